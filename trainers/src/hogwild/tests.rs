use super::*;

#[test]
fn config_round_trips_through_the_environment_encoding() {
    let c = HogwildConfig {
        workers: 3,
        steps: 7,
        batch: 5,
        lr: 0.125,
        model: crate::models::Arch::Cnn,
        hidden: vec![16, 8],
        data: Some(crate::data::DEFAULT_DIR.into()),
        samples: 99,
        data_seed: 42,
        sharing: Sharing::FileSystem,
        timeout: Duration::from_millis(1234),
        kill_worker: Some(KillWorker {
            rank: 2,
            after_steps: 3,
        }),
        sample_every: Duration::from_millis(100),
        local_steps: 4,
    };
    assert_eq!(HogwildConfig::decode(&c.encode()).unwrap(), c);
    let d = HogwildConfig::default();
    assert_eq!(HogwildConfig::decode(&d.encode()).unwrap(), d);
    for bad in [
        "workers=0",
        "steps=x",
        "nope=1",
        "sharing=pipes",
        "lr=-1",
        "kill=5@1",
        "model=resnet",
        "model=vgg",
        "sample_ms=0",
        "local_steps=0",
    ] {
        assert!(HogwildConfig::decode(bad).is_err(), "{bad} was accepted");
    }
}

#[test]
fn owner_pid_parses_only_our_names() {
    assert_eq!(owner_pid("ringside-hogwild-123-0"), Some(123));
    assert_eq!(owner_pid("ringside-hogwild-123-x"), None);
    assert_eq!(owner_pid("ringside-hogwild-0-1"), None);
    assert_eq!(owner_pid("torch_123_456"), None);
    assert_eq!(owner_pid("ringside-hogwild-abc-1"), None);
}

#[test]
fn a_descriptor_sent_over_a_socket_maps_the_same_memory() {
    let fd = memfd(4096).unwrap();
    let a = Mapping::new(fd.as_raw_fd(), 4096).unwrap();
    let (left, right) = UnixStream::pair().unwrap();
    send_fd(&left, fd.as_raw_fd(), &4096u64.to_le_bytes()).unwrap();
    drop(fd);
    let mut len = [0u8; 8];
    let got = recv_fd(&right, &mut len).unwrap();
    assert_eq!(u64::from_le_bytes(len), 4096);
    let b = Mapping::new(got.as_raw_fd(), 4096).unwrap();
    a.atomic(128).unwrap().store(77, Ordering::SeqCst);
    assert_eq!(b.atomic(128).unwrap().load(Ordering::SeqCst), 77);
    assert!(a.atomic(4096).is_err() && a.atomic(3).is_err());
}

#[test]
fn region_header_is_checked() {
    let fd = memfd(params_offset(2) + 40).unwrap();
    let m = Mapping::new(fd.as_raw_fd(), params_offset(2) + 40).unwrap();
    m.init(2, 10).unwrap();
    m.check(2, 10).unwrap();
    assert!(m.check(2, 11).is_err());
    assert!(m.check(3, 10).is_err());
}
