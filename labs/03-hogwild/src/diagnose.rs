//! Names the common mistakes of the Hogwild pieces by calling each alone on
//! three numbers, in this process, before any worker starts: a piece that
//! writes where it should not is recognisable from those numbers, while the
//! workers' run would only say that the loss did not fall.

use tch::{Kind, Tensor};
use trainers::hogwild::{Pieces, Reference};

/// An explanation and its `hint: <key>` line.
fn named(what: String, key: &str) -> Option<String> {
    Some(format!("\n{}", labkit::named(what, key)))
}

/// A tensor's numbers.
fn values(t: &Tensor) -> Option<Vec<f64>> {
    Vec::<f64>::try_from(t.f_to_kind(Kind::Double).ok()?.f_reshape([-1]).ok()?).ok()
}

/// A parameter as the model holds one: a leaf that requires a gradient.
fn parameter(v: &[f32]) -> Tensor {
    Tensor::from_slice(v).set_requires_grad(true)
}

/// The first element where `got` is not `want`, as "element i: got g, expected w".
fn first_wrong(got: &[f64], want: &[f64]) -> Option<String> {
    let i = (0..want.len()).find(|&i| got.get(i).is_none_or(|g| (g - want[i]).abs() > 1e-6))?;
    let g = got.get(i).map_or("nothing".to_string(), |g| g.to_string());
    Some(format!("element {i}: got {g}, expected {}", want[i]))
}

/// `attach` on a parameter [1, 2, 3] and a region [5, 6, 7]; then every number
/// of the region is set to 9, as another worker's update would: the parameter
/// must read 9s.
pub fn attach(pieces: &dyn Pieces) -> Option<String> {
    let p = parameter(&[1.0, 2.0, 3.0]);
    let region = Tensor::from_slice(&[5f32, 6.0, 7.0]);
    pieces
        .attach(&[p.shallow_clone()], &[region.shallow_clone()])
        .ok()?;
    let attached = values(&p)?;
    let _ = tch::no_grad(|| region.shallow_clone().f_fill_(9.0)).ok()?;
    let seen = values(&p)?;
    let wrong = first_wrong(&seen, &[9.0; 3])?;
    let what = format!(
        "Your attach on a parameter [1, 2, 3] and a region [5, 6, 7], then the region set \
         to 9 (another worker's update): the parameter's {wrong}"
    );
    if attached[..] == [5.0, 6.0, 7.0] {
        return named(
            format!(
                "{what}. It took the region's numbers, but not the region itself: a copy. \
                 This worker would never see the others' updates, nor they its own."
            ),
            "attach-copies",
        );
    }
    named(
        format!("{what}. It still holds its own numbers: nothing was attached."),
        "attach-copies",
    )
}

/// `update` with lr 0.5 on a parameter [1, 2, 3] attached (by trainers' own
/// `attach`) to a region, whose gradient is [1, 2, 4]: the region must then
/// hold [0.5, 1, 1] and the gradient be zero (or gone).
pub fn update(pieces: &dyn Pieces) -> Option<String> {
    let p = parameter(&[1.0, 2.0, 3.0]);
    let region = Tensor::from_slice(&[1f32, 2.0, 3.0]);
    Reference
        .attach(&[p.shallow_clone()], &[region.shallow_clone()])
        .ok()?;
    let c = Tensor::from_slice(&[1f32, 2.0, 4.0]);
    p.f_mul(&c)
        .ok()?
        .f_sum(Kind::Float)
        .ok()?
        .f_backward()
        .ok()?;
    let what = "Your update with lr 0.5 on a parameter [1, 2, 3] in the region, gradient [1, 2, 4]";
    if let Err(e) = pieces.update(&[p.shallow_clone()], 0.5) {
        let e = e.to_string();
        if e.contains("leaf Variable") || e.contains("requires grad") {
            return named(
                format!(
                    "{what} failed: {e}\nlibtorch refuses to change a parameter in place \
                     while autograd records: the update is not part of the model's graph."
                ),
                "update-under-autograd",
            );
        }
        return None;
    }
    let got = values(&region)?;
    if let Some(wrong) = first_wrong(&got, &[0.5, 1.0, 1.0]) {
        let what = format!("{what}: the region's {wrong}");
        if got[..] == [1.0, 2.0, 3.0] {
            return named(
                format!(
                    "{what}, the number it held before: the step never reached the \
                     region. A new tensor `p - lr * g` lives in fresh memory; only an \
                     in-place write lands in the pages the workers share."
                ),
                "update-not-in-place",
            );
        }
        if got[..] == [1.5, 3.0, 5.0] {
            return named(
                format!("{what}: the parameter moved along the gradient, not against it."),
                "update-sign",
            );
        }
        return named(what, "update-not-in-place");
    }
    let g = p.f_grad().ok()?;
    if g.defined() && values(&g)?.iter().any(|&x| x != 0.0) {
        return named(
            format!(
                "{what}: the region is right, but the gradient still holds {:?} \
                 afterwards: the next backward adds to it, and every later step repeats \
                 this one.",
                values(&g)?
            ),
            "grad-not-zeroed",
        );
    }
    None
}

/// What the probes name in `pieces`, joined (empty when nothing is recognised,
/// or when a piece is not written yet: its own error says so).
pub fn diagnose(pieces: &dyn Pieces) -> String {
    [attach(pieces), update(pieces)]
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests;
