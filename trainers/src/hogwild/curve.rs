//! The parent's loss curve: it samples the workers' step counts and loss sums
//! from their slots of the region while they train.

use super::*;

/// The parent's samples of the workers' step counts and loss sums.
pub(super) struct LossCurve {
    start: Instant,
    every: Duration,
    next: Instant,
    /// Steps and loss sum at the previous sample.
    seen: (u64, f64),
    pub(super) points: Vec<LossPoint>,
}

impl LossCurve {
    pub(super) fn new(start: Instant, every: Duration) -> LossCurve {
        LossCurve {
            start,
            every,
            next: start + every,
            seen: (0, 0.0),
            points: Vec::new(),
        }
    }

    /// Adds a point if a sampling time has passed (or `now`) and steps were done.
    pub(super) fn sample(&mut self, region: &Mapping, workers: usize, now: bool) -> Result<()> {
        let t = Instant::now();
        if !now && t < self.next {
            return Ok(());
        }
        self.next = t + self.every;
        let (mut steps, mut sum) = (0u64, 0.0f64);
        for r in 0..workers {
            // Steps first: the loss sum read after it covers at least those steps
            // (a worker stores its sum before counting the step); the one extra
            // loss, if any, is in the next interval's difference instead.
            steps += region.slot(r, 8)?.load(Ordering::SeqCst);
            sum += f64::from_bits(region.slot(r, 16)?.load(Ordering::SeqCst));
        }
        let (steps0, sum0) = self.seen;
        if steps > steps0 {
            self.points.push(LossPoint {
                seconds: (t - self.start).as_secs_f64(),
                steps,
                loss: (sum - sum0) / (steps - steps0) as f64,
            });
            self.seen = (steps, sum);
        }
        Ok(())
    }
}
