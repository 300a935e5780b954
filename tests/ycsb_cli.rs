//! `boomctl ycsb` as a YCSB user drives it: report rows, status lines, YCSB's own flags
//! and properties, pipes. Every run is embedded (temporary pool), small and bounded.

use std::collections::BTreeMap;
use std::process::{Command, Output};

fn boomctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
}

fn run(args: &[&str]) -> Output {
    let out = boomctl().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "boomctl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `[SERIES], Metric, value` rows of a YCSB report.
fn rows(stdout: &[u8]) -> BTreeMap<(String, String), String> {
    let text = String::from_utf8_lossy(stdout);
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.splitn(3, ", ").collect();
        if parts.len() == 3 && parts[0].starts_with('[') {
            m.insert((parts[0].trim_matches(['[', ']']).to_string(), parts[1].to_string()), parts[2].to_string());
        }
    }
    m
}

fn num(r: &BTreeMap<(String, String), String>, series: &str, metric: &str) -> f64 {
    r.get(&(series.to_string(), metric.to_string()))
        .unwrap_or_else(|| panic!("no [{series}], {metric} in {r:?}"))
        .parse()
        .unwrap()
}

#[test]
fn workload_f_times_read_and_update_separately() {
    let out = run(&["ycsb", "--mix", "f", "--quiet", "-p", "recordcount=200", "-p", "operationcount=3000"]);
    let r = rows(&out.stdout);
    let rmw = num(&r, "READ-MODIFY-WRITE", "Operations");
    assert!(rmw > 1000.0, "{r:?}");
    // Every update of F is the write half of a read-modify-write...
    assert_eq!(num(&r, "UPDATE", "Operations"), rmw);
    // ...but timed alone: the whole (read + update) takes longer than its update.
    assert!(num(&r, "READ-MODIFY-WRITE", "AverageLatency(us)") > num(&r, "UPDATE", "AverageLatency(us)"), "{r:?}");
    // YCSB reports no status for the pair.
    assert!(!r.keys().any(|(s, m)| s == "READ-MODIFY-WRITE" && m.starts_with("Return=")), "{r:?}");
    assert_eq!(num(&r, "UPDATE", "Return=OK"), rmw);
    // Reads: plain reads plus the read halves.
    assert_eq!(num(&r, "READ", "Operations"), 3000.0);
}

#[test]
fn cleanup_rows_one_per_thread() {
    let out =
        run(&["ycsb", "--mix", "c", "--quiet", "--threads", "2", "-p", "recordcount=50", "-p", "operationcount=100"]);
    let r = rows(&out.stdout);
    assert_eq!(num(&r, "CLEANUP", "Operations"), 2.0, "{r:?}");
    assert!(r.contains_key(&("CLEANUP".into(), "MaxLatency(us)".into())));
    assert!(!r.keys().any(|(s, m)| s == "CLEANUP" && m.starts_with("Return=")), "{r:?}");
}

#[test]
fn latency_unit_ns_prints_nanoseconds() {
    let out = run(&[
        "ycsb",
        "--mix",
        "c",
        "--quiet",
        "--latency-unit",
        "ns",
        "-p",
        "recordcount=50",
        "-p",
        "operationcount=200",
    ]);
    let r = rows(&out.stdout);
    assert!(num(&r, "READ", "MinLatency(ns)") > 0.0, "{r:?}");
    assert!(!r.keys().any(|(_, m)| m.ends_with("(us)")), "{r:?}");
}

#[test]
fn a_ycsb_command_line_runs_unchanged_with_status_lines() {
    let wl = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads/workloada");
    let out = run(&[
        "ycsb",
        "-P",
        wl,
        "-threads",
        "2",
        "-target",
        "1000",
        "-s",
        "-p",
        "recordcount=300",
        "-p",
        "operationcount=1500",
        "-p",
        "status.interval=1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Command line: ycsb -P"), "{err}");
    let status: Vec<&str> = err.lines().filter(|l| l.contains(" sec: ") && l.contains(" operations; ")).collect();
    // Load: first and final line; run (1.5 s at 1000 ops/s): first, one a second, final.
    assert!(status.len() >= 5, "{err}");
    // 2026-11-24 04:06:59:779 0 sec: 0 operations; est completion in 0 second
    let first = status[0];
    assert_eq!(&first[4..5], "-");
    assert_eq!(&first[19..20], ":", "{first}");
    assert!(first[23..].starts_with(" 0 sec: 0 operations; est completion in "), "{first}");
    assert!(
        status.iter().any(|l| l.contains("current ops/sec; est completion in ")
            && l.contains("[READ: Count=")
            && l.contains(", 99.99=")),
        "{err}"
    );
    let r = rows(&out.stdout);
    assert_eq!(num(&r, "READ", "Operations") + num(&r, "UPDATE", "Operations"), 1500.0);
    assert_eq!(num(&r, "CLEANUP", "Operations"), 2.0);
    assert!(r.contains_key(&("Intended-READ".into(), "Operations".into())), "-target measures intended latency");
}

#[test]
fn load_only_export_file_and_layered_property_files() {
    let dir = tempfile::tempdir().unwrap();
    let extra = dir.path().join("more.properties");
    std::fs::write(&extra, "recordcount=120\n").unwrap();
    let report = dir.path().join("report.txt");
    let wl = concat!(env!("CARGO_MANIFEST_DIR"), "/workloads/workloadb");
    let out = run(&[
        "ycsb",
        "-load",
        "--quiet",
        "-P",
        wl,
        "-P",
        extra.to_str().unwrap(),
        "-p",
        &format!("exportfile={}", report.display()),
        "-db",
        "site.ycsb.BasicDB",
    ]);
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("-db site.ycsb.BasicDB ignored"));
    let text = std::fs::read(&report).unwrap();
    let r = rows(&text);
    // The later file's recordcount wins; only the load phase ran.
    assert_eq!(num(&r, "INSERT", "Operations"), 120.0, "{r:?}");
    assert!(!r.keys().any(|(s, _)| s == "READ"), "{r:?}");
}

/// Runs boomctl with its standard output closed from the start (a reader that has
/// gone, like `| head` after its lines): it must exit 0 without a panic or an error.
fn run_into_closed_pipe(args: &[&str]) {
    let mut child =
        boomctl().args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {:?}\n{err}", out.status);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
}

#[test]
fn a_closed_pipe_is_a_normal_exit() {
    run_into_closed_pipe(&["ycsb", "--mix", "b", "--ops", "100000000", "--dry-run", "--print-ops", "100000000"]);
    run_into_closed_pipe(&["completions", "bash"]);
}

#[test]
fn a_dry_run_prints_no_more_operations_than_the_run_would_do() {
    let lines = |args: &[&str]| {
        let out = boomctl().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    assert_eq!(lines(&["ycsb", "--mix", "b", "--ops", "5", "--dry-run"]), 5);
    assert_eq!(lines(&["ycsb", "--mix", "b", "-p", "operationcount=3", "--dry-run", "--print-ops", "10"]), 3);
    assert_eq!(lines(&["ycsb", "--mix", "b", "--ops", "50", "--dry-run", "--print-ops", "7"]), 7);
    // bounded by time alone, the run has no operation count
    assert_eq!(lines(&["ycsb", "--mix", "b", "--duration", "3", "--dry-run", "--print-ops", "1500"]), 1500);
    // --print-ops says how many to print: without --dry-run it is refused, not ignored
    fails_with(&["ycsb", "--mix", "b", "--ops", "5", "--print-ops", "3"], "--dry-run");
    // ... and it measures nothing, so it writes no report files
    fails_with(&["ycsb", "--mix", "b", "--ops", "5", "--dry-run", "--csv", "x.csv"], "cannot be used with");
}

#[test]
fn a_binary_file_given_as_workload_is_refused_before_anything_runs() {
    let exe = env!("CARGO_BIN_EXE_boomctl");
    fails_with(&["ycsb", "-P", exe, "--quiet"], "is not a properties file");
}

fn fails_with(args: &[&str], needle: &str) {
    let out = boomctl().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(1 | 2)), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn first_contact_messages() {
    // YCSB's file name as --mix, and upper case.
    run(&["ycsb", "--mix", "workloadc", "--dry-run", "--print-ops", "1"]);
    run(&["ycsb", "--mix", "B", "--dry-run", "--print-ops", "1"]);
    fails_with(&["ycsb", "--mix", "z", "--dry-run"], "possible values: a, b, c, d, e, f");
    // Sizes: binary units only; "kb" is ambiguous; 0 is no value.
    run(&["ycsb", "--size", "2KiB", "--dry-run", "--print-ops", "1"]);
    fails_with(&["ycsb", "--size", "2kb", "--dry-run"], "ambiguous");
    fails_with(&["ycsb", "--size", "0", "--dry-run"], "at least 1 byte");
    fails_with(&["ycsb", "--size", "0..4k", "--dry-run"], "at least 1 byte");
    // A negative number is a value the option's own check judges, not a flag `-1`
    // that clap does not know.
    fails_with(&["ycsb", "--pool-size", "-1", "--dry-run"], "'-1': a size cannot be negative");
    fails_with(&["ycsb", "--threads", "-2", "--dry-run"], "invalid value '-2' for '--threads");
    // recordcount=0 is YCSB's 2^31 - 1 records, and the pool message counts them so.
    fails_with(&["ycsb", "-p", "recordcount=0", "--ops", "10"], "for 2147483647 records of up to 1000 each");
    fails_with(&["serve", "--pmem", "/nonexistent", "--pool-size", "-5"], "'-5': a size cannot be negative");
    // An output path that cannot be written is found before the run, not after it.
    for flag in ["--csv", "--json", "--hdr-log"] {
        let out = boomctl()
            .args(["ycsb", "--quiet", "-p", "recordcount=5", "-p", "operationcount=5", flag, "/nonexistent-dir/out"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert!(err.contains(&format!("{flag} /nonexistent-dir/out: cannot write there")), "{flag}: {err}");
        assert!(out.stdout.is_empty(), "{flag}: no report, the run never began");
    }
    fails_with(
        &["ycsb", "--quiet", "-p", "exportfile=/nonexistent-dir/r.txt", "-p", "recordcount=5"],
        "exportfile /nonexistent-dir/r.txt: cannot write there",
    );
    // Scans on the embedded server's hash index: the advice is for this command line.
    fails_with(
        &["ycsb", "--mix", "e", "--index", "hash", "--quiet", "-p", "recordcount=5"],
        "which the hash index cannot serve: omit --index hash",
    );
    // A value over what a transfer carries says so before running.
    fails_with(
        &["ycsb", "--size", "20m", "--quiet", "-p", "recordcount=5", "-p", "operationcount=5"],
        "one transfer carries values up to",
    );
}

#[test]
fn tcp_prefix_parses_like_shm_prefix() {
    use boomkv::transport::Endpoint;
    let ep = Endpoint::parse("tcp:127.0.0.1:7470").unwrap();
    assert_eq!(ep, Endpoint::parse("tcp://127.0.0.1:7470").unwrap());
}

#[test]
fn falling_behind_the_target_is_reported() {
    // No machine runs a debug build at 10^9 ops/s.
    let out = run(&[
        "ycsb",
        "--mix",
        "c",
        "--quiet",
        "--target",
        "1000000000",
        "-p",
        "recordcount=50",
        "-p",
        "operationcount=500",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("fell behind --target"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out =
        run(&["ycsb", "--mix", "c", "--quiet", "--target", "200", "-p", "recordcount=50", "-p", "operationcount=100"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("fell behind"));
}

#[test]
fn duration_alone_runs_for_the_duration() {
    // workloadc says operationcount=1000; --duration without --ops runs by the clock.
    let out = run(&["ycsb", "--mix", "c", "--quiet", "--duration", "2", "-p", "recordcount=100"]);
    let r = rows(&out.stdout);
    let runtime = num(&r, "OVERALL", "RunTime(ms)");
    assert!((1900.0..4000.0).contains(&runtime), "{r:?}");
    assert!(num(&r, "READ", "Operations") > 1000.0, "{r:?}");
    // The report says what bounded the run.
    assert_eq!(r.get(&("CONFIG".to_string(), "max_execution_time".to_string())).map(String::as_str), Some("2"));
}

#[test]
fn duration_zero_is_no_time_limit() {
    // YCSB's maxexecutiontime=0 is no limit: workloadc's operationcount=1000 bounds the
    // run. `--duration 0` used to run for ever (no clock to stop it, and no count);
    // `timeout` ends such a run here, failing the test.
    let mut cmd = Command::new("timeout");
    cmd.args(["60", env!("CARGO_BIN_EXE_boomctl"), "ycsb", "--mix", "c", "--quiet", "--duration", "0"]);
    let out = cmd.args(["-p", "recordcount=100"]).output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(num(&rows(&out.stdout), "READ", "Operations"), 1000.0);
}

#[test]
fn a_low_target_waits_no_longer_than_the_run() {
    // 0.01 ops/s: each client's second operation is due at 100 s, past --duration 2;
    // the wait ends with the run (it used to sleep the 100 s through). `timeout`
    // fails the test if it does not.
    let mut cmd = Command::new("timeout");
    cmd.args(["30", env!("CARGO_BIN_EXE_boomctl"), "ycsb", "--mix", "c", "--quiet", "--target", "0.01"]);
    let out = cmd.args(["--duration", "2", "-p", "recordcount=10", "-p", "operationcount=10"]).output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(num(&rows(&out.stdout), "READ", "Operations"), 1.0);
    // A rate whose interval no clock holds is refused (it panicked).
    let small = ["--quiet", "-p", "recordcount=10", "-p", "operationcount=10"];
    fails_with(&[&["ycsb", "--target", "1e-19"][..], &small].concat(), "at least 0.001 ops/s");
}

#[test]
fn an_interrupted_run_removes_its_temporary_pool() {
    // SIGTERM (or SIGINT) in the middle of a run: the embedded pool, in /dev/shm by
    // default, went with the process before; now it is removed and the exit status is
    // 128 + 15.
    let dir = tempfile::tempdir().unwrap();
    let child = boomctl()
        .args(["ycsb", "--mix", "c", "--quiet", "--duration", "30", "--ops", "1000000000", "--pmem"])
        .arg(dir.path())
        .args(["-p", "recordcount=100"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ours = format!("boomkv-{}-", child.id());
    let pools = || -> usize {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&ours)))
            .count()
    };
    let t0 = std::time::Instant::now();
    while pools() == 0 && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(pools(), 1, "the run's pool is there");
    // The load and the run are under way once the pool exists; a moment more for the
    // threads to be busy with it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(pools(), 0, "the pool is removed");
}

#[test]
fn an_embedded_pool_that_cannot_fit_says_why() {
    fails_with(
        &["ycsb", "--mix", "c", "--quiet", "--records", "100000000000", "--size", "16k"],
        "the embedded pool needs",
    );
    // Many clients on a few keys: the clients' segments are what does not fit.
    fails_with(&["ycsb", "--quiet", "--clients", "100000", "--records", "10", "--ops", "10"], "for 100000 clients");
    // --records 0 is refused, not read as YCSB's 2^31 - 1 records.
    fails_with(&["ycsb", "--quiet", "--records", "0"], "at least 1");
}

#[test]
fn every_export_carries_the_run_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (csv, json) = (dir.path().join("r.csv"), dir.path().join("r.json"));
    let out = run(&[
        "ycsb",
        "--mix",
        "b",
        "--quiet",
        "--theta",
        "1.1",
        "--size",
        "2k",
        "--seed",
        "7",
        "-p",
        "recordcount=50",
        "-p",
        "operationcount=100",
        "--csv",
        csv.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let r = rows(&out.stdout);
    let cfg = |k: &str| r.get(&("CONFIG".to_string(), k.to_string())).cloned().unwrap_or_default();
    assert_eq!(cfg("protocol"), "boom");
    assert_eq!(cfg("value_size"), "2048");
    assert_eq!(cfg("records"), "50");
    assert_eq!(cfg("seed"), "7");
    assert_eq!(cfg("max_execution_time"), "none");
    assert_eq!(cfg("distribution"), "zipfian (true Zipf; theta 1.1)");
    assert!(!cfg("commit").is_empty() && !cfg("version").is_empty(), "{r:?}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    for col in [
        "protocol",
        "transport",
        "records",
        "operations",
        "max_execution_time",
        "threads",
        "value_size",
        "distribution",
        "seed",
        "target",
        "durability",
        "flush",
        "host",
        "version",
        "commit",
    ] {
        assert!(header.contains(&col), "no {col} in {header:?}");
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["config"]["distribution"], "zipfian (true Zipf; theta 1.1)");
    assert_eq!(v["config"]["threads"], "1");
    // The machine around the run: its load, and (with two CPUs or more) the round trip
    // of a cache line between them before and after: the same figures in text and JSON.
    let others = num(&r, "MACHINE", "OtherProcessesCPUs");
    assert!((0.0..=64.0).contains(&others), "{r:?}");
    assert_eq!(v["machine"]["load"]["others_cpus"].as_f64().map(|x| format!("{x:.2}")), Some(format!("{others:.2}")));
    for (row, field) in [("CpuRoundTripBefore(ns)", "handoff_before_ns"), ("CpuRoundTripAfter(ns)", "handoff_after_ns")]
    {
        let key = ("MACHINE".to_string(), row.to_string());
        match v["machine"][field].as_f64() {
            // The row rounds to whole nanoseconds.
            Some(ns) => assert!((num(&r, "MACHINE", row) - ns).abs() <= 0.5, "{ns} vs {r:?}"),
            // No figure (one CPU, or a probe whose other thread never ran): no row.
            None => assert!(!r.contains_key(&key) && v["machine"][field].is_null(), "{r:?} {}", v["machine"]),
        }
    }
}

#[test]
fn help_has_examples_and_completions_know_the_values() {
    let help = String::from_utf8(run(&["--help"]).stdout).unwrap();
    assert!(help.contains("Examples:") && help.contains("boomctl ycsb --mix b --size 2k"), "{help}");
    // "Each command has its own --help with more examples": every one of them.
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A name is indented by two; a description that wraps, by more.
        .filter(|l| !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(listed.len() >= 12, "{listed:?}");
    for cmd in listed {
        let h = String::from_utf8(run(&[cmd, "--help"]).stdout).unwrap();
        assert!(h.contains(&format!("boomctl {cmd}")) && h.contains("Example"), "boomctl {cmd} --help: {h}");
    }
    let bash = String::from_utf8(run(&["completions", "bash"]).stdout).unwrap();
    for values in ["boom rdmp rpc", "clwb clflushopt clflush none", "a b c d e f", "segment-size skew writeback"] {
        assert!(bash.contains(values), "no completion for {values}");
    }
}

#[test]
fn client_counters_count_the_measured_writes_only() {
    // Workload A, 2 threads, with a warm-up whose writes must not be counted: every
    // measured UPDATE is either appended or rewritten in place, nothing else is.
    let out = run(&[
        "ycsb",
        "--mix",
        "a",
        "--quiet",
        "--threads",
        "2",
        "--warmup",
        "500",
        "-p",
        "recordcount=200",
        "-p",
        "operationcount=4000",
    ]);
    let r = rows(&out.stdout);
    let updates = num(&r, "UPDATE", "Return=OK");
    assert!(updates > 1000.0, "{r:?}");
    assert_eq!(num(&r, "CLIENT", "Appends") + num(&r, "CLIENT", "InPlaceUpdates"), updates, "{r:?}");
    assert_eq!(num(&r, "CLIENT", "TornReadRetries"), 0.0, "{r:?}");
    // The JSON export carries the same counts.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    run(&[
        "ycsb",
        "--mix",
        "a",
        "--quiet",
        "--protocol",
        "rfp",
        "--rfp-mode",
        "reply",
        "--json",
        json.to_str().unwrap(),
        "-p",
        "recordcount=100",
        "-p",
        "operationcount=1000",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let c = &v["client"];
    // Server-reply mode: every operation's result SENT, none fetched.
    assert_eq!(c["server_replies"].as_u64(), Some(1000), "{v}");
    assert_eq!(c["fetch_retries"].as_u64(), Some(0), "{v}");
    assert_eq!(c["torn_retries"].as_u64(), Some(0), "{v}");
    assert!(c["appends"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn several_clients_per_thread_serve_a_whole_run() {
    // BOOM, RDMA-KV, HERD, RFP and RDMP-KV split their GETs and PUTs (each client's
    // request stays in flight while the thread starts the others'), pDPM-Direct and
    // Clover their GETs. Workload A: half reads, half updates; F: read-modify-writes,
    // which run whole.
    for (transport, protocol, mix) in [
        ("shm", "boom", "a"),
        ("tcp", "boom", "a"),
        ("shm", "rpc", "a"),
        ("tcp", "herd", "a"),
        ("shm", "rdmp", "a"),
        ("tcp", "rfp", "a"),
        ("tcp", "clover", "a"),
        ("tcp", "pdpm-direct", "a"),
        ("shm", "boom", "f"),
    ] {
        let args = [
            "ycsb",
            "--mix",
            mix,
            "--quiet",
            "--threads",
            "2",
            "--clients",
            "5",
            "--transport",
            transport,
            "--protocol",
            protocol,
            "--size",
            "300",
            "-p",
            "recordcount=200",
            "-p",
            "operationcount=3000",
        ];
        let out = run(&args);
        let r = rows(&out.stdout);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("[CONFIG], clients, 5") && text.contains("[CONFIG], threads, 2"), "{args:?}: {text}");
        assert_eq!(num(&r, "CLEANUP", "Operations"), 5.0, "{args:?}: one per client");
        // Every operation counted once, and every read found the record the load wrote.
        let reads = num(&r, "READ", "Operations");
        assert_eq!(num(&r, "READ", "Return=OK"), reads, "{args:?}: {text}");
        let writes = if mix == "f" { 0.0 } else { num(&r, "UPDATE", "Operations") };
        assert_eq!(reads + writes, 3000.0, "{args:?}: {text}");
        assert_eq!(num(&r, "UPDATE", "Return=OK"), num(&r, "UPDATE", "Operations"), "{args:?}");
        assert!(!text.contains("ERROR") && !text.contains("NOT_FOUND"), "{args:?}: {text}");
    }
    let small = ["--quiet", "-p", "recordcount=5", "-p", "operationcount=5"];
    fails_with(&[&["ycsb", "--threads", "3", "--clients", "2"][..], &small].concat(), "fewer than the 3 threads");
    fails_with(&[&["ycsb", "--clients", "0"][..], &small].concat(), "--clients 0");
}

#[test]
fn a_server_logged_protocol_with_many_clients_fits_the_smallest_embedded_pool() {
    // An --ops far beyond the file system sizes the embedded pool by its need alone:
    // the records, and a segment for each client. HERD's server logs each connection's
    // writes in a segment of its own, and the load's connections keep theirs (sealed,
    // holding records) while the run's take new ones: 8 threads failed with "pool full"
    // when the pool had room for one phase's clients only.
    let out = run(&[
        "ycsb",
        "--mix",
        "b",
        "--protocol",
        "herd",
        "--threads",
        "8",
        "--size",
        "2k",
        "--quiet",
        "-p",
        "recordcount=2000",
        "--ops",
        "50000000",
        "--duration",
        "1",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("ERROR"), "{text}");
    assert_eq!(num(&rows(&out.stdout), "CLEANUP", "Operations"), 8.0);
}

#[test]
fn zero_padding_is_bounded_by_the_longest_key() {
    assert_eq!(boomkv::workload::core::MAX_ZERO_PADDING + 4, u64::from(boomkv::log::format::MAX_KEY_LEN));
    // 10^10 zeros per key, even for a dry run
    fails_with(&["ycsb", "-p", "zeropadding=10000000000", "--dry-run"], "at most 1020");
    run(&["ycsb", "-p", "zeropadding=1020", "--dry-run", "--print-ops", "1"]);
}

#[test]
fn counts_of_zero_are_refused_not_made_one() {
    fails_with(&["ycsb", "--workers", "0", "--dry-run"], "must be at least 1");
    fails_with(&["serve", "--pmem", "/nonexistent-dir/p", "--workers", "0"], "must be at least 1");
}

#[test]
fn an_embedded_server_takes_every_client_of_the_run() {
    // More than a shared server's default of 256: "too many clients", with no option
    // to raise it.
    run(&[
        "ycsb",
        "--quiet",
        "--threads",
        "1",
        "--clients",
        "260",
        "--segment-size",
        "64K",
        "-p",
        "recordcount=100",
        "-p",
        "operationcount=520",
    ]);
}

#[test]
fn a_warm_up_ends_with_the_duration() {
    // --duration bounds the warm-up as it bounds the run: 2^64 - 1 warm-up operations
    // ran until killed. Both phases of 1 s: done well inside the 60 s `timeout` gives.
    let t0 = std::time::Instant::now();
    let out = Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_boomctl"), "ycsb", "--quiet", "--mix", "a", "--records", "10"])
        .args(["--ops", "10", "--duration", "1", "--warmup", "18446744073709551615"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t0.elapsed() < std::time::Duration::from_secs(50), "{:?}", t0.elapsed());
    assert!(String::from_utf8_lossy(&out.stdout).contains("[OVERALL], Throughput(ops/sec)"));
}

#[test]
fn runs_that_cannot_end_well_are_refused_or_explained() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    // A run bounded by time only whose inserts fill the embedded pool says what to do.
    fails_with(
        &["ycsb", "--quiet", "--mix", "d", "--records", "100", "--size", "16k", "-p", "insertproportion=1"]
            .into_iter()
            .chain(["-p", "readproportion=0", "--duration", "60"])
            .collect::<Vec<_>>(),
        "give --pool-size (a sparse file) or bound the run with --ops",
    );
    // A CSV the run could not append to is refused before the run, not after it.
    std::fs::write(p("old.csv"), "a,b\n1,2\n").unwrap();
    let out = boomctl()
        .args(["ycsb", "--records", "10", "--duration", "30", "--csv", &p("old.csv")])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--csv: ") && err.contains("different columns"), "{err}");
    assert!(out.stdout.is_empty() && !err.contains("Starting test"), "it ran first: {err}");
    // A new CSV's columns are unique (`operations` was there twice).
    run(&["ycsb", "--quiet", "--records", "10", "--ops", "10", "--csv", &p("new.csv")]);
    let text = std::fs::read_to_string(p("new.csv")).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let unique: std::collections::BTreeSet<&str> = header.iter().copied().collect();
    assert_eq!(unique.len(), header.len(), "{header:?}");
    // An output that cannot be written is named.
    fails_with(
        &["ycsb", "--quiet", "--records", "10", "--ops", "10", "-p", "exportfile=/dev/full"],
        "exportfile: writing",
    );
    fails_with(&["ycsb", "--quiet", "--records", "10", "--ops", "10", "--json", "/dev/full"], "--json: writing");
    // Two names of one file.
    std::fs::create_dir(p("o")).unwrap();
    fails_with(
        &["ycsb", "--quiet", "--records", "10", "--ops", "10", "--json", &p("o/../o/r"), "--csv", &p("o/r")],
        "name the same file",
    );
    // A skew for a distribution without one; a binding with boomkv's own options.
    fails_with(
        &["ycsb", "--theta", "1.1", "-p", "requestdistribution=uniform", "--dry-run"],
        "skews the zipfian and latest distributions only; requestdistribution is uniform",
    );
    fails_with(&["ycsb", "--db", "redis://127.0.0.1:1", "--protocol", "rdmp", "--dry-run"], "cannot be used with");
    // --merge runs nothing, so takes no run or output option.
    fails_with(&["ycsb", "--merge", &p("x.hlog"), "--csv", &p("m.csv")], "cannot be used with");
    // A segment size no pool can have, on the command line.
    fails_with(&["ycsb", "--segment-size", "1k", "--dry-run"], "invalid value '1k' for '--segment-size");
    // Values over the server's default limit are taken by the embedded server.
    run(&["ycsb", "--quiet", "--records", "4", "--ops", "8", "--size", "2M"]);
    // Each operation's intended latencies have columns of their own: filled by a run
    // with a target, empty without one. An intended time has no outcome of its own.
    run(&[
        "ycsb",
        "--quiet",
        "--mix",
        "c",
        "--records",
        "10",
        "--ops",
        "40",
        "--target",
        "4000",
        "--csv",
        &p("new.csv"),
    ]);
    let mut rdr = csv::Reader::from_path(p("new.csv")).unwrap();
    let headers = rdr.headers().unwrap().clone();
    let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
    let cell = |r: usize, name: &str| rows[r][headers.iter().position(|h| h == name).unwrap()].to_string();
    assert_eq!(rows.len(), 2);
    assert_eq!((cell(0, "intended_read_operations"), cell(0, "intended_read_p99_us")), (String::new(), String::new()));
    assert_eq!(cell(1, "read_operations"), "40");
    assert_eq!(cell(1, "intended_read_operations"), "40");
    assert!(cell(1, "intended_read_p99_us").parse::<f64>().unwrap() > 0.0, "{rows:?}");
    assert_eq!((cell(1, "intended_read_ok"), cell(1, "intended_read_failed")), (String::new(), String::new()));
    // A CSV written by earlier versions (without the intended series; before that,
    // with the configured `operations` column too) is appended to in its own layout,
    // not refused.
    let text = std::fs::read_to_string(p("new.csv")).unwrap();
    let cols: Vec<&str> = text
        .lines()
        .next()
        .unwrap()
        .split(',')
        .take_while(|c| !c.starts_with("intended_"))
        .filter(|c| *c != "max_execution_time")
        .collect();
    let previous = cols.join(",");
    let legacy = previous.replacen(",records,", ",records,operations,", 1);
    for (file, header, operations) in [("previous.csv", &previous, 1), ("legacy.csv", &legacy, 2)] {
        std::fs::write(p(file), format!("{header}\n")).unwrap();
        run(&["ycsb", "--quiet", "--records", "10", "--ops", "10", "--csv", &p(file)]);
        let rows: Vec<csv::StringRecord> = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_path(p(file))
            .unwrap()
            .records()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 2, "{file}");
        assert_eq!(rows[0].len(), rows[1].len(), "{file}: {rows:?}");
        assert_eq!(rows[0].iter().filter(|c| *c == "operations").count(), operations, "{file}: {rows:?}");
    }
    // A --json that cannot be written costs not the text report.
    let out =
        boomctl().args(["ycsb", "--records", "10", "--ops", "10", "--quiet", "--json", "/dev/full"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("[OVERALL], Throughput(ops/sec)"));
    // Option values in any case, and their aliases, as before.
    run(&["ycsb", "--transport", "SHM", "--rfp-mode", "Reply", "--index", "BTREE", "--dry-run", "--print-ops", "1"]);
    // A value the protocol cannot carry is refused before a pool is made for it.
    fails_with(
        &["ycsb", "--protocol", "rpc", "--size", "2M", "--records", "10", "--ops", "10"],
        "rpc carries values up to 1051596 bytes (in one message)",
    );
    // `load` takes hdrhistogram.percentiles (its report's rows).
    let out =
        boomctl().args(["load", "--server", "127.0.0.1:1", "-p", "hdrhistogram.percentiles=50,99.9"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("has no effect"), "{out:?}");
    // `load` names the runner's properties it does not take.
    let out =
        boomctl().args(["load", "--server", "127.0.0.1:1", "-p", "threadcount=4", "-p", "target=10"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for k in ["threadcount", "target"] {
        assert!(err.contains(&format!("load: property `{k}` (-p override) has no effect here")), "{err}");
    }
}

#[test]
fn two_reports_into_one_file_and_embedded_options_with_a_server_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.out");
    let f = f.to_str().unwrap();
    let out = boomctl()
        .args(["ycsb", "--quiet", "--records", "10", "--ops", "10", "--csv", f, "--json", f])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--csv and --json name the same file"), "{err}");
    assert!(!std::path::Path::new(f).exists(), "refused before anything ran: {err}");
    // Options of the embedded server, with a server it does not start: refused, as
    // with --db (they were ignored without a word).
    for opt in [&["--workers", "3"][..], &["--pmem", "/nonexistent"][..], &["--segment-size", "1M"][..]] {
        let out = boomctl()
            .args(["ycsb", "--quiet", "--records", "10", "--ops", "10", "--server", "127.0.0.1:1"])
            .args(opt)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opt:?}: {err}");
        assert!(err.contains("cannot be used with"), "{opt:?}: {err}");
    }
}

#[test]
fn an_operation_count_of_zero_is_no_limit_as_in_ycsb() {
    // `--ops 0` ran nothing while `-p operationcount=0` ran to the clock.
    for zero in [&["--ops", "0"][..], &["-p", "operationcount=0"]] {
        let out = run(&[&["ycsb", "--mix", "c", "--quiet", "--records", "100", "--duration", "1"][..], zero].concat());
        assert!(num(&rows(&out.stdout), "READ", "Operations") > 1000.0, "{zero:?}");
        // Without a time limit nothing would end the run.
        fails_with(&[&["ycsb", "--mix", "c", "--quiet", "--records", "100"][..], zero].concat(), "no limit");
    }
}

#[test]
fn a_target_paces_a_load_only_run_and_zero_is_no_target() {
    // YCSB's `-load -target N` throttles the inserts (they ran at full speed under a
    // report that printed the target and Intended rows).
    let t0 = std::time::Instant::now();
    let out = run(&["ycsb", "-load", "--mix", "a", "--quiet", "-p", "recordcount=300", "-target", "1000"]);
    assert!(t0.elapsed() >= std::time::Duration::from_millis(250), "{:?}", t0.elapsed());
    let r = rows(&out.stdout);
    assert!(num(&r, "OVERALL", "Throughput(ops/sec)") < 1300.0, "{r:?}");
    assert_eq!(num(&r, "Intended-INSERT", "Operations"), 300.0, "{r:?}");
    // --target 0 is no target: no intended start times, so no Intended rows.
    let out = run(&["ycsb", "--mix", "a", "--quiet", "--records", "100", "--ops", "100", "--target", "0"]);
    let r = rows(&out.stdout);
    assert!(!r.keys().any(|(s, _)| s.starts_with("Intended-")), "{r:?}");
    // And the last of -load and -t wins, as in YCSB.
    let out = run(&["ycsb", "--mix", "a", "--quiet", "--records", "100", "--ops", "100", "-load", "-t"]);
    assert!(num(&rows(&out.stdout), "READ", "Operations") > 0.0);
}

/// `hdrhistogram.fileoutput=true` writes YCSB's own files, one per measurement
/// (`<hdrhistogram.output.path>READ.hdr`...), in microseconds as YCSB's, beside
/// boomkv's tagged `ycsb.hlog`: a script written for YCSB's files finds them.
#[test]
fn hdr_file_output_writes_ycsbs_file_per_measurement() {
    use boomkv::bench::hlog::{HlogFile, UNTAGGED};
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{}/h-", dir.path().display());
    let out = run(&[
        "ycsb",
        "--mix",
        "a",
        "--quiet",
        "--records",
        "100",
        "--ops",
        "6000",
        "--target",
        "1500",
        "-p",
        "measurement.interval=both",
        "-p",
        "hdrhistogram.fileoutput=true",
        "-p",
        &format!("hdrhistogram.output.path={prefix}"),
    ]);
    let r = rows(&out.stdout);
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for want in ["h-READ.hdr", "h-UPDATE.hdr", "h-Intended-READ.hdr", "h-Intended-UPDATE.hdr", "h-CLEANUP.hdr"] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
    assert!(names.iter().any(|n| n == "h-ycsb.hlog"), "{names:?}");
    for series in ["READ", "UPDATE", "Intended-READ", "CLEANUP"] {
        let path = dir.path().join(format!("h-{series}.hdr"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(&format!("#[Logging for: {series}]")), "{text}");
        let f = HlogFile::read(&path).unwrap();
        // Untagged, as YCSB's: HistogramLogProcessor reads them with no -tag.
        assert!(f.intervals.iter().all(|i| i.tag == UNTAGGED), "{series}");
        // A run of four seconds at least (6000 operations at 1500 a second): an interval
        // a second, each file from its measurement's first one on.
        if series != "CLEANUP" {
            assert!(f.intervals.len() >= 2, "{series}: {} intervals", f.intervals.len());
        }
        let mut all = boomkv::bench::measure::new_histogram();
        for i in &f.intervals {
            all.add(&i.histogram).unwrap();
        }
        // The report's operations and its microseconds: the files hold YCSB's values.
        assert_eq!(all.len() as f64, num(&r, series, "Operations"), "{series}");
        assert_eq!(all.max() as f64, num(&r, series, "MaxLatency(us)"), "{series}");
        assert_eq!(all.min() as f64, num(&r, series, "MinLatency(us)"), "{series}");
    }

    // A file that cannot be made mid-run (here a directory in UPDATE's place) stops the
    // files, not the run (it once ended the run with no report): the report is whole,
    // and the exit says which file and why.
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{}/h-", dir.path().display());
    std::fs::create_dir(dir.path().join("h-UPDATE.hdr")).unwrap();
    let args = ["ycsb", "--mix", "a", "--quiet", "--records", "100", "--ops", "2000"];
    let out = boomctl()
        .args(args)
        .args(["-p", "hdrhistogram.fileoutput=true", "-p", &format!("hdrhistogram.output.path={prefix}")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("h-UPDATE.hdr") && err.contains("the report above is whole"), "{err}");
    assert!(num(&rows(&out.stdout), "READ", "Operations") > 0.0, "{err}");
    // The same for boomkv's own log on a full disk: the report, then the error.
    let out = boomctl().args(args).args(["--hdr-log", "/dev/full"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/dev/full") && err.contains("the report above is whole"), "{err}");
    assert!(num(&rows(&out.stdout), "READ", "Operations") > 0.0, "{err}");
    // And a prefix in no directory is refused before anything runs.
    let out = boomctl()
        .args(args)
        .args(["-p", "hdrhistogram.fileoutput=true", "-p", "hdrhistogram.output.path=/nonexistent-dir/h-"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("hdrhistogram.output.path") && err.contains("cannot write there"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn an_output_that_a_measurement_file_would_overwrite_is_refused_before_the_run() {
    // --csv, --json, exportfile or the tagged log naming one of YCSB's per-measurement
    // files (or the tagged log itself) was written over during the run, or wrote over it.
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("{}/h-", dir.path().display());
    let hdr = [
        "-p".to_string(),
        "hdrhistogram.fileoutput=true".into(),
        "-p".into(),
        format!("hdrhistogram.output.path={prefix}"),
    ];
    let base = ["ycsb", "--mix", "a", "--quiet", "--records", "50", "--ops", "100"];
    let refused = |output: &[&str], needle: &str| {
        let out = boomctl().args(base).args(&hdr).args(output).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{output:?}: {err}");
        assert!(err.contains(needle), "{output:?}: {err}");
        assert!(out.stdout.is_empty(), "{output:?}: ran");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{output:?}: {left:?}");
    };
    let csv = format!("{prefix}READ.hdr");
    refused(&["--csv", &csv], "is the file hdrhistogram.fileoutput writes READ's latencies to");
    // Through another spelling of the directory, and a failure series of an intended one.
    let json = format!(
        "{}/../{}/h-Intended-UPDATE-NOT_FOUND.hdr",
        dir.path().display(),
        dir.path().file_name().unwrap().to_str().unwrap()
    );
    refused(&["--json", &json], "writes Intended-UPDATE-NOT_FOUND's latencies to");
    refused(&["-p", &format!("exportfile={prefix}CLEANUP.hdr")], "exportfile");
    refused(&["--csv", &format!("{prefix}ycsb.hlog")], "--csv and hdrhistogram.output.path name the same file");
    // Through a link, to a file the run has not made yet (the link is left as it was).
    let link = dir.path().join("out.csv");
    std::os::unix::fs::symlink("h-UPDATE.hdr", &link).unwrap();
    let out = boomctl().args(base).args(&hdr).args(["--csv", link.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("writes UPDATE's latencies to"), "{err}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    std::fs::remove_file(&link).unwrap();
    // A link to a file not made yet that no measurement takes: the run writes through it
    // (the check before the run once removed the link and left the file it made).
    let other = dir.path().join("other.csv");
    std::os::unix::fs::symlink("report.csv", &other).unwrap();
    let out = boomctl().args(base).args(&hdr).args(["--csv", other.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(&other).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(dir.path().join("report.csv")).unwrap().contains("read_operations"));
    for e in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    // A failure series' name is one the run makes; another upper-case one is not.
    refused(&["--json", &format!("{prefix}SCAN-FAILED.hdr")], "writes SCAN-FAILED's latencies to");
    // A .hdr name no measurement takes is an ordinary output.
    let notes = format!("{prefix}READ-BACKUP.hdr");
    let out = boomctl().args(base).args(&hdr).args(["--json", &notes]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&notes).unwrap().starts_with('{'));

    // A directory that takes no new file, but holds a writable READ.hdr, passed the check
    // before the run (it tried READ.hdr alone). Root writes through permissions, so the
    // directory is made immutable, where the file system lets `chattr` do that.
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("h-READ.hdr"), b"").unwrap();
    let chattr = |flag: &str| Command::new("chattr").arg(flag).arg(&ro).status().is_ok_and(|s| s.success());
    struct Mutable<F: Fn(&str) -> bool>(F);
    impl<F: Fn(&str) -> bool> Drop for Mutable<F> {
        fn drop(&mut self) {
            (self.0)("-i");
        }
    }
    if chattr("+i") {
        let _undo = Mutable(chattr);
        let prefix = format!("hdrhistogram.output.path={}/h-", ro.display());
        // The tagged log elsewhere: it is checked first, and would be refused first.
        let log = dir.path().join("tagged.hlog");
        let out = boomctl()
            .args(base)
            .args(["-p", "hdrhistogram.fileoutput=true", "-p", &prefix, "--hdr-log", log.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("no new file can be made there"), "{err}");
        assert!(out.stdout.is_empty());
    } else {
        eprintln!("chattr +i refused here: the read-only directory case is not checked");
    }
}

#[test]
fn merging_one_log_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("r.hlog");
    run(&["ycsb", "--mix", "c", "--quiet", "--records", "100", "--ops", "200", "--hdr-log", log.to_str().unwrap()]);
    let alias = dir.path().join("x").join("..").join("r.hlog");
    std::fs::create_dir(dir.path().join("x")).unwrap();
    fails_with(&["ycsb", "--merge", log.to_str().unwrap(), alias.to_str().unwrap()], "are the same file");
}

#[test]
fn a_time_limit_bounds_the_run_not_the_load() {
    // Loading 300,000 records over tcp, one round trip each, takes well over the
    // one-second limit (about 3 s for this debug build here). The limit used to stop the load too: the run then read keys
    // that were never loaded (`[READ], Return=NOT_FOUND`) under `[CONFIG], records,
    // 300000`, and exited 0. In YCSB load and run are two invocations, and a run's
    // `maxexecutiontime` never touches the load.
    let out = run(&[
        "ycsb",
        "--mix",
        "c",
        "--transport",
        "tcp",
        "-p",
        "recordcount=300000",
        "-p",
        "fieldlength=10",
        "-p",
        "operationcount=2000",
        "-p",
        "maxexecutiontime=1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("load: 300000 records"), "{err}");
    let r = rows(&out.stdout);
    assert!(!r.contains_key(&("READ".to_string(), "Return=NOT_FOUND".to_string())), "{r:?}");
    assert!(num(&r, "READ", "Return=OK") > 0.0, "{r:?}");
}

#[test]
fn a_target_however_given_adds_the_intended_rows_unless_measurement_interval_says_op() {
    // `-target N` added Intended-* rows and `-p target=N` did not.
    let base = ["ycsb", "--mix", "c", "--quiet", "-p", "recordcount=50", "-p", "operationcount=100"];
    let intended = |extra: &[&str]| {
        let out = run(&[&base[..], extra].concat());
        rows(&out.stdout).keys().any(|(s, _)| s == "Intended-READ")
    };
    assert!(intended(&["-target", "2000"]));
    assert!(intended(&["-p", "target=2000"]));
    assert!(!intended(&["-p", "target=2000", "-p", "measurement.interval=op"]));
    assert!(!intended(&[]));
}

#[test]
fn the_workload_class_alone_starts_from_ycsbs_defaults() {
    // YCSB with `-p workload=...CoreWorkload -p readproportion=1` and no -P: 1 read to
    // CoreWorkload's default 0.05 update (about 95% reads). boomctl used workloada's
    // 0.5 update under it (two reads in three) without a word.
    let reads = |args: &[&str]| {
        let base = [
            "ycsb",
            "-p",
            "recordcount=100",
            "-p",
            "operationcount=2000",
            "-p",
            "readproportion=1",
            "--dry-run",
            "--print-ops",
            "2000",
        ];
        let out = boomctl().args([&base[..], args].concat()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (text.lines().filter(|l| l.starts_with("READ")).count(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (n, _) = reads(&["-p", "workload=site.ycsb.workloads.CoreWorkload"]);
    assert!((1850..1960).contains(&n), "{n} reads of 2000");
    // Without the class, workloada is the base, and a note says so.
    let (n, err) = reads(&[]);
    assert!((1250..1420).contains(&n), "{n} reads of 2000");
    assert!(err.contains("no -P or --mix"), "{err}");
}

#[test]
fn config_values_hold_no_comma() {
    // `[CONFIG], distribution, zipfian (YCSB scrambled, ...)` split into four fields.
    let out = run(&["ycsb", "--mix", "b", "--quiet", "-p", "recordcount=20", "-p", "operationcount=20"]);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        assert_eq!(line.matches(',').count(), 2, "{line}");
    }
}

#[test]
fn more_threads_than_operations_are_cut_to_the_count() {
    let out =
        run(&["ycsb", "--mix", "c", "--quiet", "-p", "recordcount=20", "-p", "operationcount=2", "-threads", "4"]);
    let r = rows(&out.stdout);
    assert_eq!(num(&r, "CLEANUP", "Operations"), 2.0, "{r:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 threads for 2 operations"));
}

#[test]
fn a_torn_csv_row_is_cut_before_the_next_row() {
    // A run that hit a full disk left its row cut short; the next run's row joined it
    // into one line of 116 fields under a 104-field header, values under wrong names.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("r.csv");
    let args = ["ycsb", "--mix", "c", "--quiet", "-p", "recordcount=20", "-p", "operationcount=20", "--csv"];
    run(&[&args[..], &[csv.to_str().unwrap()]].concat());
    run(&[&args[..], &[csv.to_str().unwrap()]].concat());
    let two = std::fs::read(&csv).unwrap();
    std::fs::write(&csv, &two[..two.len() - 30]).unwrap();
    let out = run(&[&args[..], &[csv.to_str().unwrap()]].concat());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut a torn last row"));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut r = csv::ReaderBuilder::new().flexible(false).from_reader(text.as_bytes());
    let rows: Vec<csv::StringRecord> = r.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), 2, "{text}");
}

#[test]
fn a_csv_that_is_a_device_is_not_read_for_its_header() {
    // `--csv /dev/full` read /dev/full's "first line" until memory ran out (23 GB, then
    // the OOM killer); now the row's write fails with the device's own error.
    let args = ["ycsb", "--mix", "c", "--quiet", "-p", "recordcount=20", "-p", "operationcount=20", "--csv"];
    fails_with(&[&args[..], &["/dev/full"]].concat(), "No space left on device");
    run(&[&args[..], &["/dev/null"]].concat());
}

#[test]
fn what_a_killed_run_left_behind_is_removed_and_said() {
    // A run killed with SIGKILL left its 1 GiB pool in /dev/shm, and every later run
    // left it there, without a word.
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    let parent = std::env::temp_dir();
    let left = parent.join(format!("boomkv-{dead}-killedrun"));
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("boomkv.pool"), vec![1u8; 8192]).unwrap();
    // A live process's (this test's) stays.
    let live = parent.join(format!("boomkv-{}-alive", std::process::id()));
    std::fs::create_dir_all(&live).unwrap();
    let out = run(&["ycsb", "--mix", "c", "--quiet", "-p", "recordcount=5", "-p", "operationcount=5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!left.exists(), "{err}");
    assert!(err.contains(&format!("removed {}", left.display())) && err.contains("was killed"), "{err}");
    assert!(live.exists());
    std::fs::remove_dir_all(&live).unwrap();
}

/// The crowded-wait test measures the machine (which way its clients wait faster), and
/// the placement test keeps both CPUs busy: they take turns.
static CPU_BOUND: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn crowded_shm_clients_report_how_they_waited() {
    let _turn = CPU_BOUND.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Clients share CPUs only with more polling threads than cores, and the embedded
    // server's worker gets a CPU of its own only with two or more.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cores < 2 {
        eprintln!("one CPU: no client placement, so no crowded clients to test");
        return;
    }
    let threads = (cores + 2).to_string();
    // Split: colocated clients (the default past the CPUs a split leaves them) wait
    // beside their worker, always yielding, and never measure.
    let args = [
        "ycsb",
        "--mix",
        "c",
        "--quiet",
        "--transport",
        "shm",
        "--pin",
        "split",
        "--duration",
        "4",
        "--threads",
        &threads,
        "-p",
        "recordcount=100",
    ];
    let out = boomctl().env_remove("BOOMKV_CROWD_WAIT").args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = rows(&out.stdout);
    // A cycle is 800 ms and decides in its first 55, so four seconds of crowded waits
    // end at least four, and busy ones decide: the machine picks which way. (A cycle
    // whose two pairs of trials disagree decides nothing: with two seconds, both
    // cycles of a run did so once on a host busy enough to swing runs by a third.)
    let decided = num(&r, "CLIENT", "CrowdedWaitSpinCycles") + num(&r, "CLIENT", "CrowdedWaitYieldCycles");
    assert!(decided >= 1.0, "{r:?}");
    assert!(decided + num(&r, "CLIENT", "CrowdedWaitUndecidedCycles") >= 4.0, "{r:?}");
    // A way set by hand is used as it is: nothing measured, nothing reported.
    let out = boomctl().env("BOOMKV_CROWD_WAIT", "yield").args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = rows(&out.stdout);
    let reported: Vec<_> = r.keys().filter(|(s, m)| s == "CLIENT" && m.starts_with("CrowdedWait")).collect();
    assert!(reported.is_empty(), "{reported:?}");
    assert!(num(&r, "READ", "Operations") > 1000.0, "{r:?}");
    // And a bad one is refused before anything runs.
    let out = boomctl().env("BOOMKV_CROWD_WAIT", "sometimes").args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("BOOMKV_CROWD_WAIT=sometimes: expected auto"), "{err}");
    assert!(out.stdout.is_empty());
}

/// `--pin auto` splits the CPUs while each client thread has one beside the workers',
/// colocates past that over shm and tcp unless `--workers` was given, and `[CONFIG],
/// pin` says which; every placement serves the whole run.
#[test]
fn the_placement_follows_the_thread_count_and_is_reported() {
    let _turn = CPU_BOUND.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cores < 2 {
        eprintln!("one CPU: nothing to place");
        return;
    }
    let crowd = (cores + 1).to_string();
    let pin = |extra: &[&str]| -> String {
        let mut args = vec!["ycsb", "--mix", "b", "--quiet", "--size", "256", "--ops", "2000", "-p", "recordcount=200"];
        args.extend_from_slice(extra);
        let out = boomctl().args(&args).output().unwrap();
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        let r = rows(&out.stdout);
        assert_eq!(num(&r, "READ", "Return=OK") + num(&r, "UPDATE", "Return=OK"), 2000.0, "{extra:?}: {r:?}");
        r.get(&("CONFIG".to_string(), "pin".to_string())).cloned().unwrap_or_default()
    };
    let split = pin(&["--threads", "1"]);
    assert!(split.starts_with("server workers on CPU"), "{split}");
    for transport in ["shm", "tcp"] {
        let p = pin(&["--threads", &crowd, "--transport", transport]);
        assert!(p.starts_with("colocated: server workers on CPU"), "{transport}: {p}");
    }
    assert_eq!(pin(&["--threads", &crowd, "--pin", "split"]), split);
    let asked = pin(&["--threads", &crowd, "--workers", "1"]);
    assert!(asked.starts_with("server workers on CPU"), "a worker count asked for keeps the split: {asked}");
    assert!(pin(&["--threads", "1", "--pin", "colocate"]).starts_with("colocated"));
    assert_eq!(pin(&["--threads", &crowd, "--pin", "off"]), "off");
}
