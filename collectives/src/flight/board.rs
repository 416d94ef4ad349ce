//! The board: where every rank is, published in the job's store when a wait
//! lasts, so a waiting rank can name the whole picture.
//!
//! Each rank owns the key `{prefix}flight/{rank}`, set before its transport
//! connects (so once connected, every rank's key exists and reading it never
//! waits). A rank whose wait passes the notice time publishes its state and
//! bumps the counter `{prefix}flight/ask`; every rank runs a small responder
//! thread that checks the counter four times a second and, when it moved,
//! publishes its own state with the counter's value. The asker reads every
//! key until each answers its ask (or a second passes) and judges the
//! picture: a cycle of ranks waiting on each other is a deadlock; a rank that
//! closed its communicator will never send.
//!
//! Only the [`Store`] trait's `set`, `get` and `add` are used, so thread ranks
//! (the in-memory store) and launched jobs (the TCP store) work alike.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Flight;
use crate::error::{Error, Result};
use crate::rendezvous::Store;

/// How often the responder checks for an ask (and reads the clock that
/// calls take their start time from, [`super::call_clock_ms`]).
pub(super) const RESPOND_EVERY: Duration = Duration::from_millis(250);
/// How long an asker waits for the answers.
const ANSWERS_WITHIN: Duration = Duration::from_secs(1);
/// Pause between reads of an answer not yet there.
const POLL: Duration = Duration::from_millis(20);

/// Where one rank is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Where {
    /// Not in any collective, for this long.
    Idle {
        /// Milliseconds since its last call ended (or since it connected).
        for_ms: u64,
    },
    /// In a call but not (yet) stalled in a wait.
    Running {
        /// The call (`all_reduce#9`).
        call: String,
        /// Milliseconds since it started.
        for_ms: u64,
    },
    /// Stalled in a wait.
    Waiting {
        /// The call's fingerprint ([`crate::transport::Tag::describe`]).
        call: String,
        /// Its sequence number.
        seq: u32,
        /// The peer its send waits on.
        send_to: Option<usize>,
        /// The peer it waits to receive from.
        recv_from: Option<usize>,
        /// Milliseconds without progress.
        stalled_ms: u64,
    },
    /// Its communicator is gone: it will take part in nothing more.
    Closed {
        /// The error that broke it, if one did.
        failed: Option<String>,
    },
}

/// One rank's published state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankState {
    /// The rank.
    pub rank: usize,
    /// The ask this state answers (0: published unasked).
    pub answer: i64,
    /// The last call it completed (`all_reduce#8`).
    pub last: Option<String>,
    /// Where it is.
    pub place: Where,
}

fn opt(p: Option<usize>) -> String {
    p.map_or("-".into(), |p| p.to_string())
}

impl RankState {
    /// The store value: one `key=value` per line.
    pub fn encode(&self) -> String {
        let mut s = format!(
            "rank={}\nanswer={}\nlast={}\n",
            self.rank,
            self.answer,
            self.last.as_deref().unwrap_or("-")
        );
        match &self.place {
            Where::Idle { for_ms } => s.push_str(&format!("where=idle\nfor={for_ms}\n")),
            Where::Running { call, for_ms } => {
                s.push_str(&format!("where=running\ncall={call}\nfor={for_ms}\n"))
            }
            Where::Waiting {
                call,
                seq,
                send_to,
                recv_from,
                stalled_ms,
            } => s.push_str(&format!(
                "where=waiting\ncall={call}\nseq={seq}\nsend={}\nrecv={}\nfor={stalled_ms}\n",
                opt(*send_to),
                opt(*recv_from)
            )),
            Where::Closed { failed } => {
                s.push_str("where=closed\n");
                if let Some(f) = failed {
                    // One line: the value ends at the newline.
                    s.push_str(&format!("failed={}\n", f.replace('\n', " ")));
                }
            }
        }
        s
    }

    /// Reads what [`RankState::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<RankState> {
        let text = String::from_utf8_lossy(bytes);
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .ok_or_else(|| Error::Protocol(format!("flight state without {k}: {text:?}")))
        };
        let num = |k: &str| -> Result<u64> {
            field(k)?
                .parse()
                .map_err(|_| Error::Protocol(format!("flight state {k} is not a number")))
        };
        let peer = |k: &str| -> Result<Option<usize>> {
            Ok(match field(k)? {
                "-" => None,
                v => Some(
                    v.parse()
                        .map_err(|_| Error::Protocol(format!("flight state {k} is not a rank")))?,
                ),
            })
        };
        let place = match field("where")? {
            "idle" => Where::Idle {
                for_ms: num("for")?,
            },
            "running" => Where::Running {
                call: field("call")?.to_owned(),
                for_ms: num("for")?,
            },
            "waiting" => Where::Waiting {
                call: field("call")?.to_owned(),
                seq: num("seq")? as u32,
                send_to: peer("send")?,
                recv_from: peer("recv")?,
                stalled_ms: num("for")?,
            },
            "closed" => Where::Closed {
                failed: field("failed").ok().map(str::to_owned),
            },
            w => return Err(Error::Protocol(format!("flight state where={w}"))),
        };
        let last = match field("last")? {
            "-" => None,
            l => Some(l.to_owned()),
        };
        Ok(RankState {
            rank: num("rank")? as usize,
            answer: field("answer")?
                .parse()
                .map_err(|_| Error::Protocol("flight state answer is not a number".into()))?,
            last,
            place,
        })
    }

    /// The rank's state in words: "rank 1 waits to receive from rank 0 in
    /// all_reduce#1 (…)", "rank 1 is not in any collective (…)".
    pub fn describe(&self) -> String {
        let last = match &self.last {
            Some(l) => format!("last completed {l}"),
            None => "none completed yet".into(),
        };
        match &self.place {
            Where::Idle { for_ms } => format!(
                "rank {} is not in any collective ({last}, {:.1} s ago)",
                self.rank,
                *for_ms as f64 / 1e3
            ),
            Where::Running { call, for_ms } => format!(
                "rank {} is in {call} for {:.1} s, not stalled ({last})",
                self.rank,
                *for_ms as f64 / 1e3
            ),
            Where::Waiting {
                call,
                send_to,
                recv_from,
                ..
            } => format!(
                "rank {} waits {} in {call}",
                self.rank,
                describe_wait(*send_to, *recv_from)
            ),
            Where::Closed { failed: None } => format!(
                "rank {} has closed its communicator and is not in any collective ({last})",
                self.rank
            ),
            Where::Closed { failed: Some(f) } => format!(
                "rank {} has closed its communicator after failing ({last}): {f}",
                self.rank
            ),
        }
    }

    /// The ranks this one waits on (none unless it waits).
    fn waits_on(&self) -> Vec<usize> {
        match &self.place {
            Where::Waiting {
                send_to, recv_from, ..
            } => recv_from.iter().chain(send_to.iter()).copied().collect(),
            _ => Vec::new(),
        }
    }
}

/// "to receive from rank 0", "to send to rank 1", or both.
pub fn describe_wait(send_to: Option<usize>, recv_from: Option<usize>) -> String {
    match (send_to, recv_from) {
        (Some(s), Some(r)) => format!("to send to rank {s} and receive from rank {r}"),
        (Some(s), None) => format!("to send to rank {s}"),
        (None, Some(r)) => format!("to receive from rank {r}"),
        (None, None) => "for nothing".into(),
    }
}

/// Every rank's state, as one look found them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picture {
    /// One per rank that answered or had published, in rank order.
    pub states: Vec<RankState>,
}

impl Picture {
    /// All ranks in one line, joined by "; ".
    pub fn describe(&self) -> String {
        self.states
            .iter()
            .map(RankState::describe)
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn of(&self, rank: usize) -> Option<&RankState> {
        self.states.iter().find(|s| s.rank == rank)
    }

    /// Whether `me` can stop waiting now, and why: it waits on a rank that
    /// closed its communicator, or it is in a cycle of waits that `before`
    /// (a look at least a second older) already showed, every member still in
    /// the same wait.
    pub fn verdict(&self, me: usize, before: Option<&Picture>) -> Option<String> {
        let mine = self.of(me)?;
        for p in mine.waits_on() {
            if let Some(peer) = self
                .of(p)
                .filter(|s| matches!(s.place, Where::Closed { .. }))
            {
                return Some(format!(
                    "{}, so it will never take part: {}",
                    peer.describe(),
                    self.describe()
                ));
            }
        }
        let cycle = self.cycle_from(me)?;
        let before = before?;
        let same = cycle.iter().all(|&r| {
            match (self.of(r).map(|s| &s.place), before.of(r).map(|s| &s.place)) {
                (
                    Some(Where::Waiting {
                        seq, stalled_ms, ..
                    }),
                    Some(Where::Waiting {
                        seq: seq0,
                        stalled_ms: stalled0,
                        ..
                    }),
                ) => seq == seq0 && stalled_ms >= stalled0,
                _ => false,
            }
        });
        same.then(|| {
            let words: Vec<String> = cycle
                .iter()
                .filter_map(|&r| self.of(r).map(RankState::describe))
                .collect();
            format!("{}: a deadlock", words.join("; "))
        })
    }

    /// Whether `me`, stalled in a wait, waits on a rank that is somewhere
    /// else: in no collective for at least `idle_limit_ms`, or in a call with
    /// another number. Then the ranks disagree on which calls to make (lab 7
    /// with the all_reduce on rank 0 only) and the wait would last until the
    /// timeout; the answer names both ranks' places.
    pub fn disagreement(&self, me: usize, idle_limit_ms: u64) -> Option<String> {
        let mine = self.of(me)?;
        let Where::Waiting {
            call,
            seq,
            send_to,
            recv_from,
            ..
        } = &mine.place
        else {
            return None;
        };
        let elsewhere = |s: &RankState| match &s.place {
            Where::Idle { for_ms } => *for_ms >= idle_limit_ms,
            Where::Waiting { seq: other, .. } => other != seq,
            Where::Running { call: other, .. } => other
                .rsplit_once('#')
                .and_then(|(_, n)| n.parse::<u32>().ok())
                .is_some_and(|n| n != *seq),
            Where::Closed { .. } => false,
        };
        let peer = mine
            .waits_on()
            .into_iter()
            .find_map(|p| self.of(p).filter(|s| elsewhere(s)))?;
        Some(format!(
            "rank {me} is in {call} and waits {}; {}: the ranks disagree on which \
             collectives to call (is the call made on some ranks only?). A rank that \
             works alone this long on purpose (saving a large checkpoint): raise \
             RINGSIDE_IDLE_LIMIT (seconds)",
            describe_wait(*send_to, *recv_from),
            peer.describe()
        ))
    }

    /// A cycle of waiting ranks reachable from `me` along wait edges, in order.
    fn cycle_from(&self, me: usize) -> Option<Vec<usize>> {
        fn walk(p: &Picture, r: usize, path: &mut Vec<usize>) -> Option<Vec<usize>> {
            if let Some(at) = path.iter().position(|&x| x == r) {
                return Some(path[at..].to_vec());
            }
            let s = p.of(r)?;
            path.push(r);
            for next in s.waits_on() {
                if let Some(c) = walk(p, next, path) {
                    return Some(c);
                }
            }
            path.pop();
            None
        }
        walk(self, me, &mut Vec::new())
    }
}

/// One rank's place on the board, and its responder.
pub struct Board {
    store: Arc<dyn Store>,
    prefix: String,
    rank: usize,
    stop: Mutex<Option<Sender<()>>>,
    responder: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board")
            .field("prefix", &self.prefix)
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl Board {
    /// Publishes `rank`'s first state (not in any collective); call before
    /// the transport connects, so every rank's key exists once it has.
    pub fn new(store: Arc<dyn Store>, prefix: &str, rank: usize, _world: usize) -> Result<Board> {
        let b = Board {
            store,
            prefix: prefix.to_owned(),
            rank,
            stop: Mutex::new(None),
            responder: Mutex::new(None),
        };
        b.publish(&RankState {
            rank,
            answer: 0,
            last: None,
            place: Where::Idle { for_ms: 0 },
        })?;
        Ok(b)
    }

    fn key(&self, rank: usize) -> String {
        format!("{}flight/{rank}", self.prefix)
    }

    fn ask_key(&self) -> String {
        format!("{}flight/ask", self.prefix)
    }

    /// Sets this rank's key.
    pub fn publish(&self, s: &RankState) -> Result<()> {
        self.store.set(&self.key(self.rank), s.encode().as_bytes())
    }

    /// Starts the thread that answers asks with `flight`'s state.
    pub(super) fn start_responder(&self, flight: Weak<Flight>) -> Result<()> {
        let (tx, rx) = mpsc::channel::<()>();
        let store = self.store.clone();
        let (ask, key) = (self.ask_key(), self.key(self.rank));
        let handle = std::thread::Builder::new()
            .name(format!("ringside-flight-{}", self.rank))
            .spawn(move || {
                let ticker = super::Ticker::start();
                let mut answered = 0;
                loop {
                    match rx.recv_timeout(RESPOND_EVERY) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    ticker.tick();
                    // A store that fails (the job is ending) ends the responder.
                    let Ok(n) = store.add(&ask, 0) else { return };
                    if n > answered {
                        let Some(f) = flight.upgrade() else { return };
                        if store.set(&key, f.state(n).encode().as_bytes()).is_err() {
                            return;
                        }
                        answered = n;
                    }
                }
            })
            .map_err(|e| Error::io("starting the flight recorder's responder", e))?;
        if let Ok(mut s) = self.stop.lock() {
            *s = Some(tx);
        }
        if let Ok(mut r) = self.responder.lock() {
            *r = Some(handle);
        }
        Ok(())
    }

    /// Stops the responder (it wakes at once) and waits for it.
    pub fn stop(&self) {
        if let Ok(mut s) = self.stop.lock() {
            s.take();
        }
        let handle = self.responder.lock().ok().and_then(|mut r| r.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// Publishes `me`, asks every rank where it is, and collects the answers
    /// (a rank that does not answer within a second is shown as last
    /// published).
    pub fn look(&self, me: &RankState, world: usize) -> Picture {
        let mut states = vec![me.clone()];
        let _ = self.publish(me);
        let Ok(asked) = self.store.add(&self.ask_key(), 1) else {
            return Picture { states };
        };
        let until = Instant::now() + ANSWERS_WITHIN;
        for r in (0..world).filter(|&r| r != self.rank) {
            loop {
                let got = self
                    .store
                    .get(&self.key(r))
                    .and_then(|v| RankState::decode(&v));
                match got {
                    Ok(s) if s.answer >= asked || matches!(s.place, Where::Closed { .. }) => {
                        states.push(s);
                        break;
                    }
                    Ok(s) if Instant::now() >= until => {
                        states.push(s);
                        break;
                    }
                    Err(_) if Instant::now() >= until => break,
                    _ => std::thread::sleep(POLL),
                }
            }
        }
        states.sort_by_key(|s| s.rank);
        Picture { states }
    }
}
