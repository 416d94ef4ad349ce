//! One stage of a pipeline step, run by its own thread: it works through its list of
//! actions (the schedule's, checked by [`plan`](super::plan)), receiving activations
//! from the previous stage and gradients from the next over channels, then takes its
//! optimizer step.
//!
//! At a stage boundary the activation is detached and, on the receiving stage, made a
//! leaf that requires grad; after that stage's backward the leaf's `.grad` is exactly
//! the gradient to send back, which the sending stage feeds into its own backward
//! (`sum(output * grad)`, see `backward_with_grad`).

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tch::nn::{self, ModuleT};
use tch::{Device, Tensor};

use super::{Action, Phase, Span};
use crate::Error;
use crate::autograd::backward_with_grad;
use crate::models::Stage;
use crate::train::LossFn;

/// One stage: its layers, their variables and optimizer, on one device.
#[derive(Debug)]
pub(super) struct PipeStage {
    pub(super) device: Device,
    pub(super) vs: nn::VarStore,
    pub(super) module: Stage,
    pub(super) opt: nn::Optimizer,
}

/// A message between stages: a micro-batch's activation or gradient, tagged with the
/// micro-batch, since a schedule may send them in another order than the neighbour
/// takes them.
pub(super) type Message = (usize, Tensor);

/// `n` channels (one per boundary).
pub(super) fn channels(n: usize) -> (Vec<Sender<Message>>, Vec<Receiver<Message>>) {
    (0..n).map(|_| mpsc::channel()).unzip()
}

/// Where a stage's forward inputs come from.
pub(super) enum Input {
    /// The first stage's micro-batches.
    Batch(Vec<Tensor>),
    /// The previous stage's activations.
    Channel(Inbox),
}

/// A receiving end that hands out messages by micro-batch, keeping those that came
/// early.
pub(super) struct Inbox {
    rx: Receiver<Message>,
    early: HashMap<usize, Tensor>,
}

impl Inbox {
    pub(super) fn new(rx: Receiver<Message>) -> Inbox {
        Inbox {
            rx,
            early: HashMap::new(),
        }
    }

    /// Micro-batch `m`'s tensor, waiting at most `timeout` in all.
    fn take(
        &mut self,
        m: usize,
        timeout: Duration,
        what: impl Fn() -> String,
    ) -> Result<Tensor, Failure> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.early.remove(&m) {
                return Ok(t);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((k, t)) => {
                    self.early.insert(k, t);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(Failure::Own(Error::Worker(format!(
                        "{} did not come within {timeout:?}",
                        what()
                    ))));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Failure::PeerGone(Error::Worker(format!(
                        "{}: the sender hung up",
                        what()
                    ))));
                }
            }
        }
    }
}

/// Everything one stage thread needs besides its stage.
pub(super) struct StageCtx {
    pub(super) index: usize,
    pub(super) micro_batches: usize,
    /// What the stage does, in order (checked by `plan`).
    pub(super) actions: Vec<Action>,
    pub(super) input: Input,
    pub(super) send_act: Option<Sender<Message>>,
    pub(super) recv_grad: Option<Inbox>,
    pub(super) send_grad: Option<Sender<Message>>,
    /// The last stage's targets with each micro-batch's weight `b_m / B`.
    pub(super) targets: Option<Vec<(Tensor, f64)>>,
    pub(super) loss: LossFn,
    pub(super) start: Instant,
    pub(super) timeout: Duration,
}

pub(super) struct StageOut {
    pub(super) spans: Vec<Span>,
    /// The summed weighted loss (last stage only).
    pub(super) loss: f64,
}

/// Why a stage stopped: its own fault, or a neighbour went away (whose own error is
/// the one to report).
pub(super) enum Failure {
    Own(Error),
    PeerGone(Error),
}

impl Failure {
    pub(super) fn into_error(self) -> Error {
        match self {
            Failure::Own(e) | Failure::PeerGone(e) => e,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Own(e)
    }
}

impl From<tch::TchError> for Failure {
    fn from(e: tch::TchError) -> Self {
        Failure::Own(e.into())
    }
}

fn send(
    tx: &Sender<Message>,
    m: usize,
    t: Tensor,
    what: impl Fn() -> String,
) -> Result<(), Failure> {
    tx.send((m, t))
        .map_err(|_| Failure::PeerGone(Error::Worker(format!("{}: the receiver hung up", what()))))
}

fn own(what: String) -> Failure {
    Failure::Own(Error::Pipeline(what))
}

/// One stage's part of a step: its actions in order, then the optimizer step.
pub(super) fn run_stage(stage: &mut PipeStage, mut ctx: StageCtx) -> Result<StageOut, Failure> {
    let k = ctx.index;
    let start = ctx.start;
    let now = || start.elapsed();
    let mut spans = Vec::with_capacity(ctx.actions.len() + 1);
    let mut total_loss = 0.0;
    // Per micro-batch, between its forward and its backward: the stage's input leaf and
    // its output (on the last stage, the weighted loss).
    let mut saved: Vec<Option<(Tensor, Tensor)>> = (0..ctx.micro_batches).map(|_| None).collect();
    let mut first_inputs: Vec<Option<Tensor>> = match &mut ctx.input {
        Input::Batch(xs) => xs.drain(..).map(Some).collect(),
        Input::Channel(_) => Vec::new(),
    };
    let actions = std::mem::take(&mut ctx.actions);

    // ANCHOR: run_actions
    for action in actions {
        match action {
            Action::Forward(m) => {
                let x = match &mut ctx.input {
                    Input::Batch(_) => first_inputs
                        .get_mut(m)
                        .and_then(Option::take)
                        .ok_or_else(|| own(format!("stage {k}: micro-batch {m} is missing")))?,
                    Input::Channel(inbox) => inbox.take(m, ctx.timeout, || {
                        format!(
                            "stage {k}: the activation of micro-batch {m} from stage {}",
                            k - 1
                        )
                    })?,
                };
                let begin = now();
                let x = x.f_to_device(stage.device)?;
                // A leaf that requires grad: after the backward its .grad is the
                // gradient to send back to the previous stage.
                let x = if k == 0 {
                    x
                } else {
                    x.f_detach()?.f_set_requires_grad(true)?
                };
                let out = stage.module.forward_t(&x, true);
                let out = match (&ctx.targets, &ctx.send_act) {
                    (Some(targets), _) => {
                        let (y, weight) = &targets[m];
                        let l = (ctx.loss)(&out, y)?.f_mul_scalar(*weight)?;
                        // Reading the loss waits for the device, so the span is honest.
                        total_loss += l.f_double_value(&[])?;
                        spans.push(span(k, m, Phase::Forward, begin, now()));
                        l
                    }
                    (None, Some(tx)) => {
                        let activation = out.f_detach()?;
                        settle(stage.device);
                        // The span ends before the send: waking the next stage may take
                        // this thread's core away, and that wait is not this stage's work.
                        spans.push(span(k, m, Phase::Forward, begin, now()));
                        send(tx, m, activation, || {
                            format!("stage {k}: sending micro-batch {m}'s activation")
                        })?;
                        out
                    }
                    (None, None) => {
                        return Err(own(format!(
                            "stage {k} has neither a next stage nor targets"
                        )));
                    }
                };
                saved[m] = Some((x, out));
            }
            Action::Backward(m) => {
                let (x, out) = saved
                    .get_mut(m)
                    .and_then(Option::take)
                    .ok_or_else(|| own(format!("stage {k}: backward {m} before its forward")))?;
                let begin = match &mut ctx.recv_grad {
                    // The last stage: `out` is the weighted loss.
                    None => {
                        let begin = now();
                        out.f_backward()?;
                        begin
                    }
                    Some(inbox) => {
                        let g = inbox.take(m, ctx.timeout, || {
                            format!(
                                "stage {k}: the gradient of micro-batch {m} from stage {}",
                                k + 1
                            )
                        })?;
                        let begin = now();
                        backward_with_grad(&out, &g.f_to_device(stage.device)?)?;
                        begin
                    }
                };
                let grad = match ctx.send_grad {
                    Some(_) => Some(x.f_grad()?),
                    None => None,
                };
                settle(stage.device);
                spans.push(span(k, m, Phase::Backward, begin, now()));
                if let (Some(tx), Some(grad)) = (&ctx.send_grad, grad) {
                    send(tx, m, grad, || {
                        format!("stage {k}: sending micro-batch {m}'s input gradient")
                    })?;
                }
            }
        }
    }
    // ANCHOR_END: run_actions

    let begin = now();
    stage.opt.step();
    spans.push(span(k, 0, Phase::Update, begin, now()));
    Ok(StageOut {
        spans,
        loss: total_loss,
    })
}

/// Waits for the stage's GPU work to finish (CUDA kernels run asynchronously), so that
/// a span ends when the work did, not when it was queued. Nothing on the CPU.
fn settle(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

fn span(stage: usize, micro_batch: usize, phase: Phase, start: Duration, end: Duration) -> Span {
    Span {
        stage,
        micro_batch,
        phase,
        start,
        end,
    }
}
