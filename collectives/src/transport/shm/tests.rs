//! The shared-memory transport's tests with thread ranks; those with ranks
//! as real processes, and the benchmark, are in [`processes`].

mod processes;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Barrier;

use super::segment::{SEGMENT_BUDGET, create_segment, open_segment, ring_capacity};
use super::*;
use crate::Collective;
use crate::element::{DType, ReduceOp};
use crate::rendezvous::MemStore;

fn opts(prefix: &str, timeout: Duration) -> TransportOptions {
    let mut token = [0u8; 16];
    getrandom::fill(&mut token).unwrap();
    TransportOptions {
        timeout,
        prefix: prefix.to_owned(),
        token,
        listen_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        local: None,
    }
}

fn tag(seq: u32, count: usize) -> Tag {
    Tag {
        collective: Collective::SendRecv,
        seq,
        dtype: DType::U8,
        op: 0,
        root: 0,
        count: count as u64,
    }
}

fn f32_tag(seq: u32, count: usize) -> Tag {
    Tag {
        collective: Collective::AllReduce,
        seq,
        dtype: DType::F32,
        op: ReduceOp::Sum.code(),
        root: 0,
        count: count as u64,
    }
}

/// Runs `f` on `world` thread ranks connected through one segment.
fn with_ranks<T: Send>(
    world: usize,
    timeout: Duration,
    f: impl Fn(ShmTransport) -> T + Sync,
) -> Vec<T> {
    let store = MemStore::new(Duration::from_secs(20));
    let o = opts("t/", timeout);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..world)
            .map(|r| {
                let (store, o, f) = (&store, &o, &f);
                s.spawn(move || f(ShmTransport::connect(store, r, world, o).unwrap()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Bytes that differ per rank, call and position (tiled from a block
/// with a prime length, so building 64 MiB is cheap in debug builds).
fn pattern(rank: usize, seq: u32, len: usize) -> Vec<u8> {
    let block: Vec<u8> = (0..4099u32)
        .map(|i| (i ^ (rank as u32 * 131) ^ (seq * 7)) as u8)
        .collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let take = block.len().min(len - v.len());
        v.extend_from_slice(&block[..take]);
    }
    v
}

fn floats(rank: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i % 1000) + rank * 1000) as f32).collect()
}

/// Sends `len` pattern bytes to `next` while receiving `prev`'s, and checks them.
fn copy_round(t: &mut ShmTransport, seq: u32, len: usize, next: usize, prev: usize) {
    let me = t.rank();
    let send = pattern(me, seq, len);
    let mut got = vec![0u8; len];
    t.exchange(
        &tag(seq, len),
        Some((next, &send)),
        Some((prev, Sink::Copy(&mut got))),
    )
    .unwrap();
    assert!(got == pattern(prev, seq, len), "rank {me} len {len}");
}

/// Sends `n` floats to `next` while reducing `prev`'s into ours, and checks
/// the sums (integers below 2^24: exact in f32 whatever the order).
fn reduce_round(t: &mut ShmTransport, seq: u32, n: usize, next: usize, prev: usize) {
    let me = t.rank();
    let send = floats(me, n);
    let mut acc = floats(me, n);
    let sink = Sink::Reduce {
        dst: bytemuck::cast_slice_mut(&mut acc),
        dtype: DType::F32,
        op: ReduceOp::Sum,
    };
    t.exchange(
        &f32_tag(seq, n),
        Some((next, bytemuck::cast_slice(&send))),
        Some((prev, sink)),
    )
    .unwrap();
    let want: Vec<f32> = floats(me, n)
        .iter()
        .zip(floats(prev, n))
        .map(|(a, b)| a + b)
        .collect();
    assert!(acc == want, "rank {me} count {n}");
}

#[test]
fn ring_exchange_copy_and_reduce_at_several_world_sizes() {
    let byte_sizes = [0usize, 1, 7, 1000, (4 << 20) + 3];
    let float_counts = [0usize, 1, 7, 1000, (1 << 20) + 3];
    for world in [2, 3, 5] {
        with_ranks(world, Duration::from_secs(30), |mut t| {
            let (next, prev) = ((t.rank() + 1) % world, (t.rank() + world - 1) % world);
            let mut seq = 0;
            for &len in &byte_sizes {
                copy_round(&mut t, seq, len, next, prev);
                seq += 1;
            }
            for &n in &float_counts {
                reduce_round(&mut t, seq, n, next, prev);
                seq += 1;
            }
        });
    }
}

#[test]
fn bidirectional_64_mib_exchange_completes() {
    let len = 64 << 20;
    with_ranks(2, Duration::from_secs(60), |mut t| {
        let me = t.rank();
        let send = pattern(me, 9, len);
        let mut got = vec![0u8; len];
        t.exchange(
            &tag(9, len),
            Some((1 - me, &send)),
            Some((1 - me, Sink::Copy(&mut got))),
        )
        .unwrap();
        assert!(got == pattern(1 - me, 9, len));
    });
}

#[test]
fn four_ranks_on_two_cores_do_not_collapse() {
    let t0 = Instant::now();
    let rounds = 2000;
    let (small, large) = (8, (1 << 20) + 8);
    with_ranks(4, Duration::from_secs(30), |mut t| {
        let world = 4;
        let (me, next, prev) = (
            t.rank(),
            (t.rank() + 1) % world,
            (t.rank() + world - 1) % world,
        );
        let sends = [pattern(me, 0, small), pattern(me, 0, large)];
        let wants = [pattern(prev, 0, small), pattern(prev, 0, large)];
        let mut got = vec![0u8; large];
        for seq in 0..rounds {
            // Mostly tiny messages (latency-bound), every 100th a large one.
            let which = usize::from(seq % 100 == 99);
            let len = sends[which].len();
            let sink = Sink::Copy(&mut got[..len]);
            t.exchange(
                &tag(seq, len),
                Some((next, &sends[which])),
                Some((prev, sink)),
            )
            .unwrap();
            assert!(got[..len] == wants[which]);
        }
    });
    let took = t0.elapsed();
    eprintln!("{rounds} ring steps of 4 ranks took {took:?}");
    // Collapsing into 50 ms futex time-outs would take ~100 s, spinning
    // against descheduled peers ~25 s (measured); this takes ~0.1 s.
    assert!(
        took < Duration::from_secs(5),
        "{rounds} ring steps took {took:?}"
    );
}

#[test]
fn mismatched_tag_or_length_is_a_mismatch_on_the_receiver() {
    let out = with_ranks(2, Duration::from_secs(5), |mut t| {
        if t.rank() == 0 {
            t.exchange(&tag(1, 4), Some((1, &[1, 2, 3, 4])), None)
                .unwrap();
            t.exchange(&tag(2, 4), Some((1, &[1, 2, 3, 4])), None)
                .unwrap();
            Ok(())
        } else {
            let mut buf = [0u8; 4];
            // Wrong sequence number (the peer is in another call).
            let a = t.exchange(&tag(7, 4), None, Some((0, Sink::Copy(&mut buf))));
            assert!(matches!(a, Err(Error::Mismatch(_))), "{a:?}");
            Err(a.unwrap_err())
        }
    });
    let msg = out[1].as_ref().unwrap_err().to_string();
    assert!(
        msg.contains("rank 1 is in sendrecv#7") && msg.contains("rank 0 is in sendrecv#1"),
        "{msg}"
    );

    let out = with_ranks(2, Duration::from_secs(5), |mut t| {
        if t.rank() == 0 {
            t.exchange(&tag(1, 4), Some((1, &[1, 2, 3, 4])), None)
                .map(|_| ())
        } else {
            let mut buf = [0u8; 3];
            t.exchange(&tag(1, 4), None, Some((0, Sink::Copy(&mut buf))))
        }
    });
    assert!(out[0].is_ok());
    let msg = out[1].as_ref().unwrap_err().to_string();
    assert!(
        matches!(out[1], Err(Error::Mismatch(_))) && msg.contains("4 bytes"),
        "{msg}"
    );
}

#[test]
fn abort_wakes_every_waiting_peer_with_its_reason() {
    let gate = Barrier::new(3);
    let out = with_ranks(3, Duration::from_secs(20), |mut t| {
        gate.wait();
        if t.rank() == 0 {
            std::thread::sleep(Duration::from_millis(300));
            t.abort("out of memory on rank 0");
            // Unusable afterwards.
            let again = t.exchange(&tag(0, 0), Some((1, &[])), None);
            assert!(matches!(again, Err(Error::PeerAborted { rank: 0, .. })));
            None
        } else {
            let t0 = Instant::now();
            let mut buf = [0u8; 8];
            let r = t.exchange(&tag(0, 8), None, Some((0, Sink::Copy(&mut buf))));
            Some((r, t0.elapsed()))
        }
    });
    for (r, took) in out.into_iter().flatten() {
        match r {
            Err(Error::PeerAborted { rank: 0, reason }) => {
                assert_eq!(reason, "out of memory on rank 0")
            }
            other => panic!("expected PeerAborted, got {other:?}"),
        }
        // 300 ms until the abort, then a futex wake; the 20 s timeout is
        // far away (the slack is for busy machines).
        assert!(took < Duration::from_millis(1500), "took {took:?}");
    }
}

#[test]
fn silent_peer_times_out_naming_it() {
    let out = with_ranks(2, Duration::from_millis(300), |mut t| {
        if t.rank() == 1 {
            std::thread::sleep(Duration::from_millis(600));
            return None;
        }
        let t0 = Instant::now();
        let mut buf = [0u8; 16];
        let r = t.exchange(&tag(3, 16), None, Some((1, Sink::Copy(&mut buf))));
        Some((r, t0.elapsed()))
    });
    let (r, took) = out.into_iter().flatten().next().unwrap();
    let msg = match r {
        Err(e @ Error::Timeout { .. }) => e.to_string(),
        other => panic!("expected Timeout, got {other:?}"),
    };
    assert!(msg.contains("rank 1 to send sendrecv#3"), "{msg}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
        "{took:?}"
    );
}

#[test]
fn bad_peer_and_segment_problems_are_clear_errors() {
    with_ranks(2, Duration::from_secs(5), |mut t| {
        let r = t.exchange(&tag(0, 0), Some((t.rank(), &[])), None);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let r = t.exchange(&tag(0, 0), None, Some((9, Sink::Copy(&mut []))));
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    });

    // No /dev/shm: rank 0 fails clearly, and tells rank 1 through the store.
    let store = MemStore::new(Duration::from_secs(5));
    let o = opts("nodir/", Duration::from_secs(5));
    let missing = Path::new("/nonexistent/ringside-shm-dir");
    let e = ShmTransport::connect_in(missing, &store, 0, 2, &o, None).unwrap_err();
    assert!(e.to_string().contains("no /dev/shm"), "{e}");
    let e = ShmTransport::connect_in(missing, &store, 1, 2, &o, None).unwrap_err();
    assert!(e.to_string().contains("rank 0 could not create"), "{e}");

    // A foreign file published under the key.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ringside-shm-feed"), vec![7u8; 8192]).unwrap();
    let store = MemStore::new(Duration::from_secs(5));
    store.set("x/shm/name", b"ringside-shm-feed").unwrap();
    let o = opts("x/", Duration::from_secs(5));
    let e = ShmTransport::connect_in(dir.path(), &store, 1, 2, &o, None).unwrap_err();
    assert!(
        matches!(e, Error::Protocol(_)) && e.to_string().contains("bad magic"),
        "{e}"
    );
    // A name that is not ours at all is not even opened.
    store.set("y/shm/name", b"../etc/passwd").unwrap();
    let o = opts("y/", Duration::from_secs(5));
    let e = ShmTransport::connect_in(dir.path(), &store, 1, 2, &o, None).unwrap_err();
    assert!(e.to_string().contains("not a ringside"), "{e}");
}

#[test]
fn segment_of_another_job_or_world_is_refused_and_nothing_leaks() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new(Duration::from_millis(500));
    let o = opts("j/", Duration::from_secs(5));
    // Rank 0 alone: it times out in the barrier and must unlink its file.
    let e = ShmTransport::connect_in(dir.path(), &store, 0, 2, &o, None).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let (seg, _, path, name) = create_segment(dir.path(), &o.token, 3, 4096).unwrap();
    let other = opts("k/", Duration::from_secs(5));
    let e = open_segment(dir.path(), &name, "k", &other.token, 3)
        .err()
        .unwrap();
    assert!(matches!(e, Error::Auth(_)), "{e}");
    let e = open_segment(dir.path(), &name, "k", &o.token, 2)
        .err()
        .unwrap();
    assert!(e.to_string().contains("made for 3 ranks"), "{e}");
    drop(seg);
    std::fs::remove_file(path).unwrap();

    // A successful connect leaves nothing in the directory either.
    let store = MemStore::new(Duration::from_secs(5));
    let o = opts("ok/", Duration::from_secs(5));
    std::thread::scope(|s| {
        let h: Vec<_> = (0..2)
            .map(|r| {
                let (store, o, d) = (&store, &o, dir.path());
                s.spawn(move || ShmTransport::connect_in(d, store, r, 2, o, None).unwrap())
            })
            .collect();
        let ts: Vec<_> = h.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(ts[1].ring_bytes(), DEFAULT_RING_BYTES);
    });
}

#[test]
fn ring_capacity_shrinks_with_world_and_rejects_bad_requests() {
    assert_eq!(ring_capacity(2, None).unwrap(), DEFAULT_RING_BYTES);
    let c8 = ring_capacity(8, None).unwrap();
    assert!(c8 * 56 <= SEGMENT_BUDGET && c8.is_power_of_two());
    assert_eq!(ring_capacity(MAX_WORLD, None).unwrap(), MIN_RING_BYTES);
    assert!(ring_capacity(2, Some(5000)).is_err());
    assert!(ring_capacity(2, Some(1024)).is_err());
    assert_eq!(ring_capacity(2, Some(8192)).unwrap(), 8192);
}

#[test]
fn tiny_rings_wrap_headers_and_payloads_correctly() {
    // 4 KiB rings with 1 KiB chunks: headers straddle the wrap point, and
    // payloads are many times the capacity.
    let store = MemStore::new(Duration::from_secs(10));
    let o = opts("tiny/", Duration::from_secs(10));
    std::thread::scope(|s| {
        for r in 0..2 {
            let (store, o) = (&store, &o);
            s.spawn(move || {
                let mut t =
                    ShmTransport::connect_with_ring_bytes(store, r, 2, o, MIN_RING_BYTES).unwrap();
                for (seq, len) in [3usize, 4000, 4096, 17, 100_000, 0, 5]
                    .into_iter()
                    .enumerate()
                {
                    let seq = seq as u32;
                    let send = pattern(r, seq, len);
                    let mut got = vec![0u8; len];
                    t.exchange(
                        &tag(seq, len),
                        Some((1 - r, &send)),
                        Some((1 - r, Sink::Copy(&mut got))),
                    )
                    .unwrap();
                    assert!(got == pattern(1 - r, seq, len), "len {len}");
                }
            });
        }
    });
}

#[test]
fn thread_ranks_read_large_messages_straight_from_the_sender() {
    // Threads of one process reach each other's buffers directly; messages
    // below the threshold, and every message with single copy off, still go
    // through the ring, and both arrive the same.
    with_ranks(3, Duration::from_secs(30), |mut t| {
        let (me, next, prev) = (t.rank(), (t.rank() + 1) % 3, (t.rank() + 2) % 3);
        assert!(t.reach.iter().enumerate().all(|(p, r)| {
            (p == me) == (*r == Reach::Ring) && (p == me || *r == Reach::SameProcess)
        }));
        assert!(t.single_copy_to(next, single_copy::MIN_BYTES));
        assert!(!t.single_copy_to(next, single_copy::MIN_BYTES - 8));
        let mut seq = 0;
        for len in [
            single_copy::MIN_BYTES - 8,
            single_copy::MIN_BYTES,
            (9 << 20) + 5,
        ] {
            copy_round(&mut t, seq, len, next, prev);
            reduce_round(&mut t, seq + 1, len / 4, next, prev);
            seq += 2;
        }
    });
}

#[test]
fn single_copy_setting_is_parsed_and_bad_values_are_refused() {
    use single_copy::Mode;
    assert_eq!(Mode::parse(None).unwrap(), Mode::Auto);
    assert_eq!(Mode::parse(Some("threads")).unwrap(), Mode::Threads);
    assert_eq!(Mode::parse(Some("OFF")).unwrap(), Mode::Off);
    assert_eq!(Mode::parse(Some("processes")).unwrap(), Mode::Processes);
    let e = Mode::parse(Some("fast")).unwrap_err().to_string();
    assert!(
        e.contains("RINGSIDE_SHM_SINGLE_COPY=fast")
            && e.contains("auto, off, threads or processes"),
        "{e}"
    );
}

#[test]
fn dropping_the_transport_restores_the_threads_cpu_mask() {
    // The tour measured Gloo after the reference backend in the same
    // process: with the rank still bound to one CPU, Gloo's network thread
    // shared it and every all_reduce waited a scheduler tick (4 ms).
    let before = match crate::sys::affinity::cpus_to_test_binding(false) {
        Ok(cpus) => cpus,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let masks = with_ranks(2, Duration::from_secs(20), |t| {
        let bound = crate::sys::affinity::allowed_cpus().unwrap();
        drop(t);
        (bound, crate::sys::affinity::allowed_cpus().unwrap())
    });
    for (rank, (bound, after)) in masks.into_iter().enumerate() {
        assert!(
            bound.len() < before.len(),
            "rank {rank} was not bound: {bound:?}"
        );
        assert_eq!(after, before, "rank {rank}");
    }
}

#[test]
fn a_single_copy_whose_sender_failed_is_not_read_after_the_sender_returns() {
    // Rank 0 sends 8 MiB to rank 1 by single copy while receiving from
    // rank 2, which sends the wrong length: rank 0 fails, and its caller may
    // free or reuse the buffer at once. Rank 1 starts reading only later and
    // must fail with the abort instead of reading it.
    let len = 8 << 20;
    let out = with_ranks(3, Duration::from_secs(10), |mut t| match t.rank() {
        0 => {
            let mut send = pattern(0, 1, len);
            let mut got = [0u8; 8];
            let r = t.exchange(
                &tag(1, len),
                Some((1, &send)),
                Some((2, Sink::Copy(&mut got))),
            );
            // Reuse the buffer the moment the exchange returns.
            send.fill(0xEE);
            r.map(|_| 0)
        }
        1 => {
            std::thread::sleep(Duration::from_millis(200));
            let mut got = vec![0u8; len];
            t.exchange(&tag(1, len), None, Some((0, Sink::Copy(&mut got))))
                .map(|_| usize::from(got.iter().all(|&b| b == 0xEE)))
        }
        _ => t
            .exchange(&tag(1, len), Some((0, &[1, 2, 3, 4])), None)
            .map(|_| 0),
    });
    assert!(
        matches!(out[0], Err(Error::Mismatch { .. })),
        "{:?}",
        out[0]
    );
    assert!(
        matches!(out[1], Err(Error::PeerAborted { .. })),
        "{:?}",
        out[1]
    );
}

/// Block lengths (f32 elements) of [`reduce_pairs`]: empty, one element,
/// odd lengths, blocks of one and of several ring capacities (whose answers
/// must be taken back before the sender can go on), one after another so
/// that messages wrap around the ring.
const PAIR_BLOCKS: [(usize, usize); 6] = [
    (0, 1),
    (1, 2),
    (1000, 1001),
    (65_536, 65_537),
    (300_001, 300_000),
    (1 << 20, (1 << 20) + 3),
];

/// An f32 sum of `mine` and `theirs` with `peer`.
fn f32_pair<'a>(peer: usize, mine: &'a mut [f32], theirs: &'a mut [f32]) -> Pair<'a> {
    Pair {
        peer,
        mine: bytemuck::cast_slice_mut(mine),
        theirs: bytemuck::cast_slice_mut(theirs),
        dtype: DType::F32,
        op: ReduceOp::Sum,
    }
}

/// Runs [`Transport::reduce_pair`] over [`PAIR_BLOCKS`] with `peer` (which
/// runs the same) and checks both blocks on this rank: integer values, so
/// the sums are exact in any order.
fn reduce_pairs(t: &mut ShmTransport, me: usize, peer: usize) {
    let value = |rank: usize, block: usize, i: usize| ((i % 1000) + 3 * rank + block) as f32;
    for (seq, (a, b)) in PAIR_BLOCKS.into_iter().enumerate() {
        let fill =
            |block: usize, n: usize| -> Vec<f32> { (0..n).map(|i| value(me, block, i)).collect() };
        let (mut first, mut second) = (fill(0, a), fill(1, b));
        // Rank r reduces block r and sends the other, as the ring does.
        let (mine, theirs) = if me == 0 {
            (&mut second, &mut first)
        } else {
            (&mut first, &mut second)
        };
        t.reduce_pair(&f32_tag(seq as u32, a + b), f32_pair(peer, mine, theirs))
            .unwrap();
        for (block, got) in [(0, &first), (1, &second)] {
            let want: Vec<f32> = (0..got.len())
                .map(|i| value(0, block, i) + value(1, block, i))
                .collect();
            assert!(*got == want, "rank {me}, pair {seq}, block {block}");
        }
    }
}

#[test]
fn a_pair_answered_in_the_ring_holds_both_sums_on_both_ranks() {
    with_ranks(2, Duration::from_secs(30), |mut t| {
        let (me, peer) = (t.rank(), 1 - t.rank());
        // Thread ranks read each other's memory instead; as processes they
        // would answer in the ring, which this makes them do.
        t.reach[peer] = Reach::Ring;
        assert!(t.answers_in_ring(peer));
        reduce_pairs(&mut t, me, peer);
    });
}

#[test]
fn thread_ranks_reduce_a_pair_by_single_copy_with_the_same_sums() {
    with_ranks(2, Duration::from_secs(30), |mut t| {
        let (me, peer) = (t.rank(), 1 - t.rank());
        assert!(!t.answers_in_ring(peer));
        // Not measured against the latency path between threads: the usual line.
        assert_eq!(t.latency_path_bytes(), crate::algorithms::SMALL_BYTES);
        reduce_pairs(&mut t, me, peer);
    });
}

/// Named after what would hang: a rank that sends for an answer while its
/// peer reduces the ring's two steps instead. Both fail at once, naming it.
#[test]
fn ranks_disagreeing_on_answers_in_the_ring_fail_instead_of_waiting() {
    let t0 = Instant::now();
    let errors = with_ranks(2, Duration::from_secs(20), |mut t| {
        let (me, peer) = (t.rank(), 1 - t.rank());
        t.reach[peer] = if me == 0 {
            Reach::Ring
        } else {
            Reach::SameProcess
        };
        let (mut a, mut b) = (vec![1f32; 100], vec![2f32; 100]);
        t.reduce_pair(&f32_tag(0, 200), f32_pair(peer, &mut a, &mut b))
            .unwrap_err()
            .to_string()
    });
    for e in &errors {
        assert!(e.contains("answered in the ring"), "{e}");
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}
