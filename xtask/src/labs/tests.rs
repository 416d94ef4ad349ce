//! Tests of `cargo lab`'s building, checking and hinting.

use super::*;

#[test]
fn executables_are_read_from_cargos_json_messages() {
    let lines = [
        r#"{"reason":"compiler-artifact","manifest_path":"/w/labs/01-a/Cargo.toml","target":{"name":"check"},"executable":"/w/target/debug/deps/check-1","fresh":true}"#,
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
            fresh: true,
        }]
    );
}

/// A scratch workspace of labs without dependencies, one per `(number, name,
/// exercise body)`. Each lab's `answer()` is the exercise's, or 42 with the
/// solution switch; its check wants 42 and names its TODO otherwise; its program
/// writes a results file and two charts where the gate's quick run says.
fn scratch_workspace(labs: &[(u32, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let write = |rel: &str, text: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    let members: Vec<String> = labs
        .iter()
        .map(|(n, name, _)| format!("\"labs/{n:02}-{name}\""))
        .collect();
    write(
        "Cargo.toml",
        &format!(
            "[workspace]\nmembers = [{}]\nresolver = \"2\"\n",
            members.join(", ")
        ),
    );
    let mut info = String::new();
    for (n, name, body) in labs {
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
    write("labs/info.toml", &info);
    dir
}

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
    check(root, fine).unwrap();
    assert!(first_build_note(root, fine).is_none());
    // The run after the check compiles nothing: the same artefacts.
    let again = build_lab(root, fine).unwrap();
    assert!(!again.is_empty());
    assert!(again.iter().all(|a| a.fresh), "{again:?}");
    find_artifact(&again, root, fine, &fine.package()).unwrap();
    // Lab 1's own check does fail to build.
    let e = build_lab(root, broken).unwrap_err().to_string();
    assert!(e.contains("-p lab01-broken"), "{e}");
}

#[test]
fn list_columns_line_up_whatever_the_title_length() {
    let row = |n: &str, title: &str, min: &str, gpu: &str, status: &str| {
        [n, title, min, gpu, status].map(String::from)
    };
    let out = table(&[
        row("1", "A first all-reduce", "20", "", "not started"),
        row(
            "5",
            "Model parallelism: a naive split, then GPipe (p−1)",
            "35",
            "yes",
            "passes",
        ),
        row("14", "Tensor parallel", "5", "", "fails its check"),
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4);
    // The status column starts at the same character on every line.
    let at = |l: &str, word: &str| l.find(word).map(|b| l[..b].chars().count());
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
    hint_for_failure(lab, &mut progress, failed).unwrap();
    let once = Progress::load(root).get(&lab.short());
    assert_eq!(once.hints_shown, 1);
    let mut progress = Progress::load(root);
    hint_for_failure(lab, &mut progress, &failed.replace("0.01s", "0.02s")).unwrap();
    assert_eq!(Progress::load(root).get(&lab.short()), once);
    // A different failure is a new place to be stuck: the next step.
    let mut progress = Progress::load(root);
    hint_for_failure(lab, &mut progress, "rank 1 disagrees with rank 0\n").unwrap();
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
