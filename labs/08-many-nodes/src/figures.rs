//! Part 2's charts: the latency records, ring and tree against the α–β
//! prediction, and the DDP step per setting.

use std::collections::BTreeMap;

use labkit::Run;
use measure::{Figure, FigureSeries, Record};
use reports::AllReduceAlgorithm;

use crate::nodes::Measured;

/// Puts what part 2 measured into `run`: the records (the per-algorithm
/// series, labelled with a `/`, only feed the prediction), the ring-vs-tree
/// chart (printing how far each is from its prediction) and the DDP-step
/// chart.
pub fn write(run: &mut Run, measured: &Measured) -> anyhow::Result<()> {
    let (records, ddp) = (&measured.records, &measured.ddp);
    for r in records {
        if !r.label.contains('/') {
            run.push(r.clone())?;
        }
    }
    predictions(run, records, measured.nodes)?;
    run.figure(
        Figure::stacked_bars(
            "ddp-step",
            "A DDP step of the CNN (batch 64 per rank, median; lower is better)",
            ddp.iter().map(|(l, _)| l.clone()).collect(),
            "ms",
        )
        .with_layer("step", &ddp.iter().map(|d| d.1).collect::<Vec<_>>()),
    )?;
    Ok(())
}

/// Ring and tree on the 1 Gbit/s link against the α–β prediction: α per
/// message from the unshaped network's ring fit, β from the link's rate.
fn predictions(run: &mut Run, records: &[Record], nodes: &[usize]) -> anyhow::Result<()> {
    let mut fig = Figure::lines(
        "ring-vs-tree",
        "all_reduce over 1 Gbit/s links: measured (solid) and α–β prediction (dashed); lower is better",
        "message size (bytes)",
        "time (µs)",
    );
    let mut said = false;
    for &n in nodes {
        let pts = |label: &str| -> Vec<(f64, f64)> {
            records
                .iter()
                .filter(|r| r.label == label)
                .map(|r| (r.bytes as f64, r.median_us))
                .collect()
        };
        let unshaped = pts(&format!("reference-tcp/ring@{n}nodes-unshaped"));
        let ring = pts(&format!("reference-tcp/ring@{n}nodes-1gbit"));
        let tree = pts(&format!("reference-tcp/tree@{n}nodes-1gbit"));
        if ring.is_empty() || tree.is_empty() {
            continue;
        }
        let factor = 2.0 * (n as f64 - 1.0) / n as f64;
        let alpha = match reports::fit_alpha_beta(&unshaped, factor) {
            reports::Fit::Fitted(m) => m.alpha_us / (2.0 * (n as f64 - 1.0)),
            _ => 0.0,
        };
        // 1 Gbit/s: 8e-3 µs per byte.
        let beta = 8.0 / 1000.0;
        let mut errors = BTreeMap::new();
        for (name, algo, measured) in [
            ("ring", AllReduceAlgorithm::Ring, &ring),
            ("tree", AllReduceAlgorithm::BinomialTree, &tree),
        ] {
            let pred: Vec<[f64; 2]> = measured
                .iter()
                .map(|&(s, _)| [s, algo.predict_us(n, s, alpha, beta)])
                .collect();
            if let (Some(&(s, t)), Some(p)) = (measured.last(), pred.last()) {
                errors.insert(name, (s, t, p[1]));
            }
            fig = fig
                .with(FigureSeries::measured(
                    format!("{name}, {n} nodes"),
                    measured.iter().map(|&(s, t)| [s, t]).collect(),
                ))
                .with(FigureSeries::theory(
                    format!("{name}, {n} nodes, predicted"),
                    pred,
                ));
        }
        for (name, (s, t, p)) in errors {
            println!(
                "  {n} nodes at 1 Gbit/s, {name}, {}: measured {:.0} µs, predicted {:.0} µs ({:+.0}%)",
                measure::size::human(s as u64),
                t,
                p,
                100.0 * (t - p) / p
            );
        }
        said = true;
    }
    if said {
        run.figure(fig)?;
    }
    Ok(())
}
