//! Throughput as nccl-tests and PyTorch's benchmarks time it: wall-clock time
//! over a window of steps, with the device synchronised where the window opens
//! and where it closes. The time then holds every step's device work (a GPU
//! runs behind the host that queued it) and nothing queued before the window;
//! inside it the host never waits for the device on the clock's account.
//!
//! Summing each step's host time instead, as `ringside-train` did until
//! 2026-11, leaves out whatever the device still owes when a read between
//! steps (the loss, a metric) waits for it; and a step that waits for the
//! device at its end, as `benches/ddp_torch.py` did, drains the device's queue
//! every step. Both programs now time this way, so their ratio compares the
//! same thing.

use std::time::Instant;

use tch::Device;

/// Wall-clock time over the steps counted in it; see the [module docs](self).
/// It may close and open again (around an evaluation, which it leaves out).
#[derive(Debug)]
pub struct Window {
    cuda: Option<usize>,
    open: Option<Instant>,
    secs: f64,
    steps: u64,
    samples: f64,
}

impl Window {
    /// A closed window for steps running on `device`.
    pub fn new(device: Device) -> Window {
        Window {
            cuda: match device {
                Device::Cuda(i) => Some(i),
                _ => None,
            },
            open: None,
            secs: 0.0,
            steps: 0,
            samples: 0.0,
        }
    }

    /// Opens the window (if closed) once the device has finished what was
    /// queued so far.
    pub fn open(&mut self) {
        if self.open.is_none() {
            self.sync();
            self.open = Some(Instant::now());
        }
    }

    /// Counts one step of `samples` samples (all ranks') in the window; a step
    /// outside an open window is not counted.
    pub fn step(&mut self, samples: f64) {
        if self.open.is_some() {
            self.steps += 1;
            self.samples += samples;
        }
    }

    /// Closes the window (if open) once the device has finished the steps
    /// queued in it.
    pub fn close(&mut self) {
        if let Some(start) = self.open.take() {
            self.sync();
            self.secs += start.elapsed().as_secs_f64();
        }
    }

    /// Whether the window is open.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Steps counted.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Seconds the window was open (closed spans only).
    pub fn secs(&self) -> f64 {
        self.secs
    }

    /// Samples per second over the closed spans; 0 if none.
    pub fn samples_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.samples / self.secs
        } else {
            0.0
        }
    }

    fn sync(&self) {
        if let Some(i) = self.cuda {
            tch::Cuda::synchronize(i as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_window_counts_only_its_open_spans_and_steps() {
        let mut w = Window::new(Device::Cpu);
        w.step(64.0); // before it opens: not counted
        w.open();
        std::thread::sleep(Duration::from_millis(20));
        w.step(64.0);
        w.step(64.0);
        w.close();
        // An evaluation between two spans is left out.
        std::thread::sleep(Duration::from_millis(200));
        w.step(64.0);
        w.open();
        w.open(); // a second open keeps the first's start
        std::thread::sleep(Duration::from_millis(20));
        w.step(64.0);
        assert!(w.is_open());
        w.close();
        w.close();
        assert_eq!(w.steps(), 3);
        // Sleeps last at least what was asked; the 200 ms outside would show.
        assert!(w.secs() >= 0.040 && w.secs() < 0.2, "{}", w.secs());
        assert!((w.samples_per_s() - 192.0 / w.secs()).abs() < 1e-9);
        assert_eq!(Window::new(Device::Cpu).samples_per_s(), 0.0);
    }
}
