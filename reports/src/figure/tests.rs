use super::*;
use measure::FigureSeries;

fn opts() -> ChartOptions {
    ChartOptions::default()
}

/// Lab 7's bucket sweep (16 KiB to 25 MiB) piled its small buckets at
/// zero on a linear axis: x spanning decades is drawn on a log axis.
#[test]
fn bucket_sweep_from_16k_to_25m_piled_at_zero_on_a_linear_axis() {
    let sweep = Figure::lines("buckets", "Exposed communication", "bucket (bytes)", "ms").with(
        FigureSeries::measured(
            "exposed",
            vec![[16384.0, 1.0], [262144.0, 0.8], [26214400.0, 2.0]],
        ),
    );
    let c = render_figure(&sweep, &opts()).unwrap();
    assert!(c.svg.contains("bucket (bytes, log)"), "no log axis label");
    // The three points' circles: on a log axis the middle one sits near the
    // middle of the plot, not against the left edge.
    let xs: Vec<f64> = c
        .svg
        .split("<circle")
        .skip(1)
        .filter_map(|t| t.split("cx=\"").nth(1)?.split('"').next()?.parse().ok())
        .collect();
    assert_eq!(xs.len(), 3, "{xs:?}");
    let frac = (xs[1] - xs[0]) / (xs[2] - xs[0]);
    assert!(
        (0.25..0.6).contains(&frac),
        "middle point at {frac} of the span"
    );
    assert!(!spans_decades([1.0, 50.0].into_iter()));
    assert!(
        !spans_decades([0.0, 1000.0].into_iter()),
        "zero cannot go on a log axis"
    );
}

#[test]
fn lines_and_bars_draw_their_names_and_labels() {
    let lines = Figure::lines("loss", "Training loss", "wall time (s)", "loss")
        .with(FigureSeries::measured(
            "2 workers",
            vec![[0.0, 2.3], [1.5, 0.9]],
        ))
        .with(FigureSeries::theory(
            "(p−1)/(m+p−1)",
            vec![[0.0, 1.0], [1.5, 0.5]],
        ));
    let c = render_figure(&lines, &opts()).unwrap();
    assert_eq!(
        (c.stem.as_str(), c.kind, c.collective),
        ("loss", ChartKind::Figure, None)
    );
    for text in [
        "Training loss",
        "2 workers",
        "wall time (s)",
        "(p−1)/(m+p−1)",
    ] {
        assert!(c.svg.contains(text), "{text} missing");
    }
    assert!(c.png.starts_with(b"\x89PNG"));

    let bars = Figure::stacked_bars(
        "phases",
        "Step phases",
        vec!["cpu".into(), "cuda:0".into()],
        "ms",
    )
    .with_layer("forward", &[3.0, 0.25])
    .with_layer("backward", &[6.0, 0.5]);
    let c = render_figure(&bars, &opts()).unwrap();
    if let Ok(dir) = std::env::var("RINGSIDE_FIGURE_DUMP") {
        std::fs::write(format!("{dir}/bars.png"), &c.png).unwrap();
    }
    // The total of the first bar (3 + 6) is written above it.
    for text in ["cpu", "cuda:0", "forward", "backward", "\n9\n"] {
        assert!(c.svg.contains(text), "{text} missing from the bars");
    }
}

/// `(x, y, width, height)` of every `<rect>` filled with `fill` (plotters
/// writes one element per line).
fn rects(svg: &str, fill: &str) -> Vec<(f64, f64, f64, f64)> {
    let attr = |line: &str, name: &str| -> f64 {
        let key = format!(" {name}=\"");
        let at = line
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            + key.len();
        let end = line[at..].find('"').unwrap();
        line[at..at + end].parse().unwrap()
    };
    svg.lines()
        .filter(|l| l.starts_with("<rect") && l.contains(&format!("fill=\"{fill}\"")))
        .map(|l| {
            (
                attr(l, "x"),
                attr(l, "y"),
                attr(l, "width"),
                attr(l, "height"),
            )
        })
        .collect()
}

/// The first palette colour as plotters writes it in SVG.
const FIRST: &str = "#1F77B4";

/// Draws `figure`, checks each of its `bars` layer-0 rects lies inside the
/// plot with a sensible width, and returns the chart.
fn bars_fit_the_plot(figure: &Figure, bars: usize) -> Chart {
    let c = render_figure(figure, &opts()).unwrap();
    let (w, h) = (f64::from(opts().width), f64::from(opts().height));
    // The legend's swatch is a rect of the same colour, 16 px wide.
    let found: Vec<_> = rects(&c.svg, FIRST)
        .into_iter()
        .filter(|r| r.2 != 16.0)
        .collect();
    assert_eq!(found.len(), bars, "{found:?}");
    for (x, y, width, height) in found {
        // Right of the y axis' labels (76 px + 14 px margin), inside the
        // picture, neither a sliver nor a wall.
        assert!(width >= 20.0 && width <= 0.5 * w, "bar width {width}");
        assert!(x >= 90.0 && x + width <= w, "bar at x {x}..{}", x + width);
        assert!(
            height > 0.0 && y >= 0.0 && y + height <= h,
            "bar y {y} h {height}"
        );
    }
    c
}

#[test]
fn one_bar_chart_has_positive_width() {
    // Lab 2 on a machine without a GPU: one category, one layer.
    let one = Figure::stacked_bars("phases", "Step phases", vec!["cpu".into()], "ms")
        .with_layer("forward", &[3.0]);
    let c = bars_fit_the_plot(&one, 1);
    assert!(
        c.svg.contains(">cpu<") || c.svg.contains("\ncpu\n"),
        "no category label"
    );
    if let Ok(dir) = std::env::var("RINGSIDE_FIGURE_DUMP") {
        std::fs::write(format!("{dir}/one-bar.png"), &c.png).unwrap();
    }
    // One bar, two layers; and three bars of one layer.
    let two_layers = one.clone().with_layer("backward", &[6.0]);
    let c = bars_fit_the_plot(&two_layers, 1);
    if let Ok(dir) = std::env::var("RINGSIDE_FIGURE_DUMP") {
        std::fs::write(format!("{dir}/one-bar-two-layers.png"), &c.png).unwrap();
    }
    let three = Figure::stacked_bars(
        "phases",
        "Step phases",
        vec!["a".into(), "b".into(), "c".into()],
        "ms",
    )
    .with_layer("forward", &[3.0, 1.0, 2.0]);
    bars_fit_the_plot(&three, 3);
}

#[test]
fn a_figure_too_large_for_its_axes_fails_fast_naming_them() {
    let huge = Figure::lines("loss", "L", "s", "loss").with(FigureSeries::measured(
        "a",
        vec![[0.0, -1e308], [1.0, 1e308]],
    ));
    let e = render_figure(&huge, &opts()).unwrap_err().to_string();
    assert!(e.contains("loss") && e.contains("y axis"), "{e}");
    let bars = Figure::stacked_bars("phases", "P", vec!["cpu".into()], "ms")
        .with_layer("a", &[1e308])
        .with_layer("b", &[1e308]);
    let e = render_figure(&bars, &opts()).unwrap_err().to_string();
    assert!(e.contains("phases") && e.contains("y axis"), "{e}");
}

#[test]
fn an_undrawable_figure_is_an_error_naming_it() {
    let e = render_figure(&Figure::lines("nothing", "N", "x", "y"), &opts()).unwrap_err();
    assert!(e.to_string().contains("nothing"), "{e}");
}

/// Writes `c`'s PNG into `$RINGSIDE_FIGURE_DUMP`, when set, to look at.
fn dump(name: &str, c: &Chart) {
    if let Ok(dir) = std::env::var("RINGSIDE_FIGURE_DUMP") {
        std::fs::write(format!("{dir}/{name}.png"), &c.png).unwrap();
    }
}

/// The book's column is 920 px wide (book/theme/custom.css); the charts are
/// drawn 960 px wide and shown scaled into it, or drawn at 920.
const BOOK: (u32, u32) = (920, 540);

/// The `y` of the SVG `<text>` whose content is `text` (plotters writes the
/// content on its own line).
fn text_y(svg: &str, text: &str) -> Option<f64> {
    let lines: Vec<&str> = svg.lines().collect();
    lines.windows(2).find_map(|w| {
        if w[0].starts_with("<text") && w[1] == text {
            let at = w[0].find(" y=\"")? + 4;
            let end = w[0][at..].find('"')?;
            w[0][at..at + end].parse().ok()
        } else {
            None
        }
    })
}

/// No two boxes share a pixel.
fn apart(boxes: &[frame::Rect]) -> Result<(), String> {
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            if a.intersects(b) {
                return Err(format!("{a:?} overlaps {b:?}"));
            }
        }
    }
    Ok(())
}

fn inside(r: &frame::Rect, size: (u32, u32)) -> bool {
    r.left >= 0 && r.top >= 0 && r.right <= size.0 as i32 && r.bottom <= size.1 as i32
}

/// Three series running along the top of the plot from edge to edge, one of
/// them through the upper right corner where plotters' legend used to sit
/// (and the upper left, where the bench charts' sat): the legend is a band
/// of its own above the plot.
#[test]
fn legend_covered_the_data_in_the_upper_right_corner() {
    let top = |y: f64| (0..=10).map(|k| [f64::from(k), y]).collect::<Vec<_>>();
    let f = Figure::lines("corner", "Series in the corners", "step", "loss")
        .with(FigureSeries::measured(
            "your step 1: one all_reduce per parameter",
            top(10.0),
        ))
        .with(FigureSeries::measured("your step 2: bucketed", top(9.8)))
        .with(FigureSeries::theory(
            "the reference solution, its run",
            top(9.6),
        ));
    let plan = lines_plan(&f).unwrap();
    for size in [(960, 560), BOOK, (480, 400)] {
        let drawn = lines_frame(&f, &plan, size).unwrap();
        let l = &drawn.layout;
        assert_eq!(l.legend.len(), 3);
        for entry in &l.legend {
            assert!(
                !entry.intersects(&l.plot),
                "{size:?}: legend {entry:?} on plot {:?}",
                l.plot
            );
            assert!(
                inside(entry, size),
                "{size:?}: legend {entry:?} outside the picture"
            );
        }
        apart(&l.legend).unwrap();
        // The data's corner really is in the plot: the top series' last point.
        let y_axis = RangedCoordf64::from(plan.y.0..plan.y.1);
        let corner = frame::y_pixel(&y_axis, l, 10.0);
        assert!(
            corner >= l.plot.top && corner < l.plot.top + 40,
            "{corner} vs {:?}",
            l.plot
        );
    }
    // And the drawing follows the layout: the legend's names above the plot.
    let c = render_figure(&f, &opts()).unwrap();
    dump("corner", &c);
    let l = lines_frame(&f, &plan, (960, 560)).unwrap().layout;
    for name in ["your step 2: bucketed", "the reference solution, its run"] {
        let y = text_y(&c.svg, name).unwrap_or_else(|| panic!("{name} not drawn"));
        assert!(
            y < f64::from(l.plot.top),
            "{name} at y {y}, plot from {}",
            l.plot.top
        );
    }
}

/// "…per parameteryour step 2…": lab 7's long category names ran into each
/// other and into the axis title in the PNG. At the book's width every tick
/// label and category line has a box of its own.
#[test]
fn tick_labels_collided_at_the_book_width() {
    let names: Vec<String> = [
        "your step 1: one all_reduce per parameter",
        "your step 2: bucketed",
        "your step 3: bucketed, overlapped with backward",
        "trainers::ddp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let bars = Figure::stacked_bars("exposed", "A 2-rank step", names.clone(), "ms per step")
        .with_layer(
            "compute (forward, backward, optimizer)",
            &[30.0, 28.0, 29.0, 27.5],
        )
        .with_layer("exposed communication", &[12.0, 4.0, 2.0, 1.5]);
    let plan = bars_plan(&bars).unwrap();
    let book = ChartOptions {
        width: BOOK.0,
        height: BOOK.1,
        ..opts()
    };
    dump("exposed-book", &render_figure(&bars, &book).unwrap());
    dump(
        "sizes-book",
        &render_figure(
            &Figure::lines("sizes", "Sizes", "message size (bytes)", "µs")
                .with(FigureSeries::measured("a", vec![[8.0, 1.0], [64e6, 2.0]])),
            &book,
        )
        .unwrap(),
    );
    let l = frame::layout(&plan.spec(&bars), BOOK).unwrap();
    let (yt, centres) = bars_ticks(&plan, &l, names.len());
    let slot = (l.plot.right - l.plot.left) / names.len() as i32;
    let mut boxes = Vec::new();
    for (lines, cx) in l.categories.iter().zip(&centres) {
        assert!(!lines.is_empty() && lines.len() <= 3, "{lines:?}");
        for (k, line) in lines.iter().enumerate() {
            let w = frame::text_width(line, 16);
            assert!(w < slot, "{line:?} is {w} px in a {slot} px slot");
            let top = l.x_labels_top + 21 * k as i32;
            boxes.push(frame::Rect {
                left: cx - w / 2,
                top,
                right: cx + w / 2,
                bottom: top + 21,
            });
        }
    }
    apart(&boxes).unwrap();
    // The axis title starts below the lowest category line.
    let lowest = boxes.iter().map(|b| b.bottom).max().unwrap();
    assert!(
        l.x_title.1 >= lowest,
        "x title at {} over labels to {lowest}",
        l.x_title.1
    );
    let y_boxes: Vec<_> = yt.iter().map(|(t, _)| t.rect).collect();
    assert!(y_boxes.len() >= 3, "{yt:?}");
    apart(&y_boxes).unwrap();

    // Numbers: a linear axis, a log one, a log size axis.
    let linear =
        Figure::lines("loss", "Loss", "wall time (s)", "loss").with(FigureSeries::measured(
            "a",
            (0..50).map(|k| [f64::from(k) * 12345.6, 1.0]).collect(),
        ));
    let log = Figure::lines("sweep", "Sweep", "images per second", "loss")
        .with(FigureSeries::measured("a", vec![[1.0, 1.0], [1e7, 2.0]]));
    let sizes = Figure::lines("sizes", "Sizes", "message size (bytes)", "µs")
        .with(FigureSeries::measured("a", vec![[8.0, 1.0], [64e6, 2.0]]));
    for f in [&linear, &log, &sizes] {
        let plan = lines_plan(f).unwrap();
        for size in [BOOK, (960, 560), (480, 360)] {
            let drawn = lines_frame(f, &plan, size).unwrap();
            let x: Vec<_> = drawn.x.iter().map(|(t, _)| t.rect).collect();
            assert!(x.len() >= 2, "{}: {x:?}", f.name);
            apart(&x).unwrap_or_else(|e| panic!("{} at {size:?}: {e}", f.name));
            for b in &x {
                assert!(inside(b, size) && b.top >= drawn.layout.plot.bottom);
                assert!(
                    b.bottom <= drawn.layout.x_title.1,
                    "{b:?} over the axis title"
                );
            }
            let y: Vec<_> = drawn.y.iter().map(|(t, _)| t.rect).collect();
            apart(&y).unwrap_or_else(|e| panic!("{} at {size:?}: {e}", f.name));
        }
    }
}

/// Lab 6's α–β chart: the ring (slow start, fast per byte) overtakes the
/// tree inside the measured sizes; the mark says so, from the data.
#[test]
fn crossover_of_two_measured_curves_is_marked_only_when_they_cross() {
    let sizes: Vec<f64> = (0..14)
        .map(|k| 8.0 * 4f64.powi(k / 2) * if k % 2 == 1 { 2.0 } else { 1.0 })
        .collect();
    let curve = |alpha: f64, per_byte: f64| -> Vec<[f64; 2]> {
        sizes.iter().map(|&s| [s, alpha + s * per_byte]).collect()
    };
    let fig = |ring: Vec<[f64; 2]>| {
        Figure::lines(
            "alpha-beta",
            "all_reduce (lower is better)",
            "message size (bytes)",
            "time (µs)",
        )
        .with(FigureSeries::measured("ring", ring))
        .with(FigureSeries::theory("ring, α–β fit", curve(40.0, 0.01)))
        .with(FigureSeries::measured("the tree", curve(10.0, 0.02)))
    };
    // 40 + 0.01 S = 10 + 0.02 S at S = 3000 B.
    let crossing = fig(curve(40.0, 0.01));
    let plan = lines_plan(&crossing).unwrap();
    let (c, note) = plan.crossing.clone().expect("they cross");
    assert!((2000.0..4500.0).contains(&c.x), "{c:?}");
    assert!(
        note.starts_with("ring overtakes the tree at ") && note.contains("KiB"),
        "{note}"
    );
    let drawn = lines_frame(&crossing, &plan, BOOK).unwrap();
    let x = drawn.crossing_px.unwrap();
    let l = &drawn.layout;
    assert!(x > l.plot.left && x < l.plot.right);
    let row = l.note.expect("a row for the note");
    assert!(!row.intersects(&l.plot) && l.legend.iter().all(|e| !e.intersects(&row)));
    let c = render_figure(&crossing, &opts()).unwrap();
    dump("crossing", &c);
    let svg = c.svg;
    assert!(svg.contains(&note), "the note is not drawn");

    // Always faster: no crossing, no mark, no row kept for one.
    let apart_curves = fig(curve(5.0, 0.01));
    let plan = lines_plan(&apart_curves).unwrap();
    assert!(plan.crossing.is_none());
    assert!(
        lines_frame(&apart_curves, &plan, BOOK)
            .unwrap()
            .layout
            .note
            .is_none()
    );
    assert!(
        !render_figure(&apart_curves, &opts())
            .unwrap()
            .svg
            .contains("overtakes")
    );
    // Crossing on a linear axis (a loss over time) is not marked.
    let losses = Figure::lines("loss", "Loss (lower is better)", "s", "loss")
        .with(FigureSeries::measured(
            "a",
            vec![[0.0, 2.0], [1.0, 1.0], [2.0, 0.5]],
        ))
        .with(FigureSeries::measured(
            "b",
            vec![[0.0, 1.5], [1.0, 1.2], [2.0, 0.9]],
        ));
    assert!(lines_plan(&losses).unwrap().crossing.is_none());
}

/// Lab 7's throughput was a line over a continuous "ranks 0–2" axis: world
/// sizes are categories, drawn as one group of bars each.
#[test]
fn categories_drawn_as_a_line_over_a_continuous_axis() {
    let configs = ["your step 1", "your step 2", "your step 3", "trainers::ddp"];
    let mut f = Figure::grouped_bars(
        "throughput",
        "DDP throughput (higher is better)",
        "ranks",
        vec!["1 rank".into(), "2 ranks".into()],
        "samples/s",
    );
    for (i, c) in configs.iter().enumerate() {
        f = f.with_layer(c, &[2000.0 + 10.0 * i as f64, 2900.0 + 100.0 * i as f64]);
    }
    let c = render_figure(&f, &opts()).unwrap();
    dump("grouped", &c);
    assert!(
        !c.svg.contains("<polyline fill=\"none\" stroke=\"#1F77B4\""),
        "a line was drawn"
    );
    for text in ["1 rank", "2 ranks", "ranks", "your step 1", "trainers::ddp"] {
        assert!(c.svg.contains(&format!("\n{text}\n")), "{text} missing");
    }
    // Series 0's two bars, one in each group's left part; every bar of a
    // group inside its half of the plot.
    let plan = bars_plan(&f).unwrap();
    let l = frame::layout(&plan.spec(&f), (960, 560)).unwrap();
    let mid = f64::from(l.plot.left + l.plot.right) / 2.0;
    let first: Vec<_> = rects(&c.svg, FIRST)
        .into_iter()
        .filter(|r| r.2 != 16.0)
        .collect();
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(
        first[0].0 + first[0].2 < mid && first[1].0 > mid,
        "{first:?}"
    );
    for (x, _, w, _) in &first {
        assert!(*w >= 10.0 && *w <= MAX_BAR_PX, "bar width {w}");
        assert!(*x >= f64::from(l.plot.left));
    }
    // The value is written above a bar wide enough for it.
    assert!(
        c.svg.contains("\n3200\n") || c.svg.contains("\n3.2k\n"),
        "no value label"
    );
}

/// Lab 6's fits were drawn in the next palette colour, not their series':
/// a fit named after a measured series takes its colour.
#[test]
fn fit_lines_took_another_series_colour() {
    let pts = vec![[8.0, 1.0], [1024.0, 2.0]];
    let f = Figure::lines("ab", "A", "message size (bytes)", "µs")
        .with(FigureSeries::measured("your ring", pts.clone()))
        .with(FigureSeries::theory("your ring, α–β fit", pts.clone()))
        .with(FigureSeries::measured("tree", pts.clone()))
        .with(FigureSeries::theory("tree, α–β fit", pts.clone()))
        .with(FigureSeries::theory("ideal", pts));
    let c = series_colors(&f);
    assert_eq!(c[0], c[1]);
    assert_eq!(c[2], c[3]);
    assert_ne!(c[0], c[2]);
    assert!(
        c[4] != c[0] && c[4] != c[2],
        "a prediction of its own gets its own colour"
    );
}

/// Lab 6's α–β chart: times from 1 µs to 2 ms on a linear y axis lay every
/// size but the largest two flat at zero. y spanning decades is log too.
#[test]
fn alpha_beta_times_lay_flat_at_zero_on_a_linear_y_axis() {
    let times = Figure::lines("ab", "A", "message size (bytes)", "time (µs)").with(
        FigureSeries::measured("ring", vec![[8.0, 1.0], [1024.0, 3.0], [8e6, 2400.0]]),
    );
    let plan = lines_plan(&times).unwrap();
    assert!(plan.log_x && plan.log_y && plan.y_desc == "time (µs, log)");
    let drawn = lines_frame(&times, &plan, BOOK).unwrap();
    // Decade ticks at least at 1, 10, 100 and 1000 µs.
    assert!(drawn.y.len() >= 4, "{:?}", drawn.y);
    let c = render_figure(&times, &opts()).unwrap();
    dump("alpha-beta-log", &c);
    // A loss from 2.3 to 0.4 stays linear.
    let loss = Figure::lines("loss", "L", "step", "loss")
        .with(FigureSeries::measured("a", vec![[0.0, 2.3], [9.0, 0.4]]));
    assert!(!lines_plan(&loss).unwrap().log_y);
}
