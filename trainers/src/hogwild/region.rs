//! The shared region: the memory file (an anonymous memfd, or a named file in
//! /dev/shm that is unlinked once every worker has attached), its mapping, and
//! the layout inside it (header, one slot per worker, the parameters).

use super::*;

pub(super) fn params_offset(workers: usize) -> usize {
    SLOT + SLOT * workers
}

pub(super) fn memfd(len: usize) -> Result<OwnedFd> {
    // SAFETY: the name is a valid C string; the result is checked before use.
    let fd = unsafe { libc::memfd_create(c"ringside-hogwild".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(os("memfd_create", io::Error::last_os_error()));
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let file = File::from(fd);
    file.set_len(len as u64)
        .map_err(|e| os("sizing the memory file", e))?;
    Ok(file.into())
}

/// A named shared-memory file that is removed when dropped (or earlier).
#[derive(Debug)]
pub(super) struct NamedShm {
    pub(super) path: PathBuf,
    pub(super) linked: bool,
}

impl NamedShm {
    pub(super) fn unlink(&mut self) -> Result<()> {
        if self.linked {
            self.linked = false;
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(Error::Io {
                        path: self.path.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

impl Drop for NamedShm {
    fn drop(&mut self) {
        // Errors have nowhere to go in drop; `unlink` was already tried on the
        // normal paths, where they are reported.
        let _ = self.unlink();
    }
}

pub(super) fn create_named(name: &str, len: usize) -> Result<(File, NamedShm)> {
    let path = Path::new(SHM_DIR).join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
    let guard = NamedShm {
        path: path.clone(),
        linked: true,
    };
    file.set_len(len as u64)
        .map_err(|source| Error::Io { path, source })?;
    Ok((file, guard))
}

/// A shared, read-write mapping of a whole memory file.
#[derive(Debug)]
pub(super) struct Mapping {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

impl Mapping {
    pub(super) fn new(fd: RawFd, len: usize) -> Result<Mapping> {
        if len < SLOT {
            return Err(Error::InvalidArgument(format!(
                "a shared region of {len} bytes is too small"
            )));
        }
        // SAFETY: a fresh mapping chosen by the kernel; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os(
                "mmap of the shared parameters",
                io::Error::last_os_error(),
            ));
        }
        NonNull::new(p.cast::<u8>())
            .map(|ptr| Mapping { ptr, len })
            .ok_or_else(|| os("mmap returned null", io::Error::other("null mapping")))
    }

    /// The 8-byte atomic at `offset` (a multiple of 8 inside the header or slots).
    pub(super) fn atomic(&self, offset: usize) -> Result<&AtomicU64> {
        if offset % 8 != 0 || offset + 8 > self.len {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} is outside the {}-byte region",
                self.len
            )));
        }
        // SAFETY: in bounds and 8-aligned (mmap returns page-aligned memory); every
        // process touches these words only through atomics, so sharing them is sound.
        Ok(unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU64>() })
    }

    pub(super) fn slot(&self, rank: usize, field: usize) -> Result<&AtomicU64> {
        self.atomic(SLOT + SLOT * rank + field)
    }

    pub(super) fn attached(&self, rank: usize) -> Result<u64> {
        Ok(self.slot(rank, 0)?.load(Ordering::SeqCst))
    }

    pub(super) fn init(&self, workers: usize, floats: usize) -> Result<()> {
        self.atomic(8)?.store(self.len as u64, Ordering::SeqCst);
        self.atomic(16)?.store(floats as u64, Ordering::SeqCst);
        self.atomic(24)?.store(workers as u64, Ordering::SeqCst);
        for r in 0..workers {
            self.slot(r, 0)?.store(0, Ordering::SeqCst);
            self.slot(r, 8)?.store(0, Ordering::SeqCst);
            self.slot(r, 16)?.store(0.0f64.to_bits(), Ordering::SeqCst);
        }
        // Written last: a reader that sees the magic sees a complete header.
        self.atomic(0)?.store(MAGIC, Ordering::SeqCst);
        Ok(())
    }

    /// Checks that the region holds what this process expects.
    pub(super) fn check(&self, workers: usize, floats: usize) -> Result<()> {
        let got = (
            self.atomic(0)?.load(Ordering::SeqCst),
            self.atomic(8)?.load(Ordering::SeqCst),
            self.atomic(16)?.load(Ordering::SeqCst),
            self.atomic(24)?.load(Ordering::SeqCst),
        );
        let want = (
            MAGIC,
            (params_offset(workers) + 4 * floats) as u64,
            floats as u64,
            workers as u64,
        );
        if got != want || self.len as u64 != want.1 {
            return Err(Error::InvalidArgument(format!(
                "the shared region does not match this model: (magic, bytes, floats, \
                 workers) = {got:x?}, expected {want:x?} in a {}-byte mapping",
                self.len
            )));
        }
        Ok(())
    }

    /// Tensors over the parameter area, one per `(name, parameter)`, same shapes.
    ///
    /// They borrow the mapping's memory without a lifetime: callers drop them (and
    /// anything they were `set_data` into) before the mapping.
    pub(super) fn param_views(&self, params: &[(String, Tensor)]) -> Result<Vec<Tensor>> {
        let mut offset = params_offset_from_len(self)?;
        params
            .iter()
            .map(|(name, p)| {
                let bytes = 4 * p.numel();
                if p.kind() != Kind::Float || offset + bytes > self.len {
                    return Err(Error::InvalidArgument(format!(
                        "{name} ({:?}, {} values) does not fit the shared region",
                        p.kind(),
                        p.numel()
                    )));
                }
                // SAFETY: `offset..offset + bytes` lies inside the mapping (checked)
                // and is 4-aligned; the mapping outlives the tensor (see above).
                let t = unsafe {
                    Tensor::f_from_blob(
                        self.ptr.as_ptr().add(offset),
                        &p.size(),
                        &[],
                        Kind::Float,
                        Device::Cpu,
                    )
                }?;
                offset += bytes;
                Ok(t)
            })
            .collect()
    }
}

pub(super) fn params_offset_from_len(region: &Mapping) -> Result<usize> {
    let workers = region.atomic(24)?.load(Ordering::SeqCst) as usize;
    if workers == 0 || workers > MAX_WORKERS {
        return Err(Error::InvalidArgument(format!(
            "the shared region's header says {workers} workers"
        )));
    }
    Ok(params_offset(workers))
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mmap returned; the tensors over it are gone.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
