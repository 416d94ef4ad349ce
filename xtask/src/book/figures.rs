//! Each lab chapter's figures, honestly labelled: "your run" is a run of the
//! learner's exercise only; a run of the reference solution (`cargo lab N
//! --solution`, whose manifest records `RINGSIDE_LAB_SOLUTION=1` in its `env`) is
//! captioned as the reference solution's, with its date and machine.
//!
//! `book/src/figures/labNN/` holds the figures the chapter shows: the newest learner
//! run's, else the newest solution run's, else the committed reference's
//! (`book/reference/labNN/`). When there is a learner run and something to compare it
//! with (the newest solution run, else the committed reference), that one's figures
//! go to `figures/labNN/reference/` and the caption `run.md` sets the two side by side.

use crate::labs::info::Lab;
use anyhow::Result;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The manifest's record of the solution switch (as labkit reads it: `1` means the
/// solution).
const SOLUTION_ENV: &str = crate::labs::SOLUTION_ENV;

/// One complete run of a lab: `results/labNN/<time>/` with a results file and a chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Its folder.
    pub dir: PathBuf,
    /// The folder's name, a UTC stamp `YYYYMMDD-HHMMSS`.
    pub stamp: String,
    /// Whether it ran the reference solution.
    pub solution: bool,
    /// The machine, as its manifest describes it (CPU, cores, host name).
    pub machine: String,
}

impl Run {
    /// `2026-11-26 14:30 UTC`, from the stamp.
    pub fn when(&self) -> String {
        let s = &self.stamp;
        if s.len() == 15 && s.is_char_boundary(8) && s.as_bytes()[8] == b'-' {
            format!(
                "{}-{}-{} {}:{} UTC",
                &s[..4],
                &s[4..6],
                &s[6..8],
                &s[9..11],
                &s[11..13]
            )
        } else {
            s.clone()
        }
    }
}

/// The runs a chapter uses.
#[derive(Debug, Default)]
pub struct Picked {
    /// The newest run of the learner's exercise.
    pub learner: Option<Run>,
    /// The newest run of the reference solution.
    pub solution: Option<Run>,
    /// Runs whose manifest could not be read (so neither "yours" nor the solution's).
    pub unreadable: Vec<PathBuf>,
}

/// Reads the complete runs in `lab_results` (`results/labNN/`) and picks the newest
/// learner run and the newest solution run.
pub fn pick(lab_results: &Path) -> Picked {
    let mut picked = Picked::default();
    let Ok(entries) = std::fs::read_dir(lab_results) else {
        return picked;
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && p.join("results.json").is_file() && has_svg(p))
        .collect();
    // Run folders are UTC stamps (YYYYMMDD-HHMMSS): the name order is the time order.
    dirs.sort();
    for dir in dirs.into_iter().rev() {
        let Some(run) = read_run(&dir) else {
            picked.unreadable.push(dir);
            continue;
        };
        let slot = if run.solution {
            &mut picked.solution
        } else {
            &mut picked.learner
        };
        if slot.is_none() {
            *slot = Some(run);
        }
    }
    picked
}

/// Every committed reference run's caption (`book/reference/labNN/run.md`)
/// names what a reader needs to reproduce or discount it: the command that
/// regenerates it (in backticks), the CPU (vendor or model), the core count
/// and the date. Numbers that do not carry their machine read as universal.
pub fn references_carry_their_machine(root: &Path, labs: &[Lab]) -> Result<()> {
    let mut missing = Vec::new();
    for lab in labs {
        let dir = root.join("book/reference").join(lab.short());
        let gpu = dir.join("gpu/run.md");
        let captions = std::iter::once(dir.join("run.md")).chain(gpu.is_file().then_some(gpu));
        for path in captions {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lacks = caption_lacks(&text);
            if !lacks.is_empty() {
                missing.push(format!("{}: no {}", path.display(), lacks.join(", no ")));
            }
            if framed(&text) {
                missing.push(format!(
                    "{}: carries the book's own framing (it begins in italics or says \
                     \"{REFERENCE_RUN}\"), which the book adds around it (it read twice)",
                    path.display()
                ));
            }
        }
    }
    anyhow::ensure!(
        missing.is_empty(),
        "reference runs that do not say where and how they ran:\n  {}",
        missing.join("\n  ")
    );
    Ok(())
}

/// How the book introduces a committed reference run's caption (in italics).
const REFERENCE_RUN: &str = "A reference run of the solution";

/// Whether a committed caption already carries the framing the book adds.
fn framed(text: &str) -> bool {
    text.trim_start().starts_with('*') || text.contains(REFERENCE_RUN)
}

/// What a reference caption lacks of command, CPU, cores and date.
fn caption_lacks(text: &str) -> Vec<&'static str> {
    let mut lacks = Vec::new();
    let command = text.split('`').skip(1).step_by(2).any(|c| {
        ["cargo ", "mpirun ", "ringside ", "target/", "scripts/"]
            .iter()
            .any(|p| c.starts_with(p))
    });
    if !command {
        lacks.push("command in backticks");
    }
    if ![
        "Intel", "AMD", "EPYC", "Xeon", "Ryzen", "Core i", "ARM", "Graviton",
    ]
    .iter()
    .any(|v| text.contains(v))
    {
        lacks.push("CPU");
    }
    let cores = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .any(|w| {
            w.strip_suffix("-core")
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        || text.contains(" cores");
    if !cores {
        lacks.push("core count");
    }
    let date = text.as_bytes().windows(10).any(|w| {
        w.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
    });
    if !date {
        lacks.push("date (YYYY-MM-DD)");
    }
    lacks
}

/// A run's folder and manifest, or `None` when its results file is not JSON.
fn read_run(dir: &Path) -> Option<Run> {
    let text = std::fs::read_to_string(dir.join("results.json")).ok()?;
    let doc: Value = serde_json::from_str(&text).ok()?;
    let manifest = doc.get("manifest")?;
    // `lab.variant` where the run recorded it; runs from before it existed
    // say so only through the recorded environment.
    let solution = match manifest["lab"]["variant"].as_str() {
        Some(v) => v == "solution",
        None => manifest["env"][SOLUTION_ENV].as_str() == Some("1"),
    };
    let host = &manifest["host"];
    let mut machine = Vec::new();
    if let Some(cpu) = host["cpu"].as_str() {
        machine.push(cpu.to_owned());
    }
    if let Some(cores) = host["cores"].as_u64() {
        machine.push(format!("{cores} cores"));
    }
    let gpus: Vec<&str> = host["gpus"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !gpus.is_empty() {
        machine.push(gpus.join(" + "));
    }
    if let Some(name) = host["hostname"].as_str() {
        machine.push(format!("host {name}"));
    }
    Some(Run {
        stamp: dir.file_name()?.to_string_lossy().into_owned(),
        dir: dir.to_path_buf(),
        solution,
        machine: if machine.is_empty() {
            "machine not recorded".into()
        } else {
            machine.join(", ")
        },
    })
}

fn has_svg(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut it| {
        it.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "svg")))
    })
}

/// Fills `book/src/figures/labNN/` for every lab from `results` (the results root,
/// `results/` unless `RINGSIDE_RESULTS_DIR` says otherwise) and the committed
/// references, and writes each chapter's caption `run.md`. Returns one line per lab
/// saying what it used.
pub fn stage(root: &Path, results: &Path, labs: &[Lab]) -> Result<Vec<String>> {
    let mut said = Vec::new();
    for lab in labs {
        let dest = root.join("book/src/figures").join(lab.short());
        if dest.exists() {
            std::fs::remove_dir_all(&dest)?;
        }
        std::fs::create_dir_all(&dest)?;
        let reference = root.join("book/reference").join(lab.short());
        let about = std::fs::read_to_string(reference.join("run.md")).unwrap_or_default();
        let about = about.trim();
        let picked = pick(&results.join(lab.short()));
        let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
        let n = lab.number;
        let (from, mut caption) = match (&picked.learner, &picked.solution) {
            (Some(mine), _) => (
                mine.dir.clone(),
                format!(
                    "*These figures are from **your own run** of lab {n} ({}, {}, `{}`). \
                     Run `cargo lab {n}` again to redraw them, then `cargo xtask book`.*\n",
                    mine.when(),
                    mine.machine,
                    rel(&mine.dir)
                ),
            ),
            (None, Some(sol)) => (
                sol.dir.clone(),
                format!(
                    "*These figures are from **the reference solution's run** ({}, {}, `{}`), \
                     not yours. Run `cargo lab {n}` (without `--solution`), then \
                     `cargo xtask book`, to see your own here.*\n",
                    sol.when(),
                    sol.machine,
                    rel(&sol.dir)
                ),
            ),
            (None, None) => (
                reference.clone(),
                format!(
                    "*{REFERENCE_RUN}: {about} Run `cargo lab {n}`, then \
                     `cargo xtask book`, to see your own here.*\n"
                ),
            ),
        };
        let copied = copy_figures(&from, &dest)?;
        // Your run beside the one to compare it with.
        if picked.learner.is_some() {
            let (other, short, label) = match &picked.solution {
                Some(sol) => (
                    sol.dir.clone(),
                    "the reference solution's run",
                    format!(
                        "the reference solution's run ({}, {})",
                        sol.when(),
                        sol.machine
                    ),
                ),
                None => (
                    reference.clone(),
                    "the committed reference run",
                    "the committed reference run of the solution".to_owned(),
                ),
            };
            let beside = dest.join("reference");
            std::fs::create_dir_all(&beside)?;
            copy_figures(&other, &beside)?;
            caption.push_str(&side_by_side(lab, &dest, &beside, short, &label)?);
        }
        std::fs::write(dest.join("run.md"), caption)?;
        let mut line = format!("lab {n}: {copied} figure(s) from {}", rel(&from));
        // A committed GPU reference run stays beside whatever the CPU figures are:
        // most readers have no GPU to draw their own.
        let gpu = reference.join("gpu");
        if gpu.is_dir() {
            let gpu_dest = dest.join("gpu");
            std::fs::create_dir_all(&gpu_dest)?;
            let k = copy_figures(&gpu, &gpu_dest)?;
            let about = std::fs::read_to_string(gpu.join("run.md")).unwrap_or_default();
            std::fs::write(
                gpu_dest.join("run.md"),
                format!("*{REFERENCE_RUN} on a GPU: {}*\n", about.trim()),
            )?;
            line.push_str(&format!(", {k} GPU figure(s) from {}", rel(&gpu)));
        }
        if !picked.unreadable.is_empty() {
            line.push_str(&format!(
                " ({} run(s) skipped: unreadable results.json)",
                picked.unreadable.len()
            ));
        }
        said.push(line);
    }
    Ok(said)
}

/// Copies the SVG and PNG files of `from` into `to`; returns how many.
fn copy_figures(from: &Path, to: &Path) -> Result<usize> {
    let mut copied = 0;
    if from.is_dir() {
        for entry in std::fs::read_dir(from)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "svg" || e == "png") {
                if let Some(name) = path.file_name() {
                    std::fs::copy(&path, to.join(name))?;
                    copied += 1;
                }
            }
        }
    }
    Ok(copied)
}

/// A folded table, one row per chart both folders have: yours, then the other run's
/// (`short` heads its column, `label` says which run it is, with date and machine).
fn side_by_side(lab: &Lab, mine: &Path, other: &Path, short: &str, label: &str) -> Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(mine)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg") && other.join(n).is_file())
        .collect();
    if names.is_empty() {
        return Ok(String::new());
    }
    names.sort();
    let (short, label) = (escape(short), escape(label));
    // Relative to the chapter (book/src/labs/), which includes run.md.
    let at = format!("../figures/{}", lab.short());
    let mut html = format!(
        "\n<details>\n<summary>Your run beside {label}</summary>\n\n\
         <table>\n<tr><th>your run</th><th>{short}</th></tr>\n"
    );
    for n in names {
        html.push_str(&format!(
            "<tr><td><img src=\"{at}/{n}\" alt=\"{n}, your run\"></td>\
             <td><img src=\"{at}/reference/{n}\" alt=\"{n}, {short}\"></td></tr>\n"
        ));
    }
    html.push_str("</table>\n\n</details>\n");
    Ok(html)
}

/// `text` safe inside HTML text and double-quoted attributes.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labs::info;

    /// A run folder with a manifest (solution or not) and one chart.
    fn run(results: &Path, stamp: &str, solution: bool, chart: &str) {
        let dir = results.join("lab07").join(stamp);
        std::fs::create_dir_all(&dir).unwrap();
        let env = if solution {
            serde_json::json!({ SOLUTION_ENV: "1" })
        } else {
            serde_json::json!({})
        };
        let doc = serde_json::json!({
            "format": 1,
            "manifest": {
                "env": env,
                "host": { "cpu": "Test CPU", "cores": 2, "hostname": "box" },
            },
            "records": [],
        });
        std::fs::write(dir.join("results.json"), doc.to_string()).unwrap();
        std::fs::write(dir.join("throughput.svg"), chart).unwrap();
    }

    fn lab7(root: &Path) -> Vec<Lab> {
        std::fs::create_dir_all(root.join("labs")).unwrap();
        std::fs::write(
            root.join("labs/info.toml"),
            "[[lab]]\nnumber = 7\nname = \"ddp\"\ntitle = \"t\"\ngoal = \"g\"\n\
             minutes = 1\ndone = \"d\"\nhints = [\"Why?\"]\n",
        )
        .unwrap();
        let reference = root.join("book/reference/lab07");
        std::fs::create_dir_all(&reference).unwrap();
        std::fs::write(reference.join("run.md"), "on a test VM, 2026-11-23.").unwrap();
        std::fs::write(reference.join("throughput.svg"), "<svg>committed</svg>").unwrap();
        info::load(root).unwrap()
    }

    fn staged(root: &Path, file: &str) -> String {
        std::fs::read_to_string(root.join("book/src/figures/lab07").join(file)).unwrap()
    }

    #[test]
    fn a_newer_solution_run_is_never_called_yours() {
        let dir = tempfile::tempdir().unwrap();
        let (root, results) = (dir.path(), dir.path().join("results"));
        let labs = lab7(root);
        run(&results, "20261125-100000", false, "<svg>mine</svg>");
        run(&results, "20261126-143000", true, "<svg>solution</svg>");
        stage(root, &results, &labs).unwrap();
        // The chapter's figures are the learner's, though the solution ran later.
        assert_eq!(staged(root, "throughput.svg"), "<svg>mine</svg>");
        assert_eq!(
            staged(root, "reference/throughput.svg"),
            "<svg>solution</svg>"
        );
        let caption = staged(root, "run.md");
        assert!(
            caption.contains(
                "**your own run** of lab 7 (2026-11-25 10:00 UTC, Test CPU, 2 cores, host box"
            ),
            "{caption}"
        );
        assert!(
            caption.contains("beside the reference solution's run (2026-11-26 14:30 UTC, Test CPU, 2 cores, host box)"),
            "{caption}"
        );
        assert!(
            caption.contains("src=\"../figures/lab07/reference/throughput.svg\""),
            "{caption}"
        );
    }

    #[test]
    fn only_a_solution_run_is_captioned_as_the_solutions() {
        let dir = tempfile::tempdir().unwrap();
        let (root, results) = (dir.path(), dir.path().join("results"));
        let labs = lab7(root);
        run(&results, "20261126-143000", true, "<svg>solution</svg>");
        stage(root, &results, &labs).unwrap();
        assert_eq!(staged(root, "throughput.svg"), "<svg>solution</svg>");
        let caption = staged(root, "run.md");
        assert!(
            caption.contains("**the reference solution's run** (2026-11-26 14:30 UTC"),
            "{caption}"
        );
        assert!(
            !caption.to_lowercase().contains("your own run"),
            "{caption}"
        );
        assert!(!root.join("book/src/figures/lab07/reference").exists());
    }

    #[test]
    fn without_runs_the_committed_reference_stands_in_and_mine_is_set_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let (root, results) = (dir.path(), dir.path().join("results"));
        let labs = lab7(root);
        stage(root, &results, &labs).unwrap();
        assert_eq!(staged(root, "throughput.svg"), "<svg>committed</svg>");
        assert!(staged(root, "run.md").contains("A reference run of the solution: on a test VM"));
        run(&results, "20261125-100000", false, "<svg>mine</svg>");
        // A run whose results file is not JSON is neither yours nor the solution's.
        run(&results, "20261127-000000", false, "<svg>broken</svg>");
        std::fs::write(results.join("lab07/20261127-000000/results.json"), "{").unwrap();
        let said = stage(root, &results, &labs).unwrap();
        assert!(said[0].contains("1 run(s) skipped"), "{said:?}");
        assert_eq!(staged(root, "throughput.svg"), "<svg>mine</svg>");
        assert_eq!(
            staged(root, "reference/throughput.svg"),
            "<svg>committed</svg>"
        );
        assert!(
            staged(root, "run.md").contains("beside the committed reference run of the solution")
        );
    }

    /// Labs 2, 4 and 5 had GPU paths that no reader without a GPU ever saw: a
    /// committed `gpu/` reference is staged beside any CPU figures, a learner's
    /// own run included, and its caption must carry its machine like the others.
    #[test]
    fn the_gpu_reference_stays_beside_a_learners_cpu_run() {
        let dir = tempfile::tempdir().unwrap();
        let (root, results) = (dir.path(), dir.path().join("results"));
        let labs = lab7(root);
        let gpu = root.join("book/reference/lab07/gpu");
        std::fs::create_dir_all(&gpu).unwrap();
        std::fs::write(gpu.join("throughput.svg"), "<svg>gpu</svg>").unwrap();
        std::fs::write(gpu.join("run.md"), "on an H100, 2026-11-27.").unwrap();
        run(&results, "20261125-100000", false, "<svg>mine</svg>");
        let said = stage(root, &results, &labs).unwrap();
        assert!(said[0].contains("1 GPU figure(s)"), "{said:?}");
        assert_eq!(staged(root, "throughput.svg"), "<svg>mine</svg>");
        assert_eq!(staged(root, "gpu/throughput.svg"), "<svg>gpu</svg>");
        assert!(
            staged(root, "gpu/run.md").contains("on a GPU: on an H100, 2026-11-27."),
            "{}",
            staged(root, "gpu/run.md")
        );
        // Neither caption names a command, a CPU or cores: both are refused.
        let err = references_carry_their_machine(root, &labs)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("lab07/run.md") && err.contains("lab07/gpu/run.md"),
            "{err}"
        );
    }

    /// The committed GPU captions of labs 2, 4 and 5 began with the book's own
    /// "*A reference run of the solution on a GPU: " and ended in "*", so the
    /// book printed that twice and its italics broke: refused now.
    #[test]
    fn gpu_captions_said_a_reference_run_twice() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let labs = lab7(root);
        let reference = root.join("book/reference/lab07");
        let full = "`scripts/gpu-check.sh run` on an H100 beside a 16-core Intel Xeon, 2026-11-27";
        std::fs::create_dir_all(reference.join("gpu")).unwrap();
        std::fs::write(
            reference.join("run.md"),
            "`cargo lab 7 --solution` on a 2-core AMD EPYC, 2026-11-29",
        )
        .unwrap();
        std::fs::write(reference.join("gpu/run.md"), full).unwrap();
        references_carry_their_machine(root, &labs).unwrap();
        std::fs::write(
            reference.join("gpu/run.md"),
            format!("*A reference run of the solution on a GPU: {full}*"),
        )
        .unwrap();
        let err = references_carry_their_machine(root, &labs)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("lab07/gpu/run.md") && err.contains("read twice"),
            "{err}"
        );
        assert!(!err.contains("lab07/run.md:"), "{err}");
    }

    #[test]
    fn a_run_names_its_gpus_and_whose_code_ran() {
        let dir = tempfile::tempdir().unwrap();
        run(dir.path(), "20261127-010000", true, "<svg/>");
        let path = dir.path().join("lab07/20261127-010000/results.json");
        let mut doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        doc["manifest"]["host"]["gpus"] = serde_json::json!(["NVIDIA H100 80GB HBM3"]);
        std::fs::write(&path, doc.to_string()).unwrap();
        let r = read_run(path.parent().unwrap()).unwrap();
        assert_eq!(
            r.machine,
            "Test CPU, 2 cores, NVIDIA H100 80GB HBM3, host box"
        );
        assert!(r.solution, "the recorded environment says so");
        // The manifest's own word wins over the environment it recorded.
        doc["manifest"]["lab"] = serde_json::json!({ "number": 7, "variant": "exercise" });
        std::fs::write(&path, doc.to_string()).unwrap();
        assert!(!read_run(path.parent().unwrap()).unwrap().solution);
    }

    /// The README's benchmark table said "on the 2-core development VM" and
    /// no run reproduced it: a caption without its machine fails.
    #[test]
    fn readme_figures_named_no_cpu_date_or_command() {
        let full = "`cargo lab 5 --solution`, on an idle 2-core Intel Xeon VM, 2026-11-23: ...";
        assert!(caption_lacks(full).is_empty(), "{:?}", caption_lacks(full));
        assert_eq!(
            caption_lacks("on the 2-core development VM: 25.5 GB/s"),
            vec!["command in backticks", "CPU", "date (YYYY-MM-DD)"]
        );
        assert_eq!(
            caption_lacks("`cargo lab 1` on an AMD EPYC, 2026-11-23"),
            vec!["core count"]
        );
        // The GPU references come from the repo's GPU check script.
        let gpu = "`scripts/gpu-check.sh run` on an H100 beside a 16-core Intel Xeon, 2026-11-27";
        assert!(caption_lacks(gpu).is_empty(), "{:?}", caption_lacks(gpu));
    }
}
