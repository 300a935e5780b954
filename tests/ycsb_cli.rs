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
