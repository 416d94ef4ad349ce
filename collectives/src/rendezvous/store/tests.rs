//! The store's tests: token, server and client over loopback.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::token::TOKEN_VAR;
use super::wire::{Body, Fields, MAGIC, ST_RENDEZVOUS, VERSION, read_frame};
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

#[test]
fn server_rejects_rank_out_of_range_even_if_client_does_not_check() {
    let s = server(2);
    let mut stream = TcpStream::connect(s.local_addr()).unwrap();
    let hello = Body::default()
        .raw(MAGIC)
        .u8(VERSION)
        .raw(&token().bytes())
        .u64(5)
        .u64(2);
    stream.write_all(&hello.frame()).unwrap();
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
    assert!(msg.contains("rank 5") && msg.contains('2'), "{msg}");
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

/// 3,000 connections that never sent a hello made ~2,930 server threads: past
/// the cap a new one is closed at once, and a real rank still gets in as soon as
/// the silent ones give up their slots (here: closed by their owner).
#[test]
fn silent_connections_are_capped_and_real_ranks_still_join() {
    let s = server(2);
    let addr = s.local_addr();
    let cap = super::server::MAX_UNAUTHENTICATED + 2 * 2;
    let silent: Vec<TcpStream> = (0..cap)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    // Let the accept loop take them all.
    std::thread::sleep(Duration::from_millis(500));
    let mut extra = TcpStream::connect(addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 1];
    // Closed by the server: end of file (or a reset), not a read timeout, which is
    // what a served connection waiting for its hello would give.
    let got = std::io::Read::read(&mut extra, &mut buf);
    let closed = match &got {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    };
    assert!(closed, "a connection past the cap was served: {got:?}");
    drop(silent);
    let c = client(&s, 1, 2, Duration::from_secs(10)).unwrap();
    c.set("k", b"v").unwrap();
}
