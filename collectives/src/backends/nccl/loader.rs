//! Finding and loading `libnccl.so.2`.
//!
//! cudarc 0.19 supplies the NCCL types (`ncclUniqueId`, `ncclComm_t`, the enum
//! values) but not a usable loader for the library itself: its dynamic loader
//! only tries the names `libnccl.so`, `libnccl.so.13`, `libnccl.so.12`, …,
//! `libnccl.so.1`, and panics when none opens. NCCL's real soname is
//! `libnccl.so.2`, the only name the PyTorch wheel ships (in
//! `site-packages/nvidia/nccl/lib`), and a library's search path cannot be changed
//! once a process runs (the dynamic linker reads `LD_LIBRARY_PATH` at start-up).
//! So ringside opens NCCL itself, by full path where it can, and resolves the
//! handful of entry points it calls. Search order:
//!
//! 1. `RINGSIDE_NCCL_LIB`: the library file, or a folder holding `libnccl.so.2`.
//!    When set, nothing else is tried (a typo should fail, not fall back).
//! 2. A `libnccl.so.2` this process already loaded (libtorch_cuda pulls it in),
//!    so one process never holds two different NCCLs.
//! 3. `$LIBTORCH/../nvidia/nccl/lib/libnccl.so.2` with `LIBTORCH` read at run time
//!    (the torch folder; `.cargo/config.toml` sets it for `cargo run`/`cargo test`),
//!    then with `LIBTORCH` as it was at build time.
//! 4. `libnccl.so.2`, then `libnccl.so`, through the ordinary dynamic-linker search
//!    (`LD_LIBRARY_PATH`, `ldconfig`'s cache: a system NCCL).

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclUniqueId};

/// Environment variable naming the NCCL library (file or folder).
pub const NCCL_LIB_ENV: &str = "RINGSIDE_NCCL_LIB";

const SONAME: &str = "libnccl.so.2";

/// NCCL's C enums (`ncclResult_t`, `ncclDataType_t`, `ncclRedOp_t`) are `int`s in
/// the ABI. They cross as `c_int` so that a value a newer library adds can never
/// become an invalid Rust enum.
pub(crate) type Res = c_int;

/// The NCCL entry points the backend uses.
pub(crate) struct Api {
    /// Where the library was found (for messages).
    pub path: String,
    pub get_version: unsafe extern "C" fn(*mut c_int) -> Res,
    pub get_unique_id: unsafe extern "C" fn(*mut ncclUniqueId) -> Res,
    pub comm_init_rank: unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> Res,
    pub comm_destroy: unsafe extern "C" fn(ncclComm_t) -> Res,
    pub comm_abort: unsafe extern "C" fn(ncclComm_t) -> Res,
    pub comm_get_async_error: unsafe extern "C" fn(ncclComm_t, *mut Res) -> Res,
    pub get_error_string: unsafe extern "C" fn(Res) -> *const c_char,
    pub get_last_error: unsafe extern "C" fn(ncclComm_t) -> *const c_char,
    pub all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub broadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Res,
    pub send:
        unsafe extern "C" fn(*const c_void, usize, c_int, c_int, ncclComm_t, cudaStream_t) -> Res,
    pub recv:
        unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, ncclComm_t, cudaStream_t) -> Res,
    pub group_start: unsafe extern "C" fn() -> Res,
    pub group_end: unsafe extern "C" fn() -> Res,
}

impl Api {
    /// NCCL's description of `code`.
    pub fn error_string(&self, code: Res) -> String {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
        let p = unsafe { (self.get_error_string)(code) };
        cstr(p).unwrap_or_else(|| format!("NCCL error {code}"))
    }

    /// The last error message NCCL recorded for `comm` (may be empty).
    pub fn last_error(&self, comm: ncclComm_t) -> String {
        // SAFETY: accepts a null or live communicator; returns a NUL-terminated string.
        let p = unsafe { (self.get_last_error)(comm) };
        cstr(p).unwrap_or_default()
    }

    /// The library version as `major.minor.patch`.
    pub fn version(&self) -> String {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        if unsafe { (self.get_version)(&mut v) } != 0 {
            return "unknown".into();
        }
        // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    }
}

fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: NCCL hands out NUL-terminated strings that live as long as the library.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The loaded library, or why it could not be loaded (kept: the search is not
/// repeated on every `connect`).
pub(crate) fn api() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// The path of `libnccl.so.2` inside a pip-installed PyTorch: `torch/` and
/// `nvidia/` are siblings in `site-packages`.
pub fn nccl_in_torch(torch_dir: &Path) -> PathBuf {
    let dir = torch_dir.join("../nvidia/nccl/lib");
    dir.canonicalize().unwrap_or(dir).join(SONAME)
}

fn dlerror() -> String {
    // SAFETY: dlerror returns a thread-local NUL-terminated string or null.
    cstr(unsafe { libc::dlerror() }).unwrap_or_else(|| "unknown error".into())
}

fn dlopen(name: &str, flags: c_int) -> Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
    // SAFETY: a valid C string; the handle is kept for the life of the process.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() { Err(dlerror()) } else { Ok(h) }
}

fn load() -> Result<Api, String> {
    let mut tried: Vec<String> = Vec::new();
    let mut open = |name: String, how: &str| -> Option<(*mut c_void, String)> {
        match dlopen(&name, libc::RTLD_NOW | libc::RTLD_LOCAL) {
            Ok(h) => Some((h, name)),
            Err(e) => {
                tried.push(format!("{name} ({how}): {e}"));
                None
            }
        }
    };
    let found = if let Some(v) = std::env::var_os(NCCL_LIB_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        let file = if p.is_dir() { p.join(SONAME) } else { p };
        open(file.display().to_string(), NCCL_LIB_ENV)
    } else {
        // RTLD_NOLOAD: only succeeds if the process already has it.
        dlopen(SONAME, libc::RTLD_NOW | libc::RTLD_NOLOAD)
            .ok()
            .map(|h| (h, format!("{SONAME} (already loaded)")))
            .or_else(|| {
                std::env::var_os("LIBTORCH")
                    .filter(|v| !v.is_empty())
                    .and_then(|t| {
                        open(
                            nccl_in_torch(Path::new(&t)).display().to_string(),
                            "LIBTORCH",
                        )
                    })
            })
            .or_else(|| {
                option_env!("LIBTORCH").and_then(|t| {
                    open(
                        nccl_in_torch(Path::new(t)).display().to_string(),
                        "LIBTORCH at build time",
                    )
                })
            })
            .or_else(|| open(SONAME.into(), "dynamic-linker search"))
            .or_else(|| open("libnccl.so".into(), "dynamic-linker search"))
    };
    let Some((handle, path)) = found else {
        return Err(format!(
            "libnccl.so.2 not found; tried: {}. Set {NCCL_LIB_ENV} to the library (or its \
             folder, e.g. <venv>/lib/python3.X/site-packages/nvidia/nccl/lib) or LIBTORCH to \
             a pip-installed torch folder",
            tried.join("; ")
        ));
    };
    resolve(handle, path)
}

/// Reinterprets a symbol address as a function pointer of type `F`.
///
/// # Safety
/// `F` must be a function pointer type matching the symbol's C signature.
unsafe fn cast_fn<F: Copy>(p: *mut c_void) -> F {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    // SAFETY: same size (checked above); the caller vouches for the signature.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

fn resolve(handle: *mut c_void, path: String) -> Result<Api, String> {
    let sym = |name: &str| -> Result<*mut c_void, String> {
        let c = CString::new(name).map_err(|_| format!("bad symbol name {name:?}"))?;
        // SAFETY: a live handle from dlopen and a valid C string.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        if p.is_null() {
            Err(format!(
                "{path} has no symbol {name} (NCCL older than 2.19?): {}",
                dlerror()
            ))
        } else {
            Ok(p)
        }
    };
    // SAFETY (every cast_fn below): the field types restate the declarations in
    // nccl.h (2.19 and later), with C enums as `int`.
    unsafe {
        Ok(Api {
            get_version: cast_fn(sym("ncclGetVersion")?),
            get_unique_id: cast_fn(sym("ncclGetUniqueId")?),
            comm_init_rank: cast_fn(sym("ncclCommInitRank")?),
            comm_destroy: cast_fn(sym("ncclCommDestroy")?),
            comm_abort: cast_fn(sym("ncclCommAbort")?),
            comm_get_async_error: cast_fn(sym("ncclCommGetAsyncError")?),
            get_error_string: cast_fn(sym("ncclGetErrorString")?),
            get_last_error: cast_fn(sym("ncclGetLastError")?),
            all_reduce: cast_fn(sym("ncclAllReduce")?),
            broadcast: cast_fn(sym("ncclBroadcast")?),
            reduce: cast_fn(sym("ncclReduce")?),
            all_gather: cast_fn(sym("ncclAllGather")?),
            reduce_scatter: cast_fn(sym("ncclReduceScatter")?),
            send: cast_fn(sym("ncclSend")?),
            recv: cast_fn(sym("ncclRecv")?),
            group_start: cast_fn(sym("ncclGroupStart")?),
            group_end: cast_fn(sym("ncclGroupEnd")?),
            path,
        })
    }
}

/// Loads NCCL (see the module docs for where it looks) and returns
/// `(path, version)`. Needs no GPU: nothing is initialised.
pub fn probe() -> Result<(String, String), String> {
    let api = api()?;
    Ok((api.path.clone(), api.version()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `.ringside/libtorch` is a link: `..` must be taken from its target.
    #[test]
    fn nccl_is_found_beside_a_linked_torch_folder() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("venv/site-packages");
        std::fs::create_dir_all(sp.join("torch")).unwrap();
        std::fs::create_dir_all(sp.join("nvidia/nccl/lib")).unwrap();
        let link = dir.path().join("libtorch");
        std::os::unix::fs::symlink(sp.join("torch"), &link).unwrap();
        assert_eq!(
            nccl_in_torch(&link),
            sp.canonicalize()
                .unwrap()
                .join("nvidia/nccl/lib/libnccl.so.2")
        );
    }
}
