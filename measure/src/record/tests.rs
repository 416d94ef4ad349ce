use super::*;

fn record_json(extra: &str) -> String {
    format!(
        r#"{{"label":"reference-shm","backend":"reference","collective":"all_reduce",
           "world":2,"bytes":1024,"min_us":1.0,"median_us":2.0,"max_us":4.0{extra}}}"#
    )
}

fn doc(records: &str) -> String {
    format!(r#"{{"format":"ringside-results/1","manifest":{{"world":2}},"records":[{records}]}}"#)
}

#[test]
fn parses_minimal_record_with_defaults() {
    let f = parse_results(&doc(&record_json("")), Path::new("a.json")).unwrap();
    assert_eq!(f.records.len(), 1);
    let r = &f.records[0];
    assert_eq!(r.collective, Collective::AllReduce);
    assert_eq!(r.root, -1);
    assert_eq!(r.wrong, -1);
    assert!(!r.peer);
    // busbw computed: 1024 B / 2 µs = 0.512 GB/s algbw, × 2(2-1)/2 = 1.
    assert!((r.busbw() - 0.512).abs() < 1e-12);
}

#[test]
fn garbled_file_error_names_the_file_and_position() {
    let err = parse_results(
        "{\"format\": \"ringside-results/1\", \"records\": [",
        Path::new("dir/garbled.json"),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Parse { .. }), "{msg}");
    assert!(msg.contains("dir/garbled.json"), "{msg}");
    assert!(msg.contains("line 1"), "{msg}");
}

#[test]
fn binary_garbage_is_a_parse_error() {
    let err = parse_results("\u{1}\u{2}PNG", Path::new("x.png")).unwrap_err();
    assert!(matches!(err, Error::Parse { .. }));
}

#[test]
fn other_json_is_wrong_format_not_missing_field() {
    let err = parse_results(r#"{"name":"package.json"}"#, Path::new("package.json")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::WrongFormat { .. }), "{msg}");
    assert!(
        msg.contains("package.json") && msg.contains("no \"format\" field"),
        "{msg}"
    );

    let err = parse_results(
        r#"{"format":"ringside-results/2","records":[]}"#,
        Path::new("new.json"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("\"ringside-results/2\""), "{err}");
}

#[test]
fn unknown_collective_is_a_parse_error_naming_the_file() {
    let text = doc(&record_json("").replace("all_reduce", "allreduce"));
    let err = parse_results(&text, Path::new("typo.json")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("typo.json") && msg.contains("allreduce"),
        "{msg}"
    );
}

#[test]
fn invalid_numbers_are_rejected_with_record_index() {
    let bad = record_json("").replace("\"min_us\":1.0", "\"min_us\":3.0");
    let text = doc(&format!("{},{}", record_json(""), bad));
    let err = parse_results(&text, Path::new("order.json")).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, Error::InvalidRecord { index: 1, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("order.json") && msg.contains("out of order"),
        "{msg}"
    );

    // NaN is written as null by serde_json: a required time must not be null.
    let null_median = record_json("").replace("\"median_us\":2.0", "\"median_us\":null");
    assert!(parse_results(&doc(&null_median), Path::new("n.json")).is_err());

    let zero = record_json("").replace("\"bytes\":1024", "\"bytes\":0");
    let err = parse_results(&doc(&zero), Path::new("z.json")).unwrap_err();
    assert!(err.to_string().contains("bytes is 0"), "{err}");

    // A results file names the backend of every record (a peer's line need not).
    let no_backend = record_json("").replace("\"backend\":\"reference\",", "");
    let err = parse_results(&doc(&no_backend), Path::new("b.json")).unwrap_err();
    assert!(err.to_string().contains("empty backend"), "{err}");
}

#[test]
fn missing_file_is_a_read_error_naming_it() {
    let err = read_results(Path::new("/nonexistent/ringside.json")).unwrap_err();
    assert!(matches!(err, Error::Read { .. }));
    assert!(err.to_string().contains("/nonexistent/ringside.json"));
}

// The line format of the C and C++ peers (`impl` for the label, no backend).

const MPI_LINE: &str = r#"{"impl":"mpi","collective":"all_reduce","world":2,"bytes":1048576,"dtype":"float","iters":50,"min_us":80.000,"median_us":100.000,"max_us":120.000,"algbw_gbps":10.4858,"busbw_gbps":10.4858,"wrong":0}"#;

#[test]
fn parses_peer_line() {
    let r = parse_line(MPI_LINE).unwrap().unwrap();
    assert_eq!(r.label, "mpi");
    assert_eq!(r.world, 2);
    assert_eq!(r.bytes, 1 << 20);
    assert_eq!(r.median_us, 100.0);
    assert!(r.inconsistencies().is_empty(), "{:?}", r.inconsistencies());
}

#[test]
fn parses_exponent_bandwidths() {
    // %.6g in the peers prints tiny bandwidths with an exponent.
    let line = r#"{"impl":"gloo-ring","collective":"all_reduce","world":2,"bytes":8,"dtype":"float","iters":20,"min_us":73.189,"median_us":97.390,"max_us":4014.507,"algbw_gbps":8.21435e-05,"busbw_gbps":8.21435e-05,"wrong":0}"#;
    let r = parse_line(line).unwrap().unwrap();
    assert!((r.busbw_gbps.unwrap() - 8.21435e-05).abs() < 1e-12);
    assert!(r.inconsistencies().is_empty(), "{:?}", r.inconsistencies());
}

#[test]
fn ignores_non_records() {
    assert_eq!(parse_line("").unwrap(), None);
    assert_eq!(parse_line("# ringside sweep, world 2").unwrap(), None);
    assert_eq!(parse_line(r#"{"event":"start"}"#).unwrap(), None);
    assert_eq!(parse_line("{not json").unwrap(), None);
}

#[test]
fn malformed_record_is_an_error() {
    let line = MPI_LINE.replace(r#""wrong":0"#, r#""wrong":"zero""#);
    let err = parse_line(&line).unwrap_err();
    assert!(err.to_string().contains("bad result line"), "{err}");
}

#[test]
fn four_decimal_bandwidth_is_consistent() {
    // 8 B in 97.39 us is 8.2e-5 GB/s; printed with {:.4} it reads 0.0001.
    let line = r#"{"impl":"ringside-tcp","collective":"all_reduce","world":2,"bytes":8,"dtype":"f32","iters":50,"min_us":90.000,"median_us":97.390,"max_us":120.000,"algbw_gbps":0.0001,"busbw_gbps":0.0001,"wrong":0}"#;
    let r = parse_line(line).unwrap().unwrap();
    assert!(r.inconsistencies().is_empty(), "{:?}", r.inconsistencies());
    // Tables use the exact value, not the rounded one.
    assert!((r.computed_busbw() - 8.0 / 97.39e-6 / 1e9).abs() < 1e-12);
}

#[test]
fn a_record_line_round_trips_with_its_label() {
    let mut r = parse_line(MPI_LINE).unwrap().unwrap();
    r.label = "mpi-shm".into();
    let text = serde_json::to_string(&r).unwrap();
    assert!(text.contains(r#""label":"mpi-shm""#), "{text}");
    assert!(!text.contains("impl"), "{text}");
    assert_eq!(parse_line(&text).unwrap().unwrap(), r);
}

#[test]
fn inconsistencies_catch_wrong_unchecked_and_bandwidth() {
    let mut r = parse_line(MPI_LINE).unwrap().unwrap();
    r.wrong = 3;
    r.busbw_gbps = r.algbw_gbps.map(|a| 2.0 * a); // as if factor 2 instead of 2(n-1)/n
    let p = r.inconsistencies();
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].contains("3 wrong"));
    assert!(p[1].contains("busbw"));
    r.wrong = -1;
    assert!(r.inconsistencies()[0].contains("not checked"));
}
