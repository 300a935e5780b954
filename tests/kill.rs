//! Process crashes: `boomctl serve` as a child process under a multi-client load, killed
//! with SIGKILL at random moments and restarted on the same pool; every acknowledged
//! write must be there afterwards. Clients see a connection error, reconnect, go on.
//! Over shm here; with the `rdma` feature also over verbs (ignored unless run with
//! `--ignored` where `BOOMKV_RDMA_DEVICE` names a device: `ci/check-rdma-vm.sh`).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use boomkv::client::{Client, ClientOptions};
use boomkv::transport::{Endpoint, ShmTransport, Transport};

/// Starts `boomctl serve` on the pool in `dir`; its standard error goes to the end
/// of `dir`/serve.log (shown when a server does not come back; `BOOMKV_KILL_LOG=1` shows
/// it as it comes instead).
fn start_server(dir: &Path, ep: &Endpoint) -> Child {
    if let Endpoint::Shm(sock) = ep {
        let _ = std::fs::remove_file(sock);
    }
    Command::new(env!("CARGO_BIN_EXE_boomctl"))
        .args(["serve", "--quiet", "--stats-interval", "0", "--pool-size", "64M", "--segment-size", "1M", "--pmem"])
        .arg(dir)
        .arg("--listen")
        .arg(ep.to_string())
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("BOOMKV_KILL_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::from(
                std::fs::OpenOptions::new().create(true).append(true).open(dir.join("serve.log")).expect("serve.log"),
            )
        })
        .spawn()
        .expect("start boomctl serve")
}

fn connect<T: Transport>(t: &T, ep: &Endpoint, deadline: Instant) -> Option<Client<T>> {
    let o = ClientOptions { timeout: Duration::from_secs(2), ..Default::default() };
    while Instant::now() < deadline {
        if let Ok(c) = Client::connect(t, ep, o.clone()) {
            return Some(c);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Per key: the last acknowledged value, and values written after it without an answer.
#[derive(Default)]
struct KeyState {
    acked: Option<Vec<u8>>,
    pending: Vec<Vec<u8>>,
}

fn kills() -> Option<usize> {
    std::env::var("BOOMKV_KILLS").ok().and_then(|v| v.parse().ok())
}

#[test]
fn fifty_kills_lose_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let ep = Endpoint::Shm(dir.path().join("kill.sock"));
    kills_lose_no_acknowledged_write(ShmTransport::new, dir, ep, kills().unwrap_or(50), 60, 120);
}

/// Over verbs (soft-RoCE under an emulator is slow: the server needs about 2 s to come
/// up, so it runs longer between kills, and fewer of them by default).
#[cfg(feature = "rdma")]
#[test]
#[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (ci/rdma-vm.sh)"]
fn kills_over_verbs_lose_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let ep = Endpoint::Verbs(format!("127.0.0.1:{port}"));
    kills_lose_no_acknowledged_write(
        boomkv::transport::VerbsTransport::from_env,
        dir,
        ep,
        kills().unwrap_or(8),
        2500,
        2500,
    );
}

/// `kills` times: wait `pause_ms` plus up to `jitter_ms`, kill the server, restart it.
fn kills_lose_no_acknowledged_write<T: Transport + Send + 'static>(
    make: fn() -> boomkv::Result<T>,
    dir: tempfile::TempDir,
    ep: Endpoint,
    kills: usize,
    pause_ms: u64,
    jitter_ms: u64,
) {
    let model: Arc<Mutex<HashMap<String, KeyState>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut server = start_server(dir.path(), &ep);
    let clients: Vec<_> = (0..3)
        .map(|t| {
            let (model, stop, ep) = (model.clone(), stop.clone(), ep.clone());
            std::thread::spawn(move || {
                let tr = make().unwrap();
                let mut seq = 0u64;
                let mut reconnects = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Some(mut c) = connect(&tr, &ep, Instant::now() + Duration::from_secs(20)) else {
                        continue;
                    };
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            return reconnects;
                        }
                        seq += 1;
                        let key = format!("t{t}-k{}", seq % 17);
                        let value = format!("{key}:{seq}:").repeat(1 + (seq % 40) as usize).into_bytes();
                        model.lock().unwrap().entry(key.clone()).or_default().pending.push(value.clone());
                        match c.put(key.as_bytes(), &value) {
                            Ok(_) => {
                                let mut m = model.lock().unwrap();
                                let st = m.get_mut(&key).unwrap();
                                st.acked = Some(value);
                                st.pending.clear();
                            }
                            Err(_) => {
                                reconnects += 1;
                                break;
                            }
                        }
                    }
                }
                reconnects
            })
        })
        .collect();
    let mut rng_state = 0x9E3779B97F4A7C15u64;
    for _ in 0..kills {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        // let the server come up and take some load, then kill it at a random moment
        std::thread::sleep(Duration::from_millis(pause_ms + rng_state % jitter_ms));
        server.kill().unwrap();
        server.wait().unwrap();
        server = start_server(dir.path(), &ep);
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let reconnects: u64 = clients.into_iter().map(|h| h.join().unwrap()).sum();
    // Check every key against a fresh connection to the last server.
    let tr = make().unwrap();
    let Some(mut c) = connect(&tr, &ep, Instant::now() + Duration::from_secs(20)) else {
        // Say why: a server that exited (and how), or one that runs and does not answer.
        let state = match server.try_wait() {
            Ok(Some(status)) => format!("it exited: {status}"),
            Ok(None) => "it is running".to_string(),
            Err(e) => format!("its state is unknown: {e}"),
        };
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        let _ = server.kill();
        let _ = server.wait();
        panic!(
            "the last server did not answer within 20 s ({state}); the end of the servers' log:\n{}",
            tail.join("\n")
        );
    };
    let m = model.lock().unwrap();
    let mut checked = 0;
    for (key, st) in m.iter() {
        let got = c.get(key.as_bytes()).unwrap();
        let ok = match (&st.acked, &got) {
            (None, None) => true,
            (_, Some(g)) => st.acked.as_ref() == Some(g) || st.pending.contains(g),
            (Some(_), None) => false,
        };
        assert!(ok, "{key}: acknowledged {:?}, got {:?}", st.acked.as_ref().map(Vec::len), got.map(|v| v.len()));
        checked += st.acked.is_some() as usize;
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(checked > 20, "the load must have acknowledged writes ({checked})");
    assert!(reconnects >= (kills as u64).min(10), "clients saw the kills and reconnected ({reconnects})");
    eprintln!("{kills} kills, {reconnects} reconnects, {checked} keys checked");
}
