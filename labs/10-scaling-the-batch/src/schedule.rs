//! The check of lab 10's stretch goal, the linear-scaling rule with its
//! warm-up (`cargo lab check 10 --stretch`). The schedule is a pure function,
//! so the check asks for known rates and names each usual mistake by the
//! numbers it gives: at base rate 0.1 tuned for batch 64, batch 512 (k = 8)
//! with a 10-step warm-up must give 0.1, 0.17, …, 0.73 for steps 0 to 9 and
//! 0.8 from step 10; batch 96 (k = 1.5, not a whole number) with no warm-up
//! must give 0.15 at step 0; a batch of 0 or a rate that is not positive must
//! be an error.

#[cfg(test)]
mod tests;

use labkit::LabError;
use labkit::named;

/// A schedule, as `stretch::lr_at`: (base rate, base batch, batch, warm-up
/// steps, step) → rate (so a test can hand in mistaken ones).
pub type LrAt = fn(f64, usize, usize, u64, u64) -> Result<f64, LabError>;

/// The rate tuned at [`BASE_BATCH`].
const BASE_LR: f64 = 0.1;
/// The batch [`BASE_LR`] was tuned at.
const BASE_BATCH: usize = 64;
/// The batch of the warm-up case: k = 8.
const BATCH: usize = 512;
/// Warm-up steps of the warm-up case.
const WARMUP: u64 = 10;
/// The last step asked for: two past the warm-up.
const LAST: u64 = WARMUP + 2;
/// The batch of the no-warm-up case: k = 1.5, which integer division makes 1.
const ODD_BATCH: usize = 96;

/// The linear rule's rate after the warm-up, at [`BATCH`].
fn target() -> f64 {
    BASE_LR * BATCH as f64 / BASE_BATCH as f64
}

/// The right rate of `step` in the warm-up case (a ramp from the base rate at
/// step 0 to the target at step [`WARMUP`]), or, with `warmup` other than
/// [`WARMUP`], the ramp a mistaken schedule would give.
fn ramp(step: f64, warmup: f64) -> f64 {
    if step >= warmup {
        target()
    } else {
        BASE_LR + (target() - BASE_LR) * step / warmup
    }
}

/// Whether `got` is `want` up to rounding (a NaN never is).
fn near(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-9 * want.abs().max(1e-3)
}

/// `x` rounded to 9 decimals, so that messages say 0.15, not
/// 0.15000000000000002 (a NaN or an infinity stays itself).
fn round(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e9).round() / 1e9
    } else {
        x
    }
}

/// Names what is wrong with the rates of steps 0 to [`LAST`] in the warm-up
/// case, or nothing.
fn judge_warmup(got: &[f64]) -> Option<String> {
    let want: Vec<f64> = (0..=LAST).map(|s| ramp(s as f64, WARMUP as f64)).collect();
    let step = got.iter().zip(&want).position(|(&g, &w)| !near(g, w))?;
    let head = format!(
        "at base rate {BASE_LR} tuned for batch {BASE_BATCH}, batch {BATCH} (k = {}) with a \
         {WARMUP}-step warm-up: step {step}'s rate is {}, expected {} (steps 0 to {LAST}: {:?})",
        BATCH / BASE_BATCH,
        round(got[step]),
        round(want[step]),
        got.iter().map(|&g| round(g)).collect::<Vec<f64>>()
    );
    let last = got[LAST as usize];
    let all = |f: &dyn Fn(f64) -> f64| got.iter().enumerate().all(|(s, &g)| near(g, f(s as f64)));
    let (why, key) = if near(got[0], 0.0) {
        (
            "the warm-up starts at 0; it starts at the base rate, which is known to be stable",
            "warm-up-from-zero",
        )
    } else if near(got[0], target()) {
        (
            "step 0 already has the scaled rate: no warm-up",
            "no-warm-up",
        )
    } else if near(last, BASE_LR * (BATCH as f64 / BASE_BATCH as f64).sqrt()) {
        (
            "the rate after the warm-up is the base rate times √k: that is the square-root \
             rule, and this schedule is the linear one",
            "linear-not-sqrt",
        )
    } else if near(last, BASE_LR * BASE_BATCH as f64 / BATCH as f64) {
        (
            "the rate after the warm-up is the base rate divided by k: a bigger batch gets a \
             bigger rate",
            "ratio-upside-down",
        )
    } else if all(&|s| ramp(s + 1.0, WARMUP as f64))
        || all(&|s| ramp(s, WARMUP as f64 - 1.0))
        || all(&|s| ramp(s, WARMUP as f64 + 1.0))
    {
        (
            "the ramp is one step off: it must give the base rate at step 0 and reach the \
             target exactly at step warmup_steps",
            "warm-up-off-by-one",
        )
    } else {
        ("", "")
    };
    Some(if key.is_empty() {
        head
    } else {
        named(format!("{head}: {why}"), key)
    })
}

/// Names what is wrong with step 0's rate `got` at batch [`ODD_BATCH`] with no
/// warm-up, or nothing.
fn judge_no_warmup(got: f64) -> Option<String> {
    let want = BASE_LR * ODD_BATCH as f64 / BASE_BATCH as f64;
    if near(got, want) {
        return None;
    }
    let head = format!(
        "at base rate {BASE_LR} tuned for batch {BASE_BATCH}, batch {ODD_BATCH} (k = 1.5) with \
         no warm-up: step 0's rate is {}, expected {}",
        round(got),
        round(want)
    );
    Some(if !got.is_finite() {
        named(
            format!(
                "{head}: with 0 warm-up steps, step / warmup_steps is 0 / 0; the warm-up is \
                 over before step 0"
            ),
            "no-warm-up-steps",
        )
    } else if near(got, BASE_LR) {
        named(
            format!("{head}: {ODD_BATCH} / {BASE_BATCH} in integers is 1, not 1.5"),
            "integer-ratio",
        )
    } else if near(got, BASE_LR * (ODD_BATCH as f64 / BASE_BATCH as f64).sqrt()) {
        named(
            format!("{head}: that is the square-root rule"),
            "linear-not-sqrt",
        )
    } else {
        head
    })
}

/// The stretch goal's check (see the module docs). Returns what passed.
pub fn check(f: LrAt) -> Result<String, LabError> {
    let got = (0..=LAST)
        .map(|step| f(BASE_LR, BASE_BATCH, BATCH, WARMUP, step))
        .collect::<Result<Vec<f64>, LabError>>()?;
    if let Some(why) = judge_warmup(&got) {
        return Err(LabError::Wrong(why));
    }
    if let Some(why) = judge_no_warmup(f(BASE_LR, BASE_BATCH, ODD_BATCH, 0, 0)?) {
        return Err(LabError::Wrong(why));
    }
    for (lr, base_batch, batch, what) in [
        (BASE_LR, 0, BATCH, "a base batch of 0"),
        (BASE_LR, BASE_BATCH, 0, "a batch of 0"),
        (0.0, BASE_BATCH, BATCH, "a base rate of 0"),
        (f64::NAN, BASE_BATCH, BATCH, "a base rate of NaN"),
    ] {
        if let Ok(rate) = f(lr, base_batch, batch, WARMUP, 0) {
            return Err(LabError::Wrong(named(
                format!(
                    "{what} gave Ok({rate}): it must be an error saying why, or the optimizer \
                     writes that rate into every weight"
                ),
                "bad-input",
            )));
        }
    }
    Ok(format!(
        "at batch {BATCH} the rate warms up from {BASE_LR} to {} over {WARMUP} steps; at batch \
         {ODD_BATCH} it is {} from step 0; bad batches and rates are errors",
        target(),
        BASE_LR * ODD_BATCH as f64 / BASE_BATCH as f64
    ))
}
