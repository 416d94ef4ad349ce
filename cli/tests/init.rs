//! `launch::init` end to end: this test binary re-runs itself as two ranks
//! (the `mp.spawn` pattern), which find each other through the store.
//!
//! Keep this the only test in this file: the copies run the same test binary
//! with the same arguments, so every test here would run in every rank.

use std::time::Duration;

use collectives::launch::{self, Role};
use collectives::rendezvous::env::{self, Launcher};

#[test]
fn init_spawns_copies_that_rendezvous_through_the_store() {
    match launch::init(Some(2)).unwrap() {
        Role::Launcher(report) => {
            assert_eq!(report.exit_code(), 0, "{report}");
            assert_eq!(report.ranks.len(), 2);
        }
        Role::Rank(info) => {
            assert_eq!(info.launcher, Launcher::Ringside);
            assert_eq!(info.world_size, 2);
            let r = env::connect(&info, Duration::from_secs(20)).unwrap();
            let me = info.rank;
            r.store().set(&format!("hello/{me}"), &[me as u8]).unwrap();
            let peer = 1 - me;
            assert_eq!(
                r.store().get(&format!("hello/{peer}")).unwrap(),
                vec![peer as u8]
            );
            assert_eq!(r.is_host(), me == 0);
            r.close(Duration::from_secs(20)).unwrap();
        }
    }
}
