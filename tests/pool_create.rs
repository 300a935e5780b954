//! Pool creation and opening (issue 18 item 9, issue 13 item 9): a missing pool is
//! created only when asked, an empty file is never formatted silently, a sparse pool
//! file is allocated on open, and `serve` says whether it created or opened a pool with
//! the same key count its stop line printed.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};

use boomkv::log::{LocalWriter, Pool, PoolOptions};

fn boomctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
}

/// Starts `serve` on `pool` with `extra` arguments; returns the child once it answers.
fn serve(pool: &std::path::Path, sock: &std::path::Path, extra: &[&str]) -> Child {
    let server = format!("shm:{}", sock.display());
    let child = boomctl()
        .args(["serve", "--stats-interval", "0", "--quiet", "--listen", &server, "--pmem"])
        .arg(pool)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_server(&server);
    child
}

/// Stops `child` with SIGTERM and returns its standard error.
fn stop(child: Child) -> String {
    // SAFETY: signalling a child process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn missing_and_empty_pools_are_refused_unless_creation_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pool");
    let out = boomctl().args(["serve", "--pmem"]).arg(&missing).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--create") && err.lines().count() == 1, "{err}");
    assert!(!missing.exists(), "nothing created");
    let empty = dir.path().join("empty.pool");
    std::fs::write(&empty, b"").unwrap();
    for extra in [&[][..], &["--create"][..], &["--pool-size", "16M"][..]] {
        let out = boomctl().args(["serve", "--pmem"]).arg(&empty).args(extra).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("empty file (0 bytes)"), "{extra:?}");
        assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0, "never formatted");
    }
}

#[test]
fn serve_says_created_or_opened_and_the_key_counts_agree() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p.pool");
    let sock = dir.path().join("s.sock");
    let server = format!("shm:{}", sock.display());
    let child = serve(&pool, &sock, &["--create", "--pool-size", "32M"]);
    for i in 0..5 {
        assert!(boomctl().args(["put", "--server", &server, &format!("k{i}"), "v"]).status().unwrap().success());
    }
    assert!(boomctl().args(["del", "--server", &server, "k0"]).status().unwrap().success());
    let err = stop(child);
    assert!(err.contains("created a new pool") && err.contains("32.0 MiB"), "{err}");
    assert!(err.contains("4 keys"), "{err}");
    let child = serve(&pool, &sock, &[]);
    let err = stop(child);
    assert!(err.contains("opened pool") && err.contains("with 4 keys (1 deleted)"), "{err}");
    assert!(err.contains("stopped") && err.lines().last().unwrap().contains("4 keys"), "{err}");
}

#[test]
fn a_sparse_pool_file_is_allocated_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.pool");
    let mut o = PoolOptions { segment_size: 1 << 20, ..Default::default() };
    o.media.create_size = Some(32 << 20);
    {
        let (p, _) = Pool::open(&path, &o).unwrap();
        LocalWriter::new(&p).append(b"k", b"v", false).unwrap();
    }
    // punch the unused tail out, as a copy or a restore without --sparse=never would
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on a file this test owns.
    let r = unsafe {
        libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 8 << 20, 24 << 20)
    };
    drop(f);
    if r != 0 {
        eprintln!("this filesystem cannot punch holes; nothing to test");
        return;
    }
    let blocks = |p: &std::path::Path| std::fs::metadata(p).unwrap().blocks() * 512;
    assert!(blocks(&path) < 16 << 20, "the hole was punched");
    let (p, rep) = Pool::open(&path, &PoolOptions::default()).unwrap();
    assert_eq!(rep.keys, 1);
    assert!(blocks(&path) >= 32 << 20, "every block allocated: {} bytes", blocks(&path));
    drop(p);
}
