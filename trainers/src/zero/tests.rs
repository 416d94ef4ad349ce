use std::sync::Arc;

use collectives::{Communicator, Input, ReduceOp};
use tch::Tensor;

use super::check::{self, SGD};
use super::*;
use crate::comm::{buffer, buffer_mut};
use crate::data::synthetic;

fn small() -> ZeroConfig {
    // Unit sizes 784·48+48 = 37,680 and 48·10+10 = 490: neither divides by 3
    // (padding) and 490 by 4 neither.
    ZeroConfig {
        sizes: vec![784, 48, 10],
    }
}

#[test]
fn every_stage_trains_like_ddp_at_two_and_three_ranks() {
    let data = synthetic(3 * 16 * 10, 3).unwrap();
    for world in [2, 3] {
        for stage in [Stage::One, Stage::Two, Stage::Three] {
            let e = check::equivalence(
                stage,
                &small(),
                world,
                16,
                10,
                &data,
                Arc::new(ReduceScatterStep),
            )
            .unwrap();
            // Same gradients, averaged by a reduce-scatter instead of an
            // all-reduce (possibly another order of addition): rounding only.
            assert!(e.max_diff <= 1e-5, "{} on {world}: {e:?}", stage.name());
            assert!(
                e.moved > 1e-2,
                "{} on {world}: nothing moved: {e:?}",
                stage.name()
            );
        }
    }
}

/// Reduces with a sum instead of an average: off by the world size.
struct SumNotMean;

impl GradPath for SumNotMean {
    fn step(
        &self,
        comm: &dyn Communicator,
        grad: &Tensor,
        shard: &mut Tensor,
        momentum: &mut Option<Tensor>,
        sgd: SgdStep,
    ) -> Result<()> {
        let mut mine = shard.f_zeros_like()?;
        comm.reduce_scatter(
            Input::Buffer(buffer(grad)?),
            &mut buffer_mut(&mut mine)?,
            ReduceOp::Sum,
        )?;
        sgd_update(shard, &mine, momentum, sgd)
    }
}

#[test]
fn a_summed_instead_of_averaged_gradient_is_caught() {
    let data = synthetic(2 * 16 * 3, 3).unwrap();
    let e =
        check::equivalence(Stage::Two, &small(), 2, 16, 3, &data, Arc::new(SumNotMean)).unwrap();
    assert!(e.max_diff > 1e-3, "{e:?}");
}

#[test]
fn sharding_divides_the_counted_state_and_zero3_moves_one_and_a_half_times_ddp() {
    // Units of 12,560, 1,632, 9,312, 9,312 and 970 parameters: none holds
    // most of the model, as FSDP's wrapping policy arranges (a unit that did
    // would be gathered whole, and ZeRO-3 would save little).
    let c = ZeroConfig {
        sizes: vec![784, 16, 96, 96, 96, 10],
    };
    let data = synthetic(2 * 8 * 4, 5).unwrap();
    let world = 2;
    let m: Vec<check::Measured> = Stage::ALL
        .iter()
        .map(|&s| check::measure(s, &c, world, 8, 4, &data).unwrap())
        .collect();
    let psi = c.parameters();
    // Every unit here divides by 2: no padding.
    assert_eq!(m[0].peak.params, psi);
    assert_eq!(m[0].peak.state, psi);
    assert_eq!(m[0].peak.grads, psi);
    assert_eq!(m[1].peak.state, psi / 2);
    assert!(m[1].peak.grads >= psi, "{:?}", m[1]);
    assert!(m[2].peak.grads < psi, "{:?}", m[2]);
    assert!(m[3].peak.params < psi, "{:?}", m[3]);
    for w in m.windows(2) {
        assert!(w[1].peak.total() < w[0].peak.total(), "{m:?}");
    }
    // Payloads: DDP all-reduces ψ; ZeRO-1/2 reduce-scatter ψ and all-gather
    // ψ; ZeRO-3 all-gathers twice.
    let bytes = 4 * psi as u64;
    assert_eq!(m[0].payload, [bytes, 0, 0]);
    assert_eq!(m[1].payload, [0, bytes, bytes]);
    assert_eq!(m[2].payload, [0, bytes, bytes]);
    assert_eq!(m[3].payload, [0, bytes, 2 * bytes]);
    assert_eq!(m[3].ring_bytes_sent, 1.5 * m[0].ring_bytes_sent);
    assert_eq!(m[1].ring_bytes_sent, m[0].ring_bytes_sent);
}

#[test]
fn sgd_update_follows_pytorch_momentum() {
    let mut p = Tensor::from_slice(&[1.0f32, 2.0]);
    let g = Tensor::from_slice(&[0.5f32, -1.0]);
    let mut buf = None;
    let sgd = SgdStep {
        lr: 0.1,
        momentum: 0.9,
    };
    sgd_update(&mut p, &g, &mut buf, sgd).unwrap();
    sgd_update(&mut p, &g, &mut buf, sgd).unwrap();
    // buf = g, then 0.9·g + g = 1.9·g; p = p − 0.1·g − 0.1·1.9·g = p − 0.29·g.
    let want = [1.0 - 0.29 * 0.5, 2.0 + 0.29];
    let got: Vec<f32> = Vec::try_from(&p).unwrap();
    for (a, b) in got.iter().zip(want) {
        assert!((f64::from(*a) - b).abs() < 1e-6, "{got:?}");
    }
    let bad = sgd_update(&mut p, &Tensor::from_slice(&[1.0f32]), &mut buf, SGD).unwrap_err();
    assert!(bad.to_string().contains("shape"), "{bad}");
}
