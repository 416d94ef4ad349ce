//! Each named mistake, fed to the probes as a learner would write it: trainers'
//! own pieces with one piece replaced.

use super::*;
use trainers::Result;

/// Trainers' pieces, but `attach` copies the region's numbers into the
/// parameter.
struct CopyingAttach;

impl Pieces for CopyingAttach {
    fn fill(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        Reference.fill(params, shared)
    }
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        tch::no_grad(|| {
            for (p, s) in params.iter().zip(shared) {
                p.shallow_clone().f_copy_(s)?;
            }
            Ok(())
        })
    }
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()> {
        Reference.update(params, lr)
    }
}

/// Trainers' pieces, but `update` computes `p - lr * g` as a new tensor and
/// gives it to the parameter with `set_data`: the parameter moves, the region
/// does not.
struct NewTensorUpdate;

impl Pieces for NewTensorUpdate {
    fn fill(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        Reference.fill(params, shared)
    }
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        Reference.attach(params, shared)
    }
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()> {
        tch::no_grad(|| {
            for p in params {
                let g = p.f_grad()?;
                let moved = p.f_sub(&g.f_mul_scalar(lr)?)?;
                p.shallow_clone().f_set_data(&moved)?;
                let _ = p.f_grad()?.f_zero_()?;
            }
            Ok(())
        })
    }
}

/// Trainers' pieces, but `update` writes in place while autograd records.
struct RecordedUpdate;

impl Pieces for RecordedUpdate {
    fn fill(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        Reference.fill(params, shared)
    }
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        Reference.attach(params, shared)
    }
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()> {
        for p in params {
            let g = p.f_grad()?;
            let _ = p.shallow_clone().f_sub_(&g.f_mul_scalar(lr)?)?;
        }
        Ok(())
    }
}

/// Trainers' pieces, but `update` leaves the gradients as they are.
struct KeepsGradients;

impl Pieces for KeepsGradients {
    fn fill(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        Reference.fill(params, shared)
    }
    fn attach(&self, params: &[Tensor], shared: &[Tensor]) -> Result<()> {
        Reference.attach(params, shared)
    }
    fn update(&self, params: &[Tensor], lr: f64) -> Result<()> {
        tch::no_grad(|| {
            for p in params {
                let g = p.f_grad()?;
                let _ = p.shallow_clone().f_sub_(&g.f_mul_scalar(lr)?)?;
            }
            Ok(())
        })
    }
}

#[test]
fn trainers_own_pieces_name_nothing() {
    assert_eq!(diagnose(&Reference), "");
}

#[test]
fn an_attach_that_copies_is_named() {
    let e = diagnose(&CopyingAttach);
    assert!(
        e.contains("the parameter's element 0: got 5, expected 9. It took the region's numbers, but not the region itself: a copy."),
        "{e}"
    );
    assert!(e.ends_with("hint: attach-copies"), "{e}");
}

#[test]
fn an_update_into_a_new_tensor_is_named() {
    let e = diagnose(&NewTensorUpdate);
    assert!(
        e.contains("the region's element 0: got 1, expected 0.5"),
        "{e}"
    );
    assert!(e.ends_with("hint: update-not-in-place"), "{e}");
}

#[test]
fn an_update_that_autograd_records_is_named() {
    let e = diagnose(&RecordedUpdate);
    assert!(e.ends_with("hint: update-under-autograd"), "{e}");
}

#[test]
fn an_update_that_keeps_the_gradients_is_named() {
    let e = diagnose(&KeepsGradients);
    assert!(
        e.contains("the gradient still holds [1.0, 2.0, 4.0]"),
        "{e}"
    );
    assert!(e.ends_with("hint: grad-not-zeroed"), "{e}");
}
