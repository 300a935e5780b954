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
//!
//! Every GET verifies the entry's checksum and key, and retries a torn read.

pub mod hybrid;

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::transport::{Access, Completion, CompletionQueue, Endpoint, MemoryRegion, QueuePair, Transport, WcOpcode};
use crate::wire::{DataImm, ErrorCode, Hello, Msg, Protocol, RegionDesc, Welcome, MAX_MESSAGE};
use hybrid::{HybridTable, UpdateMode};

/// Where a BOOM PUT is about to write (reported to [`ClientOptions::on_write`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteIntent {
    /// Segment id.
    pub segment: u64,
    /// Segment offset.
    pub offset: u64,
    /// Rewrite in place (else append).
    pub in_place: bool,
    /// False just before the write is posted, true once the server acknowledged it.
    pub done: bool,
}

/// A callback told of every BOOM write's target (the crash checker uses it).
#[derive(Clone)]
pub struct WriteHook(pub std::sync::Arc<dyn Fn(&WriteIntent) + Send + Sync>);

impl std::fmt::Debug for WriteHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHook")
    }
}

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
    /// How many times a GET whose entry fails its checksum is retried.
    pub torn_retries: u32,
    /// Told of every BOOM write's target before and after it.
    pub on_write: Option<WriteHook>,
    /// BOOM: how long a segment grant keeps asking a full pool (the cleaner may free a
    /// segment) before the PUT fails with "pool full".
    pub pool_full_wait: Duration,
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
            pool_full_wait: Duration::from_secs(2),
        }
    }
}

/// What a PUT did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutInfo {
    /// Version the server assigned.
    pub version: u64,
    /// Whether the entry was rewritten in place (BOOM hybrid updates).
    pub in_place: bool,
}

/// Counters of one client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    /// Segments granted.
    pub grants: u64,
    /// PUTs appended.
    pub appends: u64,
    /// PUTs rewritten in place.
    pub in_place: u64,
    /// GETs retried because the entry was torn.
    pub torn_retries: u64,
}

pub(crate) struct Segment {
    pub(crate) id: u64,
    pub(crate) region: RegionDesc,
    pub(crate) tail: u64,
}

const RECV_SLOTS: u32 = 4;
/// Consumed receives reposted together.
const REPOST_BATCH: usize = 2;
const WR_SEND: u64 = 1 << 63;

/// A connection to a boomkv server.
pub struct Client<T: Transport> {
    pub(crate) t: T,
    pub(crate) qp: T::Qp,
    pub(crate) cq: T::Cq,
    pub(crate) recv_mr: T::Mr,
    pub(crate) recv_size: u32,
    /// Receive slots consumed and not yet posted again.
    pub(crate) unposted: Vec<u64>,
    pub(crate) resp_mr: T::Mr,
    pub(crate) entry_mr: T::Mr,
    pub(crate) opts: ClientOptions,
    pub(crate) id: u64,
    pub(crate) segment_size: u64,
    pub(crate) max_value: u32,
    pub(crate) server_recv: u32,
    pub(crate) seg: Option<Segment>,
    pub(crate) hybrid: HybridTable,
    pub(crate) buf: Vec<u8>,
    pub(crate) next_wr: u64,
    pub(crate) next_req: u32,
    pub(crate) counters: ClientCounters,
}

/// One thing that arrived for the client.
pub(crate) enum Arrival {
    Msg(Msg),
    Data(DataImm),
    /// An RPC value, left in the receive copy at `self.buf[RPC_VALUE_OFF..]`.
    RpcValue(usize),
}

/// Where the entry of an RpcValue message starts (header, then a u32 length).
pub(crate) const RPC_VALUE_OFF: usize = crate::wire::MSG_HEADER + 4;

impl<T: Transport> Client<T> {
    /// Connects to the server at `ep`.
    pub fn connect(t: &T, ep: &Endpoint, opts: ClientOptions) -> Result<Client<T>> {
        let cq = t.create_cq()?;
        let recv_size = if opts.protocol == Protocol::Rpc { MAX_MESSAGE as u32 } else { 64 << 10 };
        let recv_mr = t.alloc_mr((recv_size * RECV_SLOTS) as usize, Access::LOCAL_WRITE)?;
        let resp_mr = t.alloc_mr(opts.response_buffer.max(4096), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let hello = Hello { protocol: opts.protocol, recv_size, response: resp_mr.remote() };
        let (qp, reply) = t.connect(ep, &cq, &cq, &hello.encode(), opts.timeout)?;
        let (id, segment_size, max_value, server_recv) = match Welcome::decode(&reply)? {
            Welcome::Accepted { protocol, client_id, segment_size, max_value, recv_size, .. } => {
                if protocol != opts.protocol {
                    return Err(Error::Protocol(format!(
                        "asked for {} but the server speaks {protocol}",
                        opts.protocol
                    )));
                }
                (client_id, segment_size, max_value, recv_size)
            }
            Welcome::Refused { reason } => {
                return Err(Error::Protocol(format!("server refused the connection: {reason}")))
            }
        };
        for i in 0..RECV_SLOTS {
            qp.post_recv(i as u64, &recv_mr, (i * recv_size) as u64, recv_size)?;
        }
        let entry_mr = t.alloc_mr(4096, Access::NONE)?;
        Ok(Client {
            t: t.clone(),
            qp,
            cq,
            recv_mr,
            recv_size,
            unposted: Vec::with_capacity(REPOST_BATCH),
            resp_mr,
            entry_mr,
            hybrid: HybridTable::new(opts.update_mode),
            opts,
            id,
            segment_size,
            max_value,
            server_recv,
            seg: None,
            buf: Vec::new(),
            next_wr: 0,
            next_req: 0,
            counters: ClientCounters::default(),
        })
    }

    /// The id the server gave this client (the owner of its log).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The protocol spoken.
    pub fn protocol(&self) -> Protocol {
        self.opts.protocol
    }

    /// Counters so far.
    pub fn counters(&self) -> ClientCounters {
        self.counters
    }

    /// Transport operations this client has posted (for round-trip accounting).
    pub fn transport_stats(&self) -> crate::transport::QpStats {
        self.qp.stats()
    }

    /// Largest value the server accepts.
    pub fn max_value(&self) -> u32 {
        self.max_value
    }

    pub(crate) fn wr(&mut self) -> u64 {
        self.next_wr += 1;
        WR_SEND | self.next_wr
    }

    pub(crate) fn req(&mut self) -> u32 {
        self.next_req = self.next_req.wrapping_add(1);
        self.next_req
    }

    /// Waits for the next message or data immediate, checking send completions.
    pub(crate) fn wait_arrival(&mut self, what: &'static str) -> Result<Arrival> {
        loop {
            let c: Completion = match self.cq.wait(self.opts.timeout) {
                Ok(c) => c,
                Err(Error::Timeout(d, _)) => return Err(Error::Timeout(d, what)),
                Err(e) => return Err(e),
            };
            if !c.status.is_ok() {
                let why = self.qp.error_reason().unwrap_or_else(|| c.status.to_string());
                return Err(Error::Transport(format!("connection lost during {what}: {why}")));
            }
            if c.wr_id & WR_SEND != 0 {
                continue;
            }
            let slot = c.wr_id;
            let arrival = match (c.opcode, c.imm) {
                (WcOpcode::RecvWithImm, Some(imm)) => Ok(Arrival::Data(DataImm::decode(imm))),
                (WcOpcode::Recv, _) => {
                    self.buf.resize(c.byte_len as usize, 0);
                    self.recv_mr.read(slot * self.recv_size as u64, &mut self.buf)?;
                    if crate::wire::is_rpc_value(&self.buf) && self.buf.len() >= RPC_VALUE_OFF {
                        // Leave the (possibly large) entry where it is: no second copy.
                        Ok(Arrival::RpcValue(self.buf.len() - RPC_VALUE_OFF))
                    } else {
                        Msg::decode(&self.buf).map(|(m, _)| Arrival::Msg(m))
                    }
                }
                (op, _) => Err(Error::Protocol(format!("unexpected completion {op:?}"))),
            };
            // Receives go back in pairs: one request is in flight at a time, so two of
            // the four stay posted, and a pair shares the ring's cache lines.
            self.unposted.push(slot);
            if self.unposted.len() >= REPOST_BATCH {
                for s in std::mem::take(&mut self.unposted) {
                    self.qp.post_recv(s, &self.recv_mr, s * self.recv_size as u64, self.recv_size)?;
                }
            }
            return arrival;
        }
    }

    pub(crate) fn wait_msg(&mut self, what: &'static str) -> Result<Msg> {
        match self.wait_arrival(what)? {
            Arrival::Msg(Msg::Error { code, message }) => Err(server_error(code, message)),
            Arrival::Msg(m) => Ok(m),
            Arrival::Data(_) | Arrival::RpcValue(_) => Err(Error::Protocol(format!("unexpected data during {what}"))),
        }
    }

    pub(crate) fn call(&mut self, m: &Msg, what: &'static str) -> Result<Msg> {
        match self.call_raw(m, what)? {
            Msg::Error { code, message } => Err(server_error(code, message)),
            m => Ok(m),
        }
    }

    /// Like [`Client::call`], but a server error comes back as the message.
    pub(crate) fn call_raw(&mut self, m: &Msg, what: &'static str) -> Result<Msg> {
        let req = self.req();
        let mut b = std::mem::take(&mut self.buf);
        m.encode_into(req, &mut b);
        if b.len() > self.server_recv as usize {
            self.buf = b;
            return Err(Error::TooLarge {
                what: "request",
                len: self.buf.len() as u64,
                limit: self.server_recv as u64,
            });
        }
        let wr = self.wr();
        let r = self.qp.post_send_bytes(wr, &b);
        self.buf = b;
        r?;
        match self.wait_arrival(what)? {
            Arrival::Msg(m) => Ok(m),
            Arrival::Data(_) | Arrival::RpcValue(_) => Err(Error::Protocol(format!("unexpected data during {what}"))),
        }
    }

    pub(crate) fn check_sizes(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::invalid("empty key"));
        }
        if key.len() > fmt::MAX_KEY_LEN as usize {
            return Err(Error::TooLarge { what: "key", len: key.len() as u64, limit: fmt::MAX_KEY_LEN as u64 });
        }
        if value.len() > self.max_value as usize {
            return Err(Error::TooLarge { what: "value", len: value.len() as u64, limit: self.max_value as u64 });
        }
        Ok(())
    }

    /// Stores `value` under `key`; returns once it is durable.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<PutInfo> {
        self.check_sizes(key, value)?;
        self.write(key, value, false)
    }

    /// Deletes `key` (a durable tombstone); deleting an absent key is not an error.
    pub fn delete(&mut self, key: &[u8]) -> Result<PutInfo> {
        self.check_sizes(key, b"")?;
        self.write(key, b"", true)
    }

    pub(crate) fn ensure_entry_mr(&mut self, len: usize) -> Result<()> {
        if (self.entry_mr.len() as usize) < len {
            self.entry_mr = self.t.alloc_mr(len.next_power_of_two(), Access::NONE)?;
        }
        Ok(())
    }

    pub(crate) fn encode(&mut self, key: &[u8], value: &[u8], tomb: bool, next: u64) -> Result<usize> {
        let len = ENTRY_HEADER_SIZE as usize + key.len() + value.len();
        self.buf.resize(len, 0);
        fmt::encode_entry(&mut self.buf, key, value, tomb, next)?;
        self.ensure_entry_mr(len)?;
        self.entry_mr.write(0, &self.buf)?;
        Ok(len)
    }

    pub(crate) fn write(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        match self.opts.protocol {
            Protocol::Boom => self.boom_put(key, value, tomb),
            Protocol::Rdmp => self.rdmp_put(key, value, tomb),
            Protocol::Rpc => self.rpc_put(key, value, tomb),
        }
    }

    pub(crate) fn grant(&mut self) -> Result<()> {
        // A full pool is often waiting for the cleaner: segments of clients that left
        // are sealed and compacted in the background. Ask again for a while.
        let deadline = Instant::now() + self.opts.pool_full_wait;
        let mut pause = Duration::from_millis(2);
        loop {
            match self.call_raw(&Msg::GrantSegment, "segment grant")? {
                Msg::SegmentGranted { segment, region } => {
                    self.seg = Some(Segment { id: segment, region, tail: fmt::SEGMENT_HEADER_SIZE });
                    self.hybrid.reset();
                    self.counters.grants += 1;
                    return Ok(());
                }
                Msg::Error { code: ErrorCode::PoolFull, .. } if Instant::now() + pause < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Msg::Error { code, message } => return Err(server_error(code, message)),
                m => return Err(Error::Protocol(format!("expected a segment grant, got {m:?}"))),
            }
        }
    }

    /// Sends a DELETE's tombstone for the server to log (BOOM with no room in its
    /// segment, RDMP on a full pool): no segment is needed.
    pub(crate) fn server_delete(&mut self, key: &[u8]) -> Result<PutInfo> {
        let mut e = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len()];
        fmt::encode_entry(&mut e, key, b"", true, 0)?;
        match self.call(&Msg::RpcPut { entry: e }, "DELETE")? {
            Msg::PutOk { version, .. } => Ok(PutInfo { version, in_place: false }),
            m => Err(Error::Protocol(format!("expected a DELETE reply, got {m:?}"))),
        }
    }

    pub(crate) fn wait_put_ok(&mut self) -> Result<(u64, u64)> {
        match self.wait_msg("PUT")? {
            Msg::PutOk { version, min_get_version } => Ok((version, min_get_version)),
            m => Err(Error::Protocol(format!("expected a PUT reply, got {m:?}"))),
        }
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
        for _ in 0..=self.opts.torn_retries {
            let entry_len = match self.opts.protocol {
                Protocol::Boom => self.boom_get(key)?,
                Protocol::Rdmp => self.rdmp_get(key)?,
                Protocol::Rpc => self.rpc_get(key)?,
            };
            let Some((start, n)) = entry_len else { return Ok(false) };
            if self.decode_value(key, start, n, out)? {
                return Ok(true);
            }
            self.counters.torn_retries += 1;
        }
        Err(Error::Protocol(format!(
            "the entry of this key failed its checksum {} times in a row",
            self.opts.torn_retries + 1
        )))
    }

    /// Checks the entry in `buf` (from the response region or a message) and extracts
    /// the value; false if torn.
    pub(crate) fn decode_value(&mut self, key: &[u8], start: usize, n: usize, out: &mut Vec<u8>) -> Result<bool> {
        let Some(e) = self.buf.get(start..start + n) else { return Ok(false) };
        let Ok(h) = fmt::EntryHeader::decode(e) else { return Ok(false) };
        if h.entry_len() as usize != n || fmt::entry_checksum(e) != h.checksum {
            return Ok(false);
        }
        let k = &e[ENTRY_HEADER_SIZE as usize..][..h.key_len as usize];
        if k != key {
            // The slot was reused under us (cleaned or rewritten): read again.
            return Ok(false);
        }
        out.clear();
        out.extend_from_slice(&e[ENTRY_HEADER_SIZE as usize + key.len()..]);
        Ok(true)
    }

    /// The server's statistics as JSON.
    pub fn stats(&mut self) -> Result<serde_json::Value> {
        match self.call(&Msg::StatsReq, "stats")? {
            Msg::Stats { json } => {
                serde_json::from_slice(&json).map_err(|e| Error::corrupt("stats", format!("not JSON: {e}")))
            }
            m => Err(Error::Protocol(format!("expected stats, got {m:?}"))),
        }
    }
}

pub(crate) fn server_error(code: ErrorCode, message: String) -> Error {
    match code {
        ErrorCode::PoolFull => Error::Protocol(format!("server: pool full: {message}")),
        _ => Error::Protocol(format!("server: {message}")),
    }
}
