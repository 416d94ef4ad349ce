//! The hooks' side of [`Ddp`](super::Ddp): which buckets start during the one
//! backward of a step, and starting them.
//!
//! A hook per parameter (see [`crate::autograd::hooks`]) announces the
//! parameter once its `.grad` is final for this backward. The parameters are
//! grouped in *stages* (runs of layers, cut where [`StageSplit`](super::StageSplit)
//! says): a stage is finished when all its parameters are announced and every
//! later stage is finished. Then [`GradSync::ready`] says which buckets start, as
//! it did when backward ran stage by stage, and each one's gradients are copied
//! into its flat tensor and queued on the communicator thread, from inside
//! backward, while the earlier layers' backward goes on (PyTorch's Reducer does
//! the same from its autograd hooks).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tch::Tensor;

use super::{Done, GradSync, Msg};
use crate::comm::CommThread;
use crate::timeline::{TID_COMPUTE, Timeline};
use crate::{Error, Result};

/// A timeline entry made inside backward, recorded once backward returns (the
/// hooks cannot reach the [`Timeline`], which the caller of backward holds).
enum Event {
    Span(String, &'static str, Instant, Instant, Map<String, Value>),
    Instant(String, &'static str, Instant, Map<String, Value>),
}

/// Shared by the [`Ddp`](super::Ddp) and its hooks.
pub(super) struct Shared {
    /// Whether a Ddp backward is running: hooks fire on every backward that
    /// reaches a parameter (the optimizer's, a user's), and only the Ddp's count.
    /// Checked before the lock, so that a backward started while the lock is
    /// held (a gradient defined through autograd) cannot deadlock.
    active: AtomicBool,
    state: Mutex<Launcher>,
}

impl Shared {
    /// Shares `launcher`, with the hooks off.
    pub(super) fn new(launcher: Launcher) -> Arc<Shared> {
        Arc::new(Shared {
            active: AtomicBool::new(false),
            state: Mutex::new(launcher),
        })
    }

    /// The hook: parameter `i`'s gradient is final.
    pub(super) fn param_ready(&self, i: usize) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut st) = self.state.lock() {
            st.announce(i, Instant::now());
        }
    }

    /// The state, for the Ddp between backward passes.
    pub(super) fn lock(&self) -> Result<MutexGuard<'_, Launcher>> {
        self.state
            .lock()
            .map_err(|_| Error::Worker("DDP's bucket state was poisoned by a panic".into()))
    }

    /// Turns the hooks on (`true`) for the Ddp's backward, or off.
    pub(super) fn set_active(&self, on: bool) {
        self.active.store(on, Ordering::Release);
    }
}

/// What starting buckets needs, and how far this backward has come.
pub(super) struct Launcher {
    /// Per parameter, its stage.
    stage_of: Vec<usize>,
    /// Per stage, its parameter count.
    stage_size: Vec<usize>,
    stage_labels: Vec<String>,
    /// Per bucket, the stage whose end finishes its gradients.
    ready_stage: Vec<usize>,
    bucket_params: Vec<Vec<usize>>,
    flats: Vec<Tensor>,
    params: Vec<Tensor>,
    sync: Arc<dyn GradSync>,
    done_tx: mpsc::Sender<Msg>,
    /// The communicator thread, lent by the Ddp for the length of a backward.
    pub(super) comm: Option<CommThread>,
    // This backward:
    step: usize,
    reduce: bool,
    /// Per stage, parameters not announced yet.
    left: Vec<usize>,
    announced: Vec<bool>,
    /// Stages `finished_from..` are finished.
    finished_from: usize,
    /// Buckets `next_bucket..` have not started.
    pub(super) next_bucket: usize,
    stage_start: Instant,
    events: Vec<Event>,
    /// The first error inside backward (the hooks cannot return one).
    error: Option<Error>,
}

impl Launcher {
    /// A launcher for `params` (shallow copies of the Ddp's) in stages
    /// `stage_of`, with the buckets' members and flat tensors.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        params: Vec<Tensor>,
        stage_of: Vec<usize>,
        stage_labels: Vec<String>,
        ready_stage: Vec<usize>,
        bucket_params: Vec<Vec<usize>>,
        flats: Vec<Tensor>,
        sync: Arc<dyn GradSync>,
        done_tx: mpsc::Sender<Msg>,
    ) -> Launcher {
        let mut stage_size = vec![0; stage_labels.len()];
        for &s in &stage_of {
            if let Some(n) = stage_size.get_mut(s) {
                *n += 1;
            }
        }
        Launcher {
            announced: vec![false; params.len()],
            left: stage_size.clone(),
            finished_from: stage_size.len(),
            stage_of,
            stage_size,
            stage_labels,
            ready_stage,
            bucket_params,
            flats,
            params,
            sync,
            done_tx,
            comm: None,
            step: 0,
            reduce: false,
            next_bucket: 0,
            stage_start: Instant::now(),
            events: Vec::new(),
            error: None,
        }
    }

    /// Starts a backward of step `step`; `reduce` false inside `no_sync`.
    pub(super) fn begin(&mut self, step: usize, reduce: bool, comm: CommThread, now: Instant) {
        self.step = step;
        self.reduce = reduce;
        self.comm = Some(comm);
        self.left.clone_from(&self.stage_size);
        self.announced.iter_mut().for_each(|a| *a = false);
        self.finished_from = self.stage_size.len();
        self.next_bucket = 0;
        self.stage_start = now;
        self.error = None;
    }

    fn announce(&mut self, i: usize, now: Instant) {
        let Some(a) = self.announced.get_mut(i) else {
            return;
        };
        if std::mem::replace(a, true) {
            return;
        }
        if let Some(n) = self.stage_of.get(i).and_then(|&s| self.left.get_mut(s)) {
            *n = n.saturating_sub(1);
        }
        // Stages finish last first: a stage whose parameters are all in waits
        // for the later ones (a parameter used again by a later layer).
        while self.finished_from > 0 && self.left[self.finished_from - 1] == 0 {
            self.finish_stage(self.finished_from - 1, now);
        }
    }

    /// Finishes every stage not finished yet (parameters this backward did not
    /// reach), at `now`: the end of backward.
    pub(super) fn finish(&mut self, now: Instant) {
        while self.finished_from > 0 {
            self.finish_stage(self.finished_from - 1, now);
        }
    }

    // ANCHOR: stage_finished
    fn finish_stage(&mut self, k: usize, now: Instant) {
        self.finished_from = k;
        let label = format!("backward {}", self.stage_labels[k]);
        self.events.push(Event::Span(
            label,
            "backward",
            self.stage_start,
            now,
            Map::new(),
        ));
        if self.reduce && self.error.is_none() {
            let started = self
                .sync
                .ready(k, &self.ready_stage, self.next_bucket)
                .and_then(|ready| {
                    while self.next_bucket < ready.min(self.flats.len()) {
                        self.launch(self.next_bucket)?;
                        self.next_bucket += 1;
                    }
                    Ok(())
                });
            if let Err(e) = started {
                self.error = Some(e);
            }
        }
        self.stage_start = Instant::now();
    }
    // ANCHOR_END: stage_finished

    /// Copies bucket `b`'s gradients in and queues its all_reduce.
    pub(super) fn launch(&mut self, b: usize) -> Result<()> {
        let t0 = Instant::now();
        let mut flat = self.flats[b].shallow_clone();
        // A parameter without a gradient (unused in this step) contributes zeros.
        let grads = self.bucket_params[b]
            .iter()
            .map(|&i| {
                let g = self.params[i].f_grad()?;
                Ok(if g.defined() {
                    g
                } else {
                    self.params[i].f_zeros_like()?
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.sync.flatten(&grads, &mut flat)?;
        let bytes = flat.numel() * flat.f_kind()?.elt_size_in_bytes();
        let (done, step, sync) = (self.done_tx.clone(), self.step, self.sync.clone());
        let comm = self.comm.as_ref().ok_or_else(|| {
            Error::InvalidArgument("the communicator thread has stopped after an error".into())
        })?;
        comm.submit(move |c| {
            let start = Instant::now();
            let mut t = flat;
            // A backend that queues the reduction on a device says so before it
            // waits for it: the Ddp can then copy the averages back (device work,
            // ordered after the reduction) while the device still reduces.
            let (result, queued) = if sync.reduces_in_one_call() {
                let early = done.clone();
                collectives::queued::when_queued(
                    move || {
                        let _ = early.send(Msg::Queued { step, bucket: b });
                    },
                    || sync.all_reduce_mean(c, &mut t),
                )
            } else {
                (sync.all_reduce_mean(c, &mut t), false)
            };
            let _ = done.send(Msg::Done(Done {
                step,
                bucket: b,
                result,
                start,
                end: Instant::now(),
                queued,
            }));
        })?;
        let t1 = Instant::now();
        let mut args = Map::new();
        args.insert("bytes".into(), json!(bytes));
        args.insert("params".into(), json!(self.bucket_params[b].len()));
        self.events.push(Event::Span(
            format!("copy in bucket {b}"),
            "bucket",
            t0,
            t1,
            Map::new(),
        ));
        self.events.push(Event::Instant(
            format!("bucket {b} ready"),
            "bucket",
            t1,
            args,
        ));
        Ok(())
    }

    /// The first error inside backward, if any (taken).
    pub(super) fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// Moves the events made so far into `timeline`.
    pub(super) fn record(&mut self, timeline: &mut Timeline) {
        for e in self.events.drain(..) {
            match e {
                Event::Span(name, cat, t0, t1, args) => {
                    timeline.span(name, cat, TID_COMPUTE, t0, t1, args)
                }
                Event::Instant(name, cat, t, args) => {
                    timeline.instant(name, cat, TID_COMPUTE, t, args)
                }
            }
        }
    }

    /// The number of buckets.
    pub(super) fn buckets(&self) -> usize {
        self.flats.len()
    }
}
