//! The check names the common mistakes: each test feeds it the mistaken code.

use super::*;
use collectives::{Buffer, BufferMut};

fn failure(f: AllReduce) -> String {
    match check_with(f) {
        Ok(()) => panic!("the check passed a wrong all-reduce"),
        Err(e) => e.to_string(),
    }
}

/// Rank 0 forms the sum but keeps it.
fn never_sends_back(comm: &dyn Communicator, values: &mut [f64]) -> Result<(), LabError> {
    if comm.rank() == 0 {
        let mut theirs = vec![0.0; values.len()];
        for peer in 1..comm.world_size() {
            comm.recv(&mut BufferMut::from_slice(&mut theirs), peer)?;
            values.iter_mut().zip(&theirs).for_each(|(v, x)| *v += x);
        }
    } else {
        comm.send(&Buffer::from_slice(values), 0)?;
    }
    Ok(())
}

/// The other ranks add the total to their own numbers instead of replacing them.
fn adds_the_total(comm: &dyn Communicator, values: &mut [f64]) -> Result<(), LabError> {
    if comm.rank() == 0 {
        return solution::all_reduce_by_hand(comm, values);
    }
    comm.send(&Buffer::from_slice(values), 0)?;
    let mut total = vec![0.0; values.len()];
    comm.recv(&mut BufferMut::from_slice(&mut total), 0)?;
    values.iter_mut().zip(&total).for_each(|(v, t)| *v += t);
    Ok(())
}

/// Every rank but 0 receives before it sends: rank 0 waits for them, they
/// wait for rank 0.
fn receives_first(comm: &dyn Communicator, values: &mut [f64]) -> Result<(), LabError> {
    if comm.rank() == 0 {
        return solution::all_reduce_by_hand(comm, values);
    }
    let mut total = vec![0.0; values.len()];
    comm.recv(&mut BufferMut::from_slice(&mut total), 0)?;
    comm.send(&Buffer::from_slice(values), 0)?;
    values.copy_from_slice(&total);
    Ok(())
}

#[test]
fn the_solution_passes() {
    check_with(solution::all_reduce_by_hand).unwrap();
}

#[test]
fn a_total_never_sent_back_is_named() {
    let e = failure(never_sends_back);
    assert!(
        e.contains("2 ranks, 1 numbers: rank 1 element 0: got 2, expected 3"),
        "{e}"
    );
    assert!(e.ends_with("hint: total-not-sent-back"), "{e}");
}

#[test]
fn a_total_added_to_ones_own_numbers_is_named() {
    let e = failure(adds_the_total);
    assert!(e.contains("rank 1 element 0: got 5, expected 3"), "{e}");
    assert!(e.ends_with("hint: own-counted-twice"), "{e}");
}

#[test]
fn receiving_before_sending_is_named_a_hang_not_left_one() {
    let t = std::time::Instant::now();
    let e = failure(receives_first);
    assert!(e.ends_with("hint: unmatched-send-recv"), "{e}");
    assert!(t.elapsed() < WAIT * 3, "{:?}", t.elapsed());
}
