//! Learning-rate rules for a larger batch: scale the rate with the batch
//! (linearly, Goyal et al. 2017, "Accurate, Large Minibatch SGD"; or by the
//! square root, Krizhevsky 2014, Hoffer et al. 2017), and warm up to it.
//!
//! A batch k times larger averages k times more gradients, so one step of it
//! stands for k small steps: the linear rule multiplies the rate by k to make up
//! for the k − 1 steps not taken; the square-root rule multiplies by √k to keep
//! the gradient noise's variance per sample as before. Early in training the
//! weights change fast and a k-times rate diverges, so Goyal et al. start at the
//! base rate and raise it linearly to the scaled one over the first epochs.

use crate::{Error, Result};

/// How the learning rate grows with the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaling {
    /// The base rate whatever the batch.
    None,
    /// rate · k, for a batch k times the base batch.
    Linear,
    /// rate · √k.
    Sqrt,
}

impl Scaling {
    /// The rule's name, as charts and flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            Scaling::None => "none",
            Scaling::Linear => "linear",
            Scaling::Sqrt => "sqrt",
        }
    }

    /// The multiplier for a batch `k` times the base batch.
    pub fn factor(self, k: f64) -> f64 {
        match self {
            Scaling::None => 1.0,
            Scaling::Linear => k,
            Scaling::Sqrt => k.sqrt(),
        }
    }
}

impl std::str::FromStr for Scaling {
    type Err = Error;

    fn from_str(s: &str) -> Result<Scaling> {
        match s {
            "none" => Ok(Scaling::None),
            "linear" => Ok(Scaling::Linear),
            "sqrt" => Ok(Scaling::Sqrt),
            _ => Err(Error::InvalidArgument(format!(
                "unknown learning-rate scaling {s:?} (none, linear or sqrt)"
            ))),
        }
    }
}

/// The learning rate of every optimizer step: the base rate, tuned at the base
/// batch, scaled to the effective batch, reached by a linear warm-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    base_lr: f64,
    target: f64,
    warmup_steps: u64,
}

// ANCHOR: schedule
impl LrSchedule {
    /// `base_lr` was tuned at `base_batch`; training runs at `batch` (the
    /// effective batch: ranks × per-rank batch × accumulated micro-batches),
    /// scaled by `scaling`, warming up over `warmup_steps` optimizer steps.
    pub fn new(
        base_lr: f64,
        base_batch: usize,
        batch: usize,
        scaling: Scaling,
        warmup_steps: u64,
    ) -> Result<LrSchedule> {
        if !(base_lr.is_finite() && base_lr > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "the base learning rate must be positive, not {base_lr}"
            )));
        }
        if base_batch == 0 || batch == 0 {
            return Err(Error::InvalidArgument(format!(
                "batch sizes must be positive (base batch {base_batch}, batch {batch})"
            )));
        }
        let k = batch as f64 / base_batch as f64;
        Ok(LrSchedule {
            base_lr,
            target: base_lr * scaling.factor(k),
            warmup_steps,
        })
    }

    /// The rate after the warm-up.
    pub fn target(&self) -> f64 {
        self.target
    }

    /// The rate of optimizer step `step` (0-based): from the base rate at step
    /// 0 in equal steps to the target at step `warmup_steps`, then the target.
    /// (Goyal et al. ramp from the base rate, not from zero: the base rate is
    /// known to be stable, and starting lower only wastes steps.)
    pub fn lr_at(&self, step: u64) -> f64 {
        if step >= self.warmup_steps {
            return self.target;
        }
        let t = step as f64 / self.warmup_steps as f64;
        self.base_lr + (self.target - self.base_lr) * t
    }
}
// ANCHOR_END: schedule

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_and_sqrt_scale_by_k_and_its_root() {
        let lin = LrSchedule::new(0.05, 64, 1024, Scaling::Linear, 0).unwrap();
        let sqrt = LrSchedule::new(0.05, 64, 1024, Scaling::Sqrt, 0).unwrap();
        let none = LrSchedule::new(0.05, 64, 1024, Scaling::None, 0).unwrap();
        // 1024 / 64 = 16: ×16 and ×4, exact in binary.
        assert_eq!(lin.target(), 0.05 * 16.0);
        assert_eq!(sqrt.target(), 0.05 * 4.0);
        assert_eq!(none.target(), 0.05);
        assert_eq!(lin.lr_at(0), lin.target());
    }

    #[test]
    fn warm_up_ramps_from_the_base_rate_to_the_target_then_holds() {
        let s = LrSchedule::new(0.1, 64, 512, Scaling::Linear, 10).unwrap();
        assert_eq!(s.lr_at(0), 0.1);
        assert!((s.lr_at(5) - 0.45).abs() < 1e-12, "{}", s.lr_at(5));
        assert_eq!(s.lr_at(10), 0.8);
        assert_eq!(s.lr_at(1000), 0.8);
        let rates: Vec<f64> = (0..=10).map(|t| s.lr_at(t)).collect();
        assert!(rates.windows(2).all(|w| w[1] > w[0]), "{rates:?}");
    }

    #[test]
    fn the_base_batch_is_left_alone_by_every_rule() {
        for scaling in [Scaling::None, Scaling::Linear, Scaling::Sqrt] {
            let s = LrSchedule::new(0.05, 64, 64, scaling, 5).unwrap();
            assert_eq!((s.lr_at(0), s.lr_at(3), s.target()), (0.05, 0.05, 0.05));
        }
    }

    #[test]
    fn bad_rates_and_batches_are_errors() {
        for (lr, b0, b) in [
            (0.0, 64, 64),
            (-1.0, 64, 64),
            (f64::NAN, 64, 64),
            (0.1, 0, 64),
        ] {
            let e = LrSchedule::new(lr, b0, b, Scaling::Linear, 0).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        assert!("cubic".parse::<Scaling>().is_err());
        assert_eq!("sqrt".parse::<Scaling>().unwrap(), Scaling::Sqrt);
    }
}
