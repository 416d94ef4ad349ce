//! A chart's frame: its title, legend, axes, tick labels and axis titles,
//! laid out in pixels from the measured widths of the chart font's text and
//! drawn around the plot, never on it.
//!
//! plotters' own legend sits inside the plot (it covered lab charts' data) and
//! its label areas have fixed sizes (long category labels ran into each other
//! and into the axis title: "…per parameteryour step 2…"). Here every piece of
//! text gets a box before anything is drawn: the legend a band above the plot
//! sized to its entries, tick labels only as many as fit side by side, long
//! titles wrapped. [`Layout`] is that plan, so tests check it rather than
//! pixels.

use plotters::coord::Shift;
use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;
use plotters::style::FontTransform;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Pixels between the picture's edge and anything drawn.
const MARGIN: i32 = 14;
/// Font sizes (px): title, tick labels and axis titles, legend.
const TITLE_PX: i32 = 22;
const LABEL_PX: i32 = 16;
const LEGEND_PX: i32 = 15;
/// A line of text is this much taller than its font size.
const LEADING: f64 = 1.3;
/// The legend's line sample is this wide, then a gap before the name.
const SWATCH_PX: i32 = 24;
/// Space kept free between two tick labels.
const TICK_GAP: i32 = 10;
/// The smallest plot worth drawing: below it, the chart is refused.
const MIN_PLOT_PX: i32 = 60;

/// A rectangle in pixels, `left..right` × `top..bottom`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rect {
    pub left: i32,
    pub top: i32,
    pub right: i32,
    pub bottom: i32,
}

#[cfg(test)]
impl Rect {
    /// Whether the two share any pixel (the tests' check of a layout).
    pub fn intersects(&self, other: &Rect) -> bool {
        self.left < other.right
            && other.left < self.right
            && self.top < other.bottom
            && other.top < self.bottom
    }
}

/// How a legend entry shows its series.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Swatch {
    /// A line `width` px wide, dashed `(on, off)` px when `dash` is set.
    Line {
        color: RGBColor,
        width: u32,
        dash: Option<(i32, i32)>,
    },
    /// A filled block (a bar's colour).
    Block(RGBColor),
}

/// One legend entry.
#[derive(Debug, Clone)]
pub(crate) struct LegendEntry {
    pub name: String,
    pub swatch: Swatch,
}

/// What the x axis is labelled with.
pub(crate) enum XLabels<'a> {
    /// Numbers at ticks, one line each.
    Numeric,
    /// One label per equal slot (bars), wrapped to the slot's width.
    Categories(&'a [String]),
}

/// The text around one chart.
pub(crate) struct Spec<'a> {
    pub title: &'a str,
    pub x_title: &'a str,
    pub y_title: &'a str,
    pub legend: &'a [LegendEntry],
    /// The widest set of y tick labels the axis may show: sizes its column.
    pub y_labels: &'a [String],
    pub x_labels: XLabels<'a>,
    /// Keep one row of text between the legend and the plot for a note on
    /// the data (a crossover's label), so it covers nothing.
    pub note_row: bool,
}

/// Where every piece of the frame goes.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub size: (i32, i32),
    /// The title's lines, each with its top.
    pub title: Vec<(String, i32)>,
    /// The legend entries' boxes (swatch and name), in entry order.
    pub legend: Vec<Rect>,
    /// The legend entries' names, shortened when wider than the picture.
    pub legend_names: Vec<String>,
    /// The row kept for a note, when asked for.
    pub note: Option<Rect>,
    /// The plot: data, grid and marks only.
    pub plot: Rect,
    /// The category labels' lines (bars), in category order.
    pub categories: Vec<Vec<String>>,
    /// The top of the x tick labels.
    pub x_labels_top: i32,
    /// The x axis title's lines and the top of the first.
    pub x_title: (Vec<String>, i32),
    /// The y axis title's lines (drawn turned, left to right) and the x of
    /// the first.
    pub y_title: (Vec<String>, i32),
}

/// A tick: its value, its label, and the label's box.
#[derive(Debug, Clone)]
pub(crate) struct Tick {
    pub value: f64,
    pub label: String,
    pub rect: Rect,
}

/// Text height in pixels of `lines` lines at `px`.
fn line_h(px: i32) -> i32 {
    (f64::from(px) * LEADING).round() as i32
}

/// Width of `text` in the chart font at `px` pixels. The embedded font is
/// registered before any chart is laid out; should measuring still fail,
/// a generous estimate keeps the text from colliding.
pub(crate) fn text_width(text: &str, px: i32) -> i32 {
    if text.is_empty() {
        return 0;
    }
    let font = ("sans-serif", f64::from(px)).into_font();
    match font.box_size(text) {
        Ok((w, _)) => w as i32,
        Err(_) => (text.chars().count() as f64 * f64::from(px) * 0.62).ceil() as i32,
    }
}

/// `text` cut to at most `max_w` pixels, ending in "…" when cut.
fn shorten(text: &str, px: i32, max_w: i32) -> String {
    if text_width(text, px) <= max_w {
        return text.to_owned();
    }
    let mut chars: Vec<char> = text.chars().collect();
    while !chars.is_empty() {
        chars.pop();
        let s: String = chars.iter().collect::<String>().trim_end().to_owned() + "…";
        if text_width(&s, px) <= max_w {
            return s;
        }
    }
    "…".into()
}

/// `text` wrapped at spaces into lines at most `max_w` pixels wide, at most
/// `max_lines` of them: the last one shortened with "…" when the text does
/// not fit, and a single word wider than a line cut the same way.
pub(crate) fn wrap(text: &str, px: i32, max_w: i32, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut words = text.split_whitespace().peekable();
    while let Some(word) = words.next() {
        let last = lines.len() + 1 >= max_lines.max(1);
        let mut line = word.to_owned();
        while let Some(next) = words.peek() {
            let longer = format!("{line} {next}");
            if text_width(&longer, px) <= max_w {
                line = longer;
                words.next();
            } else {
                break;
            }
        }
        if last && words.peek().is_some() {
            // What does not fit goes into the last line's "…".
            let rest: Vec<&str> = words.by_ref().collect();
            line = format!("{line} {}", rest.join(" "));
        }
        lines.push(shorten(&line, px, max_w));
    }
    lines
}

/// Plans the frame of a `size` chart with the text of `spec`.
pub(crate) fn layout(spec: &Spec<'_>, size: (u32, u32)) -> Result<Layout, String> {
    let (w, h) = (size.0 as i32, size.1 as i32);
    let inner_w = w - 2 * MARGIN;
    let mut top = MARGIN;

    let mut title = Vec::new();
    for line in wrap(spec.title, TITLE_PX, inner_w, 2) {
        title.push((line, top));
        top += line_h(TITLE_PX);
    }
    top += 6;

    // The y axis' column: its tick labels, a tick mark, its title turned.
    let y_label_w = spec
        .y_labels
        .iter()
        .map(|l| text_width(l, LABEL_PX))
        .max()
        .unwrap_or(0);
    // The title wraps along the plot's height, not yet known: half the
    // picture is a fair guess for how many columns it needs.
    let y_title_cols = wrap(spec.y_title, LABEL_PX, h / 2, 2).len() as i32;
    let left = MARGIN + y_title_cols * line_h(LABEL_PX) + 6 + y_label_w + 10;
    // Room on the right for half of the last tick label.
    let right = w - MARGIN - 24;
    if right - left < MIN_PLOT_PX {
        return Err(format!("a {w} px wide chart has no room for its plot"));
    }

    // The legend: entries flow in rows over the plot's width, each as wide
    // as its name, so a band of one row holds a few short names.
    let mut legend = Vec::new();
    let mut legend_names = Vec::new();
    let row_h = line_h(LEGEND_PX);
    let (mut x, mut rows) = (left, 0);
    for entry in spec.legend {
        let name = shorten(&entry.name, LEGEND_PX, right - left - SWATCH_PX - 8);
        let ew = SWATCH_PX + 6 + text_width(&name, LEGEND_PX);
        if rows == 0 || (x > left && x + ew > right) {
            rows += 1;
            x = left;
        }
        let y = top + (rows - 1) * row_h;
        legend.push(Rect {
            left: x,
            top: y,
            right: x + ew,
            bottom: y + row_h,
        });
        legend_names.push(name);
        x += ew + 20;
    }
    top += rows * row_h + if rows > 0 { 8 } else { 0 };

    let note = spec.note_row.then(|| {
        let r = Rect {
            left,
            top,
            right,
            bottom: top + line_h(LEGEND_PX),
        };
        top = r.bottom + 4;
        r
    });
    // Space above the plot's top grid line: nothing sits on the frame.
    top += 4;

    // From the bottom: the x title, the tick labels, the tick marks.
    let x_title = wrap(spec.x_title, LABEL_PX, right - left, 2);
    let categories: Vec<Vec<String>> = match spec.x_labels {
        XLabels::Numeric => Vec::new(),
        XLabels::Categories(names) => {
            let slot = (right - left) / names.len().max(1) as i32;
            names
                .iter()
                .map(|n| wrap(n, LABEL_PX, (slot - TICK_GAP).max(20), 3))
                .collect()
        }
    };
    let label_rows = categories.iter().map(Vec::len).max().unwrap_or(1).max(1) as i32;
    let mut bottom = h - MARGIN - x_title.len() as i32 * line_h(LABEL_PX);
    let x_title_top = bottom;
    bottom -= 6 + label_rows * line_h(LABEL_PX);
    let x_labels_top = bottom;
    bottom -= 8;
    if bottom - top < MIN_PLOT_PX {
        return Err(format!(
            "a {h} px high chart has no room for its plot beside its title, legend and labels"
        ));
    }
    let y_title = wrap(spec.y_title, LABEL_PX, bottom - top, y_title_cols as usize);
    Ok(Layout {
        size: (w, h),
        title,
        legend,
        legend_names,
        note,
        plot: Rect {
            left,
            top,
            right,
            bottom,
        },
        categories,
        x_labels_top,
        x_title: (x_title, x_title_top),
        y_title: (y_title, MARGIN),
    })
}

/// The ticks of the first of `candidates` (densest first) whose labels fit
/// side by side under the plot with [`TICK_GAP`] between them; `px` maps a
/// value to its pixel column.
pub(crate) fn x_ticks(
    layout: &Layout,
    candidates: &[Vec<f64>],
    px: impl Fn(f64) -> i32,
    fmt: impl Fn(f64) -> String,
) -> Vec<Tick> {
    let lh = line_h(LABEL_PX);
    let ticks_of = |values: &[f64]| -> Vec<Tick> {
        labelled(values, &fmt, |value, label| {
            let (x, half) = (px(value), text_width(label, LABEL_PX) / 2 + 1);
            Rect {
                left: x - half,
                top: layout.x_labels_top,
                right: x + half,
                bottom: layout.x_labels_top + lh,
            }
        })
        .into_iter()
        .filter(|t| t.rect.left >= 0 && t.rect.right <= layout.size.0)
        .collect()
    };
    first_fitting(
        candidates,
        ticks_of,
        |t| t.rect.left,
        |a, b| a.rect.right + TICK_GAP <= b.rect.left,
    )
}

/// The y axis' ticks: as [`x_ticks`], labels stacked up the axis.
pub(crate) fn y_ticks(
    layout: &Layout,
    candidates: &[Vec<f64>],
    px: impl Fn(f64) -> i32,
    fmt: impl Fn(f64) -> String,
) -> Vec<Tick> {
    let lh = line_h(LABEL_PX);
    let ticks_of = |values: &[f64]| -> Vec<Tick> {
        labelled(values, &fmt, |value, label| {
            let y = px(value);
            Rect {
                left: layout.plot.left - 10 - text_width(label, LABEL_PX),
                top: y - lh / 2,
                right: layout.plot.left - 10,
                bottom: y + lh / 2,
            }
        })
    };
    first_fitting(
        candidates,
        ticks_of,
        |t| t.rect.top,
        |a, b| a.rect.bottom + 2 <= b.rect.top,
    )
}

/// The finite `values` as ticks: each labelled by `fmt`, its label's box
/// placed by `rect_of(value, label)`.
fn labelled(
    values: &[f64],
    fmt: impl Fn(f64) -> String,
    rect_of: impl Fn(f64, &str) -> Rect,
) -> Vec<Tick> {
    values
        .iter()
        .filter(|v| v.is_finite())
        .map(|&value| {
            let label = fmt(value);
            Tick {
                rect: rect_of(value, &label),
                value,
                label,
            }
        })
        .collect()
}

/// The first of `candidates` whose ticks, in the order of `key`, are each
/// `apart` from the next.
fn first_fitting(
    candidates: &[Vec<f64>],
    ticks_of: impl Fn(&[f64]) -> Vec<Tick>,
    key: impl Fn(&Tick) -> i32,
    apart: impl Fn(&Tick, &Tick) -> bool,
) -> Vec<Tick> {
    let mut last = Vec::new();
    for values in candidates {
        let mut ticks = ticks_of(values);
        ticks.sort_by_key(&key);
        if ticks.windows(2).all(|p| apart(&p[0], &p[1])) {
            return ticks;
        }
        last = ticks;
    }
    // Nothing fits (a very narrow chart): the two ends, which always do.
    match (last.first(), last.last()) {
        (Some(a), Some(b)) if apart(a, b) => vec![a.clone(), b.clone()],
        (Some(a), _) => vec![a.clone()],
        _ => Vec::new(),
    }
}

/// Candidate tick sets of `axis`, densest first: what plotters' own axis
/// would choose for 12 labels down to 2.
pub(crate) fn candidates<R: Ranged<ValueType = f64>>(axis: &R) -> Vec<Vec<f64>> {
    let mut sets: Vec<Vec<f64>> = (2..=12usize)
        .rev()
        .map(|n| {
            // Steps of 0.1 summed from −0.6 land on −1e-17, written "-0":
            // a value that small beside its neighbours is zero.
            let points = axis.key_points(n);
            let big = points.iter().fold(0f64, |m, v| m.max(v.abs()));
            points
                .into_iter()
                .map(|v| if v.abs() < big * 1e-9 { 0.0 } else { v })
                .collect()
        })
        .collect();
    sets.dedup();
    sets
}

/// The pixel column of `v` on `axis` drawn across `layout`'s plot, as
/// plotters maps it (a chart built on exactly the plot's area).
pub(crate) fn x_pixel<R: Ranged<ValueType = f64>>(axis: &R, layout: &Layout, v: f64) -> i32 {
    axis.map(&v, (layout.plot.left, layout.plot.right - 1))
}

/// The pixel row of `v` on `axis` drawn up `layout`'s plot.
pub(crate) fn y_pixel<R: Ranged<ValueType = f64>>(axis: &R, layout: &Layout, v: f64) -> i32 {
    axis.map(&v, (layout.plot.bottom - 1, layout.plot.top))
}

fn font(px: i32) -> TextStyle<'static> {
    ("sans-serif", f64::from(px)).into_font().color(&BLACK)
}

/// Draws the grid at `x`/`y` ticks inside the plot: first, under the data.
pub(crate) fn draw_grid<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    layout: &Layout,
    x: &[(Tick, i32)],
    y: &[(Tick, i32)],
) -> Result<(), String> {
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let p = layout.plot;
    let grid = RGBColor(228, 228, 228).stroke_width(1);
    for (_, px) in x {
        root.draw(&PathElement::new(vec![(*px, p.top), (*px, p.bottom)], grid))
            .map_err(s)?;
    }
    for (_, py) in y {
        root.draw(&PathElement::new(vec![(p.left, *py), (p.right, *py)], grid))
            .map_err(s)?;
    }
    Ok(())
}

/// Draws title, legend, axes, ticks and their labels, and axis titles.
/// `x`/`y` are ticks with their pixel column/row.
pub(crate) fn draw_frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    layout: &Layout,
    spec: &Spec<'_>,
    x: &[(Tick, i32)],
    y: &[(Tick, i32)],
    category_px: &[i32],
) -> Result<(), String> {
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let p = layout.plot;
    let (w, _) = layout.size;
    for (line, top) in &layout.title {
        let style = font(TITLE_PX).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(line.clone(), (w / 2, *top), style))
            .map_err(s)?;
    }
    for ((entry, name), r) in spec
        .legend
        .iter()
        .zip(&layout.legend_names)
        .zip(&layout.legend)
    {
        let mid = (r.top + r.bottom) / 2;
        draw_swatch(root, entry.swatch, r.left, mid).map_err(s)?;
        let style = font(LEGEND_PX).pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(
            name.clone(),
            (r.left + SWATCH_PX + 6, mid),
            style,
        ))
        .map_err(s)?;
    }
    let axis = BLACK.stroke_width(1);
    root.draw(&PathElement::new(
        vec![(p.left, p.top), (p.left, p.bottom), (p.right, p.bottom)],
        axis,
    ))
    .map_err(s)?;
    for (t, px) in x {
        root.draw(&PathElement::new(
            vec![(*px, p.bottom), (*px, p.bottom + 5)],
            axis,
        ))
        .map_err(s)?;
        let style = font(LABEL_PX).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(t.label.clone(), (*px, t.rect.top), style))
            .map_err(s)?;
    }
    for (t, py) in y {
        root.draw(&PathElement::new(
            vec![(p.left - 5, *py), (p.left, *py)],
            axis,
        ))
        .map_err(s)?;
        let style = font(LABEL_PX).pos(Pos::new(HPos::Right, VPos::Center));
        root.draw(&Text::new(t.label.clone(), (t.rect.right, *py), style))
            .map_err(s)?;
    }
    let lh = line_h(LABEL_PX);
    for (lines, cx) in layout.categories.iter().zip(category_px) {
        for (k, line) in lines.iter().enumerate() {
            let style = font(LABEL_PX).pos(Pos::new(HPos::Center, VPos::Top));
            let top = layout.x_labels_top + k as i32 * lh;
            root.draw(&Text::new(line.clone(), (*cx, top), style))
                .map_err(s)?;
        }
    }
    let (lines, top) = &layout.x_title;
    for (k, line) in lines.iter().enumerate() {
        let style = font(LABEL_PX).pos(Pos::new(HPos::Center, VPos::Top));
        let at = ((p.left + p.right) / 2, top + k as i32 * lh);
        root.draw(&Text::new(line.clone(), at, style)).map_err(s)?;
    }
    let (lines, left) = &layout.y_title;
    for (k, line) in lines.iter().enumerate() {
        // Turned a quarter left, reading bottom to top; anchored at its
        // middle, its top edge toward the picture's left.
        let style = font(LABEL_PX)
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Center, VPos::Top));
        let at = (left + k as i32 * lh, (p.top + p.bottom) / 2);
        root.draw(&Text::new(line.clone(), at, style)).map_err(s)?;
    }
    Ok(())
}

fn draw_swatch<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    swatch: Swatch,
    x: i32,
    y: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    match swatch {
        Swatch::Block(color) => root.draw(&Rectangle::new(
            [(x + 4, y - 6), (x + SWATCH_PX - 4, y + 6)],
            color.filled(),
        )),
        Swatch::Line { color, width, dash } => {
            let style = color.stroke_width(width);
            let (on, off) = dash.unwrap_or((SWATCH_PX, 0));
            let mut a = x;
            while a < x + SWATCH_PX {
                let b = (a + on).min(x + SWATCH_PX);
                root.draw(&PathElement::new(vec![(a, y), (b, y)], style))?;
                a = b + off.max(0);
                if off == 0 {
                    break;
                }
            }
            Ok(())
        }
    }
}

/// Draws a note's text in the row [`Layout::note`] kept, centred on column
/// `x` but inside the row, in `color`.
pub(crate) fn draw_note<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    layout: &Layout,
    x: i32,
    text: &str,
    color: RGBColor,
) -> Result<Option<Rect>, String> {
    let Some(row) = layout.note else {
        return Ok(None);
    };
    let text = shorten(text, LEGEND_PX, row.right - row.left);
    let tw = text_width(&text, LEGEND_PX);
    let left = (x - tw / 2).clamp(row.left, (row.right - tw).max(row.left));
    let style = ("sans-serif", f64::from(LEGEND_PX))
        .into_font()
        .color(&color)
        .pos(Pos::new(HPos::Left, VPos::Top));
    root.draw(&Text::new(text, (left, row.top), style))
        .map_err(|e| e.to_string())?;
    Ok(Some(Rect {
        left,
        top: row.top,
        right: left + tw,
        bottom: row.bottom,
    }))
}

/// Draws a crossing of two curves at pixel column `x`: a dashed rule down
/// the plot from the note row, and `note` in that row. Returns the note's box.
pub(crate) fn draw_crossing<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    layout: &Layout,
    x: i32,
    note: &str,
) -> Result<Option<Rect>, String> {
    let grey = RGBColor(70, 70, 70);
    let style = grey.stroke_width(1);
    let p = layout.plot;
    let mut y = layout.note.map_or(p.top, |r| r.bottom);
    while y < p.bottom {
        let end = (y + 6).min(p.bottom);
        root.draw(&PathElement::new(vec![(x, y), (x, end)], style))
            .map_err(|e| e.to_string())?;
        y = end + 4;
    }
    draw_note(root, layout, x, note, grey)
}

#[cfg(test)]
mod tests;
