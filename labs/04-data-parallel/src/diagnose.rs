//! Names the common mistakes of the DataParallel pieces by calling each alone
//! on a few numbers on the CPU, before the equivalence check trains: there a
//! wrong piece only shows as parameters that drift from the one-device step;
//! here the numbers say which piece and how.

use tch::{Device, Kind, Tensor};
use trainers::data_parallel::Pieces;

/// An explanation and its `hint: <key>` line.
fn named(what: String, key: &str) -> Option<String> {
    Some(format!("\n{what}\nhint: {key}"))
}

/// A tensor's numbers.
fn values(t: &Tensor) -> Option<Vec<f64>> {
    Vec::<f64>::try_from(t.f_to_kind(Kind::Double).ok()?.f_reshape([-1]).ok()?).ok()
}

/// A parameter [0, 0] whose gradient is [g, g] (left by a backward, as a
/// replica's would be).
fn with_grad(g: f32) -> Option<Tensor> {
    let p = Tensor::zeros([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    p.f_mul_scalar(g as f64)
        .ok()?
        .f_sum(Kind::Float)
        .ok()?
        .f_backward()
        .ok()?;
    Some(p)
}

/// `reduce` with the master's gradient [1, 1] and two replicas' [2, 2] and
/// [3, 3]: the master must end with [6, 6].
pub fn reduce(pieces: &dyn Pieces) -> Option<String> {
    let master = [with_grad(1.0)?];
    let replicas = [vec![with_grad(2.0)?], vec![with_grad(3.0)?]];
    pieces.reduce(&master, &replicas).ok()?;
    let got = values(&master[0].f_grad().ok()?)?;
    let g = *got.first()?;
    if (g - 6.0).abs() < 1e-6 {
        return None;
    }
    let what = format!(
        "Your reduce with gradients [1, 1] on the master and [2, 2], [3, 3] on two \
         replicas: the master's gradient element 0: got {g}, expected 6 (the sum)"
    );
    if (g - 2.0).abs() < 1e-6 || (g - 2.5).abs() < 1e-6 {
        return named(
            format!(
                "{what}: that is an average. The loss was already a mean over the whole \
                 batch on the first device, so each replica's gradient is its rows' share \
                 of that mean: averaging divides the step by the number of replicas."
            ),
            "reduce-averaged",
        );
    }
    if (g - 1.0).abs() < 1e-6 {
        return named(
            format!(
                "{what}: the master's own, unchanged: the replicas' gradients were added \
                 into a new tensor, not into the master's `.grad` itself."
            ),
            "reduce-not-in-place",
        );
    }
    if (g - 5.0).abs() < 1e-6 {
        return named(
            format!(
                "{what}: the replicas' sum without the master's own share: the master's \
                 gradient was overwritten, not added to."
            ),
            "reduce-not-in-place",
        );
    }
    named(what, "reduce-averaged")
}

/// `scatter` of a batch of `rows` rows (row r holds r) over `n` CPU devices:
/// the pieces' row counts and rows, against `Tensor::chunk`'s.
fn scatter_case(pieces: &dyn Pieces, rows: i64, n: usize) -> Option<String> {
    let x = Tensor::arange(rows, (Kind::Float, Device::Cpu))
        .f_reshape([rows, 1])
        .ok()?;
    let got = pieces.scatter(&x, &vec![Device::Cpu; n]).ok()?;
    let size = |t: &Tensor| t.size().first().copied().unwrap_or(0);
    let sizes: Vec<i64> = got.iter().map(size).collect();
    let per = (rows + n as i64 - 1) / n as i64;
    let want: Vec<i64> = (0..rows)
        .step_by(per as usize)
        .map(|from| per.min(rows - from))
        .collect();
    if sizes != want {
        return named(
            format!(
                "Your scatter of {rows} rows over {n} devices made pieces of {sizes:?} rows, \
                 expected {want:?}: ceil({rows}/{n}) = {per} rows each, the last smaller{}.",
                if want.len() < n {
                    ", and no empty pieces (a replica with no rows has nothing to run)"
                } else {
                    ""
                }
            ),
            "scatter-sizes",
        );
    }
    let mut from = 0;
    for (k, piece) in got.iter().enumerate() {
        let v = values(piece)?;
        if let Some(i) = (0..v.len()).find(|&i| v[i] != (from + i) as f64) {
            return named(
                format!(
                    "Your scatter of {rows} rows (row r holds r) over {n} devices: piece {k} \
                     row {i}: got row {}, expected row {}: the pieces must be the batch's \
                     rows in order, each exactly once.",
                    v[i],
                    from + i
                ),
                "scatter-rows",
            );
        }
        from += v.len();
    }
    None
}

/// `scatter` of 31 rows over 3 devices and of 2 rows over 3.
pub fn scatter(pieces: &dyn Pieces) -> Option<String> {
    scatter_case(pieces, 31, 3).or_else(|| scatter_case(pieces, 2, 3))
}

/// `gather` of two outputs that require a gradient: the result must too.
pub fn gather(pieces: &dyn Pieces) -> Option<String> {
    let outs = [
        Tensor::from_slice(&[1f32, 2.0])
            .f_reshape([2, 1])
            .ok()?
            .set_requires_grad(true),
        Tensor::from_slice(&[3f32])
            .f_reshape([1, 1])
            .ok()?
            .set_requires_grad(true),
    ];
    let got = pieces.gather(&outs, Device::Cpu).ok()?;
    if got.requires_grad() {
        return None;
    }
    named(
        "Your gather of two outputs that require a gradient returned a tensor that does \
         not: the loss's backward would stop there and no replica would get a gradient."
            .to_string(),
        "gather-detached",
    )
}

/// What the probes name in `pieces`, joined (empty when nothing is recognised,
/// or when a piece is not written yet: its own error says so).
pub fn diagnose(pieces: &dyn Pieces) -> String {
    [reduce(pieces), scatter(pieces), gather(pieces)]
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests;
