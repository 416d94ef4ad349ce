use super::*;

fn outcome(rank: usize, exit: Exit) -> RankOutcome {
    RankOutcome {
        rank,
        local_rank: rank,
        pid: 4242,
        exit,
        stopped: None,
        stderr_tail: vec!["boom".into()],
    }
}

#[test]
fn exit_descriptions() {
    assert_eq!(
        outcome(1, Exit::Signal(9)).describe(),
        "rank 1 (pid 4242) was killed by signal 9 (SIGKILL)"
    );
    assert_eq!(
        outcome(2, Exit::Code(3)).describe(),
        "rank 2 (pid 4242) exited with code 3"
    );
    assert_eq!(signal_name(64), "signal 64");
}

#[test]
fn report_exit_codes() {
    let ok = LaunchReport {
        ranks: vec![outcome(0, Exit::Code(0)), outcome(1, Exit::Code(0))],
        failed: None,
        interrupted: None,
    };
    assert_eq!(ok.exit_code(), 0);
    assert!(ok.to_string().contains("all 2 ranks exited successfully"));

    let mut killed = ok.clone();
    killed.ranks[1].exit = Exit::Signal(libc::SIGKILL);
    killed.failed = Some(1);
    assert_eq!(killed.exit_code(), 137);
    let text = killed.to_string();
    assert!(
        text.contains("SIGKILL") && text.contains("  | boom"),
        "{text}"
    );

    let mut code = ok.clone();
    code.ranks[0].exit = Exit::Code(3);
    code.failed = Some(0);
    assert_eq!(code.exit_code(), 3);

    let mut int = ok.clone();
    int.interrupted = Some(libc::SIGINT);
    assert_eq!(int.exit_code(), 130);
}

#[test]
fn bad_specs_are_refused_before_starting_anything() {
    let mut s = LaunchSpec::new("true", Vec::<OsString>::new(), 0);
    assert!(spawn(&s).unwrap_err().to_string().contains("at least 1"));
    s.nproc_per_node = 1;
    s.nnodes = 2;
    s.node_rank = 2;
    assert!(spawn(&s).unwrap_err().to_string().contains("out of range"));
    s.node_rank = 1;
    let e = spawn(&s).unwrap_err().to_string();
    assert!(e.contains("same job token"), "{e}");
}

#[test]
fn missing_program_is_an_error_not_a_report() {
    let s = LaunchSpec::new("/nonexistent/ringside-test-program", ["x"], 2);
    let e = spawn(&s).unwrap_err().to_string();
    assert!(e.contains("cannot start rank 0"), "{e}");
}

#[test]
fn ranks_get_the_environment_and_results_come_back() {
    let s = LaunchSpec::new(
        "sh",
        [
            "-c",
            "test \"$WORLD_SIZE\" = 2 && test -n \"$RINGSIDE_JOB_TOKEN\" \
             && echo \"hello from $RANK\" >&2 \
             && if [ \"$RANK\" = 1 ]; then sleep 0.3; exit 4; fi",
        ],
        2,
    );
    let r = spawn(&s).unwrap();
    assert_eq!(r.ranks[0].exit, Exit::Code(0));
    assert_eq!(r.ranks[0].stderr_tail, vec!["hello from 0".to_string()]);
    assert_eq!(r.exit_code(), 4);
    assert_eq!(r.failure().map(|f| f.rank), Some(1));
}

/// With `RUST_BACKTRACE=1` set (common, and on our machines), a failed rank's last
/// 20 stderr lines were only backtrace frames: the error itself was cut off.
#[test]
fn a_backtrace_stays_out_of_the_stderr_tail() {
    let mut f = BacktraceFilter::default();
    let mut lines = vec!["Error: rank 1 stopped responding".to_string(), "".into()];
    lines.push("Stack backtrace:".into());
    for i in 0..30 {
        lines.push(format!("  {i}: core::frame_{i}"));
        lines.push("             at ./src/x.rs:1:1".into());
    }
    lines.push("note: Some details are omitted, run with `RUST_BACKTRACE=full`".into());
    lines.push("after".into());
    let kept: Vec<String> = lines.into_iter().filter_map(|l| f.keep(l)).collect();
    assert_eq!(
        kept,
        [
            "Error: rank 1 stopped responding",
            "",
            "(backtrace omitted; the rank's full stderr is above)",
            "after"
        ]
    );
}

/// With rank 1 frozen (SIGSTOP), rank 0 timed out "waiting for rank 1" and exited
/// first, and the report named rank 0 as the failed rank: it now says rank 1
/// stopped responding.
#[test]
fn the_report_names_the_rank_the_failed_one_waited_for() {
    let outcome = |rank: usize, code: i32, stopped: Option<Stopped>, tail: &[&str]| RankOutcome {
        rank,
        local_rank: rank,
        pid: 100 + rank as u32,
        exit: if stopped.is_some() {
            Exit::Signal(15)
        } else {
            Exit::Code(code)
        },
        stopped,
        stderr_tail: tail.iter().map(|s| s.to_string()).collect(),
    };
    let timeout = "Error: timed out after 10s waiting for rank 1 to send all_reduce step 3 \
                   (0 of 4096 bytes received)";
    let report = LaunchReport {
        ranks: vec![
            outcome(0, 1, None, &[timeout]),
            outcome(1, 0, Some(Stopped::Killed), &[]),
            outcome(2, 0, Some(Stopped::Terminated), &[]),
        ],
        failed: Some(0),
        interrupted: None,
    };
    let (culprit, line) = report.blamed().unwrap();
    assert_eq!((culprit.rank, line), (1, timeout));
    let text = report.to_string();
    assert!(
        text.starts_with("rank 1 stopped responding: rank 0 gave up"),
        "{text}"
    );
    assert_eq!(
        report.exit_code(),
        1,
        "the exit code stays the failed rank's"
    );

    // A rank that blames one that had exited on its own blames nobody new.
    let mut r = report.clone();
    r.ranks[1].stopped = None;
    r.ranks[1].exit = Exit::Code(3);
    assert!(r.blamed().is_none());
    // "lost rank N" blames too; its own number never does.
    let mut r = report.clone();
    r.ranks[0].stderr_tail = vec!["Error: lost rank 2: connection reset".into()];
    assert_eq!(r.blamed().unwrap().0.rank, 2);
    r.ranks[0].stderr_tail = vec!["Error: waiting for rank 0".into()];
    assert!(r.blamed().is_none());
}

/// A hung job read as one rank's timeout; the table shows every rank's wait.
#[test]
fn a_hung_job_reports_every_ranks_wait_in_one_table() {
    let row = |r: usize, from: usize| {
        format!(
            "[rank {r}] ringside flight | rank {r} | last completed none | \
             in all_reduce#1 (4 × float, sum) | waits to receive from rank {from} (30.0 s)"
        )
    };
    let mut r0 = outcome(0, Exit::Code(1));
    r0.stderr_tail = vec!["error: timed out".into(), row(0, 1)];
    let mut r1 = outcome(1, Exit::Signal(libc::SIGTERM));
    r1.stopped = Some(Stopped::Terminated);
    r1.stderr_tail = vec![row(1, 0)];
    let mut r2 = outcome(2, Exit::Signal(libc::SIGTERM));
    r2.stopped = Some(Stopped::Terminated);
    let report = LaunchReport {
        ranks: vec![r0, r1, r2],
        failed: Some(0),
        interrupted: None,
    };
    let text = report.to_string();
    assert!(text.contains("where every rank was"), "{text}");
    let line = |r: usize| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{r} ")))
            .unwrap_or_else(|| panic!("no row for rank {r}: {text}"))
            .to_owned()
    };
    assert!(line(0).contains("waits to receive from rank 1"), "{text}");
    assert!(line(1).contains("waits to receive from rank 0"), "{text}");
    assert!(line(2).contains("still running when stopped"), "{text}");
    // No flight lines, no table.
    let plain = LaunchReport {
        ranks: vec![outcome(0, Exit::Code(1))],
        failed: Some(0),
        interrupted: None,
    };
    assert!(!plain.to_string().contains("where every rank was"));
}

/// `--nproc 1000` on a small machine failed after 84 s with a bare exit code:
/// a launch the machine cannot host is refused before any rank starts.
#[test]
fn a_launch_this_machine_cannot_host_is_refused_before_starting_anything() {
    let t0 = Instant::now();
    let s = LaunchSpec::new("true", Vec::<OsString>::new(), 10_000_000);
    let e = spawn(&s).unwrap_err().to_string();
    assert!(e.contains("cannot host 10000000 ranks"), "{e}");
    assert!(e.contains("memory: at least"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}
