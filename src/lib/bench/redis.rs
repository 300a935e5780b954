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
//! May import: `bench::runner` (the [`Db`] trait), `error`.

use std::time::Duration;

use super::runner::Db;
use crate::error::{Error, Result};

/// One connection to a Redis server.
pub struct RedisDb {
    conn: redis::Connection,
}

impl RedisDb {
    /// Connects to `url` (`redis://HOST:PORT`), waiting at most `timeout` for the
    /// connection and then for each reply.
    pub fn connect(url: &str, timeout: Duration) -> Result<RedisDb> {
        let client = redis::Client::open(url).map_err(|e| Error::invalid(format!("--db {url}: {e}")))?;
        let conn = client
            .get_connection_with_timeout(timeout)
            .map_err(|e| Error::Transport(format!("cannot connect to {url}: {e}")))?;
        conn.set_read_timeout(Some(timeout)).map_err(|e| failed("setting a timeout", &e))?;
        conn.set_write_timeout(Some(timeout)).map_err(|e| failed("setting a timeout", &e))?;
        Ok(RedisDb { conn })
    }
}

/// A failed request: a connection that broke (or timed out) ends the thread's run, as
/// boomkv's lost connections do; anything else is the server's answer.
fn failed(during: &'static str, e: &redis::RedisError) -> Error {
    if e.is_connection_dropped() || e.is_io_error() || e.is_timeout() || e.is_unrecoverable_error() {
        Error::ConnectionLost { during, why: e.to_string() }
    } else {
        Error::Transport(format!("redis: {e}"))
    }
}

impl Db for RedisDb {
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let v: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut self.conn).map_err(|e| failed("GET", &e))?;
        match v {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn write(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        redis::cmd("SET").arg(key).arg(value).query::<()>(&mut self.conn).map_err(|e| failed("SET", &e))
    }

    fn scan(&mut self, _start: &[u8], _count: u32) -> Result<usize> {
        Err(Error::Unsupported("the redis binding keeps no sorted index, so it has no scans (workload E)".into()))
    }

    fn max_value(&self) -> Option<u64> {
        // Redis strings hold up to 512 MiB.
        Some(512 << 20)
    }
}
