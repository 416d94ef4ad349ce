//! Discovery from each launcher's variables, and the rendezvous over a real store.

use super::*;
use std::collections::HashMap;
use std::time::Instant;

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k: &str| map.get(k).cloned()
}

fn info(pairs: &[(&str, &str)]) -> Result<RankInfo> {
    RankInfo::from_vars(&vars(pairs), &Overrides::default())
}

const TOKEN: &str = "00112233445566778899aabbccddeeff";

#[test]
fn ringside_launcher_vars() {
    let i = info(&[
        ("RANK", "3"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "1234"),
        ("RINGSIDE_JOB_TOKEN", TOKEN),
    ])
    .unwrap();
    assert_eq!(i.launcher, Launcher::Ringside);
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.local_world_size),
        (3, 4, 1, 2)
    );
    assert_eq!((i.master_addr.as_str(), i.master_port), ("10.0.0.1", 1234));
    assert_eq!(i.token, Token::parse(TOKEN).unwrap());
}

#[test]
fn torchrun_vars_derive_a_token_from_the_run_id() {
    let base = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29400"),
        ("TORCHELASTIC_RUN_ID", "abc"),
    ];
    let i = info(&base).unwrap();
    assert_eq!(i.launcher, Launcher::Torchrun);
    assert_eq!((i.rank, i.world_size, i.master_port), (1, 2, 29400));
    // Regression: under torchrun's agent store, MASTER_PORT is taken by torchrun.
    let mut agent = base.to_vec();
    agent.push(("TORCHELASTIC_USE_AGENT_STORE", "True"));
    assert_eq!(info(&agent).unwrap().master_port, 29401);
    let mut other = base;
    other[6] = ("TORCHELASTIC_RUN_ID", "xyz");
    assert_ne!(info(&other).unwrap().token, i.token);
    assert_eq!(info(&base).unwrap().token, i.token);
}

#[test]
fn openmpi_vars_with_defaults() {
    let i = info(&[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ("OMPI_MCA_ess_base_jobid", "77"),
    ])
    .unwrap();
    assert_eq!(i.launcher, Launcher::OpenMpi);
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.local_world_size),
        (2, 4, 0, 2)
    );
    assert_eq!(i.master_addr, DEFAULT_MASTER_ADDR);
    assert_eq!(i.master_port, DEFAULT_MASTER_PORT);
}

#[test]
fn pmi_vars_local_rank_optional() {
    let i = info(&[("PMI_RANK", "1"), ("PMI_SIZE", "3")]).unwrap();
    assert_eq!(i.launcher, Launcher::Pmi);
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.local_world_size),
        (1, 3, 1, 3)
    );
    let j = info(&[
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "3"),
        ("MPI_LOCALRANKID", "0"),
        ("MPI_LOCALNRANKS", "1"),
    ])
    .unwrap();
    assert_eq!((j.local_rank, j.local_world_size), (0, 1));
    // Same job, same derived token on every rank.
    let k = info(&[("PMI_RANK", "2"), ("PMI_SIZE", "3")]).unwrap();
    assert_eq!(i.token, k.token);
}

#[test]
fn slurm_step_vars_and_master_from_nodelist() {
    let i = info(&[
        ("SLURM_JOB_ID", "99"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "6"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "2"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
        ("SLURM_STEP_NUM_NODES", "3"),
        ("SLURM_STEP_NODELIST", "gpu[07-09]"),
    ]);
    // local rank 1 on a node with one task is inconsistent: say so.
    let e = i.unwrap_err().to_string();
    assert!(e.contains("local rank 1"), "{e}");

    let i = info(&[
        ("SLURM_JOB_ID", "99"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "5"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "1"),
        ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
        ("SLURM_STEP_NUM_NODES", "3"),
        ("SLURM_STEP_NODELIST", "gpu[07-09]"),
    ])
    .unwrap();
    assert_eq!(i.launcher, Launcher::Slurm);
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.local_world_size),
        (3, 5, 1, 2)
    );
    assert_eq!(i.master_addr, "gpu07");
}

#[test]
fn slurm_batch_script_is_not_a_rank() {
    let i = info(&[
        ("SLURM_JOB_ID", "99"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "8"),
    ])
    .unwrap();
    assert_eq!(i.launcher, Launcher::Single);
    assert_eq!((i.rank, i.world_size), (0, 1));
}

#[test]
fn torchrun_wins_over_slurm_and_mpi() {
    let i = info(&[
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "1"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
    ])
    .unwrap();
    assert_eq!(i.launcher, Launcher::Torchrun);
    assert_eq!(i.rank, 1);
}

#[test]
fn nothing_set_is_a_single_process_on_a_free_port() {
    let i = info(&[]).unwrap();
    assert_eq!(i.launcher, Launcher::Single);
    assert_eq!(
        (i.rank, i.world_size, i.local_rank, i.local_world_size),
        (0, 1, 0, 1)
    );
    assert_eq!(i.master_port, 0);
}

#[test]
fn parse_errors_are_clear() {
    let e = info(&[("RANK", "abc"), ("WORLD_SIZE", "2")]).unwrap_err();
    assert_eq!(e.to_string(), "rendezvous: RANK=abc is not a number");
    let e = info(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "70000")]).unwrap_err();
    assert!(e.to_string().contains("MASTER_PORT=70000"), "{e}");
    let e = info(&[("RANK", "2"), ("WORLD_SIZE", "2")]).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = info(&[("RANK", "0")]).unwrap_err();
    assert!(e.to_string().contains("WORLD_SIZE is not"), "{e}");
    let e = info(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
        ("RINGSIDE_JOB_TOKEN", "x"),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("RINGSIDE_JOB_TOKEN"), "{e}");
    let e = info(&[("RANK", "0"), ("WORLD_SIZE", "0")]).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}

#[test]
fn overrides_win() {
    let t = Token::generate().unwrap();
    let ov = Overrides {
        rank: Some(1),
        world_size: Some(3),
        master_addr: Some("h".into()),
        master_port: Some(4000),
        token: Some(t),
        ..Overrides::default()
    };
    let env = vars(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "5")]);
    let i = RankInfo::from_vars(&env, &ov).unwrap();
    assert_eq!((i.rank, i.world_size), (1, 3));
    assert_eq!((i.master_addr.as_str(), i.master_port), ("h", 4000));
    assert_eq!(i.token, t);

    // Arguments alone make a multi-rank job with an agreed token.
    let ov = Overrides {
        rank: Some(1),
        world_size: Some(2),
        ..Overrides::default()
    };
    let a = RankInfo::from_vars(&vars(&[]), &ov).unwrap();
    let b = RankInfo::from_vars(
        &vars(&[]),
        &Overrides {
            rank: Some(0),
            ..ov
        },
    )
    .unwrap();
    assert_eq!(a.launcher, Launcher::Ringside);
    assert_eq!(a.master_port, DEFAULT_MASTER_PORT);
    assert_eq!(a.token, b.token);

    let e = RankInfo::from_vars(
        &vars(&[]),
        &Overrides {
            rank: Some(2),
            ..Overrides::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("no world size"), "{e}");
}

#[test]
fn slurm_list_helpers() {
    assert_eq!(tasks_on_node("2(x3),1", 0), Some(2));
    assert_eq!(tasks_on_node("2(x3),1", 2), Some(2));
    assert_eq!(tasks_on_node("2(x3),1", 3), Some(1));
    assert_eq!(tasks_on_node("2(x3),1", 4), None);
    assert_eq!(tasks_on_node("4", 0), Some(4));
    assert_eq!(first_host("node[03-05,9],gpu1").as_deref(), Some("node03"));
    assert_eq!(first_host("a1,a2").as_deref(), Some("a1"));
    assert_eq!(first_host("solo").as_deref(), Some("solo"));
    assert_eq!(first_host("x,n[1-2]").as_deref(), Some("x"));
    assert_eq!(first_host("rack[2]-n[1-4]").as_deref(), Some("rack2-n1"));
    assert_eq!(first_host("[").as_deref(), None);
}

#[test]
fn bind_addr_listens_only_where_it_was_told() {
    assert_eq!(bind_addr("127.0.0.1", 5).to_string(), "127.0.0.1:5");
    assert_eq!(bind_addr("localhost", 5).to_string(), "127.0.0.1:5");
    assert_eq!(bind_addr("10.1.2.3", 5).to_string(), "10.1.2.3:5");
    assert_eq!(bind_addr("node7", 5).to_string(), "0.0.0.0:5");
    assert_eq!(bind_addr("::1", 5).to_string(), "[::1]:5");
    assert_eq!(bind_addr("fe80::1", 5).to_string(), "[::]:5");
}

#[test]
fn connect_single_rank_and_a_pair_of_threads() {
    let single = info(&[]).unwrap();
    let r = connect(&single, Duration::from_secs(5)).unwrap();
    assert!(r.is_host());
    assert_ne!(r.info.master_port, 0);
    r.store().set("x", b"1").unwrap();
    r.close(Duration::from_secs(1)).unwrap();

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Token::generate().unwrap();
    std::thread::scope(|s| {
        for rank in 0..2 {
            s.spawn(move || {
                let i = RankInfo {
                    rank,
                    world_size: 2,
                    local_rank: rank,
                    local_world_size: 2,
                    master_addr: "127.0.0.1".into(),
                    master_port: port,
                    token: t,
                    token_derived: false,
                    launcher: Launcher::Ringside,
                };
                let r = connect(&i, Duration::from_secs(5)).unwrap();
                assert_eq!(r.is_host(), rank == 0);
                r.store().set(&format!("hi{rank}"), b"x").unwrap();
                r.store().get(&format!("hi{}", 1 - rank)).unwrap();
                r.close(Duration::from_secs(5)).unwrap();
            });
        }
    });
}

#[test]
fn connect_names_the_missing_rank() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let i = RankInfo {
        rank: 0,
        world_size: 2,
        local_rank: 0,
        local_world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: port,
        token: Token::generate().unwrap(),
        token_derived: false,
        launcher: Launcher::Ringside,
    };
    let e = connect(&i, Duration::from_millis(300)).unwrap_err();
    assert!(e.to_string().contains("ranks [1] to join"), "{e}");
}

/// Regression: rank 0 left the closing barrier and dropped the store while
/// a rank that had arrived earlier was still polling it ("the store ...
/// closed the connection"), failing a finished job under load.
#[test]
fn close_does_not_pull_the_store_from_a_rank_still_leaving() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Token::generate().unwrap();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|rank| {
                s.spawn(move || {
                    let i = RankInfo {
                        rank,
                        world_size: 4,
                        local_rank: rank,
                        local_world_size: 4,
                        master_addr: "127.0.0.1".into(),
                        master_port: port,
                        token: t,
                        token_derived: false,
                        launcher: Launcher::Ringside,
                    };
                    let r = connect(&i, Duration::from_secs(5))?;
                    // Ranks reach the end at different times.
                    std::thread::sleep(Duration::from_millis(40 * rank as u64));
                    r.close(Duration::from_secs(5))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, r) in results.into_iter().enumerate() {
        assert!(r.is_ok(), "rank {rank}: {r:?}");
    }
}

/// With plain RANK/WORLD_SIZE/MASTER_* variables the token was a hash of public
/// values, so any process on the host could derive it and write keys: on one host
/// the ranks now share a random token through a private file, and the derived token
/// is refused.
#[test]
fn without_a_job_token_one_host_ranks_share_a_private_random_one() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let plain = [
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
    ];
    let port_s = port.to_string();
    let info = |rank: &str| {
        let mut v: Vec<(&str, &str)> = plain.to_vec();
        v[0].1 = rank;
        v.push(("MASTER_PORT", &port_s));
        RankInfo::from_vars(&vars(&v), &Overrides::default()).unwrap()
    };
    let (i0, i1) = (info("0"), info("1"));
    assert!(i0.token_derived && i1.token_derived);
    assert_eq!(i0.token, i1.token, "both derive the same public token");
    let derived = i0.token;
    let joined: Vec<Token> = std::thread::scope(|s| {
        let hs: Vec<_> = [i0, i1]
            .into_iter()
            .map(|i| {
                s.spawn(move || {
                    let r = connect(&i, Duration::from_secs(10)).unwrap();
                    let token = r.info.token;
                    r.store().set(&format!("hi{}", i.rank), b"x").unwrap();
                    r.store().get(&format!("hi{}", 1 - i.rank)).unwrap();
                    if i.rank == 0 {
                        // An outsider who derives the token is refused.
                        let e = TcpStore::connect(
                            "127.0.0.1",
                            port,
                            &derived,
                            1,
                            2,
                            Duration::from_secs(2),
                        )
                        .unwrap_err();
                        assert!(matches!(e, Error::Auth(_)), "{e}");
                    }
                    r.store().set(&format!("checked{}", i.rank), b"x").unwrap();
                    r.store().get(&format!("checked{}", 1 - i.rank)).unwrap();
                    r.close(Duration::from_secs(5)).unwrap();
                    token
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(joined[0], joined[1]);
    assert_ne!(joined[0], derived);
    // The file is gone once both joined.
    let dir = secret::private_dir().unwrap();
    assert!(!secret::path_in(&dir, &derived).exists());
}

/// Plain `RANK/WORLD_SIZE/MASTER_*` variables for `rank` of two on one host:
/// a derived token, so the ranks share a secret through a private file.
fn plain(rank: usize, port: u16) -> RankInfo {
    let (rank, port) = (rank.to_string(), port.to_string());
    info(&[
        ("RANK", &rank),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", &port),
    ])
    .unwrap()
}

/// Regression: the secret file stayed behind when rank 0 failed or timed out
/// before every rank had joined.
#[test]
fn a_rank_zero_that_gives_up_removes_the_secret() {
    let i0 = plain(0, crate::launch::free_port().unwrap());
    let path = secret::path_in(&secret::private_dir().unwrap(), &i0.token);
    let done = std::sync::atomic::AtomicBool::new(false);
    let (seen, e) = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if path.exists() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            false
        });
        let e = connect(&i0, Duration::from_millis(500)).unwrap_err();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (watcher.join().unwrap(), e)
    });
    assert!(e.to_string().contains("ranks [1] to join"), "{e}");
    assert!(seen, "the secret was never published");
    assert!(!path.exists(), "the secret outlived rank 0's failure");
}

/// Regression: with another program listening on MASTER_PORT, rank 0 published
/// the secret before failing to bind, and rank 1 sent it in its hello to that
/// program. Now rank 0 publishes nothing; rank 1 waits for a secret that never
/// comes, and even with a stale one (a rank 0 killed outright) it never sends
/// the token, and says what it met.
#[test]
fn a_squatted_master_port_gets_no_secret() {
    use crate::rendezvous::store::tests::{Squatter, contains, fake_challenge};
    let squat = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squat.local_addr().unwrap().port();
    let squatter = Squatter::on(squat, Some(fake_challenge()));
    let (i0, i1) = (plain(0, port), plain(1, port));
    let path = secret::path_in(&secret::private_dir().unwrap(), &i0.token);

    let e = connect(&i0, Duration::from_secs(2)).unwrap_err();
    assert!(e.to_string().contains("address already in use"), "{e}");
    assert!(
        !path.exists(),
        "rank 0 published a secret for a store it never ran"
    );
    let e = connect(&i1, Duration::from_millis(300)).unwrap_err();
    assert!(e.to_string().contains("publish the job's secret"), "{e}");

    let stale = Token::generate().unwrap();
    let file = secret::publish(&path, &stale).unwrap();
    let start = Instant::now();
    let e = connect(&i1, Duration::from_secs(1)).unwrap_err();
    let took = start.elapsed();
    drop(file);
    let msg = e.to_string();
    assert!(matches!(e, Error::Auth(_)), "{e}");
    assert!(
        msg.contains("MASTER_PORT") && msg.contains("could not prove"),
        "{msg}"
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let seen = squatter.finish();
    assert!(!seen.is_empty(), "rank 1 never dialled the squatter");
    for got in &seen {
        assert!(!contains(got, &stale.bytes()) && !contains(got, stale.to_string().as_bytes()));
        // The hello and nothing else: no proof made with the token.
        assert_eq!(got.len(), 4 + 37, "{got:?}");
    }
}
