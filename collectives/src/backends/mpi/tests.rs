use super::*;
use crate::element::DType;

#[test]
fn in_place_address_by_library() {
    let ompi = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4";
    assert_eq!(in_place_address(ompi), Some(1));
    assert_eq!(
        in_place_address("MPICH Version:\t4.0.2\nMPICH Release date: ..."),
        Some(usize::MAX)
    );
    assert_eq!(in_place_address("Some Other MPI 1.0"), None);
}

#[test]
fn thread_level_comes_from_the_variable_and_defaults_to_multiple() {
    assert_eq!(requested_level(None).unwrap(), mpi::Threading::Multiple);
    assert_eq!(requested_level(Some("")).unwrap(), mpi::Threading::Multiple);
    assert_eq!(
        requested_level(Some("single")).unwrap(),
        mpi::Threading::Single
    );
    assert_eq!(
        requested_level(Some("serialized")).unwrap(),
        mpi::Threading::Serialized
    );
    let e = requested_level(Some("threaded")).unwrap_err();
    assert!(
        e.contains(THREAD_LEVEL_VAR) && e.contains("single, funneled"),
        "{e}"
    );
}

#[test]
fn at_single_a_call_from_another_thread_is_refused_by_name() {
    assert!(one_thread(mpi::Threading::Single, true).is_ok());
    let e = one_thread(mpi::Threading::Funneled, false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("thread level funneled") && e.contains("=serialized or multiple"),
        "{e}"
    );
}

#[test]
fn counts_beyond_int_are_refused() {
    assert_eq!(int(7, "x").unwrap(), 7);
    let e = int(1 << 40, "all_reduce").unwrap_err();
    assert!(e.to_string().contains("all_reduce"), "{e}");
}

/// One process without a launcher is an MPI singleton (world 1). The tests
/// below share it: MPI is initialised once per process.
#[test]
fn singleton_communicators_coexist_and_reduce_half_types() {
    let a = MpiComm::new(0, 1).unwrap();
    let b = MpiComm::new(0, 1).unwrap();
    assert!(
        a.library_version().contains("MPI"),
        "{}",
        a.library_version()
    );
    let x = [half::f16::from_f32(1.5), half::f16::from_f32(-2.0)];
    let mut y = [half::f16::ZERO; 2];
    let mut out = BufferMut::from_slice(&mut y);
    a.all_reduce(Buffer::from_slice(&x).into(), &mut out, ReduceOp::Max)
        .unwrap();
    assert_eq!(y, x);
    let mut z = [half::bf16::from_f32(3.0)];
    b.all_reduce(
        Input::InPlace,
        &mut BufferMut::from_slice(&mut z),
        ReduceOp::Avg,
    )
    .unwrap();
    assert_eq!(z[0].to_f32(), 3.0);
    b.barrier().unwrap();
}

#[test]
fn disagreeing_with_mpi_about_the_world_is_a_rendezvous_error() {
    let e = MpiComm::new(1, 2).err().unwrap();
    assert!(matches!(e, Error::Rendezvous(_)), "{e}");
    assert!(
        e.to_string()
            .contains("MPI says this process is rank 0 of 1"),
        "{e}"
    );
}

/// MPI_ERRORS_RETURN is set: a bad call comes back as our error with
/// MPI's message instead of aborting the process.
#[test]
fn mpi_errors_come_back_as_errors() {
    let c = MpiComm::new(0, 1).unwrap();
    let dt = c.rt.datatype(DType::F32);
    let mut x = [0f32; 1];
    let p = x.as_mut_ptr().cast();
    // SAFETY: a negative count is rejected by MPI before it touches `p`.
    let e = c
        .call(&"MPI_Bcast", 0, || unsafe {
            ffi::MPI_Bcast(p, -1, dt, 0, c.comm)
        })
        .unwrap_err();
    assert!(e.to_string().contains("MPI_Bcast failed"), "{e}");
    assert!(e.to_string().contains("MPI error code"), "{e}");
}

#[test]
fn empty_slices_never_pass_as_in_place() {
    // An empty byte slice points at address 1: OpenMPI's MPI_IN_PLACE.
    assert_ne!(cptr(&[]) as usize, 1);
    assert_ne!(mptr(&mut []) as usize, 1);
}
