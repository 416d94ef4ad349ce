//! Lab 9: which backend? The program measures Gloo, MPI and the reference
//! backend (over shared memory and over TCP; NCCL on CUDA tensors where a GPU
//! is) on the same job: every collective over a size sweep, and DDP training.
//! From those measurements it derives a decision table ([`decide`]) and prints
//! it beside the course's rule of thumb ([`rule_of_thumb`]) and the learner's
//! guesses ([`exercise::guesses`], written before running).

pub mod crossover;
pub mod exercise;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use labkit::{LabError, Variant};
use measure::{Collective, Record};
use serde_json::{Value, json};

/// A situation the table decides for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Row {
    /// CPU tensors, messages up to 64 KiB: latency.
    SmallCpu,
    /// CPU tensors, messages of 1 MiB and more: bandwidth.
    LargeCpu,
    /// DDP training of the CNN on CPU: samples per second.
    DdpCpu,
    /// Tensors on a GPU.
    GpuTensors,
    /// Ranks on different hosts (lab 8's simulated ones).
    AcrossHosts,
}

impl Row {
    /// Every row, in table order.
    pub const ALL: [Row; 5] = [
        Row::SmallCpu,
        Row::LargeCpu,
        Row::DdpCpu,
        Row::GpuTensors,
        Row::AcrossHosts,
    ];
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Row::SmallCpu => "CPU tensors, ≤ 64 KiB",
            Row::LargeCpu => "CPU tensors, ≥ 1 MiB",
            Row::DdpCpu => "DDP training, CPU",
            Row::GpuTensors => "GPU tensors",
            Row::AcrossHosts => "across hosts",
        })
    }
}

/// A backend as the table names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pick {
    /// Gloo (TCP).
    Gloo,
    /// MPI (OpenMPI here).
    Mpi,
    /// The reference backend over shared memory (one host only).
    ReferenceShm,
    /// The reference backend over TCP.
    ReferenceTcp,
    /// NCCL (CUDA tensors only).
    Nccl,
    /// Nothing here can run it.
    None,
}

impl Pick {
    /// The measured labels, in the results file and the charts.
    pub fn label(self) -> &'static str {
        match self {
            Pick::Gloo => "gloo",
            Pick::Mpi => "mpi",
            Pick::ReferenceShm => "reference-shm",
            Pick::ReferenceTcp => "reference-tcp",
            Pick::Nccl => "nccl",
            Pick::None => "none",
        }
    }

    /// The pick whose [`label`](Self::label) is `s`.
    pub fn from_label(s: &str) -> Option<Pick> {
        [
            Pick::Gloo,
            Pick::Mpi,
            Pick::ReferenceShm,
            Pick::ReferenceTcp,
            Pick::Nccl,
            Pick::None,
        ]
        .into_iter()
        .find(|p| p.label() == s)
    }
}

/// A prediction for one row.
#[derive(Clone, Debug)]
pub struct Guess {
    /// Which situation.
    pub row: Row,
    /// The backend expected to win there.
    pub pick: Pick,
    /// Why, in a sentence.
    pub why: &'static str,
}

// ANCHOR: rule_of_thumb
/// The seed course's rule of thumb: Gloo for CPU tensors, NCCL for GPU tensors,
/// MPI where the hosts talk over InfiniBand without IPoIB (which a TCP library
/// cannot use), Gloo across hosts over Ethernet.
pub fn rule_of_thumb(row: Row) -> Guess {
    let (pick, why) = match row {
        Row::SmallCpu | Row::LargeCpu | Row::DdpCpu => (
            Pick::Gloo,
            "Gloo is PyTorch's CPU backend: the course's default for CPU tensors",
        ),
        Row::GpuTensors => (
            Pick::Nccl,
            "NCCL reduces on the GPU over NVLink/PCIe without copies to the host",
        ),
        Row::AcrossHosts => (
            Pick::Gloo,
            "over Ethernet (TCP) Gloo; MPI only where InfiniBand has no IPoIB",
        ),
    };
    Guess { row, pick, why }
}
// ANCHOR_END: rule_of_thumb

/// `variant`'s guesses: the learner's, or the rule of thumb (the solution:
/// what the course would have you guess).
pub fn guesses(variant: Variant) -> Result<Vec<Guess>, LabError> {
    match variant {
        Variant::Exercise => exercise::guesses(),
        Variant::Solution => Ok(Row::ALL.into_iter().map(rule_of_thumb).collect()),
    }
}

/// Refuses a guess list that leaves a row out, guesses a row twice, gives no
/// reason (a sentence of at least 3 words), or picks a backend that cannot
/// run the row at all (NCCL for CPU tensors, shared memory across hosts). Each
/// refusal ends with a `hint: <key>` line naming the mistake for `cargo lab
/// check` (keys in `labs/info.toml`).
pub fn validate(guesses: &[Guess]) -> Result<(), LabError> {
    let wrong = |what: String, key: &str| Err(LabError::Wrong(format!("{what}\nhint: {key}")));
    for row in Row::ALL {
        let mine: Vec<&Guess> = guesses.iter().filter(|g| g.row == row).collect();
        match mine.as_slice() {
            [] => return wrong(format!("no guess for \"{row}\""), "missing-row"),
            [g] if g.why.split_whitespace().count() < 3 => {
                return wrong(
                    format!(
                        "the guess for \"{row}\" needs a reason of a sentence, not {:?}",
                        g.why
                    ),
                    "no-reason",
                );
            }
            // Not a matter of opinion: NCCL reduces CUDA memory only.
            [g] if g.pick == Pick::Nccl && row != Row::GpuTensors => {
                return wrong(
                    format!("\"{row}\" is guessed NCCL, which cannot reduce CPU tensors"),
                    "nccl-on-cpu",
                );
            }
            // Nor this: shared memory is one host's.
            [g] if g.pick == Pick::ReferenceShm && row == Row::AcrossHosts => {
                return wrong(
                    format!("\"{row}\" is guessed reference-shm: shared memory spans one host"),
                    "shm-across-hosts",
                );
            }
            [_] => {}
            _ => {
                return wrong(
                    format!("\"{row}\" is guessed {} times", mine.len()),
                    "row-guessed-twice",
                );
            }
        }
    }
    Ok(())
}

/// What the measurements say for one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Which situation.
    pub row: Row,
    /// The winner, or `None` when nothing was measured for the row.
    pub winner: Option<Pick>,
    /// The numbers behind it, or why nothing was measured.
    pub evidence: String,
}

/// The backends' geometric-mean time relative to the best, over every
/// collective and size of `records` with `bytes` in `range` that all of them
/// measured, best first. Geometric, so no one collective or size dominates.
pub fn relative_times(
    records: &[Record],
    range: std::ops::RangeInclusive<u64>,
) -> Vec<(Pick, f64)> {
    let mut by_case: BTreeMap<(Collective, u64), BTreeMap<Pick, f64>> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| range.contains(&r.bytes) && r.median_us > 0.0)
    {
        if let Some(p) = Pick::from_label(&r.label) {
            by_case
                .entry((r.collective, r.bytes))
                .or_default()
                .insert(p, r.median_us);
        }
    }
    let picks: Vec<Pick> = by_case
        .values()
        .flat_map(|m| m.keys().copied())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let complete: Vec<&BTreeMap<Pick, f64>> = by_case
        .values()
        .filter(|m| picks.iter().all(|p| m.contains_key(p)))
        .collect();
    if complete.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<(Pick, f64)> = picks
        .iter()
        .map(|&p| {
            let logs: f64 = complete
                .iter()
                .map(|m| (m[&p] / m.values().copied().fold(f64::INFINITY, f64::min)).ln())
                .sum();
            (p, (logs / complete.len() as f64).exp())
        })
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

/// The decision table from this run's collective `records`, the DDP samples/s
/// per backend, why GPU tensors were (not) measured, and lab 8's records of
/// simulated hosts (`<backend>-tcp@<N>nodes-…`), if the learner ran lab 8.
pub fn decide(
    records: &[Record],
    ddp: &[(Pick, f64)],
    gpu: Result<Vec<(Pick, f64)>, String>,
    hosts: Option<&[Record]>,
) -> Vec<Decision> {
    let ratios = |rel: &[(Pick, f64)]| {
        rel.iter()
            .map(|(p, r)| format!("{} {r:.2}×", p.label()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let from_rel = |row, rel: Vec<(Pick, f64)>, what: &str| Decision {
        row,
        winner: rel.first().map(|p| p.0),
        evidence: if rel.is_empty() {
            format!("nothing measured {what}")
        } else {
            format!("time vs the best, {what}: {}", ratios(&rel))
        },
    };
    let mut ddp = ddp.to_vec();
    ddp.sort_by(|a, b| b.1.total_cmp(&a.1));
    vec![
        from_rel(
            Row::SmallCpu,
            relative_times(records, 0..=64 << 10),
            "every collective ≤ 64 KiB",
        ),
        from_rel(
            Row::LargeCpu,
            relative_times(records, 1 << 20..=u64::MAX),
            "every collective ≥ 1 MiB",
        ),
        Decision {
            row: Row::DdpCpu,
            winner: ddp.first().map(|p| p.0),
            evidence: ddp
                .iter()
                .map(|(p, s)| format!("{} {s:.0}", p.label()))
                .collect::<Vec<_>>()
                .join(", ")
                + " samples/s",
        },
        match gpu {
            Ok(rel) => from_rel(Row::GpuTensors, rel, "all_reduce on CUDA tensors"),
            Err(why) => Decision {
                row: Row::GpuTensors,
                winner: None,
                evidence: format!("not measured: {why}"),
            },
        },
        match hosts {
            Some(recs) if !recs.is_empty() => {
                // One network: the most nodes on the slowest link lab 8 ran
                // (its runs differ in node count and link; mixing them would
                // compare one backend's 2 nodes with another's 4).
                let net = recs
                    .iter()
                    .filter_map(|r| r.label.split_once('@').map(|(_, net)| net))
                    .filter(|net| net.contains("nodes-"))
                    .max_by_key(|net| {
                        let nodes: usize = net
                            .chars()
                            .take_while(char::is_ascii_digit)
                            .collect::<String>()
                            .parse()
                            .unwrap_or(0);
                        (net.ends_with("-1gbit"), nodes)
                    })
                    .unwrap_or_default()
                    .to_owned();
                let mut relabeled: Vec<Record> = recs
                    .iter()
                    .filter(|r| !net.is_empty() && r.label.ends_with(&format!("@{net}")))
                    .map(|r| {
                        let mut r = r.clone();
                        let backend = r.label.split('@').next().unwrap_or_default().to_owned();
                        r.label = backend;
                        r
                    })
                    .collect();
                relabeled.retain(|r| Pick::from_label(&r.label).is_some());
                from_rel(
                    Row::AcrossHosts,
                    relative_times(&relabeled, 0..=u64::MAX),
                    &format!("all_reduce on lab 8's simulated hosts, {net}"),
                )
            }
            _ => Decision {
                row: Row::AcrossHosts,
                winner: None,
                evidence: "not measured: no run of lab 8 (simulated hosts) in results/lab08".into(),
            },
        },
    ]
}

/// The runs under a lab's results folder (`results/labNN/<UTC time>/`),
/// newest first; none when the folder is missing.
fn runs_newest_first(lab_dir: &Path) -> Vec<std::path::PathBuf> {
    let mut runs: Vec<_> = std::fs::read_dir(lab_dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    runs.sort();
    runs.reverse();
    runs
}

/// The records of the newest readable run under `results/labNN/`, if any.
pub fn latest_records(lab_dir: &Path) -> Option<Vec<Record>> {
    runs_newest_first(lab_dir)
        .iter()
        .find_map(|d| measure::read_results(&d.join("results.json")).ok())
        .map(|f| f.records)
}

/// The table as markdown and JSON, each row with the rule of thumb, the
/// guess, the measured winner and whether each agrees with it.
pub fn table(decisions: &[Decision], guesses: &[Guess]) -> (String, Value) {
    let mark = |p: Pick, w: Option<Pick>| match w {
        None => "—",
        Some(w) if w == p => "agrees",
        Some(_) => "disagrees",
    };
    let mut md = String::from(
        "| situation | measured winner | evidence | rule of thumb | | your guess | |\n|---|---|---|---|---|---|---|\n",
    );
    let mut rows = Vec::new();
    for d in decisions {
        let rule = rule_of_thumb(d.row).pick;
        let guess = guesses
            .iter()
            .find(|g| g.row == d.row)
            .map_or(Pick::None, |g| g.pick);
        let won = d.winner.map_or("not measured", Pick::label);
        md.push_str(&format!(
            "| {} | {won} | {} | {} | {} | {} | {} |\n",
            d.row,
            d.evidence,
            rule.label(),
            mark(rule, d.winner),
            guess.label(),
            mark(guess, d.winner)
        ));
        rows.push(json!({
            "row": d.row.to_string(), "winner": d.winner.map(Pick::label),
            "evidence": d.evidence, "rule_of_thumb": rule.label(), "guess": guess.label(),
        }));
    }
    (md, json!({ "rows": rows }))
}

/// The self-check: your guesses cover every row with a reason. If you have
/// run the lab, it also prints how they compare with your latest run's table
/// (reported, not asserted: this machine decides the answers).
pub fn check(variant: Variant) -> Result<String, LabError> {
    let mine = guesses(variant)?;
    validate(&mine)?;
    let table = runs_newest_first(&labkit::results_root().join("lab09"))
        .iter()
        .find_map(|d| std::fs::read_to_string(d.join("table.json")).ok())
        .and_then(|s| serde_json::from_str::<Value>(&s).ok());
    let Some(table) = table else {
        return Ok("every row has a guess; run `cargo lab 9` to see how they compare".into());
    };
    let mut lines = Vec::new();
    for g in &mine {
        let row = table["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["row"] == g.row.to_string());
        let winner = row
            .and_then(|r| r["winner"].as_str())
            .unwrap_or("not measured");
        let verdict = if winner == g.pick.label() {
            "agrees"
        } else {
            "differs"
        };
        lines.push(format!(
            "{}: you guessed {}, measured {winner} ({verdict})",
            g.row,
            g.pick.label()
        ));
    }
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of thumb with `row`'s guess replaced by `pick` and `why`.
    fn guesses_with(row: Row, pick: Pick, why: &'static str) -> Vec<Guess> {
        let mut g: Vec<Guess> = Row::ALL.into_iter().map(rule_of_thumb).collect();
        g.retain(|g| g.row != row);
        g.push(Guess { row, pick, why });
        g
    }

    #[test]
    fn a_left_out_row_is_named() {
        let mut g: Vec<Guess> = Row::ALL.into_iter().map(rule_of_thumb).collect();
        g.retain(|g| g.row != Row::DdpCpu);
        let msg = validate(&g).unwrap_err().to_string();
        assert!(msg.contains("no guess for \"DDP training, CPU\""), "{msg}");
        assert!(msg.contains("hint: missing-row"), "{msg}");
    }

    #[test]
    fn a_guess_without_a_reason_is_named() {
        let msg = validate(&guesses_with(Row::LargeCpu, Pick::Mpi, "bandwidth"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("needs a reason of a sentence"), "{msg}");
        assert!(msg.contains("hint: no-reason"), "{msg}");
    }

    #[test]
    fn nccl_for_cpu_tensors_is_named() {
        let g = guesses_with(Row::SmallCpu, Pick::Nccl, "NCCL is the fastest library");
        let msg = validate(&g).unwrap_err().to_string();
        assert!(msg.contains("hint: nccl-on-cpu"), "{msg}");
    }

    #[test]
    fn shared_memory_across_hosts_is_named() {
        let g = guesses_with(
            Row::AcrossHosts,
            Pick::ReferenceShm,
            "no copies through TCP",
        );
        let msg = validate(&g).unwrap_err().to_string();
        assert!(msg.contains("hint: shm-across-hosts"), "{msg}");
        // The rule of thumb itself passes.
        validate(&Row::ALL.into_iter().map(rule_of_thumb).collect::<Vec<_>>()).unwrap();
    }

    #[test]
    fn a_row_guessed_twice_is_named() {
        let mut g: Vec<Guess> = Row::ALL.into_iter().map(rule_of_thumb).collect();
        g.push(Guess {
            row: Row::LargeCpu,
            pick: Pick::Gloo,
            why: "second thoughts about the bandwidth",
        });
        let msg = validate(&g).unwrap_err().to_string();
        assert!(msg.contains("is guessed 2 times"), "{msg}");
        assert!(msg.contains("hint: row-guessed-twice"), "{msg}");
    }

    fn rec(label: &str, c: Collective, bytes: u64, us: f64) -> Record {
        let mut r: Record = serde_json::from_value(json!({
            "label": label, "collective": c.key(), "world": 2, "bytes": bytes,
            "min_us": us, "median_us": us, "max_us": us,
        }))
        .unwrap();
        r.label = label.into();
        r
    }

    #[test]
    fn relative_times_are_geometric_means_over_cases_everyone_measured() {
        let r = vec![
            rec("gloo", Collective::AllReduce, 8, 40.0),
            rec("mpi", Collective::AllReduce, 8, 10.0),
            rec("gloo", Collective::Broadcast, 8, 10.0),
            rec("mpi", Collective::Broadcast, 8, 40.0),
            // Only one backend measured this case: left out.
            rec("gloo", Collective::Gather, 8, 1.0),
        ];
        let rel = relative_times(&r, 0..=64);
        // Each wins once by 4×: both at √4 = 2× the best, geometrically.
        assert_eq!(rel.len(), 2);
        assert!(rel.iter().all(|(_, x)| (x - 2.0).abs() < 1e-9), "{rel:?}");
    }

    #[test]
    fn a_missing_row_or_reason_is_refused_and_the_rule_of_thumb_is_complete() {
        let rule: Vec<Guess> = Row::ALL.into_iter().map(rule_of_thumb).collect();
        validate(&rule).unwrap();
        assert!(validate(&rule[1..]).is_err());
        let mut lazy = rule.clone();
        lazy[0].why = "fast";
        assert!(validate(&lazy).is_err());
    }

    #[test]
    fn the_hosts_row_compares_backends_on_one_network_of_lab_8() {
        let hosts = vec![
            rec(
                "reference-tcp@2nodes-1gbit",
                Collective::AllReduce,
                4096,
                50.0,
            ),
            rec("gloo@2nodes-1gbit", Collective::AllReduce, 4096, 100.0),
            // Another network: left out, or gloo would win it.
            rec(
                "reference-tcp@4nodes-unshaped",
                Collective::AllReduce,
                4096,
                500.0,
            ),
            rec("gloo@4nodes-unshaped", Collective::AllReduce, 4096, 10.0),
            rec(
                "reference-tcp/ring@2nodes-1gbit",
                Collective::AllReduce,
                4096,
                1.0,
            ),
        ];
        let d = decide(&[], &[], Err("none".into()), Some(&hosts));
        let row = d.iter().find(|d| d.row == Row::AcrossHosts).unwrap();
        assert_eq!(row.winner, Some(Pick::ReferenceTcp), "{row:?}");
        assert!(
            row.evidence.contains("2nodes-1gbit") && row.evidence.contains("gloo 2.00×"),
            "{row:?}"
        );
    }
}
