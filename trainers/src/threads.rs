//! The threads of a parallel trainer (replicas, pipeline stages): they start
//! with libtorch's thread count of their parent, and a panic in one becomes
//! an error with its message.

/// Gives a new thread the caller's libtorch intra-op thread count.
///
/// With OpenMP (the CPU builds of libtorch) the count is a per-thread setting: a fresh
/// thread starts with one OpenMP worker per core, whatever `tch::set_num_threads` said
/// in the thread that spawned it. Two replica threads with a team of 2 each on a
/// 2-core machine spin-wait on each other: the first op of a step took 10 ms
/// instead of 1.
pub fn inherit_num_threads(threads: i32) {
    if tch::get_num_threads() != threads {
        tch::set_num_threads(threads);
    }
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}
