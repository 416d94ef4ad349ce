//! The self-check of lab 3 (`cargo lab check 3`): the same test judges your
//! exercise and, with RINGSIDE_LAB_SOLUTION=1, the reference solution (trainers'
//! own Hogwild pieces). Its workers are the lab's program, re-run by the parent.

use labkit::Variant;
use trainers::hogwild::WorkerProgram;

#[test]
fn shared_parameters_train_and_a_killed_worker_leaks_no_shared_memory() {
    let variant = Variant::from_env();
    let launcher = WorkerProgram {
        program: env!("CARGO_BIN_EXE_lab03-hogwild").into(),
        args: Vec::new(),
    };
    tch::set_num_threads(1);
    match lab03_hogwild::check(variant, trainers::data::DEFAULT_DIR.into(), &launcher) {
        Ok(seen) => {
            for line in seen {
                println!("{line}");
            }
        }
        Err(e) => panic!("{variant}: {e}"),
    }
}
