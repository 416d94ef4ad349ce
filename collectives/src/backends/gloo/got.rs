//! Changing one shared object's imports (its GOT entries), so that calls
//! libgloo makes into libc reach ringside's wrappers instead: only libgloo's
//! own calls, nothing else in the process. Used by [`super::loop_yield`]
//! (its event loop) and [`super::close_on_exec`] (its descriptors).

use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The object whose imports are changed.
pub(super) const LIBGLOO: &str = "libgloo.so";

/// The relocation types that fill an import's GOT entry.
#[cfg(target_arch = "x86_64")]
const IMPORTS: [u32; 2] = [6, 7]; // R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT
#[cfg(target_arch = "aarch64")]
const IMPORTS: [u32; 2] = [1025, 1026]; // R_AARCH64_GLOB_DAT, R_AARCH64_JUMP_SLOT
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const IMPORTS: [u32; 0] = [];

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    _addend: i64,
}

#[repr(C)]
struct Sym {
    name: u32,
    _info: u8,
    _other: u8,
    _shndx: u16,
    _value: u64,
    _size: u64,
}

/// A loaded object: load address, PT_DYNAMIC and PT_GNU_RELRO (address
/// ranges), by its path.
struct Object {
    base: usize,
    dynamic: Option<usize>,
    relro: Option<(usize, usize)>,
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info, and `data` is the
    // (&str, Vec) pair `objects` handed it.
    let (info, (want, found)) = unsafe { (&*info, &mut *(data as *mut (&str, Vec<Object>))) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: a NUL-terminated path owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
    if !name.contains(*want) {
        return 0;
    }
    let base = info.dlpi_addr as usize;
    // SAFETY: the loader's program headers of this object.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
    let mut obj = Object {
        base,
        dynamic: None,
        relro: None,
    };
    for p in phdrs {
        let start = base + p.p_vaddr as usize;
        match p.p_type {
            libc::PT_DYNAMIC => obj.dynamic = Some(start),
            libc::PT_GNU_RELRO => obj.relro = Some((start, start + p.p_memsz as usize)),
            _ => {}
        }
    }
    found.push(obj);
    0
}

/// The loaded objects whose path contains `lib`.
fn objects(lib: &str) -> Vec<Object> {
    let mut data: (&str, Vec<Object>) = (lib, Vec::new());
    // SAFETY: `visit` only reads the loader's data and pushes onto `data`,
    // which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut data as *mut _ as *mut c_void) };
    data.1
}

/// Sets each named import of every loaded object whose path contains
/// `lib` to the given address; `Err` if there is no such object or one of
/// the names is imported by none.
pub(super) fn patch(lib: &str, imports: &[(&CStr, usize)]) -> Result<(), String> {
    if IMPORTS.is_empty() {
        return Err(format!(
            "not done on {} (only x86-64 and AArch64)",
            std::env::consts::ARCH
        ));
    }
    let found = objects(lib);
    if found.is_empty() {
        return Err(format!("no {lib} among the loaded objects"));
    }
    let mut done = vec![false; imports.len()];
    for obj in &found {
        for (slot, i) in slots(obj, imports) {
            // SAFETY: `slot` is this object's GOT entry for the import,
            // which the loader filled; see `write`.
            unsafe { write(slot, imports[i].1, obj.relro)? };
            done[i] = true;
        }
    }
    match imports.iter().zip(&done).find(|(_, d)| !**d) {
        Some(((name, _), _)) => Err(format!("{lib} imports no {}", name.to_string_lossy())),
        None => Ok(()),
    }
}

/// The address of each import's GOT entry in `obj`, with its index in
/// `imports`.
fn slots(obj: &Object, imports: &[(&CStr, usize)]) -> Vec<(usize, usize)> {
    let Some(dynamic) = obj.dynamic else {
        return Vec::new();
    };
    // glibc has already relocated the dynamic section's addresses in
    // place; other loaders leave them as offsets from the base.
    let at = |v: u64| {
        let v = v as usize;
        if v < obj.base { obj.base + v } else { v }
    };
    let (mut strtab, mut symtab) = (0, 0);
    let mut tables = [(0usize, 0usize); 2];
    let mut d = dynamic as *const Dyn;
    // SAFETY: PT_DYNAMIC is an array of entries ending in DT_NULL.
    unsafe {
        while (*d).tag != DT_NULL {
            let v = (*d).val;
            match (*d).tag {
                DT_STRTAB => strtab = at(v),
                DT_SYMTAB => symtab = at(v),
                DT_JMPREL => tables[0].0 = at(v),
                DT_PLTRELSZ => tables[0].1 = v as usize,
                DT_RELA => tables[1].0 = at(v),
                DT_RELASZ => tables[1].1 = v as usize,
                _ => {}
            }
            d = d.add(1);
        }
    }
    if strtab == 0 || symtab == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (start, size) in tables {
        if start == 0 {
            continue;
        }
        let n = size / std::mem::size_of::<Rela>();
        // SAFETY: the object's relocation table, `size` bytes.
        let relas = unsafe { std::slice::from_raw_parts(start as *const Rela, n) };
        for r in relas {
            if !IMPORTS.contains(&(r.info as u32)) {
                continue;
            }
            let sym = (r.info >> 32) as usize;
            // SAFETY: the symbol a relocation names is in the table, and
            // its name in the string table.
            let name = unsafe {
                let s = &*(symtab as *const Sym).add(sym);
                CStr::from_ptr((strtab + s.name as usize) as *const libc::c_char)
            };
            if let Some(i) = imports.iter().position(|(want, _)| *want == name) {
                out.push((obj.base + r.offset as usize, i));
            }
        }
    }
    out
}

/// Stores `value` in the GOT entry at `slot`, opening its page for writing
/// while it lies in the read-only-after-relocation range, and closing it
/// again. One aligned store: a thread calling through it meanwhile sees
/// the old or the new address, either of them valid.
unsafe fn write(slot: usize, value: usize, relro: Option<(usize, usize)>) -> Result<(), String> {
    // SAFETY: no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let start = slot & !(page - 1);
    let guarded = relro.is_some_and(|(a, b)| slot >= a && slot < b);
    let protect = |prot| {
        // SAFETY: the page holding the slot, inside the object's mapping.
        let rc = unsafe { libc::mprotect(start as *mut c_void, page, prot) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "mprotect of libgloo's GOT: {}",
                std::io::Error::last_os_error()
            ))
        }
    };
    if guarded {
        protect(libc::PROT_READ | libc::PROT_WRITE)?;
    }
    // SAFETY: an aligned, mapped, now writable pointer-sized slot.
    unsafe { (*(slot as *const AtomicUsize)).store(value, Ordering::SeqCst) };
    if guarded {
        protect(libc::PROT_READ)?;
    }
    Ok(())
}

/// The address now in `obj`'s GOT entry for `name`, for the tests.
#[cfg(test)]
pub(super) fn current(lib: &str, name: &CStr) -> Vec<usize> {
    let mut out = Vec::new();
    for obj in &objects(lib) {
        for (slot, _) in slots(obj, &[(name, 0)]) {
            // SAFETY: a filled GOT entry.
            out.push(unsafe { (*(slot as *const AtomicUsize)).load(Ordering::SeqCst) });
        }
    }
    out
}
