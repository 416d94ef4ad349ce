//! libtorch's own profiler (Kineto, what Python's `torch.profiler.profile`
//! runs), for a Rust program: every op dispatched on the thread that starts it
//! and on autograd's threads, and on CUDA every kernel and copy the device ran,
//! with its time, saved as a Chrome trace (`chrome://tracing`, Perfetto).
//! `ringside-train --profile` records a few steps with it, and
//! `benches/profile_summary.py` compares such a trace with one PyTorch wrote.

use std::ffi::{CString, c_char};
use std::path::Path;

use tch::Device;

use super::shim;
use crate::{Error, Result};

/// A running profiler; [`Profiler::save`] stops it and writes what it saw.
/// Dropped unsaved, it stops and keeps nothing. One runs at a time per
/// process: a second [`Profiler::start`] fails with libtorch's message.
#[derive(Debug)]
pub struct Profiler {
    device: Device,
    running: bool,
}

impl Profiler {
    /// Starts recording on this thread: host ops, and the device's activity
    /// when `device` is a CUDA device.
    pub fn start(device: Device) -> Result<Profiler> {
        let mut err = [0 as c_char; shim::ERR_LEN];
        // SAFETY: `err` is a writable buffer of the length given.
        let rc = unsafe {
            shim::ringside_profiler_start(i32::from(device.is_cuda()), err.as_mut_ptr(), err.len())
        };
        if rc != 0 {
            return Err(Error::Model(format!(
                "cannot start libtorch's profiler: {}",
                shim::message(&err)
            )));
        }
        Ok(Profiler {
            device,
            running: true,
        })
    }

    /// Stops recording, once the device has finished what was queued while it
    /// ran (as `torch.profiler` does), and writes the trace to `path` (JSON,
    /// Chrome's format).
    pub fn save(mut self, path: &Path) -> Result<()> {
        if let Device::Cuda(i) = self.device {
            tch::Cuda::synchronize(i as i64);
        }
        let p = path
            .to_str()
            .and_then(|s| CString::new(s).ok())
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "profile path {} is not UTF-8 without NULs",
                    path.display()
                ))
            })?;
        self.running = false;
        stop(Some(&p)).map_err(|e| {
            Error::Model(format!(
                "libtorch's profiler could not write {}: {e}",
                path.display()
            ))
        })
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if self.running {
            let _ = stop(None);
        }
    }
}

/// Stops the profiler of this thread, saving to `path` if given.
fn stop(path: Option<&CString>) -> std::result::Result<(), String> {
    let mut err = [0 as c_char; shim::ERR_LEN];
    let p = path.map_or(std::ptr::null(), |p| p.as_ptr());
    // SAFETY: `p` is null or a C string that outlives the call; `err` is a
    // writable buffer of the length given.
    let rc = unsafe { shim::ringside_profiler_stop(p, err.as_mut_ptr(), err.len()) };
    if rc != 0 {
        return Err(shim::message(&err));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    #[test]
    fn a_profile_names_the_ops_that_ran_and_a_second_profiler_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.json");
        let p = Profiler::start(Device::Cpu).unwrap();
        let second = Profiler::start(Device::Cpu).unwrap_err().to_string();
        assert!(
            second.contains("cannot start libtorch's profiler"),
            "{second}"
        );
        let x = Tensor::ones([8, 8], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        x.matmul(&x).sum(Kind::Float).backward();
        p.save(&path).unwrap();
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let names: Vec<&str> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert!(names.contains(&"aten::matmul"), "{names:?}");
        // The backward ran on autograd's side: its nodes are in the trace too.
        assert!(names.iter().any(|n| n.contains("MmBackward")), "{names:?}");
        // Stopped: a new profiler may start, and one dropped unsaved writes nothing.
        drop(Profiler::start(Device::Cpu).unwrap());
    }
}
