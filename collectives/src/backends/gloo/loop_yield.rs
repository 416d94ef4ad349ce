//! Gloo's event loop, kept from spinning on a pair's lock.
//!
//! **What breaks.** Gloo's TCP event loop (`Loop::run`, Debian's 0.5 and
//! upstream alike) waits in `epoll_wait` on level-triggered descriptors and
//! hands each ready one to `Pair::handleEvents`, which only *tries* to take
//! the pair's lock and returns at once when the rank's own thread holds it
//! (in `Pair::send` or `Pair::recv`, writing to the socket). The descriptor is
//! still ready, so `epoll_wait` returns at once again: the loop spins until
//! the lock is free. Where the lock holder runs on another core that is a few
//! microseconds. But a socket write wakes the peer with the kernel's "sync"
//! hint, which on a busy machine puts the woken thread on the writer's core and
//! lets it preempt the writer, lock held. When the peer's answer then wakes
//! this rank's loop on that core, the loop spins there, and the holder it waits
//! for cannot run until the scheduler's next tick: 4 ms for a call of 60 µs.
//!
//! Seen on 2026-11-27 on the 2-core Xeon VM, 2 ranks under `mpirun` beside
//! two busy loops (`ringside bench --backend gloo --load 2`): in 19 of 27
//! runs one or more sizes from 4 B to 64 KiB took a median of 4.0 ms (every
//! call a tick), mostly the first sizes, while the kernel still had all four
//! rank threads on one core. `perf sched` showed a loop thread running
//! 3.7–4.2 ms at a stretch, state R, with its rank's thread runnable on the
//! same core; `perf record` showed it calling `epoll_wait`, which returned
//! ready events each time (`ep_send_events`), and `pthread_mutex_trylock`.
//! PyTorch's Gloo has the same loop; its ranks' threads are arranged
//! differently, and it hit this less often.
//!
//! **What this does.** [`install`] points libgloo's imports of `epoll_wait`,
//! `recv` and `writev` (its GOT entries; only libgloo's, nothing else in the
//! process) at wrappers that call the real ones. The socket ones note that the
//! calling thread moved bytes (or tried to). `epoll_wait`'s returns what the
//! real one returns, but when a thread gets back the same ready set as last
//! time and has made no socket call since, Gloo's handler did nothing with it:
//! the lock was taken. After [`SPIN_BEFORE_YIELD`] of that it calls
//! `sched_yield` before each return, so the lock holder can run. A holder
//! running on another core frees the lock well within that time, so nothing
//! yields then. In the same A/B, `ringside bench --backend gloo --load 2 -b 4
//! -e 64K -f 4` under `mpirun`, builds taken in turn: without the wrappers
//! 19 of 27 runs had sizes at 4 ms, with them none of 23 (yielding after 0, 5
//! or 20 µs); an `LD_PRELOAD` sketch of the same idea had none in 14 against
//! 10 of 14 without. Idle, 4 runs each, the median call was the same or
//! faster (78–98 µs against 90–103).
//!
//! Tried on 2026-11-28 and not kept: a stuck loop sleeping on the lock its
//! handler failed to take (libgloo's `pthread_mutex_trylock` import wrapped,
//! then `pthread_mutex_timedlock`) instead of yielding. Under `--load 2`, 10
//! alternating rounds of `bench -b 16M -e 64M`, in-place medians: 16 MiB 10.0
//! ms yielding, 11.1 sleeping, 16.1 sleeping only after a yield had given the
//! core away; 64 MiB 59, 65, 81 ms. Idle the sleeping loop was 5–14 % slower at
//! 1–64 MiB (a sleeping loop's wake-up costs more than a yield on a free core).
//!
//! `RINGSIDE_GLOO_LOOP_YIELD=off` leaves Gloo's loop as Debian ships it, for
//! comparing. On architectures other than x86-64 and AArch64, or where libgloo
//! cannot be found among the loaded objects, nothing is changed and Gloo runs
//! as shipped ([`install`] says why).

use std::cell::{Cell, RefCell};
use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the loop may find the same ready set with no progress before it
/// yields: about what a holder running on another core needs to write a small
/// message and let go. Measured on 2026-11-27 (2-core VM, `--load 2`, 5 runs
/// each, median call over 4 B–64 KiB per run): yielding at once 78–128 µs,
/// after 5 µs 85–125, after 20 µs 98–146; none stalled, where without the
/// wrappers 5 of 5 runs had sizes at 4 ms (one run 12 of 16).
pub const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(5);

/// The variable that turns the wrappers off (`off`, `0` or `false`).
pub const ENV: &str = "RINGSIDE_GLOO_LOOP_YIELD";

/// The object whose imports are changed.
const LIBGLOO: &str = "libgloo.so";

/// Points libgloo's `epoll_wait`, `recv` and `writev` at the wrappers, once
/// per process; later calls return the first call's outcome. `Err` says why
/// Gloo runs as shipped (turned off, or its imports were not found).
pub fn install() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        if crate::job::switched_off(ENV) {
            return Err(format!("{ENV} turns it off"));
        }
        got::patch(
            LIBGLOO,
            &[
                (c"epoll_wait", epoll_wait_hook as *const () as usize),
                (c"recv", recv_hook as *const () as usize),
                (c"writev", writev_hook as *const () as usize),
            ],
        )
    })
    .clone()
}

/// libgloo's `recv`: the real one, noted as progress.
unsafe extern "C" fn recv_hook(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    MOVED.with(|m| m.set(true));
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { libc::recv(fd, buf, len, flags) }
}

/// libgloo's `writev`: the real one, noted as progress.
unsafe extern "C" fn writev_hook(fd: c_int, iov: *const libc::iovec, n: c_int) -> isize {
    MOVED.with(|m| m.set(true));
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { libc::writev(fd, iov, n) }
}

/// libgloo's `epoll_wait`: the real one, then a yield if the loop is stuck.
unsafe extern "C" fn epoll_wait_hook(
    epfd: c_int,
    events: *mut libc::epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let n = unsafe { libc::epoll_wait(epfd, events, maxevents, timeout) };
    if n > 0 {
        // SAFETY: epoll_wait filled the first n entries.
        let ready = unsafe { std::slice::from_raw_parts(events, n as usize) };
        let moved = MOVED.with(|m| m.replace(false));
        // `try_with`: never a panic (an abort, here) in a thread's teardown.
        let stuck = WATCH
            .try_with(|w| w.borrow_mut().stuck(ready, moved, Instant::now))
            .unwrap_or(false);
        if stuck {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
    n
}

thread_local! {
    /// Whether this thread made a socket call through libgloo since its last
    /// return from `epoll_wait`.
    static MOVED: Cell<bool> = const { Cell::new(false) };
    static WATCH: RefCell<Watch> = RefCell::new(Watch::default());
}

/// One loop thread's view of its last returns from `epoll_wait`.
#[derive(Default)]
struct Watch {
    /// The last ready set: (event data, event bits) per descriptor.
    key: Vec<(u64, u32)>,
    /// When it was first seen with no progress.
    since: Option<Instant>,
    /// Yields this thread made.
    yields: u64,
}

impl Watch {
    /// Whether the loop should yield, given the ready set just returned,
    /// whether it made a socket call since the last return, and the clock
    /// (read only when the set repeats unmoved: most returns need no time).
    fn stuck(
        &mut self,
        ready: &[libc::epoll_event],
        moved: bool,
        now: impl FnOnce() -> Instant,
    ) -> bool {
        let key = |e: &libc::epoll_event| ({ e.u64 }, { e.events });
        let same =
            self.key.len() == ready.len() && self.key.iter().zip(ready).all(|(k, e)| *k == key(e));
        if !same || moved {
            if !same {
                self.key.clear();
                self.key.extend(ready.iter().map(key));
            }
            self.since = None;
            return false;
        }
        let now = now();
        let stuck = now.duration_since(*self.since.get_or_insert(now)) >= SPIN_BEFORE_YIELD;
        self.yields += u64::from(stuck);
        stuck
    }
}

/// Changing one shared object's imports (its GOT entries).
mod got {
    use super::*;

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
    unsafe fn write(
        slot: usize,
        value: usize,
        relro: Option<(usize, usize)>,
    ) -> Result<(), String> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    fn ev(data: u64, events: u32) -> libc::epoll_event {
        libc::epoll_event { events, u64: data }
    }

    #[test]
    fn watch_yields_only_after_the_same_ready_set_made_no_progress_for_a_while() {
        let t0 = Instant::now();
        let at = |us| t0 + Duration::from_micros(us);
        let inb = libc::EPOLLIN as u32;
        let mut w = Watch::default();
        // First sight; then the same set with nothing read, for 20 µs.
        assert!(!w.stuck(&[ev(1, inb)], false, || at(0)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(1)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(5)));
        assert!(w.stuck(&[ev(1, inb)], false, || at(6)), "5 µs unmoved");
        assert!(
            w.stuck(&[ev(1, inb)], false, || at(7)),
            "and on while stuck"
        );
        // A socket call (progress) starts the wait over.
        assert!(!w.stuck(&[ev(1, inb)], true, || at(8)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(10)));
        assert!(!w.stuck(&[ev(1, inb)], false, || at(14)));
        assert!(w.stuck(&[ev(1, inb)], false, || at(15)));
        // Another handler or other bits: a new set.
        assert!(!w.stuck(&[ev(2, inb)], false, || at(90)));
        assert!(!w.stuck(&[ev(2, inb | libc::EPOLLOUT as u32)], false, || at(200)));
        assert!(!w.stuck(&[ev(2, inb), ev(1, inb)], false, || at(300)));
        // Streaming, or small calls back to back: the same set every time,
        // with a read after each.
        let mut w = Watch::default();
        for us in 0..100 {
            assert!(!w.stuck(&[ev(4, inb)], us > 0, || at(us * 30)));
        }
    }

    /// The loop of a rank whose pair lock is held sees the same readable
    /// socket over and over and reads nothing: what took a scheduler tick per
    /// call under load (module docs). Through the wrappers, as libgloo calls
    /// them: a loop that keeps finding an unread socket yields; one that
    /// reads after each return never does.
    #[test]
    fn a_loop_that_cannot_take_its_pair_lock_yields_instead_of_spinning() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        // SAFETY: no preconditions; closed below.
        let ep = unsafe { libc::epoll_create1(0) };
        assert!(ep >= 0);
        let mut reg = ev(0xfeed, libc::EPOLLIN as u32);
        // SAFETY: valid descriptors and event.
        let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, rx.as_raw_fd(), &mut reg) };
        assert_eq!(rc, 0);
        let mine = || WATCH.with(|w| w.borrow().yields);
        let mut out = [ev(0, 0); 8];
        let mut wait = || {
            // SAFETY: a valid epoll fd and 8 entries.
            unsafe { epoll_wait_hook(ep, out.as_mut_ptr(), 8, 1000) }
        };
        let mut buf = [0u8; 64];
        let mut read = |n: usize| {
            // SAFETY: `buf` has room for n <= 64 bytes.
            let got = unsafe { recv_hook(rx.as_raw_fd(), buf.as_mut_ptr().cast(), n, 0) };
            assert_eq!(got, n as isize);
        };

        tx.write_all(&[7; 64]).unwrap();
        let before = mine();
        let start = Instant::now();
        while start.elapsed() < SPIN_BEFORE_YIELD * 50 {
            assert_eq!(wait(), 1);
        }
        assert!(
            mine() > before,
            "spinning on an unread socket never yielded"
        );

        read(64);
        let before = mine();
        let start = Instant::now();
        while start.elapsed() < SPIN_BEFORE_YIELD * 50 {
            tx.write_all(&[1; 4]).unwrap();
            assert_eq!(wait(), 1);
            read(4);
        }
        assert_eq!(mine(), before, "a loop making progress yielded");
        // SAFETY: ours.
        unsafe { libc::close(ep) };
    }

    #[test]
    fn install_points_libgloos_imports_at_the_wrappers() {
        if let Err(why) = install() {
            if std::env::var_os(ENV).is_some() {
                eprintln!("skipped: {why}");
                return;
            }
            panic!("{why}");
        }
        for (name, hook) in [
            (c"epoll_wait", epoll_wait_hook as *const () as usize),
            (c"recv", recv_hook as *const () as usize),
            (c"writev", writev_hook as *const () as usize),
        ] {
            let now = got::current(LIBGLOO, name);
            assert!(!now.is_empty(), "libgloo's {name:?} not found");
            assert!(now.iter().all(|&a| a == hook), "{name:?} still {now:x?}");
        }
        // Idempotent: a second install changes nothing and agrees.
        assert_eq!(install(), Ok(()));
    }
}
