//! `boomctl recover` and `inspect-log` on real pool files.

use std::path::Path;
use std::process::Command;

use boomkv::log::{LocalWriter, Pool, PoolOptions};

fn boomctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
}

fn make_pool(dir: &Path) -> std::path::PathBuf {
    let mut o = PoolOptions { segment_size: 64 << 10, ..Default::default() };
    o.media.create_size = Some(2 << 20);
    let (pool, _) = Pool::open(dir, &o).unwrap();
    let mut w = LocalWriter::new(&pool);
    for i in 0..300u32 {
        w.append(format!("user{}", i % 100).as_bytes(), &vec![b'v'; 100 + i as usize], false).unwrap();
    }
    w.append(b"user5", b"", true).unwrap();
    w.append(b"we\"ird\\key\x01", b"x", false).unwrap();
    dir.join("boomkv.pool")
}

#[test]
fn recover_prints_summary_and_json() {
    let dir = tempfile::tempdir().unwrap();
    make_pool(dir.path());
    let out = boomctl().args(["recover", "--pmem"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("keys        100 live, 1 deleted"), "{s}");
    assert!(s.contains("302 valid (201 superseded), 0 rejected"), "{s}");
    let out = boomctl().args(["recover", "--json", "--pmem"]).arg(dir.path()).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["recovery"]["keys"], 100);
    assert_eq!(v["recovery"]["tombstones"], 1);
}

#[test]
fn inspect_log_tables_filters_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path());
    let before = std::fs::read(&pool).unwrap();
    let out = boomctl().args(["inspect-log", "--entries", "--key", "user5", "--pmem"]).arg(&pool).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = s.lines().filter(|l| l.ends_with(" user5")).collect();
    assert_eq!(rows.len(), 4, "{s}");
    assert_eq!(rows.iter().filter(|r| r.contains("superseded")).count(), 3);
    assert!(rows.iter().any(|r| r.contains("deleted") && r.contains(" T ")), "{s}");

    let out = boomctl().args(["inspect-log", "--json", "--entries", "--pmem"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 302);
    assert!(v["segments"].as_array().unwrap().len() > 1);
    if Command::new("python3").arg("--version").output().is_ok() {
        let mut child = Command::new("python3")
            .args(["-m", "json.tool"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&out.stdout).unwrap();
        assert!(child.wait().unwrap().success(), "python3 -m json.tool rejected the output");
    }
    let out = boomctl().args(["inspect-log", "--client", "999", "--pmem"]).arg(&pool).output().unwrap();
    assert!(out.status.success());
    // A client with no segment is said so, not shown as an empty table.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no segment belongs to client 999") && !text.contains("fill%"), "{text}");
    // So is a key with no entry.
    let out = boomctl().args(["inspect-log", "--key", "nosuchkey", "--pmem"]).arg(&pool).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no log entry of key `nosuchkey` in the pool's segments") && !text.contains("checksum"));
    // A key that is not UTF-8 is a key like any other.
    use std::os::unix::ffi::OsStrExt;
    let out = boomctl()
        .args(["inspect-log", "--segment", "0", "--key"])
        .arg(std::ffi::OsStr::from_bytes(b"k\xff"))
        .arg("--pmem")
        .arg(&pool)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no log entry of key `k\\xff` in segment 0"), "{text}");
    assert_eq!(std::fs::read(&pool).unwrap(), before, "inspect-log must not change the pool");
}

#[test]
fn bad_pools_give_one_line_errors_and_stay_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path());
    let mut bytes = std::fs::read(&pool).unwrap();
    bytes[3] ^= 0xff;
    std::fs::write(&pool, &bytes).unwrap();
    let truncated = dir.path().join("trunc.pool");
    std::fs::write(&truncated, &bytes[..1000]).unwrap();
    for (path, want) in [
        (&pool, "not a BOOM-KV pool"),
        (&truncated, "not a BOOM-KV pool"),
        (&dir.path().join("missing.pool"), "no such pool file"),
        (&dir.path().join("nodir/x.pool"), "does not exist"),
    ] {
        for cmd in ["recover", "inspect-log"] {
            let out = boomctl().args([cmd, "--pmem"]).arg(path).output().unwrap();
            assert_eq!(out.status.code(), Some(1), "{cmd} {}", path.display());
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(want) && err.contains(&*path.to_string_lossy()), "{cmd}: {err}");
        }
    }
    assert_eq!(std::fs::read(&pool).unwrap(), bytes);
    assert!(!dir.path().join("missing.pool").exists(), "nothing is created by a read-only command");
}

#[test]
fn options_that_would_be_ignored_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path());
    // --bench-size and friends describe --bench's pool only
    for extra in [&["--bench-size", "8M"][..], &["--value-size", "1k"][..], &["--bench-dir", "/tmp"][..]] {
        let out = boomctl().args(["recover", "--pmem"]).arg(&pool).args(extra).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(&format!("{} sets up --bench; without --bench it would", extra[0])), "{extra:?}: {err}");
        assert!(out.stdout.is_empty(), "the pool was recovered anyway");
    }
    let out = boomctl().args(["recover", "--repeat", "2", "--value-size", "1k", "--pmem"]).arg(&pool).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--value-size and --repeat set up --bench; without --bench they would"), "{err}");
    // a spin limit that is not a number is refused before anything runs
    let out = boomctl().env("BOOMKV_SPIN_LIMIT", "abc").args(["recover", "--pmem"]).arg(&pool).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("BOOMKV_SPIN_LIMIT=abc: expected a whole number"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn shell_completions() {
    let out = boomctl().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("_boomctl") && s.contains("inspect-log") && s.contains("crashtest"));
    // Options that take one of a few values offer them, not file names.
    for values in ["shm tcp verbs", "us ns", "hash ordered", "hybrid append", "hybrid fetch reply", "flush msync"] {
        assert!(s.contains(values), "bash completion offers no `{values}`");
    }
}

#[test]
fn inspect_log_and_recover_into_a_closed_pipe_exit_normally() {
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path());
    for args in [&["inspect-log", "--entries", "--pmem"][..], &["recover", "--pmem"][..]] {
        let mut child = boomctl()
            .args(args)
            .arg(&pool)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}\n{err}", out.status);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn inspect_log_names_the_cleaner_shows_values_and_recover_lists_keys() {
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path());
    // --key: only the entries (no segment table), with values and the legend.
    let out = boomctl().args(["inspect-log", "--key", "user7", "--values", "--pmem"]).arg(&pool).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(!s.contains("fill%"), "segment table reprinted with --key:\n{s}");
    assert!(s.lines().any(|l| l.trim_start().starts_with("value: vvvv")), "{s}");
    assert!(s.contains("flags: T = tombstone"), "{s}");
    // recover --keys: the 100 live keys (user5 deleted), in order, printable.
    let out = boomctl().args(["recover", "--keys", "--pmem"]).arg(&pool).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    let keys: Vec<&str> = s.lines().skip_while(|l| !l.is_empty()).skip(1).collect();
    assert_eq!(keys.len(), 100, "{s}");
    assert!(keys.contains(&"user0") && !keys.contains(&"user5"), "{s}");
    assert!(keys.contains(&"we\"ird\\\\key\\x01"), "{s}");
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted);
}

#[test]
fn recover_lists_long_keys_whole() {
    // Cut after 128 bytes, two keys that differ only further on were listed alike.
    let dir = tempfile::tempdir().unwrap();
    let mut o = PoolOptions { segment_size: 64 << 10, ..Default::default() };
    o.media.create_size = Some(1 << 20);
    let long = "b".repeat(1000);
    {
        let (pool, _) = Pool::open(dir.path(), &o).unwrap();
        let mut w = LocalWriter::new(&pool);
        for end in ["1", "2"] {
            w.append(format!("{long}{end}").as_bytes(), b"v", false).unwrap();
        }
    }
    let out = boomctl().args(["recover", "--keys", "--pmem"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8(out.stdout).unwrap();
    let keys: Vec<&str> = s.lines().skip_while(|l| !l.is_empty()).skip(1).collect();
    assert_eq!(keys, [format!("{long}1"), format!("{long}2")], "{s}");
}

#[test]
fn a_full_standard_output_is_named() {
    // It ended with a bare "No space left on device".
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path());
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = boomctl().args(["recover", "--keys", "--pmem"]).arg(&pool).stdout(full).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("boomctl: error: writing standard output: "), "{err}");
}

#[test]
fn crashtest_refuses_what_it_cannot_run() {
    // A largest value no segment holds was generated in full before the server refused
    // it (10G: all the memory; u64::MAX: a panic); no threads or keys was made 1.
    for (args, needle) in [
        (&["--max-value", "10G"][..], "hold values of at most"),
        (&["--max-value", "18446744073709551615"][..], "hold values of at most"),
    ] {
        let out = boomctl().args(["crashtest", "--iterations", "1", "--quiet"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // Client threads: 1 to 256, or the command line is refused (100000 threads ran out
    // of file descriptors, 2^64 - 1 panicked on a capacity overflow).
    for n in ["0", "100000", "18446744073709551615"] {
        let out = boomctl().args(["crashtest", "--iterations", "1", "--quiet", "--threads", n]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{n}: {err}");
        assert!(err.contains("1..=256"), "{n}: {err}");
    }
    // Counts and the probability are checked by the command line too (exit 2, as every
    // value that does not parse), not after it (they exited 1).
    for (args, needle) in [
        (&["--iterations", "0"][..], "not in 1.."),
        (&["--keys", "0"][..], "not in 1.."),
        (&["--ops", "0"][..], "not in 1.."),
        (&["--keep", "1.5"][..], "between 0 and 1"),
        (&["--keep", "NaN"][..], "between 0 and 1"),
        (&["--keep", "-0.1"][..], "between 0 and 1"),
    ] {
        let out = boomctl().args(["crashtest", "--quiet"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // A run that checked no acknowledged write is no pass (it exited 0).
    let out =
        boomctl().args(["crashtest", "--iterations", "5", "--ops", "1", "--threads", "1", "--quiet"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no acknowledged write was checked in 5 crashes: with --ops 1"), "{err}");
    // load: no client threads was made 1
    let out = boomctl().args(["load", "--server", "127.0.0.1:9", "--threads", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn inspect_log_refuses_a_segment_the_pool_does_not_have() {
    // It printed an empty table and exited 0: "nothing there", not "no such segment".
    let dir = tempfile::tempdir().unwrap();
    let pool = make_pool(dir.path());
    let out = boomctl().args(["inspect-log", "--segment", "999", "--pmem"]).arg(&pool).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--segment 999: the pool has segments 0 to"), "{err}");
    let out = boomctl().args(["inspect-log", "--segment", "0", "--pmem"]).arg(&pool).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_client_timeout_of_zero_is_refused() {
    // It was made 1 s without a word.
    let out = boomctl().args(["get", "--timeout", "0", "k"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'--timeout <SECS>'"));
}

#[test]
fn recover_bench_refuses_what_it_cannot_run() {
    for (args, needle) in [
        // the value was allocated in full before the first append refused it
        (&["--value-size", "1T"][..], "hold values of 1 byte to"),
        (&["--value-size", "0"][..], "hold values of 1 byte to"),
        // "inf ms, best of 0" and a ratio of 1.00x that looked like a pass
        (&["--repeat", "0"][..], "--repeat"),
        // advice about --pool-size and --segment-size, which recover has not
        (&["--bench-size", "1M"][..], "--bench-size 1M: at least 4M"),
        // accepted and ignored
        (&["--json"][..], "cannot be used with"),
        (&["--pmem", "/tmp/x"][..], "cannot be used with"),
    ] {
        let out = Command::new("timeout")
            .args(["60", env!("CARGO_BIN_EXE_boomctl"), "recover", "--bench"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(1 | 2)), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bench_transport_checks_its_csv_path_before_measuring() {
    let out = Command::new("timeout")
        .args(["20", env!("CARGO_BIN_EXE_boomctl"), "bench-transport", "--csv", "/nonexistent-dir/floor.csv"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--csv /nonexistent-dir/floor.csv: cannot write there"), "{err}");
}

#[test]
fn bench_transport_on_one_cpu_judges_nothing() {
    // Both threads of a round trip on one CPU: the figures are thread switches.
    let Ok(out) = Command::new("taskset")
        .args(["-c", "0", env!("CARGO_BIN_EXE_boomctl"), "bench-transport", "--transport", "shm"])
        .args(["--sizes", "64", "--iters", "200", "--warmup", "20"])
        .output()
    else {
        return; // no taskset
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("the checks are not judged") && !text.contains("PASS"), "{text}");
}

#[test]
fn bench_transport_takes_the_aliases_of_verbs_in_any_case() {
    // Taken by the parser as before, then refused by a build without the backend.
    if cfg!(feature = "rdma") {
        return;
    }
    let out = boomctl().args(["bench-transport", "--transport", "RDMA"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("built without RDMA support"), "{err}");
}

#[test]
fn bench_transport_refuses_counts_and_sizes_it_cannot_run() {
    // u64::MAX iterations panicked (capacity overflow), 10^12 aborted on allocation, and
    // warm-up plus timed iterations wrapped around; every refusal comes before any run.
    for (args, code, needle) in [
        (&["--iters", "18446744073709551615"][..], 2, "1..=10000000"),
        (&["--iters", "0"][..], 2, "1..=10000000"),
        (&["--warmup", "18446744073709551615"][..], 2, "0..=10000000"),
        (&["--sizes", "0"][..], 1, "--sizes: 0 bytes is outside 1 byte to 16 MiB"),
        (&["--sizes", "1M,32M"][..], 1, "--sizes: 33554432 bytes is outside"),
        (&["--transport", "bogus"][..], 2, "[possible values: shm, tcp, verbs, all]"),
    ] {
        let shm: &[&str] = if args[0] == "--transport" { &[] } else { &["--transport", "shm"] };
        let out = Command::new("timeout")
            .args(["20", env!("CARGO_BIN_EXE_boomctl"), "bench-transport"])
            .args(shm)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
