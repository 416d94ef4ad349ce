//! Which hint a failed check shows: the one for *that* failure when the check can
//! name the mistake, else the next step of the lab's ladder, and never a new one
//! for the same failure seen again.
//!
//! # The protocol (for lab authors)
//!
//! A lab's hints live in `labs/info.toml`:
//!
//! * `hints = [concept, approach, near-code]`: the **ladder**, questions that get one
//!   step more concrete each. `cargo lab hint N` climbs it one step per call;
//! * `[[lab.diagnosis]]` tables, each a `key` and a `hint`: **keyed hints**, for one
//!   mistake the check can recognise.
//!
//! A self-check names a recognised mistake by putting a line `hint: <key>` in its
//! failure message (the key lowercase-with-dashes, e.g. `hint: avg-not-sum`; text
//! before `hint:` on the line is allowed, so `panic!("...\nhint: avg-not-sum")`
//! works as well as a log line). When `cargo lab check N` fails it then shows:
//!
//! 1. the keyed hint of the first key in the output that the lab defines;
//! 2. otherwise the ladder's next step, *unless* the failure is the same as the last
//!    failed check's ([`Failure::signature`]), in which case the step already shown
//!    is shown again: re-running a check does not spend the ladder.
//!
//! A key the lab does not define is reported (a typo in the check or in
//! `info.toml`) and the ladder is used.
//!
//! A stretch goal (`[lab.stretch]`) has its own `hints` ladder and
//! `[[lab.stretch.diagnosis]]` keyed hints, under the same protocol, and its own
//! place in the progress file, so climbing one ladder spends nothing of the other.

use super::info::Diagnosis;
use super::progress::fingerprint;

/// What a failed self-check printed, read for the hint protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The `hint: <key>` keys in the output, in order, without repeats.
    pub keys: Vec<String>,
    /// A fingerprint of the failure that ignores what changes from run to run
    /// (timings, long numbers such as thread ids, temporary paths, the order in
    /// which parallel tests report), so the same mistake checked twice has the
    /// same signature.
    pub signature: String,
}

impl Failure {
    /// Reads a check's combined stdout and stderr.
    pub fn read(output: &str) -> Failure {
        let mut keys = Vec::new();
        let mut normal = Vec::new();
        for line in output.lines() {
            if let Some(key) = hint_key(line) {
                if !keys.iter().any(|k| k == key) {
                    keys.push(key.to_owned());
                }
            }
            // libtest's summary carries the run's duration.
            if line.starts_with("test result:") || line.contains("finished in") {
                continue;
            }
            normal.push(normalise(line));
        }
        // libtest runs a check's tests in parallel and reports them in the order
        // they finish, which changes from run to run: the lines, not their order,
        // are the failure.
        normal.sort_unstable();
        Failure {
            keys,
            signature: fingerprint(normal.join("\n").as_bytes()),
        }
    }
}

/// The key of a `hint: <key>` line, if the line is one.
fn hint_key(line: &str) -> Option<&str> {
    let (_, rest) = line.split_once("hint:")?;
    let key = rest.trim();
    is_key(key).then_some(key)
}

/// Whether `key` is a valid hint key: lowercase ASCII letters, digits and dashes,
/// starting with a letter.
pub fn is_key(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_lowercase())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `line` with what differs between two runs of the same code masked: numbers with
/// a fraction or of three digits or more (values, times, process ids) become `#`,
/// temporary folders (`.tmpXXXX`) become `.tmp#`. Small integers stay: they are
/// rank, step and test numbers, which tell one failure from another.
fn normalise(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i..].starts_with(&['.', 't', 'm', 'p']) {
            out.push_str(".tmp#");
            i += 4;
            while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                i += 1;
            }
            continue;
        }
        if chars[i].is_ascii_digit() {
            let start = i;
            let digits = |i: &mut usize| {
                while *i < chars.len() && chars[*i].is_ascii_digit() {
                    *i += 1;
                }
            };
            digits(&mut i);
            let mut real = false;
            if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
                i += 1;
                digits(&mut i);
                real = true;
            }
            if matches!(chars.get(i), Some('e' | 'E')) {
                let sign = usize::from(matches!(chars.get(i + 1), Some('-' | '+')));
                if chars.get(i + 1 + sign).is_some_and(char::is_ascii_digit) {
                    i += 1 + sign;
                    digits(&mut i);
                    real = true;
                }
            }
            if real || i - start >= 3 {
                out.push('#');
            } else {
                out.extend(&chars[start..i]);
            }
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The name of step `index` of a ladder of `len` steps: the first is the concept,
/// the last is near the code, the ones between are the approach.
pub fn step_name(index: usize, len: usize) -> &'static str {
    if index == 0 {
        "the concept"
    } else if index + 1 == len {
        "near the code"
    } else {
        "the approach"
    }
}

/// What a failed check shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown<'a> {
    /// The keyed hint for the mistake the check named.
    Keyed {
        /// The key the check printed.
        key: &'a str,
        /// Its hint.
        hint: &'a str,
    },
    /// Step `step` (from 0) of the ladder.
    Ladder {
        /// Which step.
        step: usize,
        /// Whether this failure spent it (false: the same failure as last time).
        new: bool,
    },
}

/// The verdict of the protocol: what to show for `failure`, from the `ladder`
/// and keyed hints `diagnosis` of the part checked, given that `shown` ladder
/// steps were shown so far and the last failed check had signature `last`.
/// Returns also the keys the check named that `diagnosis` does not define.
pub fn choose<'a>(
    ladder: &[String],
    diagnosis: &'a [Diagnosis],
    failure: &'a Failure,
    shown: usize,
    last: Option<&str>,
) -> (Shown<'a>, Vec<&'a str>) {
    let mut unknown = Vec::new();
    for key in &failure.keys {
        match diagnosis.iter().find(|d| d.key == *key) {
            Some(d) => {
                return (Shown::Keyed { key, hint: &d.hint }, unknown);
            }
            None => unknown.push(key.as_str()),
        }
    }
    let last_step = ladder.len().saturating_sub(1);
    let shown_step = if last == Some(failure.signature.as_str()) && shown > 0 {
        Shown::Ladder {
            step: (shown - 1).min(last_step),
            new: false,
        }
    } else {
        Shown::Ladder {
            step: shown.min(last_step),
            new: shown <= last_step,
        }
    };
    (shown_step, unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ladder of three steps and one keyed hint, as a lab (or its stretch) has.
    struct Hints {
        hints: Vec<String>,
        diagnosis: Vec<Diagnosis>,
    }

    fn lab() -> Hints {
        Hints {
            hints: vec!["Concept?".into(), "Approach?".into(), "Code?".into()],
            diagnosis: vec![Diagnosis {
                key: "avg-not-sum".into(),
                hint: "Sum or mean?".into(),
            }],
        }
    }

    fn choose<'a>(
        lab: &'a Hints,
        failure: &'a Failure,
        shown: usize,
        last: Option<&str>,
    ) -> (Shown<'a>, Vec<&'a str>) {
        super::choose(&lab.hints, &lab.diagnosis, failure, shown, last)
    }

    const SUMMED: &str = "running 1 test\ntest step_1 ... FAILED\n\n---- step_1 stdout ----\n\
        thread 'step_1' panicked at labs/07/tests/check.rs:10:9:\nexercise: rank 0's weight \
        is 0.2481 instead of 0.1240\nhint: avg-not-sum\n\ntest result: FAILED. 0 passed; 1 \
        failed; finished in 0.53s\n";

    #[test]
    fn hint_lines_name_keys_and_other_lines_do_not() {
        let f = Failure::read(SUMMED);
        assert_eq!(f.keys, ["avg-not-sum"]);
        let f = Failure::read(
            "  hint: block-twice\nerror: hint: block-twice\nhint: Not A Key\nhint:\nno hint here",
        );
        assert_eq!(f.keys, ["block-twice"]);
        assert!(!is_key("-dash-first") && !is_key("") && is_key("a1-b"));
    }

    #[test]
    fn timings_and_values_do_not_change_the_signature_but_the_step_does() {
        let a = Failure::read(SUMMED);
        let b = Failure::read(&SUMMED.replace("0.53s", "1.20s").replace("0.2481", "0.2482"));
        assert_eq!(a.signature, b.signature);
        let step2 = Failure::read(&SUMMED.replace("step_1", "step_2"));
        assert_ne!(a.signature, step2.signature);
        // Parallel tests report in the order they finish.
        let both = |first: &str, second: &str| {
            Failure::read(&format!(
                "---- {first} stdout ----\nthread '{first}' (2311) panicked: {first} failed\n\
                 ---- {second} stdout ----\nthread '{second}' (2312) panicked: {second} failed\n"
            ))
        };
        assert_eq!(
            both("step_1", "step_2").signature,
            both("step_2", "step_1").signature
        );
        assert_eq!(normalise("pid 12345 at 1.5e-3 rank 2"), "pid # at # rank 2");
        assert_eq!(normalise("x/.tmpAbC12/y"), "x/.tmp#/y");
    }

    #[test]
    fn a_named_mistake_gets_its_own_hint_not_the_ladders_next() {
        let lab = lab();
        let f = Failure::read(SUMMED);
        let (shown, unknown) = choose(&lab, &f, 0, None);
        assert_eq!(
            shown,
            Shown::Keyed {
                key: "avg-not-sum",
                hint: "Sum or mean?"
            }
        );
        assert!(unknown.is_empty());
        // An undefined key is reported and the ladder answers.
        let typo = Failure::read("hint: avg-not-summ\nhint: avg-not-sum\n");
        let (shown, unknown) = choose(&lab, &typo, 0, None);
        assert!(matches!(shown, Shown::Keyed { .. }));
        assert_eq!(unknown, ["avg-not-summ"]);
        let only_typo = Failure::read("hint: avg-not-summ\n");
        let (shown, _) = choose(&lab, &only_typo, 0, None);
        assert_eq!(shown, Shown::Ladder { step: 0, new: true });
    }

    #[test]
    fn the_same_failure_twice_does_not_spend_a_hint() {
        let lab = lab();
        let f = Failure::read("thread panicked: exercise: TODO(lab 07) step 1\n");
        // First failure: the concept, spent.
        let (shown, _) = choose(&lab, &f, 0, None);
        assert_eq!(shown, Shown::Ladder { step: 0, new: true });
        // The same failure again (one step shown): the concept again, not spent.
        let (shown, _) = choose(&lab, &f, 1, Some(&f.signature));
        assert_eq!(
            shown,
            Shown::Ladder {
                step: 0,
                new: false
            }
        );
        // A different failure: the next step.
        let g = Failure::read("thread panicked: rank 1 disagrees\n");
        let (shown, _) = choose(&lab, &g, 1, Some(&f.signature));
        assert_eq!(shown, Shown::Ladder { step: 1, new: true });
        // At the top of the ladder a new failure shows the last step, spending nothing.
        let (shown, _) = choose(&lab, &g, 3, Some(&f.signature));
        assert_eq!(
            shown,
            Shown::Ladder {
                step: 2,
                new: false
            }
        );
    }

    #[test]
    fn ladder_steps_are_named_concept_approach_near_code() {
        let names: Vec<_> = (0..3).map(|i| step_name(i, 3)).collect();
        assert_eq!(names, ["the concept", "the approach", "near the code"]);
        assert_eq!(step_name(0, 1), "the concept");
    }
}
