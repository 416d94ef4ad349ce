//! The store's tests: token, server and client over loopback.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::proof::{NONCE, PROOF, Transcript};
use super::token::TOKEN_VAR;
use super::wire::{Body, Fields, MAGIC, ST_OK, ST_RENDEZVOUS, VERSION, read_frame};
use super::*;
use crate::error::{Error, Result};
use crate::rendezvous::Store;

/// The token every test store and client uses.
pub(crate) fn token() -> Token {
    Token::from_bytes([7; 16])
}

/// A store on a free loopback port for a world of `world` ranks.
pub(crate) fn server(world: usize) -> StoreServer {
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
    StoreServer::bind(addr, token(), world).unwrap()
}

/// Connects `rank` of `world` to the test store `s`.
pub(crate) fn client(
    s: &StoreServer,
    rank: usize,
    world: usize,
    timeout: Duration,
) -> Result<TcpStore> {
    TcpStore::connect(
        "127.0.0.1",
        s.local_addr().port(),
        &token(),
        rank,
        world,
        timeout,
    )
}

#[test]
fn token_hex_round_trip_and_redacted_debug() {
    let t = Token::generate().unwrap();
    let hex = t.to_string();
    assert_eq!(hex.len(), 32);
    assert_eq!(Token::parse(&hex).unwrap(), t);
    assert_eq!(Token::parse(&hex.to_uppercase()).unwrap(), t);
    assert!(!format!("{t:?}").contains(&hex));
    assert_ne!(Token::generate().unwrap(), t);
}

#[test]
fn token_parse_errors_do_not_echo_the_input() {
    let e = Token::parse("abc").unwrap_err().to_string();
    assert!(e.contains("32 hex digits"), "{e}");
    let bad = "zz".repeat(16);
    let e = Token::parse(&bad).unwrap_err().to_string();
    assert!(!e.contains(&bad), "{e}");
}

#[test]
fn token_from_vars_prefers_explicit_then_derives_from_job_ids() {
    let t = Token::generate().unwrap();
    let hex = t.to_string();
    let explicit = |k: &str| match k {
        TOKEN_VAR => Some(hex.clone()),
        "SLURM_JOB_ID" => Some("42".into()),
        _ => None,
    };
    assert_eq!(Token::from_vars(&explicit).unwrap(), Some(t));

    let none = |_: &str| None;
    assert_eq!(Token::from_vars(&none).unwrap(), None);

    let job = |id: &'static str| {
        move |k: &str| match k {
            "SLURM_JOB_ID" => Some(id.to_string()),
            "SLURM_STEP_ID" => Some("0".into()),
            "MASTER_PORT" => Some("29500".into()),
            _ => None,
        }
    };
    let a = Token::from_vars(&job("42")).unwrap().unwrap();
    assert_eq!(Token::from_vars(&job("42")).unwrap().unwrap(), a);
    assert_ne!(Token::from_vars(&job("43")).unwrap().unwrap(), a);

    let broken = |k: &str| (k == TOKEN_VAR).then(|| "nope".to_string());
    let e = Token::from_vars(&broken).unwrap_err().to_string();
    assert!(e.contains(TOKEN_VAR), "{e}");
}

#[test]
fn derived_token_is_stable_across_builds() {
    // Every node computes the derived token itself: a change to the hash
    // would make mixed-version jobs refuse each other.
    let vars = |k: &str| match k {
        "TORCHELASTIC_RUN_ID" => Some("none".to_string()),
        "MASTER_ADDR" => Some("127.0.0.1".into()),
        "MASTER_PORT" => Some("29500".into()),
        _ => None,
    };
    assert_eq!(
        Token::derive(&vars).to_string(),
        Token::derive(&vars).to_string()
    );
    let other = |k: &str| (k == "MASTER_PORT").then(|| "29501".to_string());
    assert_ne!(Token::derive(&vars), Token::derive(&other));
}

#[test]
fn set_get_add_across_connections_and_threads() {
    let s = server(2);
    let t = Duration::from_secs(5);
    let a = client(&s, 0, 2, t).unwrap();
    let b = client(&s, 1, 2, t).unwrap();
    a.set("k", b"hello").unwrap();
    assert_eq!(b.get("k").unwrap(), b"hello");
    a.set("k", b"").unwrap();
    assert_eq!(b.get("k").unwrap(), b"");
    assert_eq!(a.add("n", 5).unwrap(), 5);
    assert_eq!(b.add("n", -2).unwrap(), 3);

    // Many threads sharing one client and one more client each.
    let shared = Arc::new(a);
    std::thread::scope(|sc| {
        for i in 0..4 {
            let shared = Arc::clone(&shared);
            let s = &s;
            sc.spawn(move || {
                let own = client(s, 1, 2, t).unwrap();
                for _ in 0..25 {
                    shared.add("c", 1).unwrap();
                    own.add("c", 1).unwrap();
                }
                own.set(&format!("t{i}"), &[i as u8]).unwrap();
            });
        }
    });
    assert_eq!(b.add("c", 0).unwrap(), 200);
    for i in 0..4u8 {
        assert_eq!(b.get(&format!("t{i}")).unwrap(), vec![i]);
    }
    let e = b.add("k", 1).unwrap_err().to_string();
    assert!(e.contains("integer"), "{e}");
}

#[test]
fn get_waits_for_a_later_set() {
    let s = server(2);
    let a = client(&s, 0, 2, Duration::from_secs(5)).unwrap();
    let b = client(&s, 1, 2, Duration::from_secs(5)).unwrap();
    let start = Instant::now();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            a.set("late", b"x").unwrap();
        });
        assert_eq!(b.get("late").unwrap(), b"x");
    });
    assert!(start.elapsed() >= Duration::from_millis(150));
}

#[test]
fn get_times_out_and_the_connection_stays_usable() {
    let s = server(1);
    let c = client(&s, 0, 1, Duration::from_millis(300)).unwrap();
    let start = Instant::now();
    let e = c.get("never").unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("never"), "{e}");
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(3));
    c.set("after", b"1").unwrap();
    assert_eq!(c.get("after").unwrap(), b"1");
}

#[test]
fn wrong_token_is_refused_promptly() {
    let s = server(2);
    let start = Instant::now();
    let wrong = Token::from_bytes([8; 16]);
    let e = TcpStore::connect(
        "127.0.0.1",
        s.local_addr().port(),
        &wrong,
        1,
        2,
        Duration::from_secs(10),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Auth(_)), "{e}");
    assert!(start.elapsed() < Duration::from_secs(1));
    let msg = e.to_string();
    assert!(!msg.contains(&wrong.to_string()) && !msg.contains(&token().to_string()));
}

#[test]
fn world_size_disagreement_names_both_numbers() {
    let s = server(2);
    let e = client(&s, 1, 3, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, Error::Rendezvous(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains('3') && msg.contains('2'), "{msg}");
}

#[test]
fn rank_out_of_range_is_refused() {
    let s = server(2);
    let e = client(&s, 2, 2, Duration::from_secs(5)).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

/// Says hello by hand, as `rank` of `world` holding `token`: checks the
/// server's proof, sends ours, and returns the welcome's status and message.
fn raw_hello(addr: SocketAddr, token: &Token, rank: u64, world: u64) -> (u8, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let until = Some(Instant::now() + Duration::from_secs(5));
    let client_nonce = [1u8; NONCE];
    let hello = Body::default()
        .raw(MAGIC)
        .u8(VERSION)
        .raw(&client_nonce)
        .u64(rank)
        .u64(world);
    stream.write_all(&hello.frame()).unwrap();
    let challenge = read_frame(&mut stream, 1024, until).ok().unwrap();
    let mut f = Fields(&challenge);
    assert_eq!(f.u8().unwrap(), ST_OK);
    let mut server_nonce = [0u8; NONCE];
    server_nonce.copy_from_slice(f.take(NONCE).unwrap());
    let t = Transcript {
        client_nonce,
        server_nonce,
        rank,
        world,
    };
    assert_eq!(f.take(PROOF).unwrap(), t.server_proof(token));
    stream
        .write_all(&Body::default().raw(&t.client_proof(token)).frame())
        .unwrap();
    let welcome = read_frame(&mut stream, 1024, until).ok().unwrap();
    let mut f = Fields(&welcome);
    let status = f.u8().unwrap();
    let msg = String::from_utf8(f.bytes().unwrap().to_vec()).unwrap();
    (status, msg)
}

#[test]
fn server_rejects_rank_out_of_range_even_if_client_does_not_check() {
    let s = server(2);
    let (status, msg) = raw_hello(s.local_addr(), &token(), 5, 2);
    assert_eq!(status, ST_RENDEZVOUS);
    assert!(msg.contains("rank 5") && msg.contains('2'), "{msg}");
    assert_eq!(raw_hello(s.local_addr(), &token(), 1, 2).0, ST_OK);
}

/// A store of protocol 1 (the token in clear in the hello) is told apart
/// from a wrong token, and a protocol-1 client learns why it is refused.
#[test]
fn protocol_versions_are_named_not_mistaken_for_a_wrong_token() {
    let s = server(2);
    let mut stream = TcpStream::connect(s.local_addr()).unwrap();
    let v1 = Body::default()
        .raw(MAGIC)
        .u8(1)
        .raw(&token().bytes())
        .u64(1)
        .u64(2);
    stream.write_all(&v1.frame()).unwrap();
    let answer = read_frame(
        &mut stream,
        1024,
        Some(Instant::now() + Duration::from_secs(5)),
    )
    .ok()
    .unwrap();
    let mut f = Fields(&answer);
    assert_eq!(f.u8().unwrap(), ST_RENDEZVOUS);
    let msg = String::from_utf8(f.bytes().unwrap().to_vec()).unwrap();
    assert!(
        msg.contains("version 1") && msg.contains("same ringside"),
        "{msg}"
    );
}

#[test]
fn unreachable_master_fails_within_the_timeout() {
    // Bind then drop to find a port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let e =
        TcpStore::connect("127.0.0.1", port, &token(), 0, 1, Duration::from_secs(1)).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("unreachable"), "{e}");
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(2));
}

#[test]
fn client_connects_to_a_master_that_starts_later() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let s = StoreServer::bind(addr, token(), 1).unwrap();
        std::thread::sleep(Duration::from_secs(1));
        drop(s);
    });
    let c = TcpStore::connect("127.0.0.1", port, &token(), 0, 1, Duration::from_secs(5)).unwrap();
    c.set("a", b"b").unwrap();
    late.join().unwrap();
}

#[test]
fn port_in_use_is_a_clear_error() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let e = StoreServer::bind(busy.local_addr().unwrap(), token(), 1).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("address already in use"), "{msg}");
    assert!(msg.contains("--master-port"), "{msg}");
    assert!(
        msg.contains(&busy.local_addr().unwrap().to_string()),
        "{msg}"
    );
}

#[test]
fn dropping_the_server_closes_listener_and_connections() {
    let s = server(1);
    let addr = s.local_addr();
    let c = client(&s, 0, 1, Duration::from_secs(10)).unwrap();
    let waiter = std::thread::spawn(move || {
        let start = Instant::now();
        let r = c.get("never");
        (r, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    drop(s);
    assert!(start.elapsed() < Duration::from_secs(2));
    let (r, took) = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::PeerLost { rank: 0, .. })), "{r:?}");
    assert!(took < Duration::from_secs(3));
    assert!(TcpStream::connect(addr).is_err());
    // The port is free again: a new store can take it at once.
    drop(StoreServer::bind(addr, token(), 1).unwrap());
}

/// Raises this process's open-file limit towards `want` (as far as the hard
/// limit allows) and returns the limit now in force.
fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            let _ = libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        }
    }
    lim.rlim_cur
}

/// Taken by the tests that hold hundreds of sockets, so that under a low
/// open-file limit they do not run out of descriptors because of each other.
static FD_HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Ranks 0 and 1 connect to `s` and pass barrier `prefix`; how long that took.
fn form_job(s: &StoreServer, prefix: &str) -> Duration {
    let start = Instant::now();
    std::thread::scope(|sc| {
        for rank in 0..2 {
            sc.spawn(move || {
                let c = client(s, rank, 2, Duration::from_secs(20)).unwrap();
                crate::rendezvous::barrier::join(&c, prefix, rank, 2, Duration::from_secs(20))
                    .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            });
        }
    });
    start.elapsed()
}

/// Threads of this process (every test's, not just the store's).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Regression: 68 idle connections stopped a 2-rank job from forming (a cap of
/// 64 + 2·world closed every newcomer past it, the real rank 1 included, which
/// gave up at once with "closed the connection during the hello"). Now the
/// longest-silent stranger is closed instead, strangers cost no thread, and a
/// flood of 3,000 delays the job by well under a second.
#[test]
fn store_forms_job_beside_idle_connection_flood() {
    const FLOOD: usize = 3000;
    // The test holds both ends of the flood in one process; the server keeps
    // at most its cap of them, plus slack for the tests running beside this one.
    let slack = (super::server::MAX_UNAUTHENTICATED + 4 + 128) as u64;
    let limit = raise_nofile(FLOOD as u64 + slack);
    let flood = FLOOD.min(limit.saturating_sub(slack) as usize);
    if flood < FLOOD {
        eprintln!("open-file limit {limit}: flooding with {flood} connections, not {FLOOD}");
    }
    let _fds = FD_HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let s = server(2);
    let addr = s.local_addr();
    let baseline = form_job(&s, "alone");
    let threads_before = threads();
    let mut idle = Vec::with_capacity(flood);
    for _ in 0..flood {
        match TcpStream::connect(addr) {
            Ok(c) => idle.push(c),
            // Out of descriptors after all (tests beside this one hold some).
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
            Err(e) => panic!("idle connection {}: {e}", idle.len()),
        }
    }
    let flood = idle.len();
    assert!(
        flood > super::server::MAX_UNAUTHENTICATED + 4,
        "only {flood} connections before the open-file limit {limit}: too few to flood past \
         the server's cap"
    );
    let flooded = form_job(&s, "flooded");
    let threads_after = threads();
    drop(idle);
    assert!(
        flooded < baseline + Duration::from_secs(1),
        "{flood} idle connections delayed the job from {baseline:?} to {flooded:?}"
    );
    // One thread per idle connection was ~2,930 threads; the other tests
    // running now make a few dozen at most.
    assert!(
        threads_after < threads_before + 500,
        "threads grew from {threads_before} to {threads_after} under the flood"
    );
    eprintln!("{flood} idle connections: job formed in {flooded:?} (alone: {baseline:?})");
}

/// Past the cap, the stranger silent longest is closed, not the newcomer.
#[test]
fn past_the_cap_the_oldest_silent_connection_is_closed() {
    let _fds = FD_HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let s = server(2);
    let addr = s.local_addr();
    let cap = super::server::MAX_UNAUTHENTICATED + 2 * 2;
    let mut silent: Vec<TcpStream> = (0..cap)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    // Let the front door take them all before the newcomer.
    std::thread::sleep(Duration::from_millis(500));
    let mut newest = TcpStream::connect(addr).unwrap();
    let closed = |stream: &mut TcpStream, wait: Duration| {
        stream.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 1];
        // Closed by the server: end of file (or a reset), not a read timeout,
        // which is what a connection still waiting for its hello gives.
        match std::io::Read::read(stream, &mut buf) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    };
    assert!(
        closed(&mut silent[0], Duration::from_secs(5)),
        "the oldest silent connection was kept past the cap"
    );
    assert!(
        !closed(&mut newest, Duration::from_millis(300)),
        "the newcomer was closed"
    );
    assert!(
        !closed(&mut silent[cap - 1], Duration::from_millis(100)),
        "a younger one was closed"
    );
    // The ranks still get in while the strangers stay.
    let c = client(&s, 1, 2, Duration::from_secs(10)).unwrap();
    c.set("k", b"v").unwrap();
    drop(silent);
}

/// A fake store on a free loopback port: accepts connections, records what
/// each sends until it closes, and answers the first frame with `reply`
/// (`None`: says nothing; `Some(&[])`: closes at once). Returns the address
/// and what each connection sent, once `stop` is set.
pub(crate) struct Squatter {
    pub(crate) addr: SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Vec<u8>>>>,
}

impl Squatter {
    pub(crate) fn on(listener: TcpListener, reply: Option<Vec<u8>>) -> Squatter {
        use std::io::Read;
        use std::sync::atomic::{AtomicBool, Ordering};
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                let Ok((mut c, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                let mut answered = false;
                loop {
                    match c.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                        Err(_) if flag.load(Ordering::SeqCst) => break,
                        Err(_) => {}
                    }
                    if !answered && got.len() >= 4 {
                        answered = true;
                        match &reply {
                            Some(r) if r.is_empty() => break,
                            Some(r) => c.write_all(r).unwrap_or(()),
                            None => {}
                        }
                    }
                }
                seen.push(got);
            }
            seen
        });
        Squatter {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops it; what every connection sent.
    pub(crate) fn finish(mut self) -> Vec<Vec<u8>> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Whether `needle` occurs in `hay`.
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A challenge a squatter without the token might send: the right shape,
/// a made-up proof.
pub(crate) fn fake_challenge() -> Vec<u8> {
    Body::default()
        .u8(ST_OK)
        .raw(&[9; NONCE])
        .raw(&[9; PROOF])
        .frame()
}

/// Regression: a rank sent the job token in clear in its hello, so whatever
/// squatted on MASTER_PORT received it. Now the store proves the token first:
/// a squatter that answers sees only a hello (nonce, rank, world size), never
/// the token nor a proof made with it, and the rank says what it met.
#[test]
fn a_squatter_on_the_port_never_sees_the_token() {
    let secret = Token::generate().unwrap();
    for reply in [Some(fake_challenge()), None] {
        let squatter = Squatter::on(TcpListener::bind("127.0.0.1:0").unwrap(), reply.clone());
        let start = Instant::now();
        let e = TcpStore::connect(
            "127.0.0.1",
            squatter.addr.port(),
            &secret,
            1,
            2,
            Duration::from_secs(1),
        )
        .unwrap_err();
        let took = start.elapsed();
        let seen = squatter.finish();
        let msg = e.to_string();
        if reply.is_some() {
            assert!(matches!(e, Error::Auth(_)), "{e}");
            assert!(
                msg.contains("could not prove") && msg.contains("MASTER_PORT"),
                "{msg}"
            );
            assert!(took < Duration::from_millis(500), "{took:?}");
        } else {
            assert!(matches!(e, Error::Timeout { .. }), "{e}");
            assert!(
                msg.contains("does not answer like a ringside store"),
                "{msg}"
            );
            assert!(took < Duration::from_secs(2), "{took:?}");
        }
        assert!(!msg.contains(&secret.to_string()), "{msg}");
        assert_eq!(seen.len(), 1, "one connection, no retry: {seen:?}");
        let got = &seen[0];
        // Exactly the hello: magic, version, nonce, rank, world size. No proof.
        assert_eq!(got.len(), 4 + 4 + 1 + NONCE + 8 + 8, "{got:?}");
        assert!(!contains(got, &secret.bytes()));
        assert!(!contains(got, secret.to_string().as_bytes()));
    }
}

/// A hello the store closes unanswered (a flood pushed it out) is dialled
/// again; a service that closes every one is named when the time is up.
#[test]
fn closed_hellos_are_retried_then_named() {
    let s = server(1);
    let store = s.local_addr();
    // Closes the first two connections at once, then relays to the store.
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = front.local_addr().unwrap().port();
    let relay = std::thread::spawn(move || {
        for _ in 0..2 {
            drop(front.accept().unwrap());
        }
        let (a, _) = front.accept().unwrap();
        let b = TcpStream::connect(store).unwrap();
        let pipe = |mut from: TcpStream, mut to: TcpStream| {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from, &mut to);
                let _ = to.shutdown(std::net::Shutdown::Write);
            })
        };
        let up = pipe(a.try_clone().unwrap(), b.try_clone().unwrap());
        let down = pipe(b, a);
        let _ = up.join();
        let _ = down.join();
    });
    let c = TcpStore::connect("127.0.0.1", port, &token(), 0, 1, Duration::from_secs(5)).unwrap();
    c.set("k", b"v").unwrap();
    assert_eq!(c.get("k").unwrap(), b"v");
    drop(c);
    drop(s);
    relay.join().unwrap();

    let closer = Squatter::on(TcpListener::bind("127.0.0.1:0").unwrap(), Some(Vec::new()));
    let start = Instant::now();
    let e = TcpStore::connect(
        "127.0.0.1",
        closer.addr.port(),
        &token(),
        1,
        2,
        Duration::from_secs(1),
    )
    .unwrap_err();
    let took = start.elapsed();
    let tries = closer.finish().len();
    let msg = e.to_string();
    assert!(matches!(e, Error::Rendezvous(_)), "{e}");
    assert!(
        msg.contains("kept closing") && msg.contains("MASTER_PORT"),
        "{msg}"
    );
    assert!(tries >= 3, "{tries} tries: {msg}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
}
