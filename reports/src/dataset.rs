//! Several results files merged into one set of named series.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::results::{Collective, Record, ResultsFile, read_results};

/// The longest time a record may hold, in µs: 1e9 s, about 32 years. Longer
/// is a unit or writer bug, not a measurement; refusing it keeps every axis
/// and fit in a range where f64 arithmetic cannot overflow (times of
/// 1e200–1e308 µs once made a chart's log axis infinite and the report
/// allocate 24 GB).
pub const MAX_TIME_US: f64 = 1e15;

/// Why `r` cannot be charted or fitted, if it cannot: what the results
/// format refuses (non-finite or negative times, zero sizes, no ranks) and
/// times above [`MAX_TIME_US`]. Records built in memory skip the reader's
/// check, so the dataset checks again.
fn record_problem(r: &Record) -> Option<String> {
    let times = [
        ("min_us", Some(r.min_us)),
        ("median_us", Some(r.median_us)),
        ("mean_us", r.mean_us),
        ("p99_us", r.p99_us),
        ("max_us", Some(r.max_us)),
    ];
    // The bound first: measure's check would call a huge median "out of
    // order" and print all its 200 digits.
    let absurd = times.into_iter().find_map(|(name, v)| {
        v.filter(|v| *v > MAX_TIME_US).map(|v| {
            format!("{name} is {v:e} µs, above the {MAX_TIME_US:e} µs (1e9 s) a time may be")
        })
    });
    absurd.or_else(|| r.problem())
}

/// A record as an error names it: `gloo all_reduce 4096 B, 2 ranks`.
fn describe(r: &Record) -> String {
    format!(
        "{:?} {} {} B, {} ranks",
        r.label,
        r.collective.key(),
        r.bytes,
        r.world
    )
}

/// One input file.
#[derive(Debug, Clone)]
pub struct Source {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its manifest, as written.
    pub manifest: serde_json::Value,
    /// How many records it held.
    pub records: usize,
}

/// One record together with the series it belongs to.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Index into [`Dataset::series`].
    pub series: usize,
    /// Index into [`Dataset::sources`].
    pub source: usize,
    /// The measurement.
    pub record: Record,
}

/// A line in the charts: one label (from one file, at one world size).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Display name: the label, qualified by file when the label occurs in
    /// several files and by ` n=W` when it was measured at several world sizes.
    pub name: String,
    /// Measured by the torch peer (drawn dashed).
    pub peer: bool,
    /// Number of ranks.
    pub world: usize,
}

/// All inputs merged.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The files, in the order given.
    pub sources: Vec<Source>,
    /// The series, in order of first appearance.
    pub series: Vec<Series>,
    /// Every record.
    pub entries: Vec<Entry>,
    /// The labs' own figures of every file, in order.
    pub figures: Vec<measure::Figure>,
    /// Indices into `entries` per series: [`Dataset::points`] is asked once
    /// per series and collective, and scanning every entry each time made
    /// 6,250 labels × 100k records take minutes.
    by_series: Vec<Vec<usize>>,
}

/// Short names for the files that tell them apart: the stem, or
/// `parent/stem` when stems collide (the main job writes
/// `results/<timestamp>/bench.json`, so collisions are the normal case),
/// or the full path as a last resort.
fn file_qualifiers(paths: &[PathBuf]) -> Vec<String> {
    let stem = |p: &Path| {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    let with_parent = |p: &Path| match p.parent().and_then(|d| d.file_name()) {
        Some(d) => format!("{}/{}", d.to_string_lossy(), stem(p)),
        None => stem(p),
    };
    let candidates: [&dyn Fn(&Path) -> String; 3] =
        [&stem, &with_parent, &|p: &Path| p.display().to_string()];
    for make in candidates {
        let names: Vec<String> = paths.iter().map(|p| make(p)).collect();
        let unique: BTreeSet<&String> = names.iter().collect();
        if unique.len() == names.len() {
            return names;
        }
    }
    // The same path given twice: number them so the series stay apart.
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}#{}", p.display(), i + 1))
        .collect()
}

impl Dataset {
    /// Read and merge results files (in the order given).
    pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<Dataset> {
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let p = p.as_ref();
            files.push((p.to_path_buf(), read_results(p)?));
        }
        Dataset::from_files(files)
    }

    /// Merge already parsed files; each path names its file.
    pub fn from_files(files: Vec<(PathBuf, ResultsFile)>) -> Result<Dataset> {
        if files.is_empty() {
            return Err(Error::NoRecords("no results files given".into()));
        }
        for (path, f) in &files {
            for r in &f.records {
                if let Some(reason) = record_problem(r) {
                    return Err(Error::BadRecord {
                        path: path.clone(),
                        record: describe(r),
                        reason,
                    });
                }
            }
        }
        let paths: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
        let qualifiers = file_qualifiers(&paths);

        // Which files and which world sizes each label occurs in decides how
        // much qualification its series names need.
        let mut label_files: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
        for (i, (_, f)) in files.iter().enumerate() {
            for r in &f.records {
                label_files.entry(r.label.clone()).or_default().insert(i);
            }
        }
        let qualified = |label: &str, file: usize| -> String {
            if label_files.get(label).is_some_and(|s| s.len() > 1) {
                format!("{label} ({})", qualifiers[file])
            } else {
                label.to_string()
            }
        };
        let mut worlds: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
        for (i, (_, f)) in files.iter().enumerate() {
            for r in &f.records {
                worlds
                    .entry(qualified(&r.label, i))
                    .or_default()
                    .insert(r.world);
            }
        }

        let mut series: Vec<Series> = Vec::new();
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        let mut entries = Vec::new();
        let mut sources = Vec::with_capacity(files.len());
        let mut figures = Vec::new();
        for (i, (path, file)) in files.into_iter().enumerate() {
            figures.extend(file.figures);
            sources.push(Source {
                path,
                manifest: file.manifest,
                records: file.records.len(),
            });
            for record in file.records {
                let base = qualified(&record.label, i);
                let name = if worlds.get(&base).is_some_and(|w| w.len() > 1) {
                    format!("{base} n={}", record.world)
                } else {
                    base
                };
                let id = match index.get(&name) {
                    Some(&id) => id,
                    None => {
                        series.push(Series {
                            name: name.clone(),
                            peer: record.peer,
                            world: record.world,
                        });
                        index.insert(name, series.len() - 1);
                        series.len() - 1
                    }
                };
                // A series is a peer series if any of its records is.
                series[id].peer |= record.peer;
                entries.push(Entry {
                    series: id,
                    source: i,
                    record,
                });
            }
        }
        if entries.is_empty() && figures.is_empty() {
            let names: Vec<String> = sources
                .iter()
                .map(|s| s.path.display().to_string())
                .collect();
            return Err(Error::NoRecords(format!(
                "no records or figures in {}",
                names.join(", ")
            )));
        }
        let mut by_series = vec![Vec::new(); series.len()];
        for (i, e) in entries.iter().enumerate() {
            by_series[e.series].push(i);
        }
        Ok(Dataset {
            sources,
            series,
            entries,
            figures,
            by_series,
        })
    }

    /// The collectives present, in [`Collective::ALL`] order.
    pub fn collectives(&self) -> Vec<Collective> {
        let present: BTreeSet<Collective> =
            self.entries.iter().map(|e| e.record.collective).collect();
        Collective::ALL
            .into_iter()
            .filter(|c| present.contains(c))
            .collect()
    }

    /// Series that have data for `collective`, as indices into `series`.
    pub fn series_for(&self, collective: Collective) -> Vec<usize> {
        let ids: BTreeSet<usize> = self
            .entries
            .iter()
            .filter(|e| e.record.collective == collective)
            .map(|e| e.series)
            .collect();
        ids.into_iter().collect()
    }

    /// The points of one series for one collective, one per size, sorted by
    /// size. Where a file holds several records of the same size (other
    /// dtype, op or in-place variant), the fastest median stands for the size:
    /// a line needs one y per x, and "best configuration" is what the
    /// comparison is about. Every record still appears in the results tables.
    pub fn points(&self, series: usize, collective: Collective) -> Vec<&Record> {
        let mut best: BTreeMap<u64, &Record> = BTreeMap::new();
        let mine = self.by_series.get(series).map_or(&[][..], |v| v.as_slice());
        for e in mine.iter().map(|&i| &self.entries[i]) {
            if e.record.collective != collective {
                continue;
            }
            let r = &e.record;
            match best.get(&r.bytes) {
                Some(old) if old.median_us <= r.median_us => {}
                _ => {
                    best.insert(r.bytes, r);
                }
            }
        }
        best.into_values().collect()
    }

    /// Every record of one collective, ordered by series then size (for tables).
    pub fn records_of(&self, collective: Collective) -> Vec<&Entry> {
        let mut v: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| e.record.collective == collective)
            .collect();
        v.sort_by_key(|e| (e.series, e.record.bytes));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, file};

    fn rec(label: &str, world: usize, bytes: u64, median: f64) -> Record {
        testing::record(label, Collective::AllReduce, world, bytes, median)
    }

    #[test]
    fn labels_in_several_files_are_qualified_by_stem_or_parent() {
        let ds = Dataset::from_files(vec![
            (
                "results/a/bench.json".into(),
                file(vec![rec("gloo", 2, 8, 1.0), rec("only-a", 2, 8, 1.0)]),
            ),
            (
                "results/b/bench.json".into(),
                file(vec![rec("gloo", 2, 8, 2.0), rec("torch-gloo", 2, 8, 3.0)]),
            ),
        ])
        .unwrap();
        let names: Vec<&str> = ds.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["gloo (a/bench)", "only-a", "gloo (b/bench)", "torch-gloo"]
        );
        assert!(ds.series[3].peer && !ds.series[0].peer);

        let ds = Dataset::from_files(vec![
            ("x/one.json".into(), file(vec![rec("gloo", 2, 8, 1.0)])),
            ("x/two.json".into(), file(vec![rec("gloo", 2, 8, 1.0)])),
        ])
        .unwrap();
        assert_eq!(ds.series[0].name, "gloo (one)");
        assert_eq!(ds.series[1].name, "gloo (two)");
    }

    #[test]
    fn several_world_sizes_split_a_label() {
        let ds = Dataset::from_files(vec![(
            "r.json".into(),
            file(vec![rec("mpi", 2, 8, 1.0), rec("mpi", 4, 8, 2.0)]),
        )])
        .unwrap();
        let names: Vec<&str> = ds.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mpi n=2", "mpi n=4"]);
        assert_eq!(ds.series[1].world, 4);
    }

    #[test]
    fn duplicate_sizes_keep_the_fastest_for_lines() {
        let ds = Dataset::from_files(vec![(
            "r.json".into(),
            file(vec![
                rec("mpi", 2, 64, 5.0),
                rec("mpi", 2, 8, 1.0),
                rec("mpi", 2, 64, 3.0),
            ]),
        )])
        .unwrap();
        let pts = ds.points(0, Collective::AllReduce);
        let got: Vec<(u64, f64)> = pts.iter().map(|r| (r.bytes, r.median_us)).collect();
        assert_eq!(got, [(8, 1.0), (64, 3.0)]);
        assert_eq!(ds.records_of(Collective::AllReduce).len(), 3);
    }

    #[test]
    fn report_refuses_non_finite_times() {
        for (field, bad) in [
            ("median_us", f64::NAN),
            ("max_us", f64::INFINITY),
            ("min_us", -1.0),
            ("median_us", 1e200),
        ] {
            let mut r = rec("gloo", 2, 4096, 5.0);
            r.max_us = 10.0;
            match field {
                "median_us" => r.median_us = bad,
                "max_us" => r.max_us = bad,
                _ => r.min_us = bad,
            }
            let ok = rec("mpi", 2, 8, 1.0);
            let err = Dataset::from_files(vec![("runs/r.json".into(), file(vec![ok, r]))])
                .unwrap_err()
                .to_string();
            for part in ["runs/r.json", "\"gloo\" all_reduce 4096 B, 2 ranks", field] {
                assert!(
                    err.contains(part),
                    "{field} = {bad}: {part} missing from {err}"
                );
            }
        }
        // The largest allowed time still loads.
        let mut r = rec("gloo", 2, 8, MAX_TIME_US);
        r.min_us = 1.0;
        r.max_us = MAX_TIME_US;
        assert!(Dataset::from_files(vec![("r.json".into(), file(vec![r]))]).is_ok());
    }

    #[test]
    fn empty_inputs_are_an_error() {
        assert!(matches!(
            Dataset::from_files(vec![]),
            Err(Error::NoRecords(_))
        ));
        let err = Dataset::from_files(vec![("e.json".into(), file(vec![]))]).unwrap_err();
        assert!(err.to_string().contains("e.json"), "{err}");
    }
}
