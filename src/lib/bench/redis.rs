//! The YCSB binding for a Redis server: a peer store measured in the same harness
//! (`boomctl ycsb --db redis://HOST:PORT`), with the same generators, threads, target
//! rate, reports and exports as boomkv's own runs.
//!
//! Each record is one Redis string (`SET key value`, `GET key`), one connection per
//! client thread, each request waiting for its reply: the shape of boomkv's client, so
//! the two compare request for request. YCSB's own Redis binding stores a record as a
//! hash of fields and keeps a sorted-set index for scans; this one has no index, so
//! workload E's scans are refused ([`Error::Unsupported`]). How durable an acknowledged
//! write is depends on the server's configuration (`appendfsync`), not on this binding.
//!
//! [`RedisServer`] starts a `redis-server` of its own on a loopback port (the `peers`
//! sweep preset and the tests use it), with or without an append-only file.
//!
//! May import: `bench::runner` (the [`Db`] trait), `log` (the prefix of this process's
//! temporary files), `error`.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::runner::Db;
use crate::error::{Error, Result};

/// One connection to a Redis server.
pub struct RedisDb {
    conn: redis::Connection,
    timeout: Duration,
}

impl RedisDb {
    /// Connects to `url` (`redis://HOST:PORT`), waiting at most `timeout` for the
    /// connection and then for each reply.
    pub fn connect(url: &str, timeout: Duration) -> Result<RedisDb> {
        let client = redis::Client::open(url).map_err(|e| Error::invalid(format!("--db {url}: {e}")))?;
        let conn = client.get_connection_with_timeout(timeout).map_err(|e| {
            let why = if e.is_timeout() {
                format!("no answer within {timeout:?}: is a Redis server listening there?")
            } else {
                e.to_string()
            };
            Error::Unreachable { addr: url.to_string(), why }
        })?;
        conn.set_read_timeout(Some(timeout)).map_err(|e| failed("setting a timeout", &e, timeout))?;
        conn.set_write_timeout(Some(timeout)).map_err(|e| failed("setting a timeout", &e, timeout))?;
        Ok(RedisDb { conn, timeout })
    }
}

/// A failed request: a connection that broke (or timed out) ends the thread's run, as
/// boomkv's lost connections do (a late reply would be taken for the next request's);
/// anything else is the server's answer.
fn failed(during: &'static str, e: &redis::RedisError, timeout: Duration) -> Error {
    if e.is_timeout() {
        // The socket's own words are "Resource temporarily unavailable (os error 11)".
        Error::ConnectionLost { during, why: format!("no reply within {timeout:?}") }
    } else if e.is_connection_dropped() || e.is_io_error() || e.is_unrecoverable_error() {
        Error::ConnectionLost { during, why: e.to_string() }
    } else {
        Error::Transport(format!("redis: {e}"))
    }
}

impl Db for RedisDb {
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.read_start(key, out)?;
        self.read_poll(key, out).map(|found| found.unwrap_or(false))
    }

    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_start(key, value)?;
        self.write_poll(key).map(|_| ())
    }

    /// Sends the GET without reading its reply: the replies of a thread's clients are
    /// then read in the order they were asked for (Redis answers each connection in
    /// order, and the server serves them in about the order they came).
    fn read_start(&mut self, key: &[u8], _out: &mut Vec<u8>) -> Result<Option<bool>> {
        let cmd = redis::cmd("GET").arg(key).get_packed_command();
        self.conn.send_packed_command(&cmd).map_err(|e| failed("GET", &e, self.timeout))?;
        Ok(None)
    }

    /// Waits for the reply (a blocking read).
    fn read_poll(&mut self, _key: &[u8], out: &mut Vec<u8>) -> Result<Option<bool>> {
        let reply = self
            .conn
            .recv_response()
            .and_then(redis::Value::extract_error)
            .map_err(|e| failed("GET", &e, self.timeout))?;
        let v: Option<Vec<u8>> = redis::from_redis_value(reply).map_err(|e| failed("GET", &e.into(), self.timeout))?;
        Ok(Some(match v {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                true
            }
            None => false,
        }))
    }

    /// Sends the SET without reading its reply (see `read_start`).
    fn write_start(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        let cmd = redis::cmd("SET").arg(key).arg(value).get_packed_command();
        self.conn.send_packed_command(&cmd).map_err(|e| failed("SET", &e, self.timeout))?;
        Ok(false)
    }

    /// Waits for the SET's reply.
    fn write_poll(&mut self, _key: &[u8]) -> Result<bool> {
        self.conn.recv_response().and_then(redis::Value::extract_error).map_err(|e| failed("SET", &e, self.timeout))?;
        Ok(true)
    }

    fn scan(&mut self, _start: &[u8], _count: u32) -> Result<usize> {
        Err(Error::Unsupported("the redis binding keeps no sorted index, so it has no scans (workload E)".into()))
    }

    fn max_value(&self) -> Option<u64> {
        // Redis strings hold up to 512 MiB.
        Some(512 << 20)
    }
}

/// How a [`RedisServer`] keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Memory only: no snapshots, no append-only file.
    None,
    /// An append-only file written back once a second (`appendfsync everysec`).
    AofEverySec,
}

/// A `redis-server` child on a free loopback port, stopped on drop (or by
/// [`stop_started`]).
pub struct RedisServer {
    child: Arc<Mutex<Child>>,
    port: u16,
    _dir: tempfile::TempDir,
}

/// The servers this process started and has not stopped yet (port, child).
static STARTED: Mutex<Vec<(u16, Arc<Mutex<Child>>)>> = Mutex::new(Vec::new());

/// Stops every `redis-server` this process started: for a process ending on a signal,
/// whose drops will not run (the servers would outlive it, listening, with their
/// directories).
pub fn stop_started() {
    let all = std::mem::take(&mut *STARTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for (port, child) in all {
        stop(port, &mut child.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

/// Stops the server `child` listening on `port`.
fn stop(port: u16, child: &mut Child) {
    // SHUTDOWN first: it stops an append-only-file rewrite child and removes its
    // file. SIGKILL left that child running, writing a temp-rewriteaof-bg file of
    // hundreds of MB into the directory being removed, which then stayed behind.
    let url = format!("redis://127.0.0.1:{port}");
    let asked = matches!(child.try_wait(), Ok(None))
        && RedisDb::connect(&url, Duration::from_secs(1))
            .map(|mut db| redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut db.conn))
            .is_ok();
    let end = Instant::now() + Duration::from_secs(if asked { 5 } else { 0 });
    while Instant::now() < end && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl RedisServer {
    /// Whether `redis-server` can be run here.
    pub fn installed() -> bool {
        Command::new("redis-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
    }

    /// Starts a server with `persistence`; its files (the append-only file) go into a
    /// temporary directory under `parent` (default: the system's), removed on drop.
    /// Waits until it accepts connections (at most 10 s).
    pub fn start(persistence: Persistence, parent: Option<&Path>) -> Result<RedisServer> {
        if !Self::installed() {
            return Err(Error::Unsupported("redis-server is not installed (Debian: apt install redis-server)".into()));
        }
        // This process's temporary prefix: what a signal's clean-up removes.
        let prefix = format!("{}redis-", crate::log::temp_prefix());
        let dir = match parent {
            Some(p) => tempfile::Builder::new().prefix(&prefix).tempdir_in(p),
            None => tempfile::Builder::new().prefix(&prefix).tempdir(),
        }
        .map_err(|e| Error::Transport(format!("redis-server: a directory for its files: {e}")))?;
        // A free port: the kernel's choice for a listener dropped at once. Another
        // process may take it in between; the wait below then fails and says so.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| Error::Transport(format!("redis-server: no free loopback port: {e}")))?
            .port();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--daemonize", "no"]);
        cmd.arg("--dir").arg(dir.path());
        match persistence {
            Persistence::None => cmd.args(["--appendonly", "no"]),
            Persistence::AofEverySec => cmd.args(["--appendonly", "yes", "--appendfsync", "everysec"]),
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::Transport(format!("starting redis-server: {e}")))?;
        let child = Arc::new(Mutex::new(child));
        STARTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((port, child.clone()));
        let server = RedisServer { child, port, _dir: dir };
        let end = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = server.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner).try_wait();
            if let Ok(Some(status)) = exited {
                return Err(Error::Transport(format!("redis-server on port {port} exited at start: {status}")));
            }
            if Instant::now() > end {
                return Err(Error::Transport(format!("redis-server did not listen on port {port} within 10 s")));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Listening is not serving yet (it may still be loading): wait for a PING.
        let url = server.url();
        loop {
            let pong = RedisDb::connect(&url, Duration::from_secs(1)).and_then(|mut db| {
                redis::cmd("PING").query::<String>(&mut db.conn).map_err(|e| failed("PING", &e, Duration::from_secs(1)))
            });
            match pong {
                Ok(_) => return Ok(server),
                Err(e) if Instant::now() > end => {
                    return Err(Error::Transport(format!("redis-server on port {port} does not answer: {e}")))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        STARTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(p, _)| *p != self.port);
        stop(self.port, &mut self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_never_answers_is_named_as_such() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", l.local_addr().unwrap());
        // Accepts, reads nothing, answers nothing, and hangs up after a second.
        let t = std::thread::spawn(move || {
            let c = l.accept();
            std::thread::sleep(Duration::from_secs(1));
            drop(c);
        });
        let r = RedisDb::connect(&url, Duration::from_millis(300)).and_then(|mut db| db.read(b"k", &mut Vec::new()));
        let e = r.unwrap_err().to_string();
        assert!(e.contains("no answer within 300ms") || e.contains("no reply within 300ms"), "{e}");
        assert!(!e.contains("os error"), "{e}");
        t.join().unwrap();
    }
}
