use super::*;

#[test]
fn long_text_wraps_within_its_width_and_says_when_it_was_cut() {
    crate::charts::prepare(&crate::ChartOptions::default()).unwrap();
    let text =
        "all_reduce latency at scale from this machine's α = 12.3 µs per message (lower is better)";
    let lines = wrap(text, 16, 300, 3);
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(lines.iter().all(|l| text_width(l, 16) <= 300), "{lines:?}");
    assert_eq!(
        lines.join(" "),
        text,
        "nothing lost when it fits in 3 lines"
    );
    let cut = wrap(text, 16, 300, 1);
    assert_eq!(cut.len(), 1);
    assert!(
        cut[0].ends_with('…') && text_width(&cut[0], 16) <= 300,
        "{cut:?}"
    );
    // One word wider than the line is cut too, not spilled.
    let long = wrap("a_very_long_identifier_without_spaces_at_all", 16, 80, 2);
    assert!(long.iter().all(|l| text_width(l, 16) <= 80), "{long:?}");
    assert!(wrap("", 16, 80, 2).is_empty());
}

#[test]
fn a_chart_too_small_for_its_text_is_refused_not_squeezed() {
    crate::charts::prepare(&crate::ChartOptions::default()).unwrap();
    let legend: Vec<LegendEntry> = (0..40)
        .map(|i| LegendEntry {
            name: format!("series number {i} with a long name"),
            swatch: Swatch::Block(RGBColor(0, 0, 0)),
        })
        .collect();
    let spec = Spec {
        title: "T",
        x_title: "x",
        y_title: "y",
        legend: &legend,
        y_labels: &[],
        x_labels: XLabels::Numeric,
        note_row: false,
    };
    let e = layout(&spec, (320, 200)).unwrap_err();
    assert!(e.contains("no room"), "{e}");
}

/// The residuals chart labelled its middle tick "-0" (−0.6 + 6 × 0.1).
#[test]
fn a_tick_a_rounding_error_from_zero_read_minus_zero() {
    let axis = plotters::coord::types::RangedCoordf64::from(-0.625..0.625);
    for set in candidates(&axis) {
        for v in set {
            assert!(v == 0.0 || v.abs() > 1e-6, "{v:e}");
            assert_ne!(crate::units::sig3(v), "-0");
        }
    }
}
