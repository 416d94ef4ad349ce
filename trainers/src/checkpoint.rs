//! Checkpoints as [safetensors](https://github.com/huggingface/safetensors) files:
//! model, optimizer state and training counters in one file that runs no code when it
//! is read (unlike a pickled `torch.save`).
//!
//! # What a file holds
//!
//! * every variable of the model's VarStore, parameters and buffers (batch-norm
//!   running statistics) alike, under its stable name (`conv1.weight`,
//!   `stage2.0.bn1.running_mean`). Never with a `module.` prefix: a leading `module.`
//!   (how PyTorch's `DistributedDataParallel` names its wrapped model) is removed on
//!   save and ignored on load, so DDP checkpoints load into a single-device model and
//!   files written by PyTorch DDP users load here;
//! * the [`Sgd`] momentum buffers, as `optimizer.momentum_buffer.<parameter name>`;
//! * in the string metadata (`__metadata__`): `format` and `format_version`, the
//!   counters of a [`TrainState`] (`epoch`, `batch_in_epoch`, `step`, `seed`), the
//!   optimizer's hyper-parameters (`optimizer.lr`, ...), free-form `extra.*` entries,
//!   `sha256`: a SHA-256 over every tensor's name, dtype, shape and bytes, in name
//!   order, and `metadata_sha256`: a SHA-256 over every other metadata entry (key and
//!   value, in key order), both checked on load. Everything resume trusts is covered:
//!   version 1 files checksummed the tensors only, and a changed digit in
//!   `optimizer.lr` loaded silently.
//!
//! # Randomness
//!
//! libtorch's global generator state is not saved: tch 0.24 can seed it
//! (`tch::manual_seed`) but not read it back. Instead all randomness of our training
//! is a function of the saved counters: the data order comes from
//! [`DistributedSampler`](crate::sampler::DistributedSampler) seeded by
//! `(seed, epoch)`, and resuming skips the `batch_in_epoch` batches already seen;
//! the models have no dropout; weight initialisation is overwritten by the load. A
//! trainer that adds randomness inside a step (dropout, augmentation) must seed it
//! from [`crate::train::step_seed`]`(seed, epoch, step)` so that the counters
//! restore it too.
//!
//! # Writing and reading safely
//!
//! [`save`] writes a temporary file in the target's folder, fsyncs it, renames it
//! over the target and fsyncs the folder: a crash leaves either the old checkpoint or
//! the new one, never a mix. [`load`] reads the whole file and checks the format
//! version, the checksum, that every model variable is present with the model's shape
//! and dtype and that the file holds nothing the model lacks; only then does it copy
//! anything into the model, so a bad file leaves the model untouched. Only a
//! regular file is read, and no more of it than its size (at most
//! [`MAX_CHECKPOINT_BYTES`]): a path to `/dev/zero` or a FIFO is an error at once,
//! not a read until memory runs out or forever.
//!
//! One live run per checkpoint folder: [`lock_folder`] takes a lock on it that a
//! second run (say one started with `--resume` while the first still trains) is
//! refused, naming the first's pid; otherwise the two would resume from each
//! other's saves and overwrite one file.
//!
//! ```no_run
//! use tch::nn::VarStore;
//! use trainers::checkpoint::{self, TrainState};
//! use trainers::optim::{Sgd, SgdConfig};
//! let vs = VarStore::new(tch::Device::Cpu);
//! let model = trainers::models::cnn().build(&vs.root());
//! let mut opt = Sgd::new(&vs, SgdConfig::new(0.05).momentum(0.9))?;
//! let state = TrainState { epoch: 3, step: 1200, seed: 42, ..Default::default() };
//! checkpoint::save("run/last.safetensors", &vs, Some(&opt), &state)?;
//! let resumed = checkpoint::load("run/last.safetensors", &vs, Some(&mut opt))?;
//! assert_eq!(resumed, state);
//! # Ok::<(), trainers::Error>(())
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use collectives::{BufferMut, Communicator, Input};
use safetensors::tensor::{Dtype, SafeTensors, View};
use sha2::{Digest, Sha256};
use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use crate::optim::{Sgd, SgdConfig};
use crate::{Error, Result};

/// The `format` metadata value of our checkpoints.
pub const FORMAT: &str = "ringside.checkpoint";
/// The layout version this build writes and reads.
pub const FORMAT_VERSION: u32 = 2;
/// Prefix of the optimizer's momentum buffers among the tensor names.
pub const MOMENTUM_PREFIX: &str = "optimizer.momentum_buffer.";
/// The prefix PyTorch's `DistributedDataParallel` puts before its model's names.
pub const DDP_PREFIX: &str = "module.";

/// Where training stands: with the seed, enough to reproduce the data order (and any
/// other randomness, see the [module docs](self)) from here on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrainState {
    /// The epoch in progress (the sampler's `set_epoch` value).
    pub epoch: u64,
    /// Batches of `epoch` already trained on; resuming skips them.
    pub batch_in_epoch: u64,
    /// Optimizer steps since the start of training.
    pub step: u64,
    /// The sampler's shuffling seed.
    pub seed: u64,
    /// Free-form notes (architecture, world size, ...), stored as `extra.<key>`.
    pub extra: BTreeMap<String, String>,
}

/// What [`inspect`] finds in a checkpoint without loading it into a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Info {
    /// The training counters.
    pub state: TrainState,
    /// The optimizer's hyper-parameters, if the file holds optimizer state.
    pub optimizer: Option<SgdConfig>,
    /// Model tensors: name (without `module.`), dtype name, shape.
    pub tensors: Vec<(String, String, Vec<usize>)>,
    /// Parameter names that have a momentum buffer.
    pub momentum_buffers: Vec<String>,
}

/// Writes model, optimizer state (if given) and counters to `path`, atomically.
pub fn save(
    path: impl AsRef<Path>,
    vs: &VarStore,
    opt: Option<&Sgd>,
    state: &TrainState,
) -> Result<()> {
    let path = path.as_ref();
    let bytes = serialize(path, vs, opt, state)?;
    write_atomic(path, &bytes)
}

/// [`save`] in a data-parallel job: rank 0 writes while the other ranks wait for it,
/// then every rank learns whether the write succeeded (a one-byte broadcast from
/// rank 0, which doubles as the barrier). Returns on rank 0 only once the file is
/// durable, and on the others only after that. All ranks must call it.
///
/// Only rank 0's model and optimizer are written: in data-parallel training every
/// replica holds the same weights and momentum buffers.
pub fn save_distributed(
    comm: &dyn Communicator,
    path: impl AsRef<Path>,
    vs: &VarStore,
    opt: Option<&Sgd>,
    state: &TrainState,
) -> Result<()> {
    let path = path.as_ref();
    let result = if comm.rank() == 0 {
        save(path, vs, opt, state)
    } else {
        Ok(())
    };
    let mut ok = [u8::from(result.is_ok())];
    comm.broadcast(Input::InPlace, &mut BufferMut::from_slice(&mut ok), 0)?;
    match result {
        Err(e) => Err(e),
        Ok(()) if ok[0] == 1 => Ok(()),
        Ok(()) => Err(Error::Checkpoint {
            path: path.to_path_buf(),
            what: "rank 0 failed to write it (see rank 0's error)".into(),
        }),
    }
}

/// Loads a checkpoint written by [`save`] into `vs` (and `opt`, whose
/// hyper-parameters and momentum buffers it replaces), and returns the counters.
///
/// The file must hold exactly the model's variables (a leading `module.` on either
/// side is ignored), each with the model's shape and dtype, and a checksum matching
/// its data; otherwise an error names the file and the tensor, and neither `vs` nor
/// `opt` is changed. Variables are copied onto whatever device they live on.
pub fn load(path: impl AsRef<Path>, vs: &VarStore, opt: Option<&mut Sgd>) -> Result<TrainState> {
    let path = path.as_ref();
    let file = read(path)?;
    let meta = file.metadata.as_ref().ok_or_else(|| {
        bad(
            path,
            "has no metadata: not a ringside checkpoint (use load_weights for plain safetensors files)",
        )
    })?;
    check_format(path, meta, false)?;
    let state = read_state(path, meta)?;
    let optimizer = read_optimizer(path, meta)?;

    let (model, momentum) = split_names(path, &file.tensors)?;
    let copies = plan_model_copies(path, vs, &model, true)?;

    // The optimizer part is checked in full before anything is written.
    let opt_update = match opt {
        None => None,
        Some(opt) => {
            let Some(config) = optimizer else {
                return Err(bad(
                    path,
                    "holds no optimizer state, but an optimizer was given to restore",
                ));
            };
            config
                .validate()
                .map_err(|e| bad(path, &format!("optimizer settings: {e}")))?;
            let mut buffers = Vec::with_capacity(momentum.len());
            for (name, raw) in &momentum {
                let Some((_, p)) = opt.params().iter().find(|(n, _)| canonical(n) == *name) else {
                    return Err(bad(
                        path,
                        &format!(
                            "holds a momentum buffer for `{name}`, which the optimizer does not have"
                        ),
                    ));
                };
                check_like(path, &format!("{MOMENTUM_PREFIX}{name}"), raw, p)?;
                let t = to_tensor(path, name, raw)?.f_to_device(p.device())?;
                buffers.push((opt_name(opt, name), t));
            }
            Some((opt, config, buffers))
        }
    };

    // Everything is checked and staged: now copy, all at once.
    tch::no_grad(|| -> Result<()> {
        for (mut dst, src) in copies {
            dst.f_copy_(&src)?;
        }
        Ok(())
    })?;
    if let Some((opt, config, buffers)) = opt_update {
        opt.set_config(config)?;
        opt.set_momentum_buffers(buffers)?;
    }
    Ok(state)
}

/// Loads only the model weights from any safetensors file: ours, or one written by
/// `safetensors.torch.save_file(model.state_dict(), ...)` (with or without DDP's
/// `module.` prefix). The checksum is verified when the file has one. Every model
/// variable must be present with its shape and dtype; tensors the model lacks (our
/// optimizer state, PyTorch's `num_batches_tracked`) are skipped and returned, sorted.
/// Nothing is copied unless everything checks out.
pub fn load_weights(path: impl AsRef<Path>, vs: &VarStore) -> Result<Vec<String>> {
    let path = path.as_ref();
    let file = read(path)?;
    if let Some(meta) = file.metadata.as_ref().filter(|m| m.contains_key("format")) {
        check_format(path, meta, true)?;
    }
    let (model, momentum) = split_names(path, &file.tensors)?;
    let copies = plan_model_copies(path, vs, &model, false)?;
    let wanted: Vec<String> = vs
        .variables()
        .keys()
        .map(|n| canonical(n).to_owned())
        .collect();
    let mut skipped: Vec<String> = model
        .keys()
        .filter(|n| !wanted.contains(n))
        .cloned()
        .chain(momentum.keys().map(|n| format!("{MOMENTUM_PREFIX}{n}")))
        .collect();
    skipped.sort();
    tch::no_grad(|| -> Result<()> {
        for (mut dst, src) in copies {
            dst.f_copy_(&src)?;
        }
        Ok(())
    })?;
    Ok(skipped)
}

/// Writes `tensors` under their names as given, and nothing else, atomically: what
/// PyTorch users write with `safetensors.torch.save_file(model.state_dict(), path)`.
/// Saving a wrapper's [`DataParallel::state_dict`](crate::data_parallel::DataParallel::state_dict)
/// this way keeps its `module.` prefix, unlike [`save`].
pub fn save_state_dict(path: impl AsRef<Path>, tensors: &[(String, Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let mut raws: BTreeMap<&str, Raw> = BTreeMap::new();
    for (name, t) in tensors {
        let raw = to_raw(t).map_err(|e| bad(path, &format!("tensor `{name}`: {e}")))?;
        if raws.insert(name, raw).is_some() {
            return Err(bad(path, &format!("two tensors are named `{name}`")));
        }
    }
    let bytes = safetensors::tensor::serialize(raws.iter().map(|(n, r)| (*n, r)), &None)
        .map_err(|e| bad(path, &format!("cannot serialize: {e}")))?;
    write_atomic(path, &bytes)
}

// ANCHOR: load_state_dict
/// Loads a safetensors file into `vs` by PyTorch's `model.load_state_dict(sd)` rules
/// (`strict=True`): the names must be exactly the model's, no prefix forgiven (unlike
/// [`load`] and [`load_weights`]). With `consume_prefix`, that prefix is first
/// removed from every name that starts with it, as PyTorch's
/// `consume_prefix_in_state_dict_if_present(sd, "module.")` does: the fix for a file
/// saved from a DataParallel or DDP wrapper.
///
/// On a mismatch the error lists every missing and every unexpected key (and says
/// when the unexpected ones are the missing ones behind a wrapper's prefix); shapes
/// and dtypes are checked too, and nothing is copied unless everything matches.
pub fn load_state_dict(
    path: impl AsRef<Path>,
    vs: &VarStore,
    consume_prefix: Option<&str>,
) -> Result<()> {
    let path = path.as_ref();
    let file = read(path)?;
    let mut stored: BTreeMap<String, &Raw> = BTreeMap::new();
    for (name, raw) in &file.tensors {
        let name = match consume_prefix {
            Some(prefix) => name.strip_prefix(prefix).unwrap_or(name),
            None => name,
        };
        if stored.insert(name.to_owned(), raw).is_some() {
            return Err(bad(
                path,
                &format!("holds `{name}` twice once the prefix is removed"),
            ));
        }
    }
    let vars: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    let missing: Vec<&str> = vars
        .keys()
        .filter(|n| !stored.contains_key(*n))
        .map(String::as_str)
        .collect();
    let unexpected: Vec<&str> = stored
        .keys()
        .filter(|n| !vars.contains_key(*n))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() || !unexpected.is_empty() {
        let list = |names: &[&str]| {
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut what = format!(
            "does not match the model: missing key(s) [{}]; unexpected key(s) [{}]",
            list(&missing),
            list(&unexpected)
        );
        if let Some(prefix) = wrapper_prefix(&missing, &unexpected) {
            what.push_str(&format!(
                ". Every unexpected key is a missing one behind `{prefix}`: the file was \
                 saved from a wrapper (DataParallel, DDP); remove the prefix on load \
                 (consume_prefix = Some(\"{prefix}\")) or save the wrapped model's own variables"
            ));
        }
        return Err(bad(path, &what));
    }
    let mut copies = Vec::with_capacity(vars.len());
    for (name, var) in &vars {
        let raw = stored[name];
        check_like(path, name, raw, var)?;
        copies.push((
            var.shallow_clone(),
            to_tensor(path, name, raw)?.f_to_device(var.device())?,
        ));
    }
    tch::no_grad(|| -> Result<()> {
        for (mut dst, src) in copies {
            dst.f_copy_(&src)?;
        }
        Ok(())
    })
}
// ANCHOR_END: load_state_dict

/// The prefix (up to and including its first `.`) that turns exactly the `missing`
/// names into the `unexpected` ones, if there is one: `module.` for a wrapper.
fn wrapper_prefix(missing: &[&str], unexpected: &[&str]) -> Option<String> {
    let first = unexpected.first()?;
    let prefix = &first[..first.find('.')? + 1];
    let stripped: Vec<&str> = unexpected
        .iter()
        .map(|n| n.strip_prefix(prefix))
        .collect::<Option<_>>()?;
    (stripped == missing).then(|| prefix.to_owned())
}

/// Reads and verifies a checkpoint (format, checksum, metadata) without a model.
pub fn inspect(path: impl AsRef<Path>) -> Result<Info> {
    let path = path.as_ref();
    let file = read(path)?;
    let meta = file
        .metadata
        .as_ref()
        .ok_or_else(|| bad(path, "has no metadata: not a ringside checkpoint"))?;
    check_format(path, meta, false)?;
    let (model, momentum) = split_names(path, &file.tensors)?;
    Ok(Info {
        state: read_state(path, meta)?,
        optimizer: read_optimizer(path, meta)?,
        tensors: model
            .iter()
            .map(|(n, t)| (n.clone(), format!("{:?}", t.dtype), t.shape.clone()))
            .collect(),
        momentum_buffers: momentum.keys().cloned().collect(),
    })
}

/// A tensor's bytes on the host, as stored in the file.
#[derive(Debug)]
struct Raw {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// A parsed, checksummed file: tensors by stored name, and the metadata.
struct Parsed {
    tensors: BTreeMap<String, Raw>,
    metadata: Option<HashMap<String, String>>,
}

fn bad(path: &Path, what: &str) -> Error {
    Error::Checkpoint {
        path: path.to_path_buf(),
        what: what.to_owned(),
    }
}

/// A name without DDP's `module.` prefix.
fn canonical(name: &str) -> &str {
    name.strip_prefix(DDP_PREFIX).unwrap_or(name)
}

/// The optimizer's own spelling of a canonical parameter name.
fn opt_name(opt: &Sgd, canonical_name: &str) -> String {
    opt.names()
        .find(|n| canonical(n) == canonical_name)
        .unwrap_or(canonical_name)
        .to_owned()
}

fn to_raw(t: &Tensor) -> Result<Raw> {
    let t = t.f_detach()?.f_to_device(Device::Cpu)?.f_contiguous()?;
    let dtype = Dtype::try_from(t.kind())?;
    let numel = t.numel();
    let mut data = vec![0u8; numel * t.kind().elt_size_in_bytes()];
    t.f_copy_data_u8(&mut data, numel)?;
    Ok(Raw {
        dtype,
        shape: t.size().iter().map(|&d| d as usize).collect(),
        data,
    })
}

fn to_tensor(path: &Path, name: &str, raw: &Raw) -> Result<Tensor> {
    let kind =
        Kind::try_from(raw.dtype).map_err(|e| bad(path, &format!("tensor `{name}`: {e}")))?;
    let shape: Vec<i64> = raw.shape.iter().map(|&d| d as i64).collect();
    Ok(Tensor::f_from_data_size(&raw.data, &shape, kind)?)
}

/// SHA-256 over (name, dtype, shape, bytes) of every tensor, in name order, each
/// field length-prefixed so that no two different contents hash the same bytes.
fn checksum<'a>(tensors: impl IntoIterator<Item = (&'a str, &'a Raw)>) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    for (name, raw) in tensors {
        field(name.as_bytes());
        field(format!("{:?}", raw.dtype).as_bytes());
        let shape: Vec<u8> = raw
            .shape
            .iter()
            .flat_map(|&d| (d as u64).to_le_bytes())
            .collect();
        field(&shape);
        field(&raw.data);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The metadata keys that hold checksums, and so are not covered by
/// [`metadata_checksum`].
const CHECKSUM_KEYS: [&str; 2] = ["sha256", "metadata_sha256"];

/// SHA-256 over every metadata entry but the checksums, in key order, key and value
/// length-prefixed.
fn metadata_checksum(meta: &HashMap<String, String>) -> String {
    let mut entries: Vec<(&String, &String)> = meta
        .iter()
        .filter(|(k, _)| !CHECKSUM_KEYS.contains(&k.as_str()))
        .collect();
    entries.sort();
    let mut h = Sha256::new();
    for (k, v) in entries {
        for bytes in [k.as_bytes(), v.as_bytes()] {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn serialize(path: &Path, vs: &VarStore, opt: Option<&Sgd>, state: &TrainState) -> Result<Vec<u8>> {
    let mut tensors: BTreeMap<String, Raw> = BTreeMap::new();
    let mut insert = |name: String, t: &Tensor| -> Result<()> {
        let raw = to_raw(t).map_err(|e| bad(path, &format!("tensor `{name}`: {e}")))?;
        if tensors.insert(name.clone(), raw).is_some() {
            return Err(bad(
                path,
                &format!("two variables are both named `{name}` once `module.` is removed"),
            ));
        }
        Ok(())
    };
    for (name, t) in vs.variables() {
        let name = canonical(&name).to_owned();
        if name.starts_with(MOMENTUM_PREFIX) {
            return Err(bad(
                path,
                &format!("model variable `{name}` collides with the optimizer's names"),
            ));
        }
        insert(name, &t)?;
    }
    let mut meta: HashMap<String, String> = HashMap::new();
    if let Some(opt) = opt {
        for (name, t) in opt.momentum_buffers() {
            insert(format!("{MOMENTUM_PREFIX}{}", canonical(&name)), &t)?;
        }
        let c = opt.config();
        meta.insert("optimizer".into(), "sgd".into());
        meta.insert("optimizer.lr".into(), c.lr.to_string());
        meta.insert("optimizer.momentum".into(), c.momentum.to_string());
        meta.insert("optimizer.dampening".into(), c.dampening.to_string());
        meta.insert("optimizer.weight_decay".into(), c.weight_decay.to_string());
        meta.insert("optimizer.nesterov".into(), c.nesterov.to_string());
    }
    meta.insert("format".into(), FORMAT.into());
    meta.insert("format_version".into(), FORMAT_VERSION.to_string());
    meta.insert("epoch".into(), state.epoch.to_string());
    meta.insert("batch_in_epoch".into(), state.batch_in_epoch.to_string());
    meta.insert("step".into(), state.step.to_string());
    meta.insert("seed".into(), state.seed.to_string());
    for (k, v) in &state.extra {
        meta.insert(format!("extra.{k}"), v.clone());
    }
    meta.insert(
        "sha256".into(),
        checksum(tensors.iter().map(|(n, r)| (n.as_str(), r))),
    );
    let covered = metadata_checksum(&meta);
    meta.insert("metadata_sha256".into(), covered);
    let views = tensors.iter().map(|(n, r)| (n.as_str(), r));
    safetensors::tensor::serialize(views, &Some(meta))
        .map_err(|e| bad(path, &format!("cannot serialize: {e}")))
}

/// Reads and [`parse`]s the file at `path`.
fn read(path: &Path) -> Result<Parsed> {
    let bytes = read_regular_file(path)?;
    parse(path, &bytes)
}

/// The largest checkpoint read: far above any model here, and a bound on the
/// memory a wrong path can make a load take.
pub const MAX_CHECKPOINT_BYTES: u64 = 32 << 30;

/// The bytes of `path`, which must be a regular file no larger than
/// [`MAX_CHECKPOINT_BYTES`]. Anything else would be read until memory runs out
/// (`/dev/zero`) or forever (a FIFO nobody writes). Checked before opening, and
/// again on the opened file (`fstat`) in case the path was swapped between the
/// two; opened non-blocking so that a FIFO swapped in cannot block the open.
/// The read stops at the size the check saw.
fn read_regular_file(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let check = |meta: &fs::Metadata| -> Result<u64> {
        if !meta.is_file() {
            return Err(bad(
                path,
                &format!(
                    "is {}, not a regular file: a checkpoint is a file that `save` wrote",
                    file_kind(meta)
                ),
            ));
        }
        if meta.len() > MAX_CHECKPOINT_BYTES {
            return Err(bad(
                path,
                &format!(
                    "is {} bytes, more than the {MAX_CHECKPOINT_BYTES} a checkpoint may be",
                    meta.len()
                ),
            ));
        }
        Ok(meta.len())
    };
    check(&fs::metadata(path).map_err(io)?)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let len = check(&file.metadata().map_err(io)?)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(len).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// What a file that is not a regular file is, for an error message.
fn file_kind(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_char_device() {
        "a character device (like /dev/zero)"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a file of another kind"
    }
}

/// Parses a file's bytes and verifies the checksum if the metadata holds one.
fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        bad(
            path,
            &format!(
                "not a valid safetensors file ({} bytes; truncated or corrupt?): {e}",
                bytes.len()
            ),
        )
    })?;
    let (_, header) = SafeTensors::read_metadata(bytes)
        .map_err(|e| bad(path, &format!("bad safetensors header: {e}")))?;
    let metadata = header.metadata().clone();
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        let raw = Raw {
            dtype: view.dtype(),
            shape: view.shape().to_vec(),
            data: view.data().to_vec(),
        };
        tensors.insert(name, raw);
    }
    if let Some(want) = metadata.as_ref().and_then(|m| m.get("sha256")) {
        let got = checksum(tensors.iter().map(|(n, r)| (n.as_str(), r)));
        if *want != got {
            return Err(bad(
                path,
                &format!(
                    "checksum mismatch: the file records sha256 {want} but its tensors hash \
                     to {got}; the file is corrupt"
                ),
            ));
        }
    }
    if let Some(meta) = &metadata
        && let Some(want) = meta.get("metadata_sha256")
        && *want != metadata_checksum(meta)
    {
        return Err(bad(
            path,
            "metadata checksum mismatch: an entry of the header (a counter, the seed or an \
             optimizer setting) was changed after the file was written; the file is corrupt \
             and was not used",
        ));
    }
    Ok(Parsed { tensors, metadata })
}

/// Checks the format, its version and the checksum entries. `weights_only` readers
/// (which trust only the checksummed tensors) also accept version 1.
fn check_format(path: &Path, meta: &HashMap<String, String>, weights_only: bool) -> Result<()> {
    match meta.get("format").map(String::as_str) {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(bad(
                path,
                &format!("format is {other:?}, expected {FORMAT:?}"),
            ));
        }
        None => {
            return Err(bad(
                path,
                &format!("has no `format` entry: not a {FORMAT} file"),
            ));
        }
    }
    let version = meta
        .get("format_version")
        .ok_or_else(|| bad(path, "has no `format_version` entry"))?;
    match version.parse::<u32>().ok() {
        Some(FORMAT_VERSION) => {}
        Some(1) if weights_only => {
            return if meta.contains_key("sha256") {
                Ok(())
            } else {
                Err(bad(path, "has no `sha256` checksum entry"))
            };
        }
        Some(1) => {
            return Err(bad(
                path,
                &format!(
                    "format version 1: written before the metadata was checksummed, so its \
                     counters and optimizer settings cannot be trusted; this build reads \
                     version {FORMAT_VERSION} (load its weights with `load_weights`, which \
                     uses only the checksummed tensors)"
                ),
            ));
        }
        _ => {
            return Err(bad(
                path,
                &format!(
                    "format version {version:?}; this build reads version {FORMAT_VERSION} only"
                ),
            ));
        }
    }
    for key in CHECKSUM_KEYS {
        if !meta.contains_key(key) {
            return Err(bad(path, &format!("has no `{key}` checksum entry")));
        }
    }
    Ok(())
}

fn field<T: std::str::FromStr>(
    path: &Path,
    meta: &HashMap<String, String>,
    key: &str,
) -> Result<T> {
    let s = meta
        .get(key)
        .ok_or_else(|| bad(path, &format!("metadata lacks `{key}`")))?;
    s.parse()
        .map_err(|_| bad(path, &format!("metadata `{key}` = {s:?} is not valid")))
}

fn read_state(path: &Path, meta: &HashMap<String, String>) -> Result<TrainState> {
    Ok(TrainState {
        epoch: field(path, meta, "epoch")?,
        batch_in_epoch: field(path, meta, "batch_in_epoch")?,
        step: field(path, meta, "step")?,
        seed: field(path, meta, "seed")?,
        extra: meta
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("extra.")?.to_owned(), v.clone())))
            .collect(),
    })
}

fn read_optimizer(path: &Path, meta: &HashMap<String, String>) -> Result<Option<SgdConfig>> {
    match meta.get("optimizer").map(String::as_str) {
        None => Ok(None),
        Some("sgd") => Ok(Some(SgdConfig {
            lr: field(path, meta, "optimizer.lr")?,
            momentum: field(path, meta, "optimizer.momentum")?,
            dampening: field(path, meta, "optimizer.dampening")?,
            weight_decay: field(path, meta, "optimizer.weight_decay")?,
            nesterov: field(path, meta, "optimizer.nesterov")?,
        })),
        Some(other) => Err(bad(path, &format!("unknown optimizer {other:?}"))),
    }
}

/// File tensors by canonical name.
type ByName<'a> = BTreeMap<String, &'a Raw>;

/// Splits stored names into model tensors and momentum buffers, both keyed by
/// canonical name; two stored names meaning the same tensor are an error.
fn split_names<'a>(
    path: &Path,
    tensors: &'a BTreeMap<String, Raw>,
) -> Result<(ByName<'a>, ByName<'a>)> {
    let mut model = BTreeMap::new();
    let mut momentum = BTreeMap::new();
    for (stored, raw) in tensors {
        let (map, name) = match stored.strip_prefix(MOMENTUM_PREFIX) {
            Some(p) => (&mut momentum, canonical(p)),
            None => (&mut model, canonical(stored)),
        };
        if map.insert(name.to_owned(), raw).is_some() {
            return Err(bad(
                path,
                &format!("holds `{name}` twice (with and without `module.`)"),
            ));
        }
    }
    Ok((model, momentum))
}

/// The file tensor must have `like`'s shape and dtype.
fn check_like(path: &Path, name: &str, raw: &Raw, like: &Tensor) -> Result<()> {
    let want_shape: Vec<usize> = like.size().iter().map(|&d| d as usize).collect();
    let want_dtype = Dtype::try_from(like.kind())?;
    if raw.shape != want_shape || raw.dtype != want_dtype {
        return Err(bad(
            path,
            &format!(
                "tensor `{name}` is {:?} {:?} in the file but {want_dtype:?} {want_shape:?} \
                 in the model",
                raw.dtype, raw.shape
            ),
        ));
    }
    Ok(())
}

/// Checks every model variable against the file and stages its new value on the
/// variable's device. With `strict`, file tensors the model lacks are errors too.
fn plan_model_copies(
    path: &Path,
    vs: &VarStore,
    file: &ByName<'_>,
    strict: bool,
) -> Result<Vec<(Tensor, Tensor)>> {
    let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    let mut copies = Vec::with_capacity(vars.len());
    for (name, var) in &vars {
        let key = canonical(name);
        let raw = file.get(key).ok_or_else(|| {
            bad(
                path,
                &format!(
                    "lacks tensor `{key}` that the model has ({} in the file)",
                    file.len()
                ),
            )
        })?;
        check_like(path, key, raw, var)?;
        let staged = to_tensor(path, key, raw)?.f_to_device(var.device())?;
        copies.push((var.shallow_clone(), staged));
    }
    if strict {
        let have: Vec<&str> = vars.iter().map(|(n, _)| canonical(n)).collect();
        if let Some(extra) = file.keys().find(|k| !have.contains(&k.as_str())) {
            return Err(bad(
                path,
                &format!("holds tensor `{extra}` that the model does not have"),
            ));
        }
    }
    Ok(copies)
}

/// Distinguishes the temporary files of concurrent saves in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
thread_local! {
    /// Test hook: fail the next temporary-file write after this many bytes.
    static FAIL_WRITE_AFTER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

fn write_all(f: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    #[cfg(test)]
    if let Some(n) = FAIL_WRITE_AFTER.with(|c| c.take()) {
        f.write_all(&bytes[..n.min(bytes.len())])?;
        return Err(std::io::Error::other("injected write failure (test)"));
    }
    f.write_all(bytes)
}

/// Temporary file in the same folder (so the rename cannot cross file systems),
/// write, fsync, rename over `path`, fsync the folder so the rename itself is durable.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    let name = path
        .file_name()
        .ok_or_else(|| bad(path, "is not a file path"))?
        .to_string_lossy();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    remove_stale_temporaries(&dir, &name);
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(io(&tmp))?;
        write_all(&mut f, bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        fs::rename(&tmp, path).map_err(io(path))
    })();
    if let Err(e) = written {
        // Best effort: the error that matters is the one being returned.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(io(&dir))
}

/// Removes `.{name}.tmp.<pid>.<n>` files whose writer is gone (a SIGKILL or a full
/// disk mid-write leaves one behind, as large as a checkpoint). A live writer's file
/// (another process saving into the same folder) is left alone. Best effort: a file
/// that cannot be removed is only left over, as before.
fn remove_stale_temporaries(dir: &Path, name: &str) {
    let prefix = format!(".{name}.tmp.");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // kill(pid, 0) probes without signalling: ESRCH means no such process.
        // SAFETY: signal 0 sends nothing.
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = fs::remove_file(entry.path());
        }
    }
}

mod lock;
pub use lock::{FolderLock, LOCK_FILE, lock_folder};

#[cfg(test)]
mod tests;
