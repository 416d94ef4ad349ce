//! A lab's own measurement that is not a collective's size sweep: a training
//! loss over wall time, the split of a step into phases, a pipeline's bubble.
//! It travels in the same results file as the records (its `figures` list), so
//! one format, one manifest and one reader serve the bench and every lab;
//! `reports` draws each one as a chart named after it.

use serde::{Deserialize, Serialize};

/// How a [`Figure`] is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureKind {
    /// Each series is a line through its `(x, y)` points (a log x axis when
    /// x spans two decades or more).
    Lines,
    /// One bar per category; each series is one layer of every bar, stacked
    /// in series order. A point's `x` is its category's index.
    StackedBars,
    /// One group per category (a world size, a configuration), one bar per
    /// series side by side in it: categories are not a continuous axis, so
    /// no line joins them. A point's `x` is its category's index.
    GroupedBars,
}

/// One named series of a [`Figure`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FigureSeries {
    /// The legend's text.
    pub name: String,
    /// `(x, y)` points, in drawing order.
    pub points: Vec<[f64; 2]>,
    /// A prediction rather than a measurement (drawn dashed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub theory: bool,
}

impl FigureSeries {
    /// A measured series.
    pub fn measured(name: impl Into<String>, points: Vec<[f64; 2]>) -> Self {
        FigureSeries {
            name: name.into(),
            points,
            theory: false,
        }
    }

    /// A predicted series (drawn dashed).
    pub fn theory(name: impl Into<String>, points: Vec<[f64; 2]>) -> Self {
        FigureSeries {
            name: name.into(),
            points,
            theory: true,
        }
    }
}

/// One chart's numbers, with everything needed to draw and label it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The chart's file stem: `[a-z0-9_-]`, unique within a results file.
    pub name: String,
    /// The chart's title.
    pub title: String,
    /// Lines or stacked bars.
    pub kind: FigureKind,
    /// The x axis' label (with its unit).
    pub x_label: String,
    /// The y axis' label (with its unit).
    pub y_label: String,
    /// For the bar kinds, the categories' labels, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// The data.
    pub series: Vec<FigureSeries>,
}

impl Figure {
    /// A line chart with no series yet.
    pub fn lines(name: &str, title: &str, x_label: &str, y_label: &str) -> Self {
        Figure {
            name: name.into(),
            title: title.into(),
            kind: FigureKind::Lines,
            x_label: x_label.into(),
            y_label: y_label.into(),
            categories: Vec::new(),
            series: Vec::new(),
        }
    }

    /// A stacked bar chart with one bar per category and no layers yet.
    pub fn stacked_bars(name: &str, title: &str, categories: Vec<String>, y_label: &str) -> Self {
        Figure {
            name: name.into(),
            title: title.into(),
            kind: FigureKind::StackedBars,
            x_label: String::new(),
            y_label: y_label.into(),
            categories,
            series: Vec::new(),
        }
    }

    /// A grouped bar chart: one group per category along an x axis titled
    /// `x_label`, one bar per series in each, no series yet.
    pub fn grouped_bars(
        name: &str,
        title: &str,
        x_label: &str,
        categories: Vec<String>,
        y_label: &str,
    ) -> Self {
        Figure {
            kind: FigureKind::GroupedBars,
            x_label: x_label.into(),
            ..Figure::stacked_bars(name, title, categories, y_label)
        }
    }

    /// Adds a series (builder style).
    pub fn with(mut self, series: FigureSeries) -> Self {
        self.series.push(series);
        self
    }

    /// Adds one layer of a stacked bar chart, or one series of a grouped one:
    /// `values[i]` in category `i`.
    pub fn with_layer(self, name: &str, values: &[f64]) -> Self {
        let points = values
            .iter()
            .enumerate()
            .map(|(i, &v)| [i as f64, v])
            .collect();
        self.with(FigureSeries::measured(name, points))
    }

    /// Why this figure cannot be drawn, if it cannot: a bad name, no data, a
    /// value that is not finite, a bar outside its categories or below zero.
    pub fn problem(&self) -> Option<String> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !name_ok {
            return Some(format!(
                "figure name {:?} must be non-empty [a-z0-9_-] (it becomes a file name)",
                self.name
            ));
        }
        if self.series.iter().all(|s| s.points.is_empty()) {
            return Some(format!("figure {} has no points", self.name));
        }
        for s in &self.series {
            for p in &s.points {
                if !p[0].is_finite() || !p[1].is_finite() {
                    return Some(format!(
                        "figure {}, series {:?}: point {p:?} is not finite",
                        self.name, s.name
                    ));
                }
                if self.kind != FigureKind::Lines {
                    let i = p[0];
                    if i.fract() != 0.0 || i < 0.0 || i as usize >= self.categories.len() {
                        return Some(format!(
                            "figure {}, series {:?}: bar index {i} outside its {} categories",
                            self.name,
                            s.name,
                            self.categories.len()
                        ));
                    }
                    if p[1] < 0.0 {
                        return Some(format!(
                            "figure {}, series {:?}: a bar cannot be negative ({})",
                            self.name, s.name, p[1]
                        ));
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phases() -> Figure {
        Figure::stacked_bars("phases", "Step", vec!["cpu".into(), "cuda".into()], "ms")
            .with_layer("forward", &[3.0, 0.5])
            .with_layer("backward", &[6.0, 1.0])
    }

    #[test]
    fn a_figure_round_trips_through_json() {
        let f = Figure::lines("loss", "Loss", "s", "loss")
            .with(FigureSeries::measured(
                "1 worker",
                vec![[0.0, 2.3], [1.0, 1.1]],
            ))
            .with(FigureSeries::theory("ideal", vec![[0.0, 2.3]]));
        let text = serde_json::to_string(&f).unwrap();
        assert!(!text.contains("categories"), "{text}");
        assert_eq!(serde_json::from_str::<Figure>(&text).unwrap(), f);
        assert_eq!(phases().problem(), None);
    }

    #[test]
    fn undrawable_figures_say_why() {
        let mut f = phases();
        f.name = "Phases/1".into();
        assert!(f.problem().unwrap().contains("[a-z0-9_-]"));
        let f = phases().with_layer("optimizer", &[1.0, 1.0, 1.0]);
        assert!(f.problem().unwrap().contains("outside its 2 categories"));
        let f = phases().with_layer("data", &[f64::NAN, 1.0]);
        assert!(f.problem().unwrap().contains("not finite"));
        let f = Figure::lines("empty", "E", "x", "y");
        assert!(f.problem().unwrap().contains("no points"));
        let grouped = |values: &[f64]| {
            Figure::grouped_bars("t", "T", "ranks", vec!["1".into(), "2".into()], "samples/s")
                .with_layer("a", values)
        };
        assert_eq!(grouped(&[1.0, 2.0]).problem(), None);
        assert!(
            grouped(&[1.0, 2.0, 3.0])
                .problem()
                .unwrap()
                .contains("outside its 2")
        );
        assert!(
            grouped(&[-1.0])
                .problem()
                .unwrap()
                .contains("cannot be negative")
        );
    }
}
