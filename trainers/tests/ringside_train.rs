//! `ringside-train` as a user runs it: what it prints and writes for the
//! workshop's questions (phases, effective batch, resuming, evaluating only).
//! Synthetic data and one rank keep each run to a second or two.

use std::path::Path;
use std::process::{Command, Output};

fn train(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ringside-train"))
        .args(["--nproc", "1", "--synthetic", "256", "--batch", "16"])
        .args(["--timeout", "60", "--json"])
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

/// The `--json` summary of a run that must have succeeded, and its stderr.
fn summary(out: &Output) -> (serde_json::Value, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout.lines().find(|l| l.starts_with('{')).unwrap();
    (serde_json::from_str(line).unwrap(), stderr)
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The trace has data-loading and optimizer spans beside forward and backward,
/// and the run ends with the per-phase split of its median step.
#[test]
fn trace_has_every_phase_and_the_run_prints_the_split() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let (v, stderr) = summary(&train(&[
        "--steps",
        "8",
        "--warmup",
        "2",
        "--trace",
        arg(&trace),
    ]));
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    for cat in ["data", "forward", "backward", "optimizer"] {
        let n = events
            .iter()
            .filter(|e| e["cat"] == cat && e["ph"] == "X")
            .count();
        assert!(n >= 8, "{n} {cat} spans");
    }
    let split = stderr
        .lines()
        .find(|l| l.contains("per-phase split"))
        .unwrap_or_else(|| panic!("{stderr}"));
    for part in ["data ", "forward ", "backward ", "optimizer ", "most in "] {
        assert!(split.contains(part), "{split}");
    }
    for phase in ["data", "forward", "backward", "optimizer"] {
        assert!(
            v["phase_ms"][phase].as_f64().is_some_and(|ms| ms >= 0.0),
            "{v}"
        );
    }
}

/// `--profile` records the steps right after the warm-up with libtorch's
/// profiler (the optimizer's and the model's ops, autograd's nodes) and leaves
/// them out of the throughput; a run too short for them says nothing was written.
#[test]
fn profile_records_the_steps_after_the_warm_up_and_leaves_them_out_of_the_timing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.json");
    let (v, stderr) = summary(&train(&[
        "--steps",
        "9",
        "--warmup",
        "2",
        "--profile",
        arg(&path),
        "--profile-steps",
        "3",
        "--no-eval",
    ]));
    assert!(
        stderr.contains("profile of steps 3-5 written to"),
        "{stderr}"
    );
    assert_eq!(v["timed_steps"], 4, "9 steps - 2 warm-up - 3 profiled: {v}");
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let names: Vec<&str> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "cpu_op")
        .filter_map(|e| e["name"].as_str())
        .collect();
    // Three steps of the CNN: two convolutions each, and their backward nodes.
    let convs = names.iter().filter(|n| **n == "aten::conv2d").count();
    assert_eq!(convs, 6, "{names:?}");
    assert!(
        names.iter().any(|n| n.contains("ConvolutionBackward0")),
        "{names:?}"
    );

    let none = dir.path().join("none.json");
    let (_, stderr) = summary(&train(&[
        "--steps",
        "2",
        "--warmup",
        "2",
        "--profile",
        arg(&none),
        "--no-eval",
    ]));
    assert!(stderr.contains("nothing written to"), "{stderr}");
    assert!(!none.exists());
}

/// `--accumulate 2` says what the optimizer sees and which LR rule applies.
#[test]
fn accumulation_prints_the_effective_batch_and_the_lr_rule() {
    let (v, stderr) = summary(&train(&["--steps", "2", "--accumulate", "2", "--no-eval"]));
    assert!(
        stderr.contains("× 2 accumulated × 1 rank(s) = effective batch 32"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "unchanged by --accumulate 2: linear scaling in the effective batch would be 0.02"
        ),
        "{stderr}"
    );
    assert_eq!(
        (v["effective_batch"].as_u64(), v["accumulate"].as_u64()),
        (Some(32), Some(2))
    );
}

/// `--grad-compress bf16` trains through the compressed all-reduce and says so.
#[test]
fn gradients_can_travel_compressed() {
    let (v, _) = summary(&train(&["--steps", "3", "--grad-compress", "bf16"]));
    assert_eq!(v["grad_compress"].as_str(), Some("bf16"), "{v}");
    assert!(v["test_loss"].as_f64().is_some_and(f64::is_finite), "{v}");
}

/// A resumed run with no step left reports the restored model's accuracy, and
/// `--evaluate` evaluates a checkpoint without training or touching it.
#[test]
fn a_restored_model_is_evaluated_with_or_without_training() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck");
    let (trained, _) = summary(&train(&["--steps", "4", "--checkpoint", arg(&ckpt)]));
    let file = ckpt.join("last.safetensors");
    let before = std::fs::read(&file).unwrap();
    assert!(trained["test_accuracy"].as_f64().is_some(), "{trained}");

    let (resumed, stderr) = summary(&train(&[
        "--steps",
        "4",
        "--checkpoint",
        arg(&ckpt),
        "--resume",
    ]));
    assert_eq!(resumed["steps"], 4);
    assert_eq!(resumed["test_loss"], trained["test_loss"], "{resumed}");
    assert!(!stderr.contains("test accuracy -"), "{stderr}");

    let (evaluated, stderr) = summary(&train(&["--evaluate", "--checkpoint", arg(&ckpt)]));
    assert_eq!(evaluated["evaluate_only"], true);
    assert_eq!(evaluated["steps"], 4);
    assert_eq!(evaluated["test_loss"], trained["test_loss"], "{evaluated}");
    assert_eq!(evaluated["test_accuracy"], trained["test_accuracy"]);
    assert!(
        stderr.contains("evaluated ") && stderr.contains("on 51 test examples"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "--evaluate wrote the checkpoint"
    );

    let missing = train(&["--evaluate", "--checkpoint", arg(&dir.path().join("none"))]);
    assert!(!missing.status.success());
    let text = String::from_utf8_lossy(&missing.stderr);
    assert!(text.contains("--evaluate: no checkpoint at"), "{text}");
}

/// Resuming with another `--nproc` than the checkpoint's went on silently with a
/// different data order: it is refused, saying why and how, unless asked.
#[test]
fn resuming_with_another_rank_count_is_refused_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ck");
    summary(&train(&[
        "--steps",
        "2",
        "--no-eval",
        "--checkpoint",
        arg(&ckpt),
    ]));
    let resume = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ringside-train"))
            .args(["--nproc", "2", "--synthetic", "256", "--batch", "16"])
            .args(["--timeout", "60", "--json", "--steps", "4", "--no-eval"])
            .args(["--checkpoint", arg(&ckpt), "--resume"])
            .args(extra)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap()
    };
    let before = std::fs::read(ckpt.join("last.safetensors")).unwrap();
    let refused = resume(&[]);
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{text}");
    assert!(
        text.contains("written by a 1-rank run and this run has 2")
            && text.contains("--nproc 1")
            && text.contains("--allow-world-change"),
        "{text}"
    );
    assert_eq!(
        std::fs::read(ckpt.join("last.safetensors")).unwrap(),
        before
    );
    let (v, stderr) = summary(&resume(&["--allow-world-change"]));
    assert!(
        stderr.contains("warning: ") && stderr.contains("going on"),
        "{stderr}"
    );
    assert_eq!(v["steps"], 4);
}
