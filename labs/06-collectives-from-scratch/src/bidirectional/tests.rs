//! The stretch check fed the mistakes a learner makes on the way to a
//! bidirectional ring: each is named, with the key of its hint.

use super::*;
use collectives::algorithms::{partition, ring, split_pair};
use collectives::transport::Sink;

fn message(f: AllReduce) -> String {
    check(f).unwrap_err().to_string()
}

/// The one-way ring over the whole buffer: right sums, all bytes clockwise.
#[test]
fn the_one_way_ring_is_named_by_its_bytes() {
    let msg = message(ring::all_reduce);
    assert!(
        msg.contains("rank 0 sent all its 128 bytes to its right (rank + 1) neighbour"),
        "{msg}"
    );
    assert!(msg.contains("hint: one-way"), "{msg}");
}

/// Only the first half reduced (the second ring forgotten).
fn first_half_only(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let size = dtype.size();
    let (half, _) = buf.split_at_mut(buf.len() / size / 2 * size);
    let blocks = partition(half.len() / size, p.world(), size);
    ring::reduce_scatter_blocks(p, half, &blocks, dtype, op)?;
    ring::all_gather_blocks(p, half, &blocks)
}

#[test]
fn a_half_left_unreduced_is_named_with_its_element() {
    let msg = message(first_half_only);
    assert!(
        msg.contains("rank 0's element 6 (the second half) is 385 = rank 0's copy only"),
        "{msg}"
    );
    assert!(msg.contains("hint: half-not-reduced"), "{msg}");
}

/// The second ring sent left but kept the clockwise ring's block indices.
fn mirrored_with_clockwise_indices(
    p: &mut TaggedTransport<'_>,
    buf: &mut [u8],
    dtype: DType,
    op: ReduceOp,
) -> Result<()> {
    let (r, n, size) = (p.rank(), p.world(), dtype.size());
    let (cw, ccw) = buf.split_at_mut(buf.len() / size / 2 * size);
    let blocks = partition(cw.len() / size, n, size);
    ring::reduce_scatter_blocks(p, cw, &blocks, dtype, op)?;
    ring::all_gather_blocks(p, cw, &blocks)?;
    let blocks = partition(ccw.len() / size, n, size);
    let (right, left) = ((r + 1) % n, sub_mod(r, 1, n));
    for s in 0..n - 1 {
        let (out, acc) = split_pair(
            ccw,
            blocks[sub_mod(r, s + 1, n)].clone(),
            blocks[sub_mod(r, s + 2, n)].clone(),
        )?;
        p.sendrecv(
            left,
            out,
            right,
            Sink::Reduce {
                dst: acc,
                dtype,
                op,
            },
        )?;
    }
    for s in 0..n - 1 {
        let (out, into) = split_pair(
            ccw,
            blocks[sub_mod(r, s, n)].clone(),
            blocks[sub_mod(r, s + 1, n)].clone(),
        )?;
        p.sendrecv(left, out, right, Sink::Copy(into))?;
    }
    Ok(())
}

#[test]
fn the_other_ring_with_the_first_rings_indices_is_named() {
    let msg = message(mirrored_with_clockwise_indices);
    assert!(msg.contains("(the second half)"), "{msg}");
    assert!(
        msg.contains("the first half is right, the second is not"),
        "{msg}"
    );
    assert!(msg.contains("hint: mirror-the-ring"), "{msg}");
}

#[test]
fn the_solution_passes_the_probe_and_the_conformance_suite() {
    let said = check(crate::solution::all_reduce).unwrap();
    assert!(
        said.contains("conformance cases passed on 2 to 4 ranks"),
        "{said}"
    );
    let probed = probe(crate::solution::all_reduce).unwrap();
    // A ring all-reduce sends 2(n − 1)/n of its buffer: 64 bytes of each
    // 48-byte half, one half each way.
    assert!(
        probed.sent.iter().all(|s| *s
            == Sent {
                right: 64,
                left: 64
            }),
        "{:?}",
        probed.sent
    );
}

#[test]
fn probe_sums_read_in_base_four_name_the_ranks_copies() {
    assert_eq!(copies(21.0, 0), "the copies of ranks 0, 1, 2");
    assert_eq!(
        copies(17.0 + 2.0 * 64.0 * 5.0, 5),
        "the copies of ranks 0, 2"
    );
    assert_eq!(copies(4.0 + 64.0 * 7.0, 7), "rank 1's copy only");
    assert_eq!(copies(0.0, 0), "no rank's copy");
    // Three copies, but of elements 6, 8 and 8 where element 7's belonged.
    assert_eq!(
        copies(21.0 + 64.0 * 22.0, 7),
        "the copies of ranks 0, 1, 2, not all of them of element 7: some came from another block"
    );
}
