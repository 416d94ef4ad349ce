//! The TCP transport's tests: thread ranks over loopback.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Instant;

use super::handshake::{Hello, ST_BAD_WORLD, fnv1a, parse_addr};
use super::*;
use crate::rendezvous::MemStore;
use crate::rendezvous::Store as _;
use crate::sys::socket::send2;
use crate::{Collective, DType, ReduceOp};

const TOKEN: [u8; 16] = *b"ringside-test-tk";

fn opts(timeout: Duration) -> TransportOptions {
    TransportOptions {
        timeout,
        prefix: "test/".into(),
        token: TOKEN,
        listen_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        local: None,
    }
}

/// Connects `world` ranks (threads) through one in-memory store.
fn mesh_with(world: usize, per_rank: impl Fn(usize) -> TransportOptions) -> Vec<TcpTransport> {
    let store = MemStore::new(Duration::from_secs(10));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|r| {
                let (store, o) = (&store, per_rank(r));
                s.spawn(move || TcpTransport::connect(store, r, world, &o).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn mesh(world: usize) -> Vec<TcpTransport> {
    mesh_with(world, |_| opts(Duration::from_secs(10)))
}

/// Runs `f` on every rank at once; results in rank order.
fn on_all<R: Send>(ts: &mut [TcpTransport], f: impl Fn(&mut TcpTransport) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let hs: Vec<_> = ts.iter_mut().map(|t| s.spawn(|| f(t))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn tag(seq: u32, dtype: DType, count: u64) -> Tag {
    Tag {
        collective: Collective::SendRecv,
        seq,
        dtype,
        op: 0,
        root: 0,
        count,
    }
}

/// Bytes that differ per rank and per position, cheap to build even in
/// debug builds: a 4093-byte block (prime, so it never lines up with
/// buffer sizes), each copy stamped with its index.
fn pattern(rank: usize, len: usize) -> Vec<u8> {
    let block: Vec<u8> = (0..4093)
        .map(|i: usize| (i.wrapping_mul(31) ^ rank.wrapping_mul(97)) as u8)
        .collect();
    let mut v = Vec::with_capacity(len);
    let mut n = 0u64;
    while v.len() < len {
        let at = v.len();
        let k = (len - at).min(block.len());
        v.extend_from_slice(&block[..k]);
        let stamp = n.to_le_bytes();
        let s = k.min(stamp.len());
        v[at..at + s].copy_from_slice(&stamp[..s]);
        n += 1;
    }
    v
}

#[test]
fn ring_copy_delivers_every_size() {
    for world in [2, 3, 5] {
        let mut ts = mesh(world);
        for (seq, len) in [0usize, 1, 7, 1000, (4 << 20) + 3].into_iter().enumerate() {
            let t = tag(seq as u32, DType::U8, len as u64);
            on_all(&mut ts, |tr| {
                let (r, n) = (tr.rank(), tr.world_size());
                let data = pattern(r, len);
                let mut got = vec![0xAAu8; len];
                tr.exchange(
                    &t,
                    Some(((r + 1) % n, &data)),
                    Some(((r + n - 1) % n, Sink::Copy(&mut got))),
                )
                .unwrap();
                assert!(
                    got == pattern((r + n - 1) % n, len),
                    "world {n} rank {r} len {len}: wrong bytes"
                );
            });
        }
    }
}

#[test]
fn ring_reduce_sums_f32() {
    for world in [2, 3, 5] {
        let mut ts = mesh(world);
        for (seq, count) in [0usize, 1, 7, 1000, (1 << 20) + 3].into_iter().enumerate() {
            let t = tag(seq as u32, DType::F32, count as u64);
            let value = |rank: usize, i: usize| (rank * 1000 + i % 4096) as f32;
            on_all(&mut ts, |tr| {
                let (r, n) = (tr.rank(), tr.world_size());
                let left = (r + n - 1) % n;
                let mine: Vec<f32> = (0..count).map(|i| value(r, i)).collect();
                let mut acc = mine.clone();
                tr.exchange(
                    &t,
                    Some(((r + 1) % n, bytemuck::cast_slice(&mine))),
                    Some((
                        left,
                        Sink::Reduce {
                            dst: bytemuck::cast_slice_mut(&mut acc),
                            dtype: DType::F32,
                            op: ReduceOp::Sum,
                        },
                    )),
                )
                .unwrap();
                for (i, v) in acc.iter().enumerate() {
                    assert_eq!(*v, value(r, i) + value(left, i), "rank {r} element {i}");
                }
            });
        }
    }
}

#[test]
fn large_simultaneous_exchanges_do_not_deadlock() {
    const LEN: usize = 64 << 20;
    // Both directions at once between two ranks.
    let mut ts = mesh(2);
    let t = tag(0, DType::U8, LEN as u64);
    on_all(&mut ts, |tr| {
        let r = tr.rank();
        let data = pattern(r, LEN);
        let mut got = vec![0u8; LEN];
        tr.exchange(
            &t,
            Some((1 - r, &data)),
            Some((1 - r, Sink::Copy(&mut got))),
        )
        .unwrap();
        assert!(got == pattern(1 - r, LEN));
    });
    // A ring: everyone sends right while receiving from the left.
    let mut ts = mesh(3);
    on_all(&mut ts, |tr| {
        let (r, n) = (tr.rank(), tr.world_size());
        let data = pattern(r, LEN);
        let mut got = vec![0u8; LEN];
        tr.exchange(
            &t,
            Some(((r + 1) % n, &data)),
            Some(((r + n - 1) % n, Sink::Copy(&mut got))),
        )
        .unwrap();
        assert!(got == pattern((r + n - 1) % n, LEN));
    });
}

#[test]
fn zero_length_frames_still_carry_the_tag() {
    let mut ts = mesh(2);
    let errs = on_all(&mut ts, |tr| {
        let r = tr.rank();
        // Same (empty) length, different sequence numbers.
        let t = tag(r as u32, DType::U8, 0);
        tr.exchange(&t, Some((1 - r, &[])), Some((1 - r, Sink::Copy(&mut []))))
            .unwrap_err()
    });
    for e in errs {
        assert!(matches!(e, Error::Mismatch(_)), "{e}");
    }
}

#[test]
fn mismatched_tags_fail_on_both_sides() {
    let mut ts = mesh(2);
    let errs = on_all(&mut ts, |tr| {
        let r = tr.rank();
        let t = Tag {
            collective: if r == 0 {
                Collective::AllReduce
            } else {
                Collective::Broadcast
            },
            ..tag(3, DType::F32, 25)
        };
        let data = [0u8; 100];
        let mut got = [0u8; 100];
        tr.exchange(
            &t,
            Some((1 - r, &data)),
            Some((1 - r, Sink::Copy(&mut got))),
        )
        .unwrap_err()
    });
    for (r, e) in errs.iter().enumerate() {
        let Error::Mismatch(msg) = e else {
            panic!("rank {r}: expected a mismatch, got {e}")
        };
        // Both calls, each with its rank: the desync check's message.
        assert!(msg.contains(&format!("rank {r} is in")), "{msg}");
        assert!(msg.contains(&format!("rank {} is in", 1 - r)), "{msg}");
    }
    // The transport refuses further use instead of reading mid-frame.
    let t = tag(4, DType::U8, 0);
    let e = ts[0].exchange(&t, Some((1, &[])), None).unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e}");
}

#[test]
fn mismatched_lengths_fail_on_both_sides_even_when_large() {
    for (a, b) in [(100usize, 200usize), (5 << 20, 6 << 20)] {
        let mut ts = mesh(2);
        let t = tag(0, DType::U8, 0);
        let start = Instant::now();
        let errs = on_all(&mut ts, |tr| {
            let r = tr.rank();
            let len = if r == 0 { a } else { b };
            let data = vec![1u8; len];
            let mut got = vec![0u8; len];
            tr.exchange(
                &t,
                Some((1 - r, &data)),
                Some((1 - r, Sink::Copy(&mut got))),
            )
            .unwrap_err()
        });
        assert!(start.elapsed() < Duration::from_secs(5));
        for (r, e) in errs.iter().enumerate() {
            let Error::Mismatch(msg) = e else {
                panic!("rank {r}: expected a mismatch, got {e}")
            };
            assert!(msg.contains(&format!("rank {}", 1 - r)), "{msg}");
        }
    }
}

#[test]
fn dropped_peer_is_lost_promptly_not_timed_out() {
    // Rank 1 waits on rank 0, which goes away.
    let mut ts = mesh(2);
    let mut t1 = ts.pop().unwrap();
    let t0 = ts.pop().unwrap();
    let t = tag(0, DType::U8, 1000);
    let dropper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(t0);
        Instant::now()
    });
    let mut got = vec![0u8; 1000];
    let e = t1
        .exchange(&t, None, Some((0, Sink::Copy(&mut got))))
        .unwrap_err();
    let dropped_at = dropper.join().unwrap();
    assert!(dropped_at.elapsed() < Duration::from_secs(1));
    assert!(matches!(e, Error::PeerLost { rank: 0, .. }), "{e}");
}

#[test]
fn peer_dropped_mid_payload_is_lost_promptly() {
    const LEN: usize = 64 << 20;
    // Rank 0 gives up sending after a short timeout and drops; rank 1 then
    // receives part of the payload and must notice the loss, then fail to
    // send to the dead rank as well.
    let mut ts = mesh_with(2, |r| {
        opts(Duration::from_millis(if r == 0 { 300 } else { 10_000 }))
    });
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let t = tag(0, DType::U8, LEN as u64);
    let (gone_tx, gone_rx) = mpsc::channel();
    let sender = std::thread::spawn(move || {
        let data = vec![7u8; LEN];
        let e = t0.exchange(&t, Some((1, &data)), None).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("rank 1 to take"), "{e}");
        drop(t0);
        gone_tx.send(()).unwrap();
    });
    gone_rx.recv().unwrap();
    let start = Instant::now();
    let mut got = vec![0u8; LEN];
    let e = t1
        .exchange(&t, None, Some((0, Sink::Copy(&mut got))))
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(matches!(e, Error::PeerLost { rank: 0, .. }), "{e}");
    sender.join().unwrap();
}

#[test]
fn sending_to_a_dead_peer_is_lost_not_sigpipe() {
    const LEN: usize = 64 << 20;
    let mut ts = mesh(2);
    let mut t1 = ts.pop().unwrap();
    drop(ts);
    let start = Instant::now();
    let data = vec![1u8; LEN];
    let e = t1
        .exchange(&tag(0, DType::U8, 0), Some((0, &data)), None)
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(matches!(e, Error::PeerLost { rank: 0, .. }), "{e}");
}

#[test]
fn abort_reaches_a_waiting_receiver() {
    let mut ts = mesh(2);
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        t0.abort("rank 0 ran out of memory");
        // Unusable afterwards.
        let e = t0
            .exchange(&tag(1, DType::U8, 0), Some((1, &[])), None)
            .unwrap_err();
        assert!(e.to_string().contains("aborted"), "{e}");
    });
    let start = Instant::now();
    let mut got = vec![0u8; 64];
    let e = t1
        .exchange(
            &tag(0, DType::U8, 64),
            None,
            Some((0, Sink::Copy(&mut got))),
        )
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(2));
    match e {
        Error::PeerAborted { rank: 0, reason } => {
            assert_eq!(reason, "rank 0 ran out of memory")
        }
        e => panic!("expected PeerAborted, got {e}"),
    }
    aborter.join().unwrap();
}

#[test]
fn abort_reaches_a_blocked_sender() {
    const LEN: usize = 64 << 20;
    let mut ts = mesh(2);
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let aborter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        t0.abort("gave up");
        // Keep the socket open: the sender must notice the abort frame
        // itself, not wait for the connection reset a close would cause.
        std::thread::sleep(Duration::from_millis(1500));
        drop(t0);
    });
    let start = Instant::now();
    let data = vec![3u8; LEN];
    let e = t1
        .exchange(&tag(0, DType::U8, LEN as u64), Some((0, &data)), None)
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(1200));
    assert!(
        matches!(&e, Error::PeerAborted { rank: 0, reason } if reason == "gave up"),
        "{e}"
    );
    aborter.join().unwrap();
}

#[test]
fn abort_after_a_half_sent_frame_still_arrives() {
    abort_after_half_sent_frame(1000);
}

/// Regression: a 3-rank tcp job with rank 1 SIGKILLed mid-8 MiB all_reduce
/// had rank 0 report "lost rank 2" (CI, peer_sigkilled_mid_all_reduce_over_tcp):
/// rank 2's half-sent frame to rank 0 did not fit the socket buffer, so the
/// abort padding gave up and rank 0 never learned that rank 1 was the cause.
#[test]
fn abort_after_a_half_sent_frame_larger_than_the_socket_buffer_still_arrives() {
    abort_after_half_sent_frame(32 << 20);
}

/// Rank 0 leaves a `len`-byte frame half-sent (as a failed exchange does);
/// its abort must finish that frame so rank 1 reads the abort, not garbage.
fn abort_after_half_sent_frame(len: usize) {
    let mut ts = mesh(2);
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let t = tag(0, DType::U8, len as u64);
    let header = Frame {
        tag: t,
        len: len as u64,
        flags: 0,
    }
    .encode();
    let fd = t0.peer_fd(1, "send to").unwrap();
    assert_eq!(send2(fd, &header, &[9u8; 10]).unwrap(), HEADER_LEN + 10);
    t0.peers[1].as_mut().unwrap().out_partial = (len - 10) as u64;
    t0.broken = Some("a test left a frame half-sent".into());
    // The abort runs while rank 1 reads, as in a real job.
    let aborter = std::thread::spawn(move || {
        t0.abort("send timed out");
        t0
    });

    let mut got = vec![0u8; len];
    t1.exchange(&t, None, Some((0, Sink::Copy(&mut got))))
        .unwrap();
    assert_eq!(&got[..10], &[9u8; 10]);
    assert!(got[10..].iter().all(|&b| b == 0));
    let mut more = [0u8; 1];
    let e = t1
        .exchange(
            &tag(1, DType::U8, 1),
            None,
            Some((0, Sink::Copy(&mut more))),
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::PeerAborted { rank: 0, reason } if reason == "send timed out"),
        "{e}"
    );
    drop(aborter.join().unwrap());
}

#[test]
fn silent_peer_times_out_naming_it() {
    let mut ts = mesh_with(2, |_| opts(Duration::from_millis(200)));
    let start = Instant::now();
    let mut got = [0u8; 8];
    let e = ts[1]
        .exchange(&tag(7, DType::U8, 8), None, Some((0, Sink::Copy(&mut got))))
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(2));
    let msg = e.to_string();
    assert!(matches!(e, Error::Timeout { .. }), "{msg}");
    assert!(msg.contains("rank 0 to send sendrecv#7"), "{msg}");
}

#[test]
fn wrong_token_is_rejected_on_both_sides() {
    let store = MemStore::new(Duration::from_secs(5));
    let timeout = Duration::from_millis(800);
    let start = Instant::now();
    let errs: Vec<Error> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let store = &store;
                s.spawn(move || {
                    let mut o = opts(timeout);
                    if r == 1 {
                        o.token = *b"some-other-job!!";
                    }
                    TcpTransport::connect(store, r, 2, &o).unwrap_err()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(start.elapsed() < timeout + Duration::from_secs(1));
    for (r, e) in errs.iter().enumerate() {
        let msg = e.to_string();
        assert!(matches!(e, Error::Rendezvous(_)), "rank {r}: {msg}");
        assert!(msg.contains("token"), "rank {r}: {msg}");
    }
}

#[test]
fn strangers_are_turned_away_and_the_mesh_still_forms() {
    let store = Arc::new(MemStore::new(Duration::from_secs(5)));
    let o = opts(Duration::from_secs(5));
    let ready = Barrier::new(2);
    std::thread::scope(|s| {
        let r0 = s.spawn(|| TcpTransport::connect(&*store, 0, 2, &o).unwrap());
        s.spawn(|| {
            let addr = parse_addr(0, &store.get("test/tcp/0").unwrap()).unwrap();
            // One stranger speaks HTTP, one hangs up at once.
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n..................")
                .unwrap();
            drop(TcpStream::connect(addr).unwrap());
            ready.wait();
        });
        ready.wait();
        let r1 = s.spawn(|| TcpTransport::connect(&*store, 1, 2, &o).unwrap());
        let mut ts = vec![r0.join().unwrap(), r1.join().unwrap()];
        on_all(&mut ts, |tr| {
            let r = tr.rank();
            let mut got = [0u8; 3];
            tr.exchange(
                &tag(0, DType::U8, 3),
                Some((1 - r, &[r as u8; 3])),
                Some((1 - r, Sink::Copy(&mut got))),
            )
            .unwrap();
            assert_eq!(got, [(1 - r) as u8; 3]);
        });
    });
}

#[test]
fn bad_arguments_are_errors() {
    let mut ts = mesh(2);
    let t = tag(0, DType::U8, 0);
    let e = ts[0].exchange(&t, Some((0, &[])), None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = ts[0].exchange(&t, Some((5, &[])), None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let mut odd = [0u8; 6];
    let sink = Sink::Reduce {
        dst: &mut odd,
        dtype: DType::F32,
        op: ReduceOp::Sum,
    };
    let e = ts[0].exchange(&t, None, Some((1, sink))).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // Bad arguments do not poison the transport.
    on_all(&mut ts, |tr| {
        let r = tr.rank();
        tr.exchange(&t, Some((1 - r, &[])), Some((1 - r, Sink::Copy(&mut []))))
            .unwrap();
    });
    let store = MemStore::new(Duration::from_secs(1));
    let mut o = opts(Duration::from_secs(1));
    assert!(TcpTransport::connect(&store, 2, 2, &o).is_err());
    o.listen_ip = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    assert!(TcpTransport::connect(&store, 0, 1, &o).is_err());
}

#[test]
fn transport_can_move_to_another_thread() {
    fn is_send<T: Send>() {}
    is_send::<TcpTransport>();
}

#[test]
fn hello_round_trips() {
    let h = Hello {
        rank: 3,
        world: 8,
        target: 1,
        status: ST_BAD_WORLD,
        nonce: TOKEN,
        prefix_hash: fnv1a(b"x/"),
    };
    assert_eq!(Hello::decode(&h.encode()), Ok(h));
    let mut b = h.encode();
    b[0] ^= 1;
    assert!(Hello::decode(&b).is_err());
}

/// `cargo test -p collectives --release bench_loopback -- --ignored --nocapture`
#[test]
#[ignore = "benchmark: run in release with --ignored --nocapture"]
fn bench_loopback() {
    let mut ts = mesh(2);
    println!("ping-pong latency (one way = round trip / 2), 2 threads on loopback");
    println!(
        "{:>8} {:>10} {:>10} {:>10}",
        "bytes", "min_us", "med_us", "iters"
    );
    let mut seq = 0u32;
    for len in [8usize, 64, 256, 1024, 4096] {
        let iters = 20_000;
        let times = on_all(&mut ts, |tr| {
            let r = tr.rank();
            let data = vec![1u8; len];
            let mut got = vec![0u8; len];
            let t = tag(seq, DType::U8, len as u64);
            let mut rtts = Vec::with_capacity(iters);
            for _ in 0..iters {
                let start = Instant::now();
                if r == 0 {
                    tr.exchange(&t, Some((1, &data)), None).unwrap();
                    tr.exchange(&t, None, Some((1, Sink::Copy(&mut got))))
                        .unwrap();
                } else {
                    tr.exchange(&t, None, Some((0, Sink::Copy(&mut got))))
                        .unwrap();
                    tr.exchange(&t, Some((0, &data)), None).unwrap();
                }
                rtts.push(start.elapsed());
            }
            rtts.sort();
            rtts
        });
        seq += 1;
        let rtts = &times[0];
        println!(
            "{len:>8} {:>10.2} {:>10.2} {iters:>10}",
            rtts[0].as_secs_f64() * 1e6 / 2.0,
            rtts[iters / 2].as_secs_f64() * 1e6 / 2.0
        );
    }
    println!(
        "streaming bandwidth, GB/s (1e9 B/s): rank 0 -> rank 1 into a Copy sink, into an \
         f32-sum Reduce sink, and both ways at once (per direction)"
    );
    println!(
        "{:>8} {:>10} {:>10} {:>10}",
        "MiB", "copy", "reduce", "bidir"
    );
    for mib in [1usize, 4, 16, 64] {
        let len = mib << 20;
        let reps = (1024 / mib).max(16);
        let mut gbps = [0.0f64; 3];
        for (mode, g) in gbps.iter_mut().enumerate() {
            let t = tag(seq, DType::F32, (len / 4) as u64);
            seq += 1;
            let secs = on_all(&mut ts, |tr| {
                let r = tr.rank();
                // Non-zero, so every page is really mapped before timing.
                let data = vec![1u8; len];
                let mut got = vec![1u8; len];
                let mut ack = [0u8; 0];
                let start = Instant::now();
                for _ in 0..reps {
                    match (mode, r) {
                        (0 | 1, 0) => tr.exchange(&t, Some((1, &data)), None).unwrap(),
                        (0, _) => tr
                            .exchange(&t, None, Some((0, Sink::Copy(&mut got))))
                            .unwrap(),
                        (1, _) => {
                            let sink = Sink::Reduce {
                                dst: &mut got,
                                dtype: DType::F32,
                                op: ReduceOp::Sum,
                            };
                            tr.exchange(&t, None, Some((0, sink))).unwrap()
                        }
                        _ => tr
                            .exchange(
                                &t,
                                Some((1 - r, &data)),
                                Some((1 - r, Sink::Copy(&mut got))),
                            )
                            .unwrap(),
                    }
                }
                // Close the timing on the sender once everything arrived.
                let fin = tag(u32::MAX, DType::U8, 0);
                if r == 0 {
                    tr.exchange(&fin, None, Some((1, Sink::Copy(&mut ack))))
                        .unwrap();
                } else {
                    tr.exchange(&fin, Some((0, &[])), None).unwrap();
                }
                start.elapsed().as_secs_f64()
            });
            *g = (len * reps) as f64 / secs[0] / 1e9;
        }
        println!(
            "{mib:>8} {:>10.2} {:>10.2} {:>10.2}",
            gbps[0], gbps[1], gbps[2]
        );
    }
}

/// The hello sent the job token in clear: a squatter listening where rank 1
/// dials rank 0 (rank 0's port reused, a stale address) learned it. Now it
/// gets a nonce and a rank, and rank 1 refuses it for lacking the proof.
#[test]
fn a_squatter_where_a_rank_dials_learns_nothing_usable() {
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let store = MemStore::new(Duration::from_secs(5));
    store
        .set(
            "test/tcp/0",
            squatter.local_addr().unwrap().to_string().as_bytes(),
        )
        .unwrap();
    let (heard, e) = std::thread::scope(|s| {
        let listen = s.spawn(|| {
            let (mut c, _) = squatter.accept().unwrap();
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut hello = [0u8; 48];
            std::io::Read::read_exact(&mut c, &mut hello).unwrap();
            // Answer as a ringside rank would, with a made-up nonce and proof.
            let mut fake = Hello::decode(&hello).unwrap();
            (fake.rank, fake.target) = (0, fake.rank);
            let mut reply = fake.encode().to_vec();
            reply.extend([0x5a; 32]);
            c.write_all(&reply).unwrap();
            let mut rest = Vec::new();
            let _ = std::io::Read::read_to_end(&mut c, &mut rest);
            [hello.to_vec(), rest].concat()
        });
        let e = TcpTransport::connect(&store, 1, 2, &opts(Duration::from_secs(3))).unwrap_err();
        (listen.join().unwrap(), e)
    });
    let msg = e.to_string();
    assert!(
        msg.contains("did not prove it holds this job's token"),
        "{msg}"
    );
    assert_eq!(
        heard.len(),
        48,
        "rank 1 sent more than its hello: {heard:?}"
    );
    assert!(
        !heard.windows(TOKEN.len()).any(|w| w == TOKEN),
        "the token crossed the network"
    );
}

/// Named after what broke: under `mpirun --bind-to none` (the tour's launch,
/// both ranks in one scheduling group) unbound ranks took 129–143 µs per
/// small all_reduce beside two busy loops, bound ones 10–18. A rank whose
/// place on the host is known binds to its share while the transport lives
/// and gets its mask back when it goes; one whose place is unknown does not.
/// This test process shares cargo's session, as `mpirun`'s ranks share its.
#[test]
fn ranks_with_a_known_place_bind_to_their_share_until_the_transport_goes() {
    let before = match crate::sys::affinity::cpus_to_test_binding(true) {
        Ok(cpus) => cpus,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    for known in [true, false] {
        let store = MemStore::new(Duration::from_secs(10));
        let masks: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|r| {
                    let store = &store;
                    s.spawn(move || {
                        let mut o = opts(Duration::from_secs(10));
                        o.local = known.then_some((r, 2));
                        let t = TcpTransport::connect(store, r, 2, &o).unwrap();
                        let bound = crate::sys::affinity::allowed_cpus().unwrap();
                        drop(t);
                        (bound, crate::sys::affinity::allowed_cpus().unwrap())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, (bound, after)) in masks.into_iter().enumerate() {
            let want = if known {
                crate::sys::affinity::cpus_for(rank, 2, &before, false).unwrap()
            } else {
                before.clone()
            };
            assert_eq!(bound, want, "rank {rank}, place known: {known}");
            assert_eq!(after, before, "rank {rank}");
        }
    }
}
