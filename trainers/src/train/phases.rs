//! Where a training step's time goes: data loading, forward (with the loss),
//! backward (with any gradient synchronisation it waits for) and the optimizer.
//! [`PhaseClock`] times them step by step; lab 2 draws their medians as one
//! stacked bar per device, and `ringside-train` prints the same split at the end.

use std::time::{Duration, Instant};

use tch::Device;

/// One phase of a training step, in the order a step runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Gathering the batch's examples into tensors on the training device.
    Data,
    /// The model's forward pass and the loss.
    Forward,
    /// Backward: the gradients (and, under DDP, the wait for their all_reduce).
    Backward,
    /// The optimizer's update (and zeroing the gradients for the next step).
    Optimizer,
}

impl Phase {
    /// Every phase, in step order.
    pub const ALL: [Phase; 4] = [
        Phase::Data,
        Phase::Forward,
        Phase::Backward,
        Phase::Optimizer,
    ];

    /// The phase's name, as printed and in traces: `data`, `forward`, ...
    pub fn name(self) -> &'static str {
        match self {
            Phase::Data => "data",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Time spent in each phase (of one step, or a median over steps), in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseTimes {
    secs: [f64; 4],
}

impl PhaseTimes {
    /// Seconds spent in `phase`.
    pub fn get(&self, phase: Phase) -> f64 {
        self.secs[phase.index()]
    }

    /// Adds `secs` to `phase`.
    pub fn add(&mut self, phase: Phase, secs: f64) {
        self.secs[phase.index()] += secs;
    }

    /// The sum over all phases.
    pub fn total(&self) -> f64 {
        self.secs.iter().sum()
    }

    /// The phase with the most time (the bottleneck), the first of equals.
    pub fn largest(&self) -> Phase {
        Phase::ALL.into_iter().fold(
            Phase::Data,
            |a, b| if self.get(b) > self.get(a) { b } else { a },
        )
    }

    /// Per phase, the median over `steps` (0 for no steps). A median per phase
    /// rather than one whole step's times: a step disturbed in one phase (a
    /// page fault, a preempted core) then moves only that phase's bar.
    pub fn median(steps: &[PhaseTimes]) -> PhaseTimes {
        let mut out = PhaseTimes::default();
        for phase in Phase::ALL {
            let mut v: Vec<f64> = steps.iter().map(|s| s.get(phase)).collect();
            v.sort_by(f64::total_cmp);
            out.secs[phase.index()] = match v.len() {
                0 => 0.0,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            };
        }
        out
    }

    /// One line: each phase's milliseconds and share, e.g.
    /// `data 0.1 ms (1%), forward 4.0 ms (30%), ...`.
    pub fn summary(&self) -> String {
        let total = self.total();
        Phase::ALL
            .iter()
            .map(|&p| {
                let share = if total > 0.0 {
                    100.0 * self.get(p) / total
                } else {
                    0.0
                };
                format!("{} {:.2} ms ({share:.0}%)", p.name(), 1e3 * self.get(p))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One timed interval of a phase, for a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseSpan {
    /// Which phase.
    pub phase: Phase,
    /// When it began.
    pub start: Instant,
    /// When it ended (after the device finished its work).
    pub end: Instant,
}

/// Times the phases of training steps: wrap each phase's work in
/// [`time`](Self::time), call [`end_step`](Self::end_step) after each step.
///
/// On a CUDA device kernels run asynchronously: a forward pass "returns" as soon
/// as its kernels are queued, and the time shows up wherever the host next waits.
/// So on CUDA the clock synchronises the device at the end of every phase of a
/// timed step, and each phase gets the time its own kernels took.
///
/// Those waits cost: while the host waits, it queues nothing, and the device
/// idles while the host then queues the next phase. A small model is bound by
/// how fast the host queues kernels, so waiting four times a step can cost a
/// third of the throughput. [`sampled`](Self::sampled) times one step in `n` on
/// CUDA and lets the others run without a wait; [`new`](Self::new) times every
/// step (lab 2, whose lesson is the split itself). On the CPU nothing is
/// asynchronous and every step is timed either way.
#[derive(Debug, Clone)]
pub struct PhaseClock {
    cuda: Option<usize>,
    /// Time one step in `every` (CUDA only; 1 = every step).
    every: usize,
    /// Steps closed so far, timed or not.
    closed: usize,
    current: PhaseTimes,
    /// The timed steps: their index among all steps, and their times.
    steps: Vec<PhaseTimes>,
    indices: Vec<usize>,
    spans: Vec<PhaseSpan>,
}

impl PhaseClock {
    /// A clock for steps running on `device` that times every step.
    pub fn new(device: Device) -> PhaseClock {
        PhaseClock::sampled(device, 1)
    }

    /// A clock for steps running on `device` that, on CUDA, times one step in
    /// `every` (steps 0, `every`, 2·`every`, …) and leaves the device alone on
    /// the others. `every` of 0 counts as 1.
    pub fn sampled(device: Device, every: usize) -> PhaseClock {
        let cuda = match device {
            Device::Cuda(i) => Some(i),
            _ => None,
        };
        PhaseClock {
            cuda,
            every: if cuda.is_some() { every.max(1) } else { 1 },
            closed: 0,
            current: PhaseTimes::default(),
            steps: Vec::new(),
            indices: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Whether the current step is timed.
    pub fn timing(&self) -> bool {
        self.closed % self.every == 0
    }

    /// Runs `work` as (part of) `phase` of the current step and, when the step is
    /// timed, adds its time, device work included.
    pub fn time<R>(&mut self, phase: Phase, work: impl FnOnce() -> R) -> R {
        if !self.timing() {
            return work();
        }
        let start = Instant::now();
        let out = work();
        self.sync();
        self.record(phase, start, Instant::now());
        out
    }

    /// Adds the interval `start..end` to `phase` of the current step (for work
    /// timed elsewhere), when the step is timed.
    pub fn record(&mut self, phase: Phase, start: Instant, end: Instant) {
        if !self.timing() {
            return;
        }
        self.current
            .add(phase, end.saturating_duration_since(start).as_secs_f64());
        self.spans.push(PhaseSpan { phase, start, end });
    }

    /// Waits for the device's queued work (nothing on the CPU).
    fn sync(&self) {
        if let Some(i) = self.cuda {
            tch::Cuda::synchronize(i as i64);
        }
    }

    /// The current step so far.
    pub fn current(&self) -> PhaseTimes {
        self.current
    }

    /// Closes the current step and returns its times (zeros for a step not timed).
    pub fn end_step(&mut self) -> PhaseTimes {
        let t = std::mem::take(&mut self.current);
        if self.timing() {
            self.steps.push(t);
            self.indices.push(self.closed);
        }
        self.closed += 1;
        t
    }

    /// Every timed step's times, in order.
    pub fn steps(&self) -> &[PhaseTimes] {
        &self.steps
    }

    /// Per phase, the median over the timed steps after the first `skip` steps
    /// (warm-up: the first steps allocate and pick kernels).
    pub fn median(&self, skip: usize) -> PhaseTimes {
        let from = self.indices.partition_point(|&k| k < skip);
        PhaseTimes::median(&self.steps[from..])
    }

    /// How many timed steps [`median`](Self::median)`(skip)` takes.
    pub fn timed_after(&self, skip: usize) -> usize {
        self.steps.len() - self.indices.partition_point(|&k| k < skip)
    }

    /// One step in how many is timed (1 on the CPU).
    pub fn every(&self) -> usize {
        self.every
    }

    /// The spans recorded since the last call (for a trace), oldest first.
    pub fn take_spans(&mut self) -> Vec<PhaseSpan> {
        std::mem::take(&mut self.spans)
    }

    /// The time of all closed steps, every phase.
    pub fn total(&self) -> Duration {
        Duration::from_secs_f64(self.steps.iter().map(PhaseTimes::total).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(v: [f64; 4]) -> PhaseTimes {
        PhaseTimes { secs: v }
    }

    #[test]
    fn medians_are_per_phase_and_the_largest_phase_is_the_bottleneck() {
        let steps = [
            times([1.0, 10.0, 20.0, 3.0]),
            times([9.0, 11.0, 22.0, 1.0]),
            times([2.0, 12.0, 21.0, 2.0]),
        ];
        let m = PhaseTimes::median(&steps);
        assert_eq!(m, times([2.0, 11.0, 21.0, 2.0]));
        assert_eq!(m.largest(), Phase::Backward);
        assert_eq!(m.total(), 36.0);
        let even = PhaseTimes::median(&steps[..2]);
        assert_eq!(even.get(Phase::Data), 5.0);
        assert_eq!(PhaseTimes::median(&[]), PhaseTimes::default());
        let s = m.summary();
        assert!(s.starts_with("data 2000.00 ms (6%), forward"), "{s}");
    }

    #[test]
    fn the_clock_adds_each_phase_to_its_step_and_keeps_spans() {
        let mut clock = PhaseClock::new(Device::Cpu);
        let x = clock.time(Phase::Forward, || {
            std::thread::sleep(Duration::from_millis(5));
            7
        });
        assert_eq!(x, 7);
        let t0 = Instant::now();
        clock.record(Phase::Data, t0, t0 + Duration::from_millis(2));
        clock.record(Phase::Data, t0, t0 + Duration::from_millis(1));
        let step = clock.end_step();
        assert!(step.get(Phase::Forward) >= 0.005, "{step:?}");
        assert!((step.get(Phase::Data) - 0.003).abs() < 1e-9, "{step:?}");
        assert_eq!(step.get(Phase::Optimizer), 0.0);
        assert_eq!(clock.current(), PhaseTimes::default());
        clock.end_step();
        assert_eq!(clock.steps().len(), 2);
        assert_eq!(clock.median(1).total(), 0.0);
        assert_eq!(clock.median(5), PhaseTimes::default());
        let spans = clock.take_spans();
        assert_eq!(
            spans.iter().map(|s| s.phase).collect::<Vec<_>>(),
            [Phase::Forward, Phase::Data, Phase::Data]
        );
        assert!(clock.take_spans().is_empty());
    }

    #[test]
    fn a_sampled_clock_times_one_cuda_step_in_n_and_every_cpu_step() {
        // Only `record` and `end_step` here: they never touch the device, so the
        // CUDA clock's bookkeeping is testable without a GPU.
        let mut clock = PhaseClock::sampled(Device::Cuda(0), 4);
        assert_eq!(clock.every(), 4);
        let t0 = Instant::now();
        let mut timed = Vec::new();
        for k in 0..10u64 {
            timed.push(clock.timing());
            clock.record(Phase::Backward, t0, t0 + Duration::from_millis(k + 1));
            let step = clock.end_step();
            assert_eq!(step.get(Phase::Backward) > 0.0, k % 4 == 0, "step {k}");
        }
        assert_eq!(
            timed,
            [
                true, false, false, false, true, false, false, false, true, false
            ]
        );
        // Steps 0, 4 and 8 took 1, 5 and 9 ms.
        assert_eq!(clock.steps().len(), 3);
        assert_eq!(clock.take_spans().len(), 3);
        assert!((clock.median(0).get(Phase::Backward) - 0.005).abs() < 1e-9);
        // A warm-up of 3 steps skips step 0 only; of 5, steps 0 and 4.
        assert_eq!(clock.timed_after(3), 2);
        assert!((clock.median(3).get(Phase::Backward) - 0.007).abs() < 1e-9);
        assert_eq!(clock.timed_after(5), 1);
        assert_eq!(clock.timed_after(20), 0);
        assert_eq!(clock.median(20), PhaseTimes::default());

        let mut cpu = PhaseClock::sampled(Device::Cpu, 4);
        assert_eq!(cpu.every(), 1);
        for _ in 0..3 {
            assert!(cpu.timing());
            cpu.record(Phase::Data, t0, t0 + Duration::from_millis(1));
            cpu.end_step();
        }
        assert_eq!(cpu.steps().len(), 3);
    }
}
