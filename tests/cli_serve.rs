//! `boomctl serve` in one process, `boomctl put/get/del/stats` from others, over shm and tcp.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn boomctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
}

struct Serve(Child);
impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn run(args: &[&str]) -> std::process::Output {
    boomctl().args(args).output().unwrap()
}

/// `boomctl serve ARGS --pmem DIR`, its standard error piped, once `stats` answers at
/// `server`.
fn serve(args: &[&str], dir: &std::path::Path, server: &str) -> Serve {
    let child = boomctl()
        .arg("serve")
        .args(args)
        .arg("--pmem")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let serve = Serve(child);
    let t0 = Instant::now();
    while run(&["stats", "--server", server]).status.code() != Some(0) {
        assert!(t0.elapsed() < Duration::from_secs(20), "server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    serve
}

#[test]
fn serve_and_command_line_clients_over_shm_and_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let shm = format!("shm:{}", dir.path().join("s.sock").display());
    let tcp = format!("127.0.0.1:{}", free_port());
    let args =
        ["--pool-size", "64M", "--segment-size", "4M", "--stats-interval", "0", "--listen", &shm, "--listen", &tcp];
    let mut serve = serve(&args, dir.path(), &tcp);
    for (server, proto) in [(&shm, "boom"), (&tcp, "boom"), (&shm, "rdmp"), (&tcp, "rpc")] {
        let key = format!("key-{proto}-{}", server.len());
        let out = run(&["put", "--server", server, "--protocol", proto, &key, "hello world"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let out = run(&["get", "--server", server, "--protocol", proto, &key]);
        assert_eq!(out.stdout, b"hello world", "{server} {proto}");
        let out = run(&["get", "--server", server, &key, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["value"], "hello world");
        let out = run(&["del", "--server", server, "--protocol", proto, &key]);
        assert!(out.status.success());
        let out = run(&["get", "--server", server, &key]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("key not found"));
    }
    // a value from a file and from standard input, hex output
    let f = dir.path().join("v.bin");
    std::fs::write(&f, [0u8, 1, 2, 255]).unwrap();
    assert!(run(&["put", "--server", &tcp, "bin", "--value-file", f.to_str().unwrap()]).status.success());
    assert_eq!(run(&["get", "--server", &shm, "bin", "--hex"]).stdout, b"000102ff\n");
    let mut p = boomctl().args(["put", "--server", &tcp, "stdin", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    p.stdin.take().unwrap().write_all(b"from stdin").unwrap();
    assert!(p.wait().unwrap().success());
    assert_eq!(run(&["get", "--server", &tcp, "stdin"]).stdout, b"from stdin");
    // keys and values are bytes: what the shell passes that is not UTF-8 is stored as
    // given, and shown escaped
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let key = OsStr::from_bytes(b"k\xff\x01");
    let with =
        |cmd: &str, rest: &[&OsStr]| boomctl().args([cmd, "--server", &tcp]).arg(key).args(rest).output().unwrap();
    let out = with("put", &[OsStr::from_bytes(b"v\xfe")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stored k\\xff\\x01"), "{out:?}");
    assert_eq!(with("get", &[]).stdout, b"v\xfe");
    let json = String::from_utf8(with("get", &[OsStr::new("--json")]).stdout).unwrap();
    assert!(json.contains(r#""key":null,"key_hex":"6bff01""#) && json.contains(r#""value_hex":"76fe""#), "{json}");
    assert!(with("del", &[]).status.success());
    let out = with("get", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("key not found: k\\xff\\x01"), "{out:?}");
    // errors: one line, non-zero
    let out = run(&["get", "--server", "127.0.0.1:1", "x", "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1);
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![7u8; 5 << 20]).unwrap();
    let out = run(&["put", "--server", &tcp, "k", "--value-file", big.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("over the limit"));
    // An endless value is refused at the limit, not read to the end (it took all the
    // memory); `timeout` fails the test if it is not.
    let out = Command::new("timeout")
        .args(["30", env!("CARGO_BIN_EXE_boomctl"), "put", "--server", &tcp, "k", "--value-file", "/dev/zero"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{:?}", out.status);
    assert!(String::from_utf8_lossy(&out.stderr).contains("over the limit"));
    // deleting a missing key is "not found", exit 1, like get
    let out = run(&["del", "--server", &tcp, "never-written"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("key not found: never-written"));
    // `tcp:host:port`, like `shm:/path`
    let tcp_prefixed = format!("tcp:{tcp}");
    assert_eq!(run(&["get", "--server", &tcp_prefixed, "bin", "--hex"]).stdout, b"000102ff\n");
    let out = run(&["stats", "--server", &shm]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("puts"));
    // "bin" and "stdin" live; the five keys above deleted (their tombstones were
    // counted as keys)
    assert!(text.contains("keys          2 live, 5 deleted"), "{text}");
    // A look at the pool the server has open says so: entries being written may look
    // torn there.
    let pmem = dir.path().to_str().unwrap();
    let live = "another process has this pool open for writing (a running server?)";
    for cmd in ["inspect-log", "recover"] {
        let out = run(&[cmd, "--pmem", pmem]);
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains(live), "{cmd}: {out:?}");
        // JSON says it too, and standard output stays JSON.
        let out = run(&[cmd, "--pmem", pmem, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["served"], true, "{cmd}: {v}");
    }
    // SIGTERM stops it cleanly with status 0
    sigterm(serve.0.id());
    let status = serve.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut err = String::new();
    use std::io::Read;
    serve.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("stopped after"), "{err}");
    // Without a server: no such warning.
    let out = run(&["inspect-log", "--pmem", pmem]);
    assert!(out.status.success() && !String::from_utf8_lossy(&out.stderr).contains(live), "{out:?}");
    let out = run(&["recover", "--pmem", pmem, "--json"]);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["served"], false);
}

#[test]
fn a_client_whose_server_dies_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let servers = [format!("127.0.0.1:{}", free_port()), format!("shm:{}", dir.path().join("d.sock").display())];
    for (i, server) in servers.iter().enumerate() {
        let pool = dir.path().join(format!("pool{i}"));
        std::fs::create_dir(&pool).unwrap();
        let s = serve(&["--pool-size", "64M", "--stats-interval", "0", "--listen", server], &pool, server);
        // A PUT reads its value once connected: the server dies in between, stopped
        // first so that the request lies unread in its socket when it is killed (tcp then
        // resets the connection, a failure the transport reports on a line of its own).
        let put = boomctl()
            .args(["put", "--server", server, "--timeout", "20", "k", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !String::from_utf8_lossy(&run(&["stats", "--server", server]).stdout).contains("2 connected") {
            assert!(t0.elapsed() < Duration::from_secs(20), "the put never connected");
            std::thread::sleep(Duration::from_millis(20));
        }
        let err = kill_under(s, put, |put| {
            use std::io::Write;
            let _ = put.stdin.take().unwrap().write_all(b"value");
        });
        assert!(err.starts_with("boomctl: error: PUT k"), "{server}: {err}");
    }
}

#[test]
fn a_ycsb_run_whose_server_dies_says_so_in_one_line() {
    // As a one-shot client: the transport's line about the reset came first.
    let dir = tempfile::tempdir().unwrap();
    let server = format!("127.0.0.1:{}", free_port());
    let s = serve(&["--pool-size", "64M", "--stats-interval", "0", "--listen", &server], dir.path(), &server);
    let ycsb = boomctl()
        .args(["ycsb", "--server", &server, "--mix", "c", "--records", "200", "--duration", "30", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until its run phase reads.
    let t0 = Instant::now();
    loop {
        let st = run(&["stats", "--server", &server, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap_or_default();
        if v["gets"].as_u64().is_some_and(|g| g > 0) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the run never read: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = kill_under(s, ycsb, |_| {});
    assert!(err.starts_with("boomctl: error: ") && err.contains("run phase"), "{err}");
}

/// Kills server `s` under `client`: stops it first (every thread), lets `then` make the
/// client send, and kills it 300 ms later, so requests lie unread in its sockets and tcp
/// resets the connections. The client must exit 1 with one line of error, returned.
fn kill_under(s: Serve, mut client: Child, then: impl FnOnce(&mut Child)) -> String {
    signal(s.0.id(), "STOP");
    wait_stopped(s.0.id());
    then(&mut client);
    std::thread::sleep(Duration::from_millis(300));
    signal(s.0.id(), "KILL");
    drop(s);
    let out = client.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    err
}

/// Sends SIGTERM through the `kill` command (no unsafe code in tests).
fn sigterm(pid: u32) {
    signal(pid, "TERM");
}

/// Waits until every thread of `pid` has stopped (a signal is delivered to a thread
/// running on another CPU a little after `kill` returns).
fn wait_stopped(pid: u32) {
    let t0 = Instant::now();
    let stopped = || -> bool {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
        tasks.flatten().all(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    };
    while !stopped() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{pid} did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends signal `name` (`TERM`, `STOP`, ...) to `pid` through the `kill` command.
fn signal(pid: u32, name: &str) {
    let s = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().unwrap();
    assert!(s.success(), "kill -{name} {pid}");
}

#[test]
fn a_server_that_cannot_start_leaves_no_pool_it_made_and_keeps_one_it_found() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("pool");
    let p = pool.to_str().unwrap();
    let port = format!("127.0.0.1:{}", free_port());
    // CPUs this process may not use: found after the pool was created
    let out = run(&["serve", "--pmem", p, "--create", "--pool-size", "64M", "--cpus", "1000", "--listen", &port]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--cpus"), "{err}");
    assert!(!pool.exists(), "the new, never served pool is removed");
    assert!(err.contains(&format!("removed the new pool {p} (the server did not start)")), "{err}");
    // ... also when --pmem names a directory (the pool is DIR/boomkv.pool), and a bad
    // --listen is found after the pool was made
    let out =
        run(&["serve", "--pmem", dir.path().to_str().unwrap(), "--pool-size", "64M", "--listen", "127.0.0.1:70000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--listen 127.0.0.1:70000"), "{err}");
    assert!(!dir.path().join("boomkv.pool").exists(), "the new pool in the directory is removed: {err}");
    // One address twice is named as such (it was "Address already in use"), and a
    // server that could take no value is refused.
    let twice = format!("tcp://{port}");
    for (args, needle) in [
        (
            &["--listen", &port, "--listen", &twice][..],
            format!("--listen {twice}: the same address as --listen {port}"),
        ),
        (&["--max-value", "0", "--listen", &port][..], "--max-value 0".to_string()),
    ] {
        let out = run(&[&["serve", "--pmem", p, "--pool-size", "64M"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(&needle), "{args:?}: {err}");
        assert!(!pool.exists(), "{args:?}: the new pool is removed");
    }
    // A pool too small to keep a free segment back is served, with a warning: its
    // DELETEs fail once it is full (the README's "DELETEs still succeed" needs 4).
    let out = run(&["serve", "--pmem", p, "--pool-size", "8M", "--segment-size", "4M", "--listen", "127.0.0.1:70000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a pool of 1 segment keeps no free segment back"), "{err}");
    // a pool that was there stays, whatever fails
    // (Killed when dropped: a failed assertion must not leave it running.)
    let mut s = Serve(
        boomctl()
            .args(["serve", "--pmem", p, "--create", "--pool-size", "64M", "--listen", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while std::net::TcpStream::connect(&port).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // it keeps its segment size (1 MiB for 64 MiB): another one is refused, not ignored,
    // and before the pool is opened: here the running server holds its lock, which an
    // open would have run into first
    let other = format!("127.0.0.1:{}", free_port());
    let out = run(&["serve", "--pmem", p, "--segment-size", "2M", "--listen", &other]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--segment-size 2M") && err.contains("made with 1M segments"), "{err}");
    // a largest value no transfer carries (the longest key and the headers go with it
    // in 16 MiB), whatever the segments hold: refused before the open too
    let out = run(&["serve", "--pmem", p, "--max-value", "16776141", "--listen", &other]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--max-value") && err.contains("at most 16776140 bytes"), "{err}");
    sigterm(s.0.id());
    assert!(s.0.wait().unwrap().success());
    let out = run(&["serve", "--pmem", p, "--cpus", "1000", "--listen", &port]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(pool.exists(), "an existing pool is never removed");
}

#[test]
fn scans_against_a_hash_index_server_fail_before_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let tcp = format!("127.0.0.1:{}", free_port());
    let args = ["--pool-size", "256M", "--stats-interval", "0", "--quiet", "--index", "hash", "--listen", &tcp];
    let _serve = serve(&args, dir.path(), &tcp);
    let out = run(&["ycsb", "--server", &tcp, "--mix", "e", "--records", "100000", "--ops", "100", "--size", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("run phase: server:") && err.contains("ordered"), "{err}");
    assert!(!err.contains("load: 100000 records"), "loaded first: {err}");
    // and nothing was loaded
    let stats: serde_json::Value = serde_json::from_slice(&run(&["stats", "--server", &tcp, "--json"]).stdout).unwrap();
    assert_eq!(stats["puts"], 0, "{stats}");
}

#[test]
fn a_key_too_long_is_refused_before_connecting_and_not_echoed_whole() {
    let key = "k".repeat(1025);
    // Nothing listens on port 1: a command that connected first would fail there.
    for args in [&["put", &key, "v"][..], &["get", &key][..], &["del", &key][..]] {
        let out = boomctl().arg(args[0]).args(["--server", "127.0.0.1:1"]).args(&args[1..]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("the key is 1025 bytes; a key is at most 1024 bytes"), "{err}");
        assert!(err.len() < 200, "the key is echoed whole: {err}");
    }
    let out = run(&["put", "--server", "127.0.0.1:1", "", "v"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the key is empty; a key is 1 to 1024 bytes"));
}

#[test]
fn recover_exits_3_on_damage_in_the_cell_table_and_the_clover_arena() {
    let dir = tempfile::tempdir().unwrap();
    let tcp = format!("127.0.0.1:{}", free_port());
    let mut s = serve(&["--pool-size", "64M", "--stats-interval", "0", "--quiet", "--listen", &tcp], dir.path(), &tcp);
    let values = [("pdpm-direct", "pdpm-value-0123456789"), ("clover", "clover-value-0123456789")];
    for (proto, v) in values {
        let out = run(&["put", "--server", &tcp, "--protocol", proto, proto, v]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    sigterm(s.0.id());
    assert!(s.0.wait().unwrap().success());
    let pool = dir.path().join("boomkv.pool");
    let clean = run(&["recover", "--pmem", pool.to_str().unwrap()]);
    assert_eq!(clean.status.code(), Some(0), "{}", String::from_utf8_lossy(&clean.stderr));
    // one byte of every copy of each value flipped: neither slot of the cell, nor the
    // Clover head's first version, verifies any more
    let mut img = std::fs::read(&pool).unwrap();
    for (_, v) in values {
        let at: Vec<usize> =
            img.windows(v.len()).enumerate().filter(|(_, w)| *w == v.as_bytes()).map(|(i, _)| i).collect();
        assert!(!at.is_empty(), "{v} is not in the pool");
        for i in at {
            img[i + 3] ^= 0x20;
        }
    }
    std::fs::write(&pool, &img).unwrap();
    let out = run(&["recover", "--pmem", pool.to_str().unwrap()]);
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{text}\n{err}");
    assert!(text.contains("1 cells damaged") && text.contains("1 Clover heads damaged"), "{text}");
    assert!(err.contains("holds damage (2 found;"), "{err}");
    // --json says it in its exit status too, and prints valid JSON
    let out = run(&["recover", "--json", "--pmem", pool.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["recovery"]["cells"]["cells_damaged"], 1, "{j}");
}

#[test]
fn ycsb_t_against_a_loaded_server_runs_the_transactions_alone() {
    // YCSB's `-load` then `-t`: the second used to load every record again (the server
    // counted 400 PUTs for 200 records) before it measured.
    let dir = tempfile::tempdir().unwrap();
    let server = format!("127.0.0.1:{}", free_port());
    let _s = serve(&["--pool-size", "64M", "--stats-interval", "0", "--listen", &server], dir.path(), &server);
    let ycsb = |phase: &str| {
        let out = run(&["ycsb", "--server", &server, "-P", "workloads/workloadc", "-p", "recordcount=200", phase]);
        assert!(out.status.success(), "{phase}: {}", String::from_utf8_lossy(&out.stderr));
        out
    };
    let puts = || {
        let st = run(&["stats", "--server", &server, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        v["puts"].as_u64().unwrap()
    };
    ycsb("-load");
    assert_eq!(puts(), 200);
    let out = ycsb("-t");
    assert_eq!(puts(), 200, "-t loaded again: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[READ], Return=OK, 1000"), "{text}");
}

#[test]
fn a_boom_put_that_timed_out_does_not_make_the_next_one_write_over_it() {
    // The server stops (SIGSTOP) under a PUT whose entry is on its way: the client times
    // out. The server then commits that entry late. The client's next PUT wrote at the
    // same segment offset (its tail moves only on an answer): over the committed entry,
    // and every later append was refused as misplaced. Now it takes a new segment.
    use boomkv::client::{Client, ClientOptions};
    use boomkv::transport::{Endpoint, TcpTransport};
    let dir = tempfile::tempdir().unwrap();
    let server = format!("127.0.0.1:{}", free_port());
    let s = serve(&["--pool-size", "64M", "--stats-interval", "0", "--listen", &server], dir.path(), &server);
    let ep = Endpoint::parse(&server).unwrap();
    let opts = ClientOptions { timeout: Duration::from_millis(300), ..Default::default() };
    let mut c = Client::connect(&TcpTransport::new().unwrap(), &ep, opts).unwrap();
    c.put(b"a", b"first").unwrap();
    signal(s.0.id(), "STOP");
    wait_stopped(s.0.id());
    assert!(c.put(b"b", b"late").is_err(), "the PUT did not time out");
    signal(s.0.id(), "CONT");
    // The next PUTs succeed, and the late entry is there, whole.
    c.put(b"c", b"next").unwrap();
    c.put(b"d", b"after").unwrap();
    let mut other = Client::connect(&TcpTransport::new().unwrap(), &ep, ClientOptions::default()).unwrap();
    assert_eq!(other.get(b"b").unwrap().as_deref(), Some(&b"late"[..]));
    assert_eq!(other.get(b"c").unwrap().as_deref(), Some(&b"next"[..]));
    assert_eq!(other.get(b"d").unwrap().as_deref(), Some(&b"after"[..]));
    drop(s);
}

#[test]
fn a_pool_truncated_under_the_server_stops_it_with_a_line_that_says_so() {
    // Another process truncates the pool file while `serve` runs: the next access past
    // the new end is a SIGBUS. It ended the server with the shell's bare "Bus error".
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let server = format!("127.0.0.1:{}", free_port());
    let mut s = serve(&["--pool-size", "64M", "--stats-interval", "0", "--listen", &server], dir.path(), &server);
    let put = run(&["put", "--server", &server, "k", "value"]);
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    std::fs::OpenOptions::new().write(true).open(dir.path().join("boomkv.pool")).unwrap().set_len(4096).unwrap();
    // The GET reads the entry, past the end now; its client hears the server go.
    let get = run(&["get", "--server", &server, "--timeout", "5", "k"]);
    assert!(!get.status.success());
    let until = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = s.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < until, "the server still runs on a truncated pool");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
    let mut err = String::new();
    s.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("boomctl: bus error at 0x"), "{err}");
    assert!(err.contains("another process truncated the pool file"), "{err}");
}
