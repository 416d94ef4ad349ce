//! Step metrics left on the device until a batch of steps is read back at once.
//!
//! Reading a loss (`double_value`) or a count of correct predictions
//! (`int64_value`) makes the host wait until the device has finished every
//! kernel queued so far: on a GPU, a step loop that reads its metrics every step
//! can never queue step n+1 while step n runs. [`Pending`] keeps each
//! micro-batch's loss, per-example losses and hits as device tensors (the
//! kernels that make them are queued like any others) and reads every queued
//! step back in one transfer per kind when asked ([`Pending::drain`]): one wait
//! per drain instead of several per step. The numbers are the ones the per-step
//! reads gave, added to the [`Tally`] in the same order.
//!
//! **Few kernels per step.** A step only keeps its loss, logits and labels (no
//! kernel: they are views of tensors the step made). The per-example losses
//! and hits are computed at the drain, once for all its steps, over the
//! logits concatenated: a handful of kernels per drain instead of per step,
//! which on a GPU is host time the step loop gets back (each op costs a few
//! microseconds to dispatch). Each example's cross-entropy and arg-max depend
//! on its own row only, computed by the same row kernel with the same
//! operations in the same order whatever the number of rows, so concatenating
//! rows changes no example's bits.

use std::time::Instant;

use tch::{Device, Kind, Reduction, Tensor};

use super::Tally;
use crate::metrics::StepRecord;
use crate::{Error, Result};

/// One micro-batch's metrics, still on its device.
struct Micro {
    /// The loss backward started from (a scalar).
    loss: Tensor,
    /// The model's output `[N, C]`, detached.
    logits: Tensor,
    /// The class labels `[N]`.
    labels: Tensor,
}

/// `t` without autograd history: itself (no op dispatched) when it has none.
fn detached(t: &Tensor) -> Result<Tensor> {
    Ok(if t.requires_grad() {
        t.f_detach()?
    } else {
        t.shallow_clone()
    })
}

/// A step whose host-side facts are known and whose metrics are on the device.
struct Step {
    ended: Instant,
    epoch: u64,
    step: u64,
    lr: f64,
    samples_per_s: f64,
    micro: Vec<Micro>,
}

/// Steps whose metrics have not been read back yet, oldest first.
#[derive(Default)]
pub struct Pending {
    open: Vec<Micro>,
    closed: Vec<Step>,
}

impl Pending {
    /// Nothing queued.
    pub fn new() -> Pending {
        Pending::default()
    }

    /// Queues one micro-batch of the step in progress: the `loss` backward
    /// started from, and the `logits` `[N, C]` against `labels` `[N]`. Queues
    /// kernels only; reads nothing back.
    pub fn add_micro(&mut self, loss: &Tensor, logits: &Tensor, labels: &Tensor) -> Result<()> {
        if logits.dim() != 2 || labels.size() != [logits.size()[0]] {
            return Err(Error::InvalidArgument(format!(
                "step metrics need logits [N, C] and labels [N], got {:?} and {:?}",
                logits.size(),
                labels.size()
            )));
        }
        self.open.push(Micro {
            loss: detached(loss)?,
            logits: detached(logits)?,
            labels: labels.shallow_clone(),
        });
        Ok(())
    }

    /// Closes the step in progress (ended now) with what the host knows of it.
    pub fn end_step(&mut self, epoch: u64, step: u64, lr: f64, samples_per_s: f64) {
        self.closed.push(Step {
            ended: Instant::now(),
            epoch,
            step,
            lr,
            samples_per_s,
            micro: std::mem::take(&mut self.open),
        });
    }

    /// Closed steps not read back yet.
    pub fn len(&self) -> usize {
        self.closed.len()
    }

    /// Whether no closed step waits.
    pub fn is_empty(&self) -> bool {
        self.closed.is_empty()
    }

    /// Reads every closed step back (one transfer for the losses, one for the
    /// per-example losses, one for the per-example hits, computed here over
    /// all of the steps' logits at once), adds their examples to `tally`
    /// in the order they were queued, and returns their records, oldest first:
    /// the loss is the sum of the step's micro-batch losses (as backward saw
    /// them) and the accuracy the step's hits over its examples; each with the
    /// moment its step ended ([`crate::metrics::Metrics::step_at`]).
    pub fn drain(&mut self, tally: &mut Tally) -> Result<Vec<(StepRecord, Instant)>> {
        let steps = std::mem::take(&mut self.closed);
        let micro: Vec<&Micro> = steps.iter().flat_map(|s| &s.micro).collect();
        if micro.is_empty() {
            return Ok(steps
                .iter()
                .map(|s| (record(s, 0.0, 0, 0), s.ended))
                .collect());
        }
        let to_host = |parts: Vec<Tensor>| -> Result<Vec<f64>> {
            let all = Tensor::f_cat(&parts, 0)?
                .f_to_kind(Kind::Double)?
                .f_to_device(Device::Cpu)?;
            Ok(Vec::<f64>::try_from(&all)?)
        };
        let flat = |t: &Tensor| t.f_reshape([-1]);
        let losses = to_host(
            micro
                .iter()
                .map(|m| flat(&m.loss))
                .collect::<Result<_, _>>()?,
        )?;
        let lens: Vec<usize> = micro.iter().map(|m| m.labels.numel()).collect();
        let (per_example, hits) = tch::no_grad(|| -> Result<_> {
            let logits = Tensor::f_cat(&micro.iter().map(|m| &m.logits).collect::<Vec<_>>(), 0)?;
            let labels = Tensor::f_cat(&micro.iter().map(|m| &m.labels).collect::<Vec<_>>(), 0)?;
            let per_example =
                logits.f_cross_entropy_loss::<Tensor>(&labels, None, Reduction::None, -100, 0.0)?;
            let hits = logits.f_argmax(-1, false)?.f_eq_tensor(&labels)?;
            Ok((to_host(vec![per_example])?, to_host(vec![hits])?))
        })?;
        if losses.len() != micro.len()
            || per_example.len() != lens.iter().sum::<usize>()
            || hits.len() != per_example.len()
        {
            return Err(Error::InvalidArgument(
                "a queued loss or hit count was not a single number".into(),
            ));
        }
        let mut records = Vec::with_capacity(steps.len());
        let (mut m, mut at) = (0, 0);
        for s in &steps {
            let (mut loss, mut step_hits, mut seen) = (0.0, 0u64, 0u64);
            for _ in &s.micro {
                let n = lens[m];
                let hit = hits[at..at + n].iter().filter(|&&h| h != 0.0).count() as u64;
                tally.add_examples(&per_example[at..at + n], hit);
                loss += losses[m];
                step_hits += hit;
                seen += n as u64;
                at += n;
                m += 1;
            }
            records.push((record(s, loss, step_hits, seen), s.ended));
        }
        Ok(records)
    }
}

/// The record of `s` with its metrics read back.
fn record(s: &Step, loss: f64, hits: u64, seen: u64) -> StepRecord {
    StepRecord {
        epoch: s.epoch,
        step: s.step,
        loss,
        accuracy: hits as f64 / seen.max(1) as f64,
        samples_per_s: s.samples_per_s,
        lr: s.lr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seed: i64, n: i64) -> (Tensor, Tensor) {
        crate::seed::seeded(seed, || {
            let logits = Tensor::randn([n, 10], (Kind::Float, Device::Cpu));
            let labels = Tensor::randint(10, [n], (Kind::Int64, Device::Cpu));
            (logits, labels)
        })
    }

    /// Two steps of two micro-batches each (the second step's last one short),
    /// queued and drained, give the very numbers reading each step at once did:
    /// the tally's bits, each step's loss (the sum of its micro-batch losses as
    /// f64) and accuracy.
    #[test]
    fn drained_steps_read_what_per_step_reads_read() {
        let mut pending = Pending::new();
        let mut at_once = Tally::new();
        let mut expected = Vec::new();
        for step in 0..2u64 {
            let (mut loss, mut hits, mut seen) = (0.0, 0u64, 0u64);
            for micro in 0..2 {
                let n = if step == 1 && micro == 1 { 7 } else { 16 };
                let (logits, labels) = batch((step * 2 + micro) as i64, n);
                let l = super::super::cross_entropy(&logits, &labels).unwrap();
                pending.add_micro(&l, &logits, &labels).unwrap();
                let before = at_once.correct();
                at_once.add_batch(&logits, &labels).unwrap();
                loss += l.double_value(&[]);
                hits += at_once.correct() - before;
                seen += n as u64;
            }
            pending.end_step(0, step + 1, 0.1, 100.0);
            expected.push((loss, hits as f64 / seen as f64));
        }
        assert_eq!(pending.len(), 2);
        let mut drained = Tally::new();
        let records = pending.drain(&mut drained).unwrap();
        assert!(pending.is_empty());
        assert_eq!(drained, at_once, "the same examples, in the same order");
        let got: Vec<(f64, f64)> = records.iter().map(|(r, _)| (r.loss, r.accuracy)).collect();
        assert_eq!(got, expected);
        assert_eq!(
            records.iter().map(|(r, _)| r.step).collect::<Vec<_>>(),
            [1, 2]
        );
        assert!(
            records[0].1 <= records[1].1,
            "each keeps the moment its step ended"
        );
        // Nothing left: a second drain reads nothing and returns nothing.
        assert!(pending.drain(&mut drained).unwrap().is_empty());
    }
}
