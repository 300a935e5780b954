//! The client library: connect to a server and `put`, `get`, `delete`, `scan`.
//!
//! ```no_run
//! use boomkv::client::{Client, ClientOptions};
//! use boomkv::transport::{Endpoint, TcpTransport, Transport};
//! # fn main() -> boomkv::Result<()> {
//! let t = TcpTransport::new()?;
//! let mut c = Client::connect(&t, &Endpoint::parse("127.0.0.1:7470")?, ClientOptions::default())?;
//! c.put(b"user42", b"hello")?;
//! assert_eq!(c.get(b"user42")?.as_deref(), Some(&b"hello"[..]));
//! c.delete(b"user42")?;
//! # Ok(()) }
//! ```
//!
//! One client is one connection (one queue pair) with at most one request outstanding;
//! use one client per thread. The protocol is chosen at connect time
//! ([`ClientOptions::protocol`]):
//!
//! - BOOM: a PUT builds the entry locally and WRITE_WITH_IMMs it into the client's own
//!   granted segment (appended, or rewritten in place by the [`hybrid`] rules); the
//!   server replies when it is durable. A GET SENDs the key and the address of a local
//!   buffer; the server WRITEs the entry there. One round trip each.
//! - RDMP-KV: PUT = allocation RPC, then WRITE_WITH_IMM; GET = locate RPC, then READ.
//! - RDMA-KV: PUT and GET are RPCs whose data goes through server DRAM.
//! - RDMP-CC, HERD, RFP, pDPM-Direct and Clover: see [`crate::proto`], one file each.
//!
//! Every GET verifies the entry's checksum and key, and retries a torn read.

//! The protocols' message flows are in [`crate::proto`]; this module connects, checks
//! sizes, verifies what a GET returns, and dispatches to the protocol's client half.
//!
//! May import: `error`, `link`, `log::format` (entry decoding), `proto`, `service`
//! (the stats type), `transport`, `wire`.

pub use crate::link::{ClientCounters, PutInfo};
pub use crate::proto::boom::hybrid;
pub use crate::proto::boom::{WriteHook, WriteIntent};

use std::time::Duration;

use crate::error::{Error, Result};
use crate::link::{Limits, Link};
use crate::log::format as fmt;
use crate::proto::{ClientSide, ClientTuning, Fetched};
use crate::service::ServerStats;
use crate::transport::{Access, Endpoint, MemoryRegion, Transport};
use crate::wire::{Hello, Msg, Protocol, Welcome};
use hybrid::UpdateMode;

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Protocol to speak.
    pub protocol: Protocol,
    /// BOOM: hybrid (append + in place) or append-only updates.
    pub update_mode: UpdateMode,
    /// Longest wait for any reply (then the request fails with a timeout).
    pub timeout: Duration,
    /// Initial size of the buffer the server writes GET results into (grows on demand).
    pub response_buffer: usize,
    /// How many times a GET whose entry fails its checksum, or whose READ finished too
    /// late to trust (RDMP-KV), is retried.
    pub torn_retries: u32,
    /// Told of every BOOM write's target before and after it.
    pub on_write: Option<WriteHook>,
    /// BOOM: how long a segment grant keeps asking a full pool (the cleaner may free a
    /// segment) before the PUT fails with "pool full".
    pub pool_full_wait: Duration,
    /// RFP: how many bytes the first READ of a result fetches.
    pub fetch_size: crate::proto::rfp::FetchSize,
    /// RFP: how results come back: hybrid (the paper's: fetched, by server reply after
    /// repeated vain fetches), fetch, or reply.
    pub rfp_mode: crate::proto::rfp::ResultMode,
    /// pDPM-Direct: cells to ask for if the pool has no cell table yet.
    pub cells: u64,
    /// pDPM-Direct: the largest value those cells hold (Clover: its versions).
    pub cell_value: u32,
    /// Clover: bytes of chunks to ask for if the pool has no arena yet (its head
    /// records: `cells`).
    pub clover_data: u64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            protocol: Protocol::Boom,
            update_mode: UpdateMode::Hybrid,
            timeout: Duration::from_secs(10),
            response_buffer: 64 << 10,
            torn_retries: 8,
            on_write: None,
            pool_full_wait: crate::proto::POOL_FULL_WAIT,
            fetch_size: crate::proto::rfp::FetchSize::Auto,
            rfp_mode: crate::proto::rfp::ResultMode::Hybrid,
            cells: crate::proto::pdpm_direct::DEFAULT_CELLS,
            cell_value: crate::proto::pdpm_direct::DEFAULT_CELL_VALUE,
            clover_data: 64 << 20,
        }
    }
}

impl ClientOptions {
    /// The pDPM-Direct cell table for `keys` keys with values of up to `value_size`
    /// bytes: twice as many cells as keys (probes stay short), at least 64.
    pub fn cells_for(keys: u64, value_size: u64) -> (u64, u32) {
        (keys.saturating_mul(2).max(64), u32::try_from(value_size).unwrap_or(u32::MAX))
    }

    /// Asks for the cell table of [`ClientOptions::cells_for`] (pDPM-Direct) and the
    /// Clover arena of [`ClientOptions::clover_data_for`] for `keys` keys written
    /// `writes` more times; the other protocols ignore it.
    pub fn size_passive(mut self, keys: u64, writes: u64, value_size: u64) -> Self {
        (self.cells, self.cell_value) = Self::cells_for(keys, value_size);
        self.clover_data = Self::clover_data_for(keys, writes, value_size);
        self
    }

    /// Bytes of Clover chunks for `keys` keys and `writes` more writes of values up to
    /// `value_size` bytes (keys of YCSB's length): a version each, a quarter more for
    /// the ends of chunks, and 4 chunks of slack.
    pub fn clover_data_for(keys: u64, writes: u64, value_size: u64) -> u64 {
        let v = crate::log::clover::version_len(crate::log::format::ENTRY_HEADER_SIZE + 32 + value_size);
        keys.saturating_add(writes).saturating_mul(v).saturating_mul(5) / 4 + 4 * (4 * v).max(64 << 10)
    }
}

/// A connection to a boomkv server.
pub struct Client<T: Transport> {
    link: Link<T>,
    side: Box<dyn ClientSide<T>>,
    protocol: Protocol,
    torn_retries: u32,
    /// The server worker that serves this connection (its `Welcome`).
    worker: u16,
    /// How long the request in flight (split GET or PUT) has been polled for.
    polled: Polled,
}

/// Fruitless polls of a request in flight, and from when they count: the clock is
/// read once per [`Polled::EVERY`] polls, so that a request whose answer never comes
/// fails after the link's timeout, as a waiting one does, without a clock reading
/// per poll.
#[derive(Default)]
struct Polled {
    polls: u32,
    since: Option<std::time::Instant>,
    /// The request timed out and was given up on: there is nothing more to poll.
    given_up: bool,
}

impl Polled {
    const EVERY: u32 = 1024;

    /// A new request is in flight: its wait counts from now on, whatever became of
    /// the one before (answered, failed or timed out).
    fn start(&mut self) {
        *self = Polled::default();
    }

    /// An error if the request timed out: it was given up on, and its late reply is
    /// counted to be dropped, so polling on could take the next request's reply for it.
    fn check(&self, what: &'static str) -> Result<()> {
        if self.given_up {
            return Err(Error::invalid(format!("no {what} in flight: the last one timed out")));
        }
        Ok(())
    }

    /// Counts a fruitless poll; the timeout error once the answer is `timeout` late.
    fn miss(&mut self, timeout: Duration, what: &'static str) -> Result<()> {
        self.polls = self.polls.wrapping_add(1);
        if self.polls % Self::EVERY == 0 {
            let now = std::time::Instant::now();
            if now.duration_since(*self.since.get_or_insert(now)) > timeout {
                *self = Polled { given_up: true, ..Polled::default() };
                return Err(Error::Timeout(timeout, what));
            }
        }
        Ok(())
    }
}

impl<T: Transport> Client<T> {
    /// Connects to the server at `ep`.
    pub fn connect(t: &T, ep: &Endpoint, opts: ClientOptions) -> Result<Client<T>> {
        let cq = t.create_cq()?;
        let recv_size = crate::proto::receive_buffers(opts.protocol).client;
        let recv_mr = t.alloc_mr(Link::<T>::ring_bytes(recv_size), Access::LOCAL_WRITE)?;
        let resp_mr = t.alloc_mr(opts.response_buffer.max(4096), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let hello = Hello { protocol: opts.protocol, recv_size, response: resp_mr.remote() };
        let (qp, reply) = t.connect(ep, &cq, &cq, &hello.encode(), opts.timeout)?;
        let (limits, worker) = match Welcome::decode(&reply)? {
            Welcome::Accepted { protocol, client_id, segment_size, max_value, recv_size, worker, .. } => {
                if protocol != opts.protocol {
                    return Err(Error::Protocol(format!(
                        "asked for {} but the server speaks {protocol}",
                        opts.protocol
                    )));
                }
                (Limits { id: client_id, segment_size, max_value, server_recv: recv_size }, worker)
            }
            Welcome::Refused { reason } => {
                return Err(Error::Protocol(format!("server refused the connection: {reason}")))
            }
        };
        let link = Link::new(t, qp, cq, recv_mr, recv_size, resp_mr, opts.timeout, limits)?;
        let tuning = ClientTuning {
            update_mode: opts.update_mode,
            on_write: opts.on_write.clone(),
            pool_full_wait: opts.pool_full_wait,
            fetch_size: opts.fetch_size,
            rfp_mode: opts.rfp_mode,
            cells: (opts.cells, opts.cell_value),
            clover_data: opts.clover_data,
        };
        let side = crate::proto::client_side(opts.protocol, &tuning);
        Ok(Client {
            link,
            side,
            protocol: opts.protocol,
            torn_retries: opts.torn_retries,
            worker,
            polled: Polled::default(),
        })
    }

    /// The id the server gave this client (the owner of its log).
    pub fn id(&self) -> u64 {
        self.link.limits.id
    }

    /// The server worker that serves this connection, as the server announced it (a
    /// number from 0; a hostile server may say anything, so it only ever picks a CPU
    /// from a list the caller holds, modulo its length).
    pub fn worker(&self) -> u16 {
        self.worker
    }

    /// The protocol spoken.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Counters so far.
    pub fn counters(&self) -> ClientCounters {
        self.link.counters
    }

    /// Transport operations this client has posted (for round-trip accounting).
    pub fn transport_stats(&self) -> crate::transport::QpStats {
        use crate::transport::QueuePair;
        self.link.qp.stats()
    }

    /// Largest value the server accepts.
    pub fn max_value(&self) -> u32 {
        self.link.limits.max_value
    }

    fn check_sizes(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::invalid("empty key"));
        }
        if key.len() > fmt::MAX_KEY_LEN as usize {
            return Err(Error::TooLarge { what: "key", len: key.len() as u64, limit: fmt::MAX_KEY_LEN as u64 });
        }
        let max_value = self.link.limits.max_value;
        if value.len() > max_value as usize {
            return Err(Error::TooLarge { what: "value", len: value.len() as u64, limit: max_value as u64 });
        }
        Ok(())
    }

    /// Stores `value` under `key`; returns once it is durable.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<PutInfo> {
        self.check_sizes(key, value)?;
        self.side.put(&mut self.link, key, value, false)
    }

    /// Starts a PUT of `key` without waiting for the server's answer (see
    /// [`Client::get_start`]): `Some` when it is already done (the protocol has no
    /// split PUT: pDPM-Direct, Clover, RDMP-CC), `None` while it is in flight, to
    /// be collected by [`Client::put_poll`] before anything else is sent on this client.
    pub fn put_start(&mut self, key: &[u8], value: &[u8]) -> Result<Option<PutInfo>> {
        self.check_sizes(key, value)?;
        self.polled.start();
        self.side.put_start(&mut self.link, key, value)
    }

    /// The PUT [`Client::put_start`] left in flight, if the server's answer has come:
    /// then it is acknowledged, as after [`Client::put`].
    pub fn put_poll(&mut self, key: &[u8]) -> Result<Option<PutInfo>> {
        self.polled.check("PUT")?;
        match self.side.put_poll(&mut self.link, key)? {
            None => self.missed("PUT").map(|()| None),
            done => Ok(done),
        }
    }

    /// Deletes `key` (a durable tombstone); deleting an absent key is not an error.
    pub fn delete(&mut self, key: &[u8]) -> Result<PutInfo> {
        self.check_sizes(key, b"")?;
        self.side.put(&mut self.link, key, b"", true)
    }

    /// The value of `key`, or `None` if it is absent or deleted.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Like [`Client::get`] but writes the value into `out` (reused between calls);
    /// returns whether the key exists.
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check_sizes(key, b"")?;
        self.get_tries(key, out, self.attempts())
    }

    /// Counts a poll that found no answer to the split request `what`; once it is
    /// the timeout late, the request is given up on (its late reply will be dropped).
    fn missed(&mut self, what: &'static str) -> Result<()> {
        let r = self.polled.miss(self.link.timeout, what);
        if r.is_err() && self.side.awaits_reply() {
            self.link.abandon_reply();
        }
        r
    }

    /// GETs of a key before its torn entry is an error: the first and the retries.
    fn attempts(&self) -> u32 {
        self.torn_retries.saturating_add(1)
    }

    /// Up to `tries` whole GETs of `key`, until one is not torn.
    fn get_tries(&mut self, key: &[u8], out: &mut Vec<u8>, tries: u32) -> Result<bool> {
        for _ in 0..tries {
            match self.side.get_value(&mut self.link, key, out)? {
                Fetched::Absent => return Ok(false),
                Fetched::Value => return Ok(true),
                Fetched::Torn => self.link.counters.torn_retries += 1,
                Fetched::Late => self.link.counters.late_reads += 1,
            }
        }
        Err(Error::Protocol(format!(
            "the entry of this key failed its checksum, or its READ came too late to trust, {} times in a row",
            self.attempts()
        )))
    }

    /// Starts a GET of `key` without waiting for its answer, so that one thread can
    /// keep the requests of several clients in flight (`boomctl ycsb --clients`).
    /// `Some(found)` when the GET is already done: the protocol has no split GET
    /// (pDPM-Direct and Clover), and this was a whole [`Client::get_into`]. `None` while
    /// it is in flight: [`Client::get_poll`] collects it, and no other request may be
    /// sent on this client until it has.
    pub fn get_start(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<bool>> {
        self.check_sizes(key, b"")?;
        self.polled.start();
        if self.side.get_start(&mut self.link, key)? {
            Ok(None)
        } else {
            self.get_tries(key, out, self.attempts()).map(Some)
        }
    }

    /// The GET [`Client::get_start`] left in flight, if its answer has come: whether
    /// `key` exists (its value is then in `out`). A torn entry is read again at once,
    /// as [`Client::get_into`] would, waiting for the answers.
    pub fn get_poll(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<bool>> {
        self.polled.check("GET")?;
        match self.side.get_poll(&mut self.link, key, out)? {
            None => self.missed("GET").map(|()| None),
            Some(Fetched::Absent) => Ok(Some(false)),
            Some(Fetched::Value) => Ok(Some(true)),
            Some(f @ (Fetched::Torn | Fetched::Late)) => {
                if f == Fetched::Torn {
                    self.link.counters.torn_retries += 1;
                } else {
                    self.link.counters.late_reads += 1;
                }
                self.get_tries(key, out, self.torn_retries).map(Some)
            }
        }
    }

    /// Up to `count` live key-value pairs from `start` on, in key order (BOOM protocol;
    /// the server needs `--index ordered`).
    pub fn scan(&mut self, start: &[u8], count: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.side.scan(&mut self.link, start, count)
    }

    /// The server's statistics.
    pub fn stats(&mut self) -> Result<ServerStats> {
        match self.link.call(&Msg::StatsReq, "stats")? {
            Msg::Stats { json } => serde_json::from_slice(&json)
                .map_err(|e| Error::corrupt("stats", format!("not the statistics of this version: {e}"))),
            m => Err(Error::Protocol(format!("expected stats, got {m:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request in flight times out once its answer is `timeout` late, counted from
    /// its own first polls: the clock of a request before it (failed, answered or timed
    /// out) does not carry over.
    #[test]
    fn a_polled_request_times_out_from_its_own_start() {
        let timeout = Duration::from_millis(30);
        let mut p = Polled::default();
        let t0 = std::time::Instant::now();
        let e = loop {
            if let Err(e) = p.miss(timeout, "GET") {
                break e;
            }
        };
        assert!(matches!(e, Error::Timeout(d, "GET") if d == timeout), "{e}");
        assert!(t0.elapsed() >= timeout);
        // A request that failed after a long wait leaves its clock behind; the next
        // one's start clears it, so its first thousands of polls are no timeout.
        let mut p =
            Polled { polls: 0, since: Some(std::time::Instant::now() - Duration::from_secs(60)), given_up: true };
        assert!(p.check("GET").is_err(), "a request that timed out is not polled on");
        p.start();
        p.check("GET").unwrap();
        for _ in 0..(4 * Polled::EVERY) {
            p.miss(timeout, "GET").unwrap();
        }
    }
}
