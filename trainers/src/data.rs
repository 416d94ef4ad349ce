//! Fashion-MNIST (or any MNIST-format data set) as tensors, plus a tiny synthetic set.
//!
//! The files are the four IDX files of the original distribution, gzip-compressed as
//! Debian's `dataset-fashion-mnist` ships them (uncompressed files of the same names
//! without `.gz` work too). IDX is simple enough to parse by hand: a big-endian magic
//! number `0x0000_08DD` (`08` = unsigned bytes, `DD` = number of dimensions), one
//! big-endian `u32` per dimension, then the bytes. Every way a file can be wrong
//! (missing, not gzip, cut short, extra bytes, wrong magic or shape, labels out of
//! range, images and labels disagreeing) becomes an [`Error`] naming the file.
//!
//! ```no_run
//! use trainers::data::{self, Split};
//! let train = data::load(data::DEFAULT_DIR, Split::Train)?;
//! let (x, y) = train.batch(&[0, 1, 2, 3])?; // x: [4, 1, 28, 28] f32, y: [4] i64
//! # Ok::<(), trainers::Error>(())
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use tch::{Device, Kind, Tensor};

use crate::{Error, Result};

/// Where Debian's `dataset-fashion-mnist` package installs the data set.
pub const DEFAULT_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// Mean pixel value of the Fashion-MNIST training images, scaled to `[0, 1]`.
pub const MEAN: f64 = 0.2860;
/// Standard deviation of the Fashion-MNIST training pixels, scaled to `[0, 1]`.
pub const STD: f64 = 0.3530;

/// Image height and width in pixels.
pub const SIDE: usize = 28;
/// Number of classes; labels are `0..CLASSES`.
pub const CLASSES: usize = 10;

/// Magic number of an IDX file of unsigned bytes with 3 dimensions (images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with 1 dimension (labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;

/// The class names of Fashion-MNIST, indexed by label.
pub const FASHION_CLASSES: [&str; CLASSES] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// The `--data DIR` option, for binaries to flatten into their own arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// Folder with the MNIST-format files {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
    #[arg(long = "data", value_name = "DIR", default_value = DEFAULT_DIR)]
    pub data: PathBuf,
}

impl DataArgs {
    /// Loads one split from the chosen folder.
    pub fn load(&self, split: Split) -> Result<Dataset> {
        load(&self.data, split)
    }
}

/// Which half of the data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// The 60,000 training examples (`train-*` files).
    Train,
    /// The 10,000 test examples (`t10k-*` files).
    Test,
}

impl Split {
    /// The file name prefix: `train` or `t10k`.
    pub fn prefix(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "t10k",
        }
    }

    /// The image file's name, without `.gz`.
    pub fn images_file(self) -> String {
        format!("{}-images-idx3-ubyte", self.prefix())
    }

    /// The label file's name, without `.gz`.
    pub fn labels_file(self) -> String {
        format!("{}-labels-idx1-ubyte", self.prefix())
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Split::Train => "train",
            Split::Test => "test",
        })
    }
}

/// Images and their labels, as tensors on one device.
///
/// `Send` but not `Sync` (a tch `Tensor` is not): threads that read one data set
/// each take their own handle (`Tensor::shallow_clone` shares the storage).
#[derive(Debug)]
pub struct Dataset {
    /// `[N, 1, 28, 28]` `f32`, normalised: `(pixel / 255 - MEAN) / STD`.
    pub images: Tensor,
    /// `[N]` `i64`, each in `0..CLASSES`.
    pub labels: Tensor,
}

impl Dataset {
    /// Another handle on the same tensors (no copy): one per rank thread,
    /// since a tensor handle may not be shared between threads.
    pub fn shallow_clone(&self) -> Dataset {
        Dataset {
            images: self.images.shallow_clone(),
            labels: self.labels.shallow_clone(),
        }
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        // size() of a tensor this crate built always has a first dimension >= 0.
        self.labels.size().first().map_or(0, |&n| n as usize)
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The examples at `indices` (in that order, repeats allowed) as `(images, labels)`
    /// batch tensors, gathered with `index_select` on the data set's device.
    pub fn batch(&self, indices: &[usize]) -> Result<(Tensor, Tensor)> {
        let index = self.index_tensor(indices)?;
        Ok((
            self.images.f_index_select(0, &index)?,
            self.labels.f_index_select(0, &index)?,
        ))
    }

    /// The examples at `indices` as a new data set (a copy).
    pub fn subset(&self, indices: &[usize]) -> Result<Dataset> {
        let (images, labels) = self.batch(indices)?;
        Ok(Dataset { images, labels })
    }

    /// Rows `start..start + n` as `(images, labels)`, sharing storage: a check's
    /// batch for one rank and step. Fewer rows than that is an error naming both
    /// counts (a narrow past the end would be a libtorch error about dimensions).
    pub fn rows(&self, start: usize, n: usize) -> Result<(Tensor, Tensor)> {
        if self.len() < start + n {
            return Err(Error::InvalidArgument(format!(
                "the data has {} rows; this batch needs rows {start}..{}",
                self.len(),
                start + n
            )));
        }
        let (start, n) = (start as i64, n as i64);
        Ok((
            self.images.f_narrow(0, start, n)?,
            self.labels.f_narrow(0, start, n)?,
        ))
    }

    /// The first `n` examples (all of them if there are fewer), sharing storage.
    pub fn head(&self, n: usize) -> Result<Dataset> {
        let n = n.min(self.len()) as i64;
        Ok(Dataset {
            images: self.images.f_narrow(0, 0, n)?,
            labels: self.labels.f_narrow(0, 0, n)?,
        })
    }

    /// A copy on `device` (a shallow handle when already there).
    pub fn to_device(&self, device: Device) -> Result<Dataset> {
        Ok(Dataset {
            images: self.images.f_to_device(device)?,
            labels: self.labels.f_to_device(device)?,
        })
    }

    fn index_tensor(&self, indices: &[usize]) -> Result<Tensor> {
        let len = self.len();
        // index_select would throw inside libtorch; say which index is wrong instead.
        if let Some((at, &bad)) = indices.iter().enumerate().find(|&(_, &i)| i >= len) {
            return Err(Error::InvalidArgument(format!(
                "index {bad} (position {at} of the batch) is past the end of a data set of {len}"
            )));
        }
        let as_i64: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
        to_device_queued(&Tensor::f_from_slice(&as_i64)?, self.labels.device())
    }
}

/// `t` moved to `device`. From the host to a GPU the copy goes through pinned
/// (page-locked) memory and is queued on the device's stream like a kernel, as
/// PyTorch's `DataLoader(pin_memory=True)` and `.to(device, non_blocking=True)`
/// do: the host goes on queueing work. (A plain `.to(device)` from pageable memory
/// waits for the device to finish everything queued before it: a host sync on
/// every batch.) Anywhere else, an ordinary move.
pub fn to_device_queued(t: &Tensor, device: Device) -> Result<Tensor> {
    if device.is_cuda() && t.device() == Device::Cpu {
        // The pinned buffer is freed when the returned tensor's source drops;
        // libtorch's pinned-memory cache keeps it until the queued copy is done.
        // `_pin_memory`, not `pin_memory`: tch passes `pin_memory` a device,
        // which libtorch 2.11 warns about on every call.
        Ok(t.f_internal_pin_memory(device)?
            .f_to_device_(device, t.f_kind()?, true, false)?)
    } else {
        Ok(t.f_to_device(device)?)
    }
}

/// Loads one split of an MNIST-format data set from `dir` (e.g. [`DEFAULT_DIR`]).
///
/// Each file is looked up as `NAME.gz` first, then as plain `NAME`.
pub fn load(dir: impl AsRef<Path>, split: Split) -> Result<Dataset> {
    let dir = dir.as_ref();
    let images_path = find(dir, &split.images_file())?;
    let labels_path = find(dir, &split.labels_file())?;
    let images = read_images(&images_path)?;
    let labels = read_labels(&labels_path)?;
    if images.count != labels.len() {
        return Err(Error::CountMismatch {
            images_path,
            images: images.count,
            labels_path,
            labels: labels.len(),
        });
    }
    Ok(Dataset {
        images: images_tensor(&images.pixels, images.count)?,
        labels: Tensor::f_from_slice(&labels)?.f_to_kind(Kind::Int64)?,
    })
}

/// The raw pixels of an IDX image file: `count` images of 28×28 bytes, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawImages {
    /// Number of images.
    pub count: usize,
    /// `count * 28 * 28` bytes.
    pub pixels: Vec<u8>,
}

/// Reads and checks an IDX image file (gzip or plain): magic `0x00000803`, shape
/// `[N, 28, 28]`, exactly `N·784` bytes of pixels.
pub fn read_images(path: &Path) -> Result<RawImages> {
    let mut file = IdxReader::open(path)?;
    let dims = file.header(IMAGES_MAGIC, "images (unsigned bytes, 3 dimensions)")?;
    let (count, rows, cols) = (dims[0], dims[1], dims[2]);
    if (rows, cols) != (SIDE, SIDE) {
        return Err(file.bad(format!(
            "images are {rows}x{cols} pixels, expected {SIDE}x{SIDE}"
        )));
    }
    let pixels = file.payload(count, SIDE * SIDE)?;
    Ok(RawImages { count, pixels })
}

/// Reads and checks an IDX label file (gzip or plain): magic `0x00000801`, shape
/// `[N]`, every label below [`CLASSES`].
pub fn read_labels(path: &Path) -> Result<Vec<u8>> {
    let mut file = IdxReader::open(path)?;
    let dims = file.header(LABELS_MAGIC, "labels (unsigned bytes, 1 dimension)")?;
    let labels = file.payload(dims[0], 1)?;
    if let Some((at, &bad)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| usize::from(l) >= CLASSES)
    {
        return Err(file.bad(format!(
            "label {bad} at index {at} is out of range 0..={}",
            CLASSES - 1
        )));
    }
    Ok(labels)
}

/// `NAME.gz` if it exists, else `NAME`, else [`Error::NotFound`].
fn find(dir: &Path, name: &str) -> Result<PathBuf> {
    let gz = dir.join(format!("{name}.gz"));
    if gz.exists() {
        return Ok(gz);
    }
    let plain = dir.join(name);
    if plain.exists() {
        return Ok(plain);
    }
    Err(Error::NotFound {
        dir: dir.to_path_buf(),
        name: name.to_owned(),
    })
}

/// Pixels to normalised `[N, 1, 28, 28]` floats.
fn images_tensor(pixels: &[u8], count: usize) -> Result<Tensor> {
    let side = SIDE as i64;
    let mut images = Tensor::f_from_slice(pixels)?
        .f_view([count as i64, 1, side, side])?
        .f_to_kind(Kind::Float)?;
    // (p/255 - MEAN)/STD as one scale and one shift, in place: the training set is
    // 188 MB of floats, and every extra temporary costs as much again.
    let _ = images.f_mul_scalar_(1.0 / (255.0 * STD))?;
    let _ = images.f_sub_scalar_(MEAN / STD)?;
    Ok(images)
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// An open IDX file, decompressing on the fly when it is gzip.
struct IdxReader {
    path: PathBuf,
    gzip: bool,
    inner: Box<dyn Read>,
}

impl IdxReader {
    fn open(path: &Path) -> Result<Self> {
        let io_err = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = BufReader::new(File::open(path).map_err(io_err)?);
        // Sniff the content rather than trust the name: an IDX file starts with two
        // zero bytes, a gzip file with 1f 8b, so the two cannot be confused.
        let mut head = [0u8; 2];
        let got = read_full(&mut file, &mut head).map_err(io_err)?;
        let gzip = got == 2 && head == GZIP_MAGIC;
        let named_gz = path.extension().is_some_and(|e| e == "gz");
        if named_gz && !gzip {
            return Err(Error::Gzip {
                path: path.to_path_buf(),
                source: io::Error::new(
                    ErrorKind::InvalidData,
                    format!(
                        "the file starts with {:02x?}, not the gzip magic 1f 8b",
                        &head[..got]
                    ),
                ),
            });
        }
        // Put the sniffed bytes back in front of the stream.
        let rest = io::Cursor::new(head[..got].to_vec()).chain(file);
        let inner: Box<dyn Read> = if gzip {
            Box::new(GzDecoder::new(rest))
        } else {
            Box::new(rest)
        };
        Ok(IdxReader {
            path: path.to_path_buf(),
            gzip,
            inner,
        })
    }

    fn bad(&self, what: String) -> Error {
        Error::Idx {
            path: self.path.clone(),
            what,
        }
    }

    /// A read error: the decompressor's complaints are about the gzip stream, anything
    /// else is the file system's.
    fn read_error(&self, source: io::Error) -> Error {
        let decoder_kind = matches!(
            source.kind(),
            ErrorKind::InvalidInput | ErrorKind::InvalidData | ErrorKind::UnexpectedEof
        );
        if self.gzip && decoder_kind {
            Error::Gzip {
                path: self.path.clone(),
                source,
            }
        } else {
            Error::Io {
                path: self.path.clone(),
                source,
            }
        }
    }

    /// Reads and checks the magic number, then returns the dimensions it announces.
    fn header(&mut self, magic: u32, what: &str) -> Result<Vec<usize>> {
        let mut word = [0u8; 4];
        let got = read_full(&mut self.inner, &mut word).map_err(|e| self.read_error(e))?;
        if got < 4 {
            return Err(self.bad(format!(
                "only {got} byte(s): too short for an IDX header (a 4-byte magic number)"
            )));
        }
        let found = u32::from_be_bytes(word);
        if found != magic {
            let hint = match found {
                IMAGES_MAGIC => " (this is an image file)",
                LABELS_MAGIC => " (this is a label file)",
                _ => "",
            };
            return Err(self.bad(format!(
                "bad magic number {found:#010x}{hint}, expected {magic:#010x}: IDX {what}"
            )));
        }
        let ndims = (magic & 0xff) as usize;
        let mut dims = Vec::with_capacity(ndims);
        for d in 0..ndims {
            let got = read_full(&mut self.inner, &mut word).map_err(|e| self.read_error(e))?;
            if got < 4 {
                return Err(self.bad(format!(
                    "header cut short: dimension {d} of {ndims} is missing"
                )));
            }
            dims.push(u32::from_be_bytes(word) as usize);
        }
        Ok(dims)
    }

    /// Reads exactly `count · item` bytes and checks that nothing follows them.
    fn payload(&mut self, count: usize, item: usize) -> Result<Vec<u8>> {
        let want = count
            .checked_mul(item)
            .ok_or_else(|| self.bad(format!("{count} entries of {item} bytes overflow usize")))?;
        // Grow with the data actually present instead of trusting the header with one
        // big allocation: a garbled count must not ask for gigabytes.
        let mut data = Vec::new();
        (&mut self.inner)
            .take(want as u64)
            .read_to_end(&mut data)
            .map_err(|e| self.read_error(e))?;
        if data.len() < want {
            return Err(self.bad(format!(
                "truncated: the header announces {count} entries ({want} bytes of data) \
                 but only {} bytes follow it",
                data.len()
            )));
        }
        // Reading on to the end also makes the gzip decoder check its CRC and length.
        let mut extra = [0u8; 64];
        let got = read_full(&mut self.inner, &mut extra).map_err(|e| self.read_error(e))?;
        if got > 0 {
            return Err(self.bad(format!(
                "more data than the header announces ({count} entries): the file is \
                 garbled or the header is wrong"
            )));
        }
        Ok(data)
    }
}

/// Fills `buf` as far as the stream allows; returns how many bytes were read (less than
/// `buf.len()` only at end of stream).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A small learnable stand-in for Fashion-MNIST, for fast tests: `n` examples, label
/// `c` drawn uniformly, image = a bright 7×7 square whose position depends on `c`, on
/// a background of uniform noise, normalised like the real data. Deterministic in
/// `seed` (its own generator; the global torch seed plays no part).
pub fn synthetic(n: usize, seed: u64) -> Result<Dataset> {
    let mut rng = SplitMix64(seed);
    let side = SIDE;
    let mut pixels = vec![0f32; n * side * side];
    let mut labels = vec![0i64; n];
    for (i, image) in pixels.chunks_exact_mut(side * side).enumerate() {
        let class = (rng.next() % CLASSES as u64) as usize;
        labels[i] = class as i64;
        // Ten cells of 7×7 on a 4-wide grid: rows 0..3, columns 0..4.
        let (top, left) = ((class / 4) * 7, (class % 4) * 7);
        for (p, px) in image.iter_mut().enumerate() {
            let (r, c) = (p / side, p % side);
            let noise = rng.unit() * 0.5;
            let lit = (top..top + 7).contains(&r) && (left..left + 7).contains(&c);
            *px = if lit { 0.5 + noise } else { noise };
        }
    }
    let images = Tensor::f_from_slice(&pixels)?
        .f_view([n as i64, 1, side as i64, side as i64])?
        .f_sub_scalar(MEAN)?
        .f_div_scalar(STD)?;
    Ok(Dataset {
        images,
        labels: Tensor::f_from_slice(&labels)?,
    })
}

/// SplitMix64: tiny, good enough for test noise, and the same on every platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compression, write::GzEncoder};
    use std::io::Write;

    fn idx(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut out = magic.to_be_bytes().to_vec();
        for d in dims {
            out.extend_from_slice(&d.to_be_bytes());
        }
        out.extend_from_slice(data);
        out
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    /// `n` images whose flattened pixels are `p % 251` (p counting across all images).
    fn images(n: u32) -> Vec<u8> {
        let data: Vec<u8> = (0..n as usize * 784).map(|p| (p % 251) as u8).collect();
        idx(IMAGES_MAGIC, &[n, 28, 28], &data)
    }

    /// `n` labels, `i % 10`.
    fn labels(n: u32) -> Vec<u8> {
        let data: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        idx(LABELS_MAGIC, &[n], &data)
    }

    /// A temp folder holding the test split's two files with the given bytes.
    fn split_dir(img: &[u8], lab: &[u8], gzip: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let (ext, img, lab) = if gzip {
            (".gz", gz(img), gz(lab))
        } else {
            ("", img.to_vec(), lab.to_vec())
        };
        std::fs::write(dir.path().join(format!("t10k-images-idx3-ubyte{ext}")), img).unwrap();
        std::fs::write(dir.path().join(format!("t10k-labels-idx1-ubyte{ext}")), lab).unwrap();
        dir
    }

    /// Loads the test split and returns the error's message, which must name `file`.
    fn load_err(dir: &tempfile::TempDir, file: &str) -> (Error, String) {
        let err = load(dir.path(), Split::Test).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(file), "message does not name {file}: {msg}");
        (err, msg)
    }

    #[test]
    fn gzip_and_plain_files_load_the_same_normalised_values() {
        for gzip in [true, false] {
            let dir = split_dir(&images(3), &labels(3), gzip);
            let ds = load(dir.path(), Split::Test).unwrap();
            assert_eq!(ds.images.size(), [3, 1, 28, 28]);
            assert_eq!(ds.images.kind(), Kind::Float);
            assert_eq!(ds.labels.kind(), Kind::Int64);
            assert_eq!(Vec::<i64>::try_from(&ds.labels).unwrap(), [0, 1, 2]);
            // Pixel 1 of image 0 is 1, pixel 250 is 250, pixel 251 wraps to 0.
            let flat = ds.images.flatten(0, -1);
            for (p, raw) in [(1, 1.0), (250, 250.0), (251, 0.0)] {
                let want = (raw / 255.0 - MEAN) / STD;
                let got = flat.double_value(&[p]);
                assert!(
                    (got - want).abs() < 1e-5,
                    "gzip={gzip} p={p}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn missing_files_name_the_folder_and_the_debian_package() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(dir.path(), Split::Train).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
        assert!(msg.contains("train-images-idx3-ubyte"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        assert!(msg.contains("dataset-fashion-mnist"), "{msg}");
    }

    #[test]
    fn bad_magic_is_reported_with_the_file_and_both_numbers() {
        // Labels where the images should be.
        let dir = split_dir(&labels(3), &labels(3), false);
        let (err, msg) = load_err(&dir, "t10k-images-idx3-ubyte");
        assert!(matches!(err, Error::Idx { .. }), "{err:?}");
        assert!(
            msg.contains("0x00000801") && msg.contains("0x00000803"),
            "{msg}"
        );
        assert!(msg.contains("label file"), "{msg}");
    }

    #[test]
    fn garbage_named_gz_is_a_gzip_error() {
        let dir = split_dir(&images(2), &labels(2), true);
        std::fs::write(dir.path().join("t10k-labels-idx1-ubyte.gz"), b"hello world").unwrap();
        let (err, msg) = load_err(&dir, "t10k-labels-idx1-ubyte.gz");
        assert!(matches!(err, Error::Gzip { .. }), "{err:?}");
        assert!(msg.contains("gzip"), "{msg}");
    }

    #[test]
    fn corrupt_gzip_body_is_a_gzip_error() {
        let dir = split_dir(&images(2), &labels(2), true);
        let path = dir.path().join("t10k-images-idx3-ubyte.gz");
        let mut bytes = std::fs::read(&path).unwrap();
        // Keep the 10-byte gzip header intact, scramble the deflate stream.
        for b in &mut bytes[10..30] {
            *b ^= 0x5a;
        }
        std::fs::write(&path, bytes).unwrap();
        let (err, _) = load_err(&dir, "t10k-images-idx3-ubyte.gz");
        assert!(matches!(err, Error::Gzip { .. }), "{err:?}");
    }

    #[test]
    fn truncated_gzip_is_a_gzip_error() {
        let dir = split_dir(&images(5), &labels(5), true);
        let path = dir.path().join("t10k-images-idx3-ubyte.gz");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let (err, msg) = load_err(&dir, "t10k-images-idx3-ubyte.gz");
        assert!(matches!(err, Error::Gzip { .. }), "{err:?}: {msg}");
    }

    #[test]
    fn gzip_with_a_bad_crc_is_caught() {
        let dir = split_dir(&images(1), &labels(1), true);
        let path = dir.path().join("t10k-labels-idx1-ubyte.gz");
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 8] ^= 0xff; // first byte of the CRC32 trailer
        std::fs::write(&path, bytes).unwrap();
        let (err, _) = load_err(&dir, "t10k-labels-idx1-ubyte.gz");
        assert!(matches!(err, Error::Gzip { .. }), "{err:?}");
    }

    #[test]
    fn truncated_payload_says_how_much_is_missing() {
        let mut img = images(4);
        img.truncate(img.len() - 100);
        let dir = split_dir(&img, &labels(4), false);
        let (err, msg) = load_err(&dir, "t10k-images-idx3-ubyte");
        assert!(matches!(err, Error::Idx { .. }), "{err:?}");
        assert!(msg.contains("truncated") && msg.contains("3136"), "{msg}");
    }

    #[test]
    fn truncated_header_is_reported() {
        for len in [0, 3, 6] {
            let dir = split_dir(&images(1)[..len], &labels(1), false);
            let (err, msg) = load_err(&dir, "t10k-images-idx3-ubyte");
            assert!(matches!(err, Error::Idx { .. }), "len {len}: {err:?}");
            assert!(msg.contains("header") || msg.contains("short"), "{msg}");
        }
    }

    #[test]
    fn extra_bytes_after_the_data_are_reported() {
        let mut lab = labels(3);
        lab.push(1);
        let dir = split_dir(&images(3), &lab, true);
        let (err, msg) = load_err(&dir, "t10k-labels-idx1-ubyte.gz");
        assert!(matches!(err, Error::Idx { .. }), "{err:?}");
        assert!(msg.contains("more data"), "{msg}");
    }

    #[test]
    fn wrong_image_dims_are_reported() {
        let img = idx(IMAGES_MAGIC, &[2, 27, 28], &vec![0; 2 * 27 * 28]);
        let dir = split_dir(&img, &labels(2), false);
        let (err, msg) = load_err(&dir, "t10k-images-idx3-ubyte");
        assert!(matches!(err, Error::Idx { .. }), "{err:?}");
        assert!(msg.contains("27x28"), "{msg}");
    }

    #[test]
    fn huge_declared_count_fails_without_allocating_it() {
        // 4 billion images announced, 784 bytes present.
        let img = idx(IMAGES_MAGIC, &[u32::MAX, 28, 28], &[0; 784]);
        let dir = split_dir(&img, &labels(1), true);
        let (err, msg) = load_err(&dir, "t10k-images-idx3-ubyte.gz");
        assert!(matches!(err, Error::Idx { .. }), "{err:?}");
        assert!(msg.contains("truncated"), "{msg}");
    }

    #[test]
    fn label_out_of_range_is_reported_with_its_index() {
        let lab = idx(LABELS_MAGIC, &[3], &[1, 2, 10]);
        let dir = split_dir(&images(3), &lab, false);
        let (err, msg) = load_err(&dir, "t10k-labels-idx1-ubyte");
        assert!(matches!(err, Error::Idx { .. }), "{err:?}");
        assert!(msg.contains("label 10 at index 2"), "{msg}");
    }

    #[test]
    fn count_mismatch_names_both_files() {
        let dir = split_dir(&images(3), &labels(4), true);
        let (err, msg) = load_err(&dir, "t10k-images-idx3-ubyte.gz");
        assert!(matches!(err, Error::CountMismatch { .. }), "{err:?}");
        assert!(msg.contains("t10k-labels-idx1-ubyte.gz"), "{msg}");
        assert!(
            msg.contains("3 images") && msg.contains("4 labels"),
            "{msg}"
        );
    }

    #[test]
    fn plain_file_is_used_when_no_gz_exists_and_gz_wins_otherwise() {
        let dir = split_dir(&images(2), &labels(2), false);
        assert_eq!(load(dir.path(), Split::Test).unwrap().len(), 2);
        // A .gz beside it takes precedence: make it a broken one to prove it is read.
        std::fs::write(dir.path().join("t10k-labels-idx1-ubyte.gz"), b"nope").unwrap();
        let (err, _) = load_err(&dir, "t10k-labels-idx1-ubyte.gz");
        assert!(matches!(err, Error::Gzip { .. }), "{err:?}");
    }

    #[test]
    fn batch_gathers_the_requested_rows_and_rejects_bad_indices() {
        let ds = synthetic(20, 7).unwrap();
        let (x, y) = ds.batch(&[5, 0, 5]).unwrap();
        assert_eq!(x.size(), [3, 1, 28, 28]);
        assert_eq!(y.size(), [3]);
        assert!(x.get(0).equal(&ds.images.get(5)));
        assert!(x.get(1).equal(&ds.images.get(0)));
        assert_eq!(y.int64_value(&[2]), ds.labels.int64_value(&[5]));
        let err = ds.batch(&[1, 20]).unwrap_err().to_string();
        assert!(err.contains("index 20") && err.contains("20"), "{err}");
        assert_eq!(ds.head(7).unwrap().len(), 7);
        assert_eq!(ds.head(70).unwrap().len(), 20);
        assert_eq!(ds.subset(&[1, 2]).unwrap().len(), 2);
    }

    #[test]
    fn synthetic_is_deterministic_and_class_dependent() {
        let a = synthetic(200, 1).unwrap();
        let b = synthetic(200, 1).unwrap();
        let c = synthetic(200, 2).unwrap();
        assert!(a.images.equal(&b.images) && a.labels.equal(&b.labels));
        assert!(!a.images.equal(&c.images));
        let labels: Vec<i64> = Vec::try_from(&a.labels).unwrap();
        for class in 0..10 {
            assert!(labels.contains(&class), "class {class} missing");
        }
        // The lit square of the image's own class is brighter than any other square.
        for (i, &class) in labels.iter().enumerate().take(20) {
            let class = class as usize;
            let img = a.images.get(i as i64).get(0);
            let square = |k: usize| {
                let (t, l) = ((k / 4) * 7, (k % 4) * 7);
                img.narrow(0, t as i64, 7)
                    .narrow(1, l as i64, 7)
                    .mean(Kind::Float)
                    .double_value(&[])
            };
            let own = square(class);
            assert!((0..10).filter(|&k| k != class).all(|k| square(k) < own));
        }
    }

    /// The real files from `dataset-fashion-mnist`; fails (does not skip) without them.
    #[test]
    fn real_fashion_mnist_has_the_published_shape_and_statistics() {
        let dir = Path::new(DEFAULT_DIR);
        assert!(
            dir.exists(),
            "{DEFAULT_DIR} is missing: apt-get install dataset-fashion-mnist (cargo xtask setup)"
        );
        let test = load(dir, Split::Test).unwrap();
        assert_eq!(test.images.size(), [10_000, 1, 28, 28]);
        let train = load(dir, Split::Train).unwrap();
        assert_eq!(train.len(), 60_000);
        // Fashion-MNIST is balanced: 6,000 of each class in train.
        let counts = train.labels.bincount::<Tensor>(None, 10);
        assert_eq!(Vec::<i64>::try_from(&counts).unwrap(), [6000; 10]);
        // MEAN and STD are the training set's: normalised data has mean 0, std 1.
        let mean = train.images.mean(Kind::Float).double_value(&[]);
        let std = train.images.std(true).double_value(&[]);
        assert!(mean.abs() < 2e-3, "mean {mean}");
        assert!((std - 1.0).abs() < 2e-3, "std {std}");
    }
}
