//! What happened when, per training step: data loading, forward, backward per
//! stage, buckets becoming ready, all_reduce start and end, the wait for
//! communication, the optimizer. Exported as a
//! Chrome trace (open it in `chrome://tracing` or <https://ui.perfetto.dev>):
//! `{"traceEvents":[{"name","ph":"X","ts","dur","pid","tid"}, ...]}`, timestamps in
//! microseconds since the Unix epoch, so the traces of ranks on one host line up
//! when merged ([`merge_chrome_traces`]).
//!
//! The number that matters is the **exposed communication** of a step: the time
//! between the end of backward and the moment the last bucket is reduced (and
//! copied back), which the optimizer has to wait for. Communication that ran while
//! backward was still computing is hidden. It is reported as a percentage of the
//! step time, a step lasting from the start of its forward pass to the start of
//! the next step's (so the optimizer and data loading are in it), or to its own
//! synchronisation's end for the last step.

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::{Error, Result};

/// Thread id of the training thread's events (forward, backward, waits).
pub const TID_COMPUTE: u32 = 0;
/// Thread id of the communicator thread's events (the collectives).
pub const TID_COMM: u32 = 1;

/// Events of at most this many steps are kept by default (the per-step summaries
/// are always kept): a long run would otherwise grow without bound.
pub const DEFAULT_EVENT_STEPS: usize = 200;

/// One Chrome trace event: a span (`ph` `X`) or an instant (`ph` `i`).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    /// What happened.
    pub name: String,
    /// Category (`data`, `forward`, `backward`, `bucket`, `comm`, `wait`,
    /// `optimizer`).
    pub cat: &'static str,
    /// `'X'` (complete span) or `'i'` (instant).
    pub ph: char,
    /// Start, microseconds since the Unix epoch.
    pub ts_us: f64,
    /// Duration in microseconds (0 for instants).
    pub dur_us: f64,
    /// [`TID_COMPUTE`] or [`TID_COMM`].
    pub tid: u32,
    /// The step it belongs to.
    pub step: usize,
    /// Extra fields shown in the viewer.
    pub args: Map<String, Value>,
}

/// The timing summary of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Step number, from 0.
    pub step: usize,
    /// Forward started (µs since the Unix epoch).
    pub start_us: f64,
    /// The last stage's backward ended.
    pub backward_end_us: f64,
    /// The last bucket was reduced and copied back (equals `backward_end_us` when
    /// the step did not communicate, as under `no_sync`).
    pub sync_end_us: f64,
    /// The next step started (or `sync_end_us` for the latest step).
    pub end_us: f64,
    /// Whether the step synchronised gradients.
    pub synced: bool,
}

impl StepStats {
    /// Step time in microseconds.
    pub fn step_us(&self) -> f64 {
        self.end_us - self.start_us
    }

    /// Time spent after backward waiting for communication, in microseconds.
    pub fn exposed_us(&self) -> f64 {
        (self.sync_end_us - self.backward_end_us).max(0.0)
    }

    /// Exposed communication as a percentage of the step time.
    pub fn exposed_pct(&self) -> f64 {
        let step = self.step_us();
        if step > 0.0 {
            100.0 * self.exposed_us() / step
        } else {
            0.0
        }
    }
}

/// The events of one rank.
#[derive(Debug, Clone)]
pub struct Timeline {
    origin: Instant,
    origin_unix_us: f64,
    pid: usize,
    event_steps: usize,
    events: Vec<TraceEvent>,
    steps: Vec<StepStats>,
}

impl Timeline {
    /// An empty timeline for rank `pid`.
    pub fn new(pid: usize) -> Timeline {
        let origin_unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e6);
        Timeline {
            origin: Instant::now(),
            origin_unix_us,
            pid,
            event_steps: DEFAULT_EVENT_STEPS,
            events: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// Keeps the events of the first `steps` steps only (summaries: all).
    pub fn with_event_steps(mut self, steps: usize) -> Timeline {
        self.event_steps = steps;
        self
    }

    /// Microseconds since the Unix epoch of an instant of this process.
    pub fn us(&self, at: Instant) -> f64 {
        self.origin_unix_us + at.saturating_duration_since(self.origin).as_secs_f64() * 1e6
            - self.origin.saturating_duration_since(at).as_secs_f64() * 1e6
    }

    /// Starts step `steps().len()` at `at`; the previous step ends there.
    pub fn begin_step(&mut self, at: Instant) -> usize {
        let ts = self.us(at);
        if let Some(prev) = self.steps.last_mut() {
            prev.end_us = ts;
        }
        self.steps.push(StepStats {
            step: self.steps.len(),
            start_us: ts,
            backward_end_us: ts,
            sync_end_us: ts,
            end_us: ts,
            synced: false,
        });
        self.steps.len() - 1
    }

    /// Marks the end of the current step's backward pass.
    pub fn end_backward(&mut self, at: Instant) {
        let ts = self.us(at);
        if let Some(s) = self.steps.last_mut() {
            s.backward_end_us = ts;
            s.sync_end_us = ts;
            s.end_us = ts;
        }
    }

    /// Marks the end of the current step's gradient synchronisation.
    pub fn end_sync(&mut self, at: Instant) {
        let ts = self.us(at);
        if let Some(s) = self.steps.last_mut() {
            s.sync_end_us = ts;
            s.end_us = ts;
            s.synced = true;
        }
    }

    /// The step a new event belongs to, if its events are still kept: the latest
    /// step, or step 0 before the first one began (the first batch's data loading
    /// comes before its forward).
    fn recording(&self) -> Option<usize> {
        let step = self.steps.len().saturating_sub(1);
        (step < self.event_steps).then_some(step)
    }

    /// Records a span of the current step.
    pub fn span(
        &mut self,
        name: impl Into<String>,
        cat: &'static str,
        tid: u32,
        start: Instant,
        end: Instant,
        args: Map<String, Value>,
    ) {
        let Some(step) = self.recording() else {
            return;
        };
        let ts_us = self.us(start);
        self.events.push(TraceEvent {
            name: name.into(),
            cat,
            ph: 'X',
            ts_us,
            dur_us: (self.us(end) - ts_us).max(0.0),
            tid,
            step,
            args,
        });
    }

    /// Records an instant of the current step.
    pub fn instant(
        &mut self,
        name: impl Into<String>,
        cat: &'static str,
        tid: u32,
        at: Instant,
        args: Map<String, Value>,
    ) {
        let Some(step) = self.recording() else {
            return;
        };
        self.events.push(TraceEvent {
            name: name.into(),
            cat,
            ph: 'i',
            ts_us: self.us(at),
            dur_us: 0.0,
            tid,
            step,
            args,
        });
    }

    /// The recorded events, in recording order.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// Every step's summary.
    pub fn steps(&self) -> &[StepStats] {
        &self.steps
    }

    /// The mean exposed-communication percentage of the synchronised steps after
    /// the first `skip` steps (warm-up), or `None` if there are none.
    pub fn mean_exposed_pct(&self, skip: usize) -> Option<f64> {
        let pcts: Vec<f64> = self
            .steps
            .iter()
            .skip(skip)
            .filter(|s| s.synced)
            .map(StepStats::exposed_pct)
            .collect();
        (!pcts.is_empty()).then(|| pcts.iter().sum::<f64>() / pcts.len() as f64)
    }

    /// This rank's events as a Chrome trace object: process and thread names, one
    /// `step N` span per step (with its exposed communication), then the events.
    pub fn to_chrome_trace(&self) -> Value {
        let pid = self.pid;
        let mut out = vec![
            meta("process_name", pid, 0, &format!("rank {pid}")),
            meta("thread_name", pid, TID_COMPUTE, "compute"),
            meta("thread_name", pid, TID_COMM, "communication"),
        ];
        for s in self.steps.iter().take(self.event_steps) {
            out.push(json!({
                "name": format!("step {}", s.step), "cat": "step", "ph": "X",
                "ts": s.start_us, "dur": s.step_us(), "pid": pid, "tid": TID_COMPUTE,
                "args": {
                    "exposed_comm_us": s.exposed_us(),
                    "exposed_comm_pct": s.exposed_pct(),
                    "synced": s.synced,
                },
            }));
        }
        for e in &self.events {
            let mut v = json!({
                "name": e.name, "cat": e.cat, "ph": e.ph.to_string(), "ts": e.ts_us,
                "pid": pid, "tid": e.tid, "args": Value::Object(e.args.clone()),
            });
            if let Value::Object(m) = &mut v {
                if e.ph == 'X' {
                    m.insert("dur".into(), json!(e.dur_us));
                } else {
                    // Instants scoped to their thread.
                    m.insert("s".into(), json!("t"));
                }
            }
            out.push(v);
        }
        json!({ "traceEvents": out, "displayTimeUnit": "ms" })
    }

    /// Writes [`to_chrome_trace`](Self::to_chrome_trace) to `path`.
    pub fn write_chrome_trace(&self, path: &Path) -> Result<()> {
        write_trace(&self.to_chrome_trace(), path)
    }
}

fn meta(what: &str, pid: usize, tid: u32, name: &str) -> Value {
    json!({"name": what, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
}

/// Concatenates the `traceEvents` of several ranks' traces into one trace.
pub fn merge_chrome_traces(traces: &[Value]) -> Result<Value> {
    let mut all = Vec::new();
    for (k, t) in traces.iter().enumerate() {
        let events = t
            .get("traceEvents")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::InvalidArgument(format!("trace {k} has no traceEvents array")))?;
        all.extend(events.iter().cloned());
    }
    Ok(json!({ "traceEvents": all, "displayTimeUnit": "ms" }))
}

/// Writes a trace as JSON.
pub fn write_trace(trace: &Value, path: &Path) -> Result<()> {
    let text = serde_json::to_string(trace)
        .map_err(|e| Error::InvalidArgument(format!("serialising the trace: {e}")))?;
    std::fs::write(path, text).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn exposed_communication_is_the_wait_after_backward_over_the_step() {
        let mut t = Timeline::new(3);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        t.begin_step(t0);
        t.span(
            "backward",
            "backward",
            TID_COMPUTE,
            ms(1),
            ms(6),
            Map::new(),
        );
        t.span("all_reduce", "comm", TID_COMM, ms(4), ms(8), Map::new());
        t.end_backward(ms(6));
        t.end_sync(ms(8));
        t.begin_step(ms(10));
        let s = t.steps()[0];
        assert!((s.step_us() - 10_000.0).abs() < 1.0, "{s:?}");
        assert!((s.exposed_us() - 2_000.0).abs() < 1.0, "{s:?}");
        assert!((s.exposed_pct() - 20.0).abs() < 0.01, "{s:?}");
        // The open second step has not synchronised: not counted.
        assert!((t.mean_exposed_pct(0).unwrap() - 20.0).abs() < 0.01);
        assert_eq!(t.mean_exposed_pct(1), None);

        let trace = t.to_chrome_trace();
        let events = trace["traceEvents"].as_array().unwrap();
        let comm = events.iter().find(|e| e["name"] == "all_reduce").unwrap();
        assert_eq!(
            (comm["ph"].as_str(), comm["tid"].as_u64()),
            (Some("X"), Some(1))
        );
        assert_eq!(comm["pid"], 3);
        assert!((comm["dur"].as_f64().unwrap() - 4_000.0).abs() < 1.0);
        let step = events.iter().find(|e| e["name"] == "step 0").unwrap();
        assert!((step["args"]["exposed_comm_pct"].as_f64().unwrap() - 20.0).abs() < 0.01);
    }

    #[test]
    fn events_stop_after_the_limit_but_summaries_do_not() {
        let mut t = Timeline::new(0).with_event_steps(2);
        let now = Instant::now();
        for _ in 0..5 {
            t.begin_step(now);
            t.instant("ready", "bucket", TID_COMPUTE, now, Map::new());
        }
        assert_eq!((t.events().len(), t.steps().len()), (2, 5));
    }

    #[test]
    fn merged_traces_round_trip_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let parts: Vec<Value> = (0..2)
            .map(|r| {
                let mut t = Timeline::new(r);
                let now = Instant::now();
                t.begin_step(now);
                t.instant("bucket 0 ready", "bucket", TID_COMPUTE, now, Map::new());
                t.to_chrome_trace()
            })
            .collect();
        let merged = merge_chrome_traces(&parts).unwrap();
        let path = dir.path().join("trace.json");
        write_trace(&merged, &path).unwrap();
        let back: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let events = back["traceEvents"].as_array().unwrap();
        let pids: std::collections::BTreeSet<u64> =
            events.iter().filter_map(|e| e["pid"].as_u64()).collect();
        assert_eq!(pids.into_iter().collect::<Vec<_>>(), [0, 1]);
        assert!(merge_chrome_traces(&[json!({})]).is_err());
    }
}
