//! The lab's program as a learner runs it. As root (CI), its quick run puts two
//! ranks in two network namespaces; elsewhere that part says why it skipped.

use labhosts::Hosts;
use labkit::testing::{quick_run, starter_fails};

const LAB: &str = env!("CARGO_BIN_EXE_lab08-many-nodes");

/// The solution's quick run: two launchers resolve their ranks, the one-host
/// baseline and (as root) two namespaced nodes measure all_reduce and a DDP
/// step, the drill's survivors report the lost rank, and the charts are drawn.
#[test]
fn quick_run_with_the_solution_launches_measures_and_drills() {
    let run = quick_run(LAB, 8, &[]);
    let out = &run.stdout;
    for launcher in ["[ringside] rank 1/2", "[slurm] rank 1/2"] {
        assert!(out.contains(launcher), "{out}");
    }
    assert_eq!(out.matches("all_reduce ok").count(), 4, "{out}");
    let labels = run.labels();
    assert!(labels.contains("reference-tcp@1host-2ranks"), "{labels:?}");
    match Hosts::available() {
        Ok(()) => {
            assert!(
                labels.contains("reference-tcp@2nodes-unshaped"),
                "{labels:?}"
            );
            assert!(labels.contains("reference-tcp@2nodes-1gbit"), "{labels:?}");
            assert!(out.contains("2 nodes at 1 Gbit/s, ring"), "{out}");
            run.assert_figures(&["ring-vs-tree", "ddp-step"]);
        }
        Err(why) => {
            println!("simulated hosts skipped: {why}");
            assert!(out.contains("simulated hosts skipped"), "{out}");
            run.assert_figures(&["ddp-step"]);
        }
    }
    // The drill: the launcher names rank 1, and both survivors find out.
    assert!(out.contains("ringside launch names rank 1"), "{out}");
    for r in [0, 2] {
        assert!(
            out.contains(&format!("rank {r}: exit 1")) && out.contains("lost rank 1"),
            "{out}"
        );
    }
    // The lab has exited: no namespace of a process that is gone is left.
    if let Ok(ns) = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
    {
        for name in String::from_utf8_lossy(&ns.stdout).split_whitespace() {
            if let Some(rest) = name.strip_prefix("rsd") {
                let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
                assert!(
                    pid.is_empty() || std::path::Path::new(&format!("/proc/{pid}")).exists(),
                    "{name} was left behind"
                );
            }
        }
    }
}

/// The lab system's promise: the unsolved starter fails fast with an error
/// naming the TODO, never a hang.
#[test]
fn the_unsolved_starter_fails_fast_naming_the_todo() {
    starter_fails(LAB, 8, "rank_env", &[]);
}
