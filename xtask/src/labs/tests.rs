//! Tests of `cargo lab`'s building, checking and hinting.

use super::*;

#[test]
fn executables_are_read_from_cargos_json_messages() {
    let lines = [
        r#"{"reason":"compiler-artifact","manifest_path":"/w/labs/01-a/Cargo.toml","target":{"name":"check","kind":["test"]},"profile":{"test":true},"executable":"/w/target/debug/deps/check-1","fresh":true}"#,
        r#"{"reason":"compiler-artifact","manifest_path":"/w/labs/kit/Cargo.toml","target":{"name":"labkit"},"executable":null}"#,
        r#"{"reason":"build-finished","success":true}"#,
        "not json",
    ]
    .join("\n");
    let got = artifacts(&lines);
    assert_eq!(
        got,
        [Artifact {
            dir: PathBuf::from("/w/labs/01-a"),
            target: "check".into(),
            executable: PathBuf::from("/w/target/debug/deps/check-1"),
            program: false,
            fresh: true,
        }]
    );
}

/// The gate builds the test step's targets (a second unit set filled a CI
/// disk), so a lab's program and its binary's unit tests arrive under the same
/// target name: the program is the one that is no
/// test harness (running the harness as the quick run draws nothing).
#[test]
fn the_gate_builds_the_test_steps_units_and_tells_the_program_from_its_unit_tests() {
    // `cargo test` with no target flags builds lib, bins, examples and tests;
    // the gate names those, with every test by glob so that the checks, which
    // `test = false` keeps out of a plain `cargo test`, come too.
    let args = build_args(Scope::Workspace, false);
    let step = crate::steps::CARGO_TEST;
    let step: Vec<String> = step.iter().map(|a| a.to_string()).collect();
    assert_eq!(args[..step.len()], step[..]);
    for flag in ["--no-run", "--lib", "--bins", "--examples"] {
        assert!(
            args.iter().any(|a| a == flag),
            "{flag} missing from {args:?}"
        );
    }
    assert!(args.windows(2).any(|w| w == ["--test", "*"]));
    assert!(
        !args.iter().any(|a| a == "--tests"),
        "--tests drops test = false targets"
    );
    assert!(!args.iter().any(|a| a == "--release"));

    let dir = scratch_workspace(&[(1, "first", SOLVED)]);
    let root = dir.path();
    let lab = &info::load(root).unwrap()[0];
    let harness = Artifact {
        dir: lab.dir(root),
        target: lab.package(),
        executable: PathBuf::from("/t/unit-tests"),
        program: false,
        fresh: true,
    };
    let program = Artifact {
        executable: PathBuf::from("/t/program"),
        program: true,
        ..harness.clone()
    };
    let built = [harness, program];
    assert_eq!(
        find_artifact(&built, root, lab, &lab.package()).unwrap(),
        PathBuf::from("/t/program")
    );
    assert!(find_artifact(&built, root, lab, "check").is_err());
}

/// A scratch workspace of labs without dependencies, one per `(number, name,
/// exercise body)`. Each lab's `answer()` is the exercise's, or 42 with the
/// solution switch; its check wants 42 and names its TODO otherwise; its program
/// writes a results file and two charts where the gate's quick run says.
fn scratch_workspace(labs: &[(u32, &str, &str)]) -> tempfile::TempDir {
    let with: Vec<_> = labs
        .iter()
        .map(|&(n, name, body)| (n, name, body, None))
        .collect();
    scratch_workspace_with_stretch(&with)
}

/// [`scratch_workspace`], where a lab may have a stretch goal: its
/// `src/stretch.rs` (the given body), a `[lab.stretch]`, and a check
/// `tests/stretch.rs` that includes the file by path (as the real labs do, so
/// the main check never compiles it), wants `stretch_answer()` to be 7 and
/// names `TODO(lab NN stretch)` otherwise.
fn scratch_workspace_with_stretch(labs: &[(u32, &str, &str, Option<&str>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let write = |rel: &str, text: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    let members: Vec<String> = labs
        .iter()
        .map(|(n, name, _, _)| format!("\"labs/{n:02}-{name}\""))
        .collect();
    write(
        "Cargo.toml",
        &format!(
            "[workspace]\nmembers = [{}]\nresolver = \"2\"\n",
            members.join(", ")
        ),
    );
    let mut info = String::new();
    for (n, name, body, _) in labs {
        info += &format!(
            "[[lab]]\nnumber = {n}\nname = \"{name}\"\ntitle = \"t\"\ngoal = \"g\"\n\
             minutes = 1\ndone = \"d\"\nhints = [\"Why?\", \"How?\", \"Which call?\"]\n\n"
        );
        let dir = format!("labs/{n:02}-{name}");
        let krate = format!("lab{n:02}_{name}");
        write(
            &format!("{dir}/Cargo.toml"),
            &format!(
                "[package]\nname = \"lab{n:02}-{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
                 [[test]]\nname = \"check\"\ntest = false\n"
            ),
        );
        write(
            &format!("{dir}/src/lib.rs"),
            &format!(
                "pub mod exercise;\npub fn answer() -> u32 {{\n    \
                 if std::env::var(\"{SOLUTION_ENV}\").as_deref() == Ok(\"1\") {{ 42 }} \
                 else {{ exercise::answer() }}\n}}\n"
            ),
        );
        write(&format!("{dir}/src/exercise.rs"), &format!("{body}\n"));
        write(
            &format!("{dir}/src/main.rs"),
            &format!(
                "fn main() {{\n    assert_eq!({krate}::answer(), 42);\n    \
                 let dir = std::path::PathBuf::from(std::env::var_os(\"{}\").unwrap());\n    \
                 for f in [\"results.json\", \"chart.svg\", \"chart.png\"] {{\n        \
                 std::fs::write(dir.join(f), \"x\").unwrap();\n    }}\n}}\n",
                measure::RESULTS_DIR_ENV
            ),
        );
        write(
            &format!("{dir}/tests/check.rs"),
            &format!(
                "#[test]\nfn answers() {{ assert_eq!({krate}::answer(), 42, \
                 \"TODO(lab {n:02}): answer is not written yet\"); }}\n"
            ),
        );
    }
    for (n, name, _, stretch) in labs {
        let Some(body) = stretch else { continue };
        // `[lab.stretch]` belongs to the `[[lab]]` just above it.
        let at = info
            .find(&format!("number = {}\n", n))
            .and_then(|i| info[i..].find("\n\n").map(|j| i + j + 1))
            .unwrap();
        info.insert_str(
            at,
            "\n[lab.stretch]\ntitle = \"seven\"\nask = \"answer 7\"\n\
             hints = [\"Seven?\", \"Which seven?\"]\n\n\
             [[lab.stretch.diagnosis]]\nkey = \"six-not-seven\"\nhint = \"One more?\"\n",
        );
        let dir = format!("labs/{n:02}-{name}");
        write(&format!("{dir}/src/stretch.rs"), &format!("{body}\n"));
        write(
            &format!("{dir}/tests/stretch.rs"),
            &format!(
                "#[path = \"../src/stretch.rs\"]\nmod stretch;\n\
                 #[test]\nfn sevens() {{\n    \
                 let got = if std::env::var(\"{SOLUTION_ENV}\").as_deref() == Ok(\"1\") {{ 7 }} \
                 else {{ stretch::stretch_answer() }};\n    \
                 if got == 6 {{ panic!(\"six\\nhint: six-not-seven\"); }}\n    \
                 assert_eq!(got, 7, \"TODO(lab {n:02} stretch): not written yet\");\n}}\n"
            ),
        );
        let manifest = root.join(format!("{dir}/Cargo.toml"));
        let mut m = std::fs::read_to_string(&manifest).unwrap();
        m += "\n[[test]]\nname = \"stretch\"\ntest = false\n";
        std::fs::write(manifest, m).unwrap();
    }
    write("labs/info.toml", &info);
    dir
}

const STRETCH_STARTER: &str = "pub fn stretch_answer() -> u32 { 0 }";
const STRETCH_SIX: &str = "pub fn stretch_answer() -> u32 { 6 }";
const STRETCH_SOLVED: &str = "pub fn stretch_answer() -> u32 { 7 }";

const DOES_NOT_COMPILE: &str = "pub fn answer() -> u32 { \"not a number\" }";
const STARTER: &str = "pub fn answer() -> u32 { 0 }";
const SOLVED: &str = "pub fn answer() -> u32 { 42 }";

#[test]
fn a_lab_that_does_not_compile_blocks_no_other_labs_check() {
    let dir = scratch_workspace(&[(1, "broken", DOES_NOT_COMPILE), (2, "fine", SOLVED)]);
    let root = dir.path();
    let labs = info::load(root).unwrap();
    let (broken, fine) = (&labs[0], &labs[1]);
    assert!(first_build_note(root, fine).is_some());
    // Lab 2 builds and passes although lab 1 does not compile.
    check(root, fine, Part::Main).unwrap();
    assert!(first_build_note(root, fine).is_none());
    // The run after the check compiles nothing: the same artefacts.
    let again = build_lab(root, fine, Part::Main).unwrap();
    assert!(!again.is_empty());
    assert!(again.iter().all(|a| a.fresh), "{again:?}");
    find_artifact(&again, root, fine, &fine.package()).unwrap();
    // Lab 1's own check does fail to build.
    let e = build_lab(root, broken, Part::Main).unwrap_err().to_string();
    assert!(e.contains("-p lab01-broken"), "{e}");
}

#[test]
fn list_columns_line_up_whatever_the_title_length() {
    let row = |n: &str, title: &str, min: &str, gpu: &str, status: &str, stretch: &str| {
        [n, title, min, gpu, status, stretch].map(String::from)
    };
    let at = |l: &str, word: &str| l.find(word).map(|b| l[..b].chars().count());
    let out = table(&[
        row(
            "1",
            "A first all-reduce",
            "20",
            "",
            "not started",
            "not started",
        ),
        row(
            "5",
            "Model parallelism: a naive split, then GPipe (p−1)",
            "35",
            "yes",
            "passes",
            "",
        ),
        row(
            "14",
            "Tensor parallel",
            "5",
            "",
            "fails its check",
            "passes",
        ),
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4);
    // The stretch column lines up too; a lab without a stretch ends its line early.
    let stretch_at = [
        at(lines[0], "stretch"),
        lines[1]
            .rfind("not started")
            .map(|b| lines[1][..b].chars().count()),
        lines[3]
            .rfind("passes")
            .map(|b| lines[3][..b].chars().count()),
    ];
    assert!(
        stretch_at
            .iter()
            .all(|s| s.is_some() && *s == stretch_at[0]),
        "{out}"
    );
    assert!(lines[2].ends_with("passes"), "{out}");
    // The status column starts at the same character on every line.
    let starts = [
        at(lines[0], "status"),
        at(lines[1], "not started"),
        at(lines[2], "passes"),
        at(lines[3], "fails"),
    ];
    assert!(
        starts.iter().all(|s| s.is_some() && *s == starts[0]),
        "{out}"
    );
    // Minutes are right-aligned under their header.
    assert_eq!(
        at(lines[0], "min").map(|s| s + 3),
        at(lines[3], " 5").map(|s| s + 2),
        "{out}"
    );
}

#[test]
fn the_same_failure_checked_twice_spends_one_step_of_the_ladder() {
    let dir = scratch_workspace(&[(1, "todo", STARTER)]);
    let root = dir.path();
    let labs = info::load(root).unwrap();
    let lab = &labs[0];
    let failed = "---- answers stdout ----\nexercise: TODO(lab 01) answer\nfinished in 0.01s\n";
    let mut progress = Progress::load(root);
    hint_for_failure(lab, Part::Main, &mut progress, failed).unwrap();
    let once = Progress::load(root).get(&lab.short());
    assert_eq!(once.hints_shown, 1);
    let mut progress = Progress::load(root);
    hint_for_failure(
        lab,
        Part::Main,
        &mut progress,
        &failed.replace("0.01s", "0.02s"),
    )
    .unwrap();
    assert_eq!(Progress::load(root).get(&lab.short()), once);
    // A different failure is a new place to be stuck: the next step.
    let mut progress = Progress::load(root);
    hint_for_failure(
        lab,
        Part::Main,
        &mut progress,
        "rank 1 disagrees with rank 0\n",
    )
    .unwrap();
    assert_eq!(Progress::load(root).get(&lab.short()).hints_shown, 2);
}

#[test]
fn the_gate_builds_every_lab_in_one_call_and_judges_starter_solution_and_quick_run() {
    let dir = scratch_workspace(&[(1, "first", STARTER), (2, "second", STARTER)]);
    gate(dir.path()).unwrap();
    // A starter that already passes is caught.
    let dir = scratch_workspace(&[(1, "first", STARTER), (2, "second", SOLVED)]);
    let e = gate(dir.path()).unwrap_err().to_string();
    assert!(e.contains("lab 2: the starter passes its check"), "{e}");
    assert!(!e.contains("lab 1"), "{e}");
}

#[test]
fn the_gate_judges_a_stretch_goal_as_it_judges_the_main_exercise() {
    let dir = scratch_workspace_with_stretch(&[
        (1, "first", STARTER, Some(STRETCH_STARTER)),
        (2, "second", STARTER, None),
    ]);
    gate(dir.path()).unwrap();
    // A stretch starter that already passes is caught, and named as the stretch's.
    let dir = scratch_workspace_with_stretch(&[(1, "first", STARTER, Some(STRETCH_SOLVED))]);
    let e = gate(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("lab 1's stretch goal: the starter passes its check"),
        "{e}"
    );
    assert!(!e.contains("lab 1: the starter"), "{e}");
    // A stretch starter failing without naming its own marker is caught.
    let dir = scratch_workspace_with_stretch(&[(1, "first", STARTER, Some(STRETCH_SIX))]);
    let e = gate(dir.path()).unwrap_err().to_string();
    assert!(e.contains("without naming TODO(lab 01 stretch)"), "{e}");
}

/// The main check must not depend on the stretch: a learner who never touches
/// it, or whose half-written stretch does not compile, still passes the main
/// check; the stretch's check is its own, with its own hints and progress.
#[test]
fn a_stretch_that_does_not_compile_blocks_neither_the_main_check_nor_the_run() {
    let dir = scratch_workspace_with_stretch(&[(1, "first", SOLVED, Some(DOES_NOT_COMPILE))]);
    let root = dir.path();
    let labs = info::load(root).unwrap();
    let lab = &labs[0];
    check(root, lab, Part::Main).unwrap();
    let built = build_lab(root, lab, Part::Main).unwrap();
    find_artifact(&built, root, lab, &lab.package()).unwrap();
    assert!(check(root, lab, Part::Stretch).is_err());
    // Fixed, the stretch passes its own check; its progress is its own.
    std::fs::write(lab.file(root, Part::Stretch), STRETCH_SOLVED).unwrap();
    check(root, lab, Part::Stretch).unwrap();
    let progress = Progress::load(root);
    assert!(progress.get("lab01-stretch").last_check.unwrap().passed);
    assert!(progress.get("lab01").last_check.unwrap().passed);
    check_solution(root, lab, Part::Stretch).unwrap();
}

#[test]
fn a_stretch_failure_shows_the_stretch_hint_and_spends_only_the_stretch_ladder() {
    let dir = scratch_workspace_with_stretch(&[(1, "first", STARTER, Some(STRETCH_SIX))]);
    let root = dir.path();
    let labs = info::load(root).unwrap();
    let lab = &labs[0];
    let mut progress = Progress::load(root);
    hint_for_failure(lab, Part::Stretch, &mut progress, "TODO(lab 01 stretch)\n").unwrap();
    let p = Progress::load(root);
    assert_eq!(p.get("lab01-stretch").hints_shown, 1);
    assert_eq!(p.get("lab01").hints_shown, 0);
    let (ladder, keyed) = lab.hints_of(Part::Stretch).unwrap();
    let f = hints::Failure::read("six\nhint: six-not-seven\n");
    let (shown, _) = hints::choose(ladder, keyed, &f, 1, None);
    assert_eq!(
        shown,
        hints::Shown::Keyed {
            key: "six-not-seven",
            hint: "One more?"
        }
    );
    hint(root, lab, Part::Stretch).unwrap();
    assert_eq!(Progress::load(root).get("lab01-stretch").hints_shown, 2);
}

#[test]
fn asking_for_the_stretch_of_a_lab_without_one_says_so() {
    let dir = scratch_workspace(&[(3, "plain", STARTER)]);
    let root = dir.path();
    let labs = info::load(root).unwrap();
    let lab = &labs[0];
    for e in [
        hint(root, lab, Part::Stretch).unwrap_err(),
        reset(root, lab, Part::Stretch, true).unwrap_err(),
        run(root, clap_args(&["lab", "check", "3", "--stretch"])).unwrap_err(),
    ] {
        assert_eq!(e.to_string(), "lab 3 has no stretch goal");
    }
    // Nothing was built or remembered for it.
    assert_eq!(
        Progress::load(root).get("lab03-stretch"),
        Default::default()
    );
}

/// `cargo lab ...` parsed as the alias would.
fn clap_args(argv: &[&str]) -> LabArgs {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        lab: LabArgs,
    }
    use clap::Parser as _;
    Cli::try_parse_from(argv).unwrap().lab
}

#[test]
fn stretch_is_a_flag_of_check_hint_and_reset() {
    let a = clap_args(&["lab", "check", "6", "--stretch", "--solution"]);
    assert!(matches!(
        a.command,
        Some(LabCommand::Check {
            number: 6,
            solution: true,
            stretch: true
        })
    ));
    let a = clap_args(&["lab", "hint", "6", "--stretch"]);
    assert!(matches!(
        a.command,
        Some(LabCommand::Hint {
            number: 6,
            stretch: true
        })
    ));
    let a = clap_args(&["lab", "check", "6"]);
    assert!(matches!(
        a.command,
        Some(LabCommand::Check { stretch: false, .. })
    ));
}

/// Lab 6 printed nothing for two minutes: a lab's run and check get a 30 s
/// timeout and a 5 s notice, unless the learner chose their own.
#[test]
fn labs_run_with_a_short_timeout_unless_the_learner_set_one() {
    let envs = |check: bool, set: &dyn Fn(&str) -> bool| {
        let mut cmd = Command::new("true");
        lab_env(&mut cmd, check, set);
        cmd.get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect::<Vec<_>>()
    };
    let none = envs(false, &|_| false);
    assert!(none.contains(&("RINGSIDE_TIMEOUT".into(), Some("30".into()))));
    assert!(none.contains(&("RINGSIDE_NOTICE".into(), Some("4".into()))));
    assert!(none.contains(&("RINGSIDE_IDLE_LIMIT".into(), Some("4".into()))));
    // The store-based desync check is for checks only: it would skew a run's figures.
    assert!(none.iter().all(|(k, _)| k != "RINGSIDE_DEBUG_COLLECTIVES"));
    let check = envs(true, &|_| false);
    assert!(check.contains(&("RINGSIDE_DEBUG_COLLECTIVES".into(), Some("1".into()))));
    let learner = envs(false, &|k| k == "RINGSIDE_TIMEOUT");
    assert!(learner.iter().all(|(k, _)| k != "RINGSIDE_TIMEOUT"));
    assert!(learner.contains(&("RINGSIDE_NOTICE".into(), Some("4".into()))));
}

/// After `kill -9` of lab 8 its namespaces, bridge and veths stayed until the
/// next run: `cargo lab 8 --cleanup` removes them (and needs a lab number).
#[test]
fn cleanup_is_a_flag_of_a_numbered_lab() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        lab: LabArgs,
    }
    use clap::Parser as _;
    let a = Cli::try_parse_from(["lab", "8", "--cleanup"]).unwrap().lab;
    assert!(a.cleanup && a.number == Some(8) && !a.solution);
    assert!(Cli::try_parse_from(["lab", "--cleanup"]).is_err());
    assert!(Cli::try_parse_from(["lab", "8", "--cleanup", "--solution"]).is_err());
}
