//! A whole world of ranks as threads of one process: each thread gets its own
//! reference-backend communicator over the real transport (TCP or shared
//! memory), rendezvousing through an in-memory store. For tests, benchmarks and
//! workshop steps that want several ranks without launching processes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backends::reference::ReferenceComm;
use crate::backends::{self, Options};
use crate::error::Result;
use crate::flight::{Flight, SharedStore};
use crate::launch::hang_table::{HangRow, parse_row, table};
use crate::rendezvous::MemStore;
use crate::transport::TransportKind;

/// Runs `body(rank, comm)` on `world` threads connected over `kind`, every
/// wait bounded by `timeout` (or by `RINGSIDE_TIMEOUT` when that is set and
/// shorter: `cargo lab` sets it to 30 s, so a lab's hang ends within that
/// whatever the lab passes); returns each rank's result in rank order, or the
/// first rank's error in connecting. A panic in `body` is passed on to the
/// caller as it is; the panicking rank's communicator aborts as it unwinds,
/// so the other ranks stop at once instead of waiting for it.
pub fn with_ranks<T: Send>(
    world: usize,
    kind: TransportKind,
    timeout: Duration,
    body: impl Fn(usize, ReferenceComm) -> T + Sync,
) -> Result<Vec<T>> {
    with_ranks_idle(world, kind, timeout, None, body)
}

/// [`with_ranks`] with the flight recorder's idle limit set (`None`:
/// `RINGSIDE_IDLE_LIMIT`, else as long as the timeout, as for launched jobs).
pub(crate) fn with_ranks_idle<T: Send>(
    world: usize,
    kind: TransportKind,
    timeout: Duration,
    idle_limit: Option<Duration>,
    body: impl Fn(usize, ReferenceComm) -> T + Sync,
) -> Result<Vec<T>> {
    // One token for the whole world; the store is private to this call.
    let mut opts = Options::new([7; 16])?;
    let timeout = if std::env::var_os("RINGSIDE_TIMEOUT").is_some() {
        timeout.min(opts.timeout)
    } else {
        timeout
    };
    opts.flight.idle_limit = match idle_limit {
        Some(limit) => limit,
        None if std::env::var_os("RINGSIDE_IDLE_LIMIT").is_some() => opts.flight.idle_limit,
        None => timeout,
    };
    let store = Arc::new(MemStore::new(timeout));
    opts.transport = kind;
    opts.timeout = timeout;
    opts.flight_store = Some(SharedStore(store.clone()));
    // Each rank's recorder, kept past its communicator: a launched job's
    // launcher prints every rank's row when a call fails, and threads have
    // no launcher, so this call prints the table itself.
    let flights: Mutex<Vec<Option<Arc<Flight>>>> = Mutex::new(vec![None; world]);
    let joined: Vec<std::thread::Result<Result<T>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let (store, body, opts, flights) = (store.clone(), &body, &opts, &flights);
                s.spawn(move || {
                    let comm = backends::reference(store.as_ref(), rank, world, opts)?;
                    if let Ok(mut f) = flights.lock() {
                        f[rank] = comm.flight();
                    }
                    Ok(body(rank, comm))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    if let Some(table) = hang_table(&flights.into_inner().unwrap_or_default()) {
        eprint!("{table}");
    }
    joined
        .into_iter()
        .map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect()
}

/// The launcher's hang table for thread ranks, when a call failed on any
/// of them: each rank's row as it stood when its call failed, or, for a rank
/// none of whose calls failed, as it stands now (e.g. the last call it
/// completed before it closed its communicator, and no current call).
fn hang_table(flights: &[Option<Arc<Flight>>]) -> Option<String> {
    if !flights.iter().flatten().any(|f| f.failed_line().is_some()) {
        return None;
    }
    let rows: Vec<(usize, Option<HangRow>)> = flights
        .iter()
        .enumerate()
        .map(|(rank, f)| {
            let row = f
                .as_ref()
                .map(|f| f.failed_line().unwrap_or_else(|| f.line(None)));
            (rank, row.as_deref().and_then(parse_row))
        })
        .collect();
    table(&rows, |_| "without a flight recorder")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BufferMut, Communicator, Input, ReduceOp};

    #[test]
    fn three_thread_ranks_all_reduce() {
        let sums = with_ranks(
            3,
            TransportKind::Shm,
            Duration::from_secs(30),
            |rank, comm| {
                let mut x = [rank as f32 + 1.0];
                comm.all_reduce(
                    Input::InPlace,
                    &mut BufferMut::from_slice(&mut x),
                    ReduceOp::Sum,
                )
                .unwrap();
                x[0]
            },
        )
        .unwrap();
        assert_eq!(sums, vec![6.0; 3]);
    }

    /// Named after what lab 7's check lacked: thread ranks that deadlock
    /// ended with one rank's error and no table of where every rank was.
    #[test]
    fn thread_ranks_that_deadlocked_left_no_table_of_every_rank() {
        let flights: Mutex<Vec<Option<Arc<Flight>>>> = Mutex::new(vec![None, None]);
        let out = with_ranks(
            2,
            TransportKind::Shm,
            Duration::from_secs(2),
            |rank, comm| {
                flights.lock().unwrap()[rank] = comm.flight();
                // Both receive first: each waits for a send the other never makes.
                let mut buf = [0u8; 8];
                let peer = 1 - rank;
                comm.recv(&mut BufferMut::from_slice(&mut buf), peer)
                    .map_err(|e| e.to_string())
            },
        )
        .unwrap();
        assert!(out.iter().all(Result::is_err), "{out:?}");
        let table = hang_table(&flights.into_inner().unwrap()).expect("a table");
        assert!(table.contains("where every rank was"), "{table}");
        for rank in ["0", "1"] {
            assert!(table.contains(&format!("  {rank:<5} none")), "{table}");
        }
        assert!(table.contains("waits to receive from rank"), "{table}");
    }

    /// A rank that made no failing call (it left after a broadcast the other
    /// rank followed with an all_reduce) still has its row: its last call.
    #[test]
    fn a_rank_that_left_shows_its_last_call_in_the_table() {
        let flights: Mutex<Vec<Option<Arc<Flight>>>> = Mutex::new(vec![None, None]);
        let out = with_ranks(
            2,
            TransportKind::Shm,
            Duration::from_secs(2),
            |rank, comm| {
                flights.lock().unwrap()[rank] = comm.flight();
                let mut x = [1.0f32; 4];
                comm.broadcast(Input::InPlace, &mut BufferMut::from_slice(&mut x), 0)
                    .map_err(|e| e.to_string())?;
                if rank == 0 {
                    comm.all_reduce(
                        Input::InPlace,
                        &mut BufferMut::from_slice(&mut x),
                        ReduceOp::Sum,
                    )
                    .map_err(|e| e.to_string())?;
                }
                Ok::<(), String>(())
            },
        )
        .unwrap();
        assert!(out[0].is_err() && out[1].is_ok(), "{out:?}");
        let table = hang_table(&flights.into_inner().unwrap()).expect("a table");
        assert!(
            table.contains("  0     broadcast#1      all_reduce#2"),
            "{table}"
        );
        assert!(table.contains("  1     broadcast#1      -"), "{table}");
    }

    /// A panic in one thread rank ended the check only after the others'
    /// timeout: the panicking rank's communicator now aborts as it unwinds.
    #[test]
    fn a_rank_that_panicked_stops_the_others_at_once() {
        for kind in [TransportKind::Shm, TransportKind::Tcp] {
            let seen = std::sync::Mutex::new(None);
            let t0 = std::time::Instant::now();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                with_ranks(2, kind, Duration::from_secs(60), |rank, comm| {
                    if rank == 1 {
                        panic!("the learner's bug");
                    }
                    let mut x = [1.0f32; 1280];
                    let r = comm.all_reduce(
                        Input::InPlace,
                        &mut BufferMut::from_slice(&mut x),
                        ReduceOp::Avg,
                    );
                    *seen.lock().unwrap() = Some(r.map_err(|e| e.to_string()));
                })
            }));
            let took = t0.elapsed();
            let panic = run.unwrap_err();
            assert_eq!(panic.downcast_ref::<&str>(), Some(&"the learner's bug"));
            let e = seen.lock().unwrap().take().unwrap().unwrap_err();
            assert!(e.contains("rank 1 panicked"), "{kind:?}: {e}");
            assert!(took < Duration::from_secs(3), "{kind:?}: took {took:?}");
        }
    }
}
