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

use std::time::Duration;

use crate::error::{Error, Result};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::transport::{Access, Completion, CompletionQueue, Endpoint, MemoryRegion, QueuePair, Transport, WcOpcode};
use crate::wire::{DataImm, DataStatus, ErrorCode, Hello, Msg, Protocol, PutImm, RegionDesc, Welcome, MAX_MESSAGE};
use hybrid::{Decision, HybridTable, SlotInfo, UpdateMode};

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

struct Segment {
    id: u64,
    region: RegionDesc,
    tail: u64,
}

const RECV_SLOTS: u32 = 4;
const WR_SEND: u64 = 1 << 63;

/// A connection to a boomkv server.
pub struct Client<T: Transport> {
    t: T,
    qp: T::Qp,
    cq: T::Cq,
    recv_mr: T::Mr,
    recv_size: u32,
    resp_mr: T::Mr,
    entry_mr: T::Mr,
    opts: ClientOptions,
    id: u64,
    segment_size: u64,
    max_value: u32,
    server_recv: u32,
    seg: Option<Segment>,
    hybrid: HybridTable,
    buf: Vec<u8>,
    next_wr: u64,
    next_req: u32,
    counters: ClientCounters,
}

/// One thing that arrived for the client.
enum Arrival {
    Msg(Msg),
    Data(DataImm),
    /// An RPC value, left in the receive copy at `self.buf[RPC_VALUE_OFF..]`.
    RpcValue(usize),
}

/// Where the entry of an RpcValue message starts (header, then a u32 length).
const RPC_VALUE_OFF: usize = crate::wire::MSG_HEADER + 4;

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

    fn wr(&mut self) -> u64 {
        self.next_wr += 1;
        WR_SEND | self.next_wr
    }

    fn req(&mut self) -> u32 {
        self.next_req = self.next_req.wrapping_add(1);
        self.next_req
    }

    /// Waits for the next message or data immediate, checking send completions.
    fn wait_arrival(&mut self, what: &'static str) -> Result<Arrival> {
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
            self.qp.post_recv(slot, &self.recv_mr, slot * self.recv_size as u64, self.recv_size)?;
            return arrival;
        }
    }

    fn wait_msg(&mut self, what: &'static str) -> Result<Msg> {
        match self.wait_arrival(what)? {
            Arrival::Msg(Msg::Error { code, message }) => Err(server_error(code, message)),
            Arrival::Msg(m) => Ok(m),
            Arrival::Data(_) | Arrival::RpcValue(_) => Err(Error::Protocol(format!("unexpected data during {what}"))),
        }
    }

    fn call(&mut self, m: &Msg, what: &'static str) -> Result<Msg> {
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
        self.wait_msg(what)
    }

    fn check_sizes(&self, key: &[u8], value: &[u8]) -> Result<()> {
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

    fn ensure_entry_mr(&mut self, len: usize) -> Result<()> {
        if (self.entry_mr.len() as usize) < len {
            self.entry_mr = self.t.alloc_mr(len.next_power_of_two(), Access::NONE)?;
        }
        Ok(())
    }

    fn encode(&mut self, key: &[u8], value: &[u8], tomb: bool, next: u64) -> Result<usize> {
        let len = ENTRY_HEADER_SIZE as usize + key.len() + value.len();
        self.buf.resize(len, 0);
        fmt::encode_entry(&mut self.buf, key, value, tomb, next)?;
        self.ensure_entry_mr(len)?;
        self.entry_mr.write(0, &self.buf)?;
        Ok(len)
    }

    fn write(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        match self.opts.protocol {
            Protocol::Boom => self.boom_put(key, value, tomb),
            Protocol::Rdmp => self.rdmp_put(key, value, tomb),
            Protocol::Rpc => self.rpc_put(key, value, tomb),
        }
    }

    fn grant(&mut self) -> Result<()> {
        match self.call(&Msg::GrantSegment, "segment grant")? {
            Msg::SegmentGranted { segment, region } => {
                self.seg = Some(Segment { id: segment, region, tail: fmt::SEGMENT_HEADER_SIZE });
                self.hybrid.reset();
                self.counters.grants += 1;
                Ok(())
            }
            m => Err(Error::Protocol(format!("expected a segment grant, got {m:?}"))),
        }
    }

    fn wait_put_ok(&mut self) -> Result<(u64, u64)> {
        match self.wait_msg("PUT")? {
            Msg::PutOk { version, min_get_version } => Ok((version, min_get_version)),
            m => Err(Error::Protocol(format!("expected a PUT reply, got {m:?}"))),
        }
    }

    fn boom_put(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let len = ENTRY_HEADER_SIZE + key.len() as u64 + value.len() as u64;
        let slot = fmt::slot_size(key.len(), value.len());
        if slot > self.segment_size - fmt::SEGMENT_HEADER_SIZE {
            return Err(Error::TooLarge { what: "entry", len, limit: self.segment_size - fmt::SEGMENT_HEADER_SIZE });
        }
        let (offset, capacity, in_place) = match self.hybrid.decide(key, len) {
            Decision::InPlace(s) if self.seg.is_some() => (s.offset, s.capacity, true),
            _ => {
                if self.seg.as_ref().is_none_or(|s| s.tail + slot > self.segment_size) {
                    self.grant()?;
                }
                let tail = self.seg.as_ref().map(|s| s.tail).unwrap_or(fmt::SEGMENT_HEADER_SIZE);
                (tail, slot, false)
            }
        };
        let n = self.encode(key, value, tomb, offset + capacity)?;
        let (seg_id, region) =
            self.seg.as_ref().map(|s| (s.id, s.region)).ok_or_else(|| Error::Protocol("no segment".into()))?;
        let imm = PutImm { offset, in_place }.encode().ok_or_else(|| Error::invalid("segment offset too large"))?;
        let mut intent = WriteIntent { segment: seg_id, offset, in_place, done: false };
        if let Some(h) = &self.opts.on_write {
            (h.0)(&intent);
        }
        let wr = self.wr();
        self.qp.post_write_imm(wr, &self.entry_mr, 0, n as u32, region.at(offset), region.rkey, imm)?;
        let (version, min_get) = self.wait_put_ok()?;
        if let Some(h) = &self.opts.on_write {
            intent.done = true;
            (h.0)(&intent);
        }
        if !in_place {
            if let Some(s) = self.seg.as_mut() {
                s.tail = offset + capacity;
            }
            self.counters.appends += 1;
        } else {
            self.counters.in_place += 1;
        }
        self.hybrid.record(key, SlotInfo { offset, capacity, version }, min_get);
        Ok(PutInfo { version, in_place })
    }

    fn rdmp_put(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let len = ENTRY_HEADER_SIZE as u32 + key.len() as u32 + value.len() as u32;
        let (addr, rkey, token) = match self.call(&Msg::Alloc { len }, "RDMP allocation")? {
            Msg::Allocated { addr, rkey, token } => (addr, rkey, token),
            m => return Err(Error::Protocol(format!("expected an allocation, got {m:?}"))),
        };
        let offset = token as u64 * 8;
        let n = self.encode(key, value, tomb, offset + fmt::slot_size(key.len(), value.len()))?;
        let imm = PutImm { offset, in_place: false }.encode().ok_or_else(|| Error::Protocol("bad token".into()))?;
        let wr = self.wr();
        self.qp.post_write_imm(wr, &self.entry_mr, 0, n as u32, addr, rkey, imm)?;
        let (version, _) = self.wait_put_ok()?;
        self.counters.appends += 1;
        Ok(PutInfo { version, in_place: false })
    }

    fn rpc_put(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let len = ENTRY_HEADER_SIZE as usize + key.len() + value.len();
        let mut e = vec![0u8; len];
        fmt::encode_entry(&mut e, key, value, tomb, 0)?;
        match self.call(&Msg::RpcPut { entry: e }, "PUT")? {
            Msg::PutOk { version, .. } => {
                self.counters.appends += 1;
                Ok(PutInfo { version, in_place: false })
            }
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
    fn decode_value(&mut self, key: &[u8], start: usize, n: usize, out: &mut Vec<u8>) -> Result<bool> {
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

    fn boom_get(&mut self, key: &[u8]) -> Result<Option<(usize, usize)>> {
        loop {
            let buf = self.resp_mr.remote();
            let req = self.req();
            let mut b = std::mem::take(&mut self.buf);
            Msg::Get { key: key.to_vec(), buf }.encode_into(req, &mut b);
            let wr = self.wr();
            let r = self.qp.post_send_bytes(wr, &b);
            self.buf = b;
            r?;
            match self.wait_arrival("GET")? {
                Arrival::Data(DataImm { status: DataStatus::Ok, len }) => {
                    self.buf.resize(len as usize, 0);
                    self.resp_mr.read(0, &mut self.buf)?;
                    return Ok(Some((0, len as usize)));
                }
                Arrival::Data(DataImm { status: DataStatus::NotFound, .. }) => return Ok(None),
                Arrival::Data(DataImm { status: DataStatus::TooSmall, len }) => {
                    let want = (len as usize).next_power_of_two();
                    self.resp_mr = self.t.alloc_mr(want, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
                }
                Arrival::Data(DataImm { status: DataStatus::Error, .. }) => {
                    return Err(Error::Protocol("the server failed the GET".into()))
                }
                Arrival::Msg(Msg::Error { code, message }) => return Err(server_error(code, message)),
                Arrival::Msg(m) => return Err(Error::Protocol(format!("expected GET data, got {m:?}"))),
                Arrival::RpcValue(_) => return Err(Error::Protocol("unexpected RPC value".into())),
            }
        }
    }

    fn rdmp_get(&mut self, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let (addr, rkey, len) = match self.call(&Msg::Locate { key: key.to_vec() }, "RDMP locate")? {
            Msg::Located { addr, rkey, len } => (addr, rkey, len),
            Msg::NotFound => return Ok(None),
            m => return Err(Error::Protocol(format!("expected a location, got {m:?}"))),
        };
        if len as u64 > self.resp_mr.len() {
            self.resp_mr =
                self.t.alloc_mr((len as usize).next_power_of_two(), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        }
        let wr = self.wr();
        self.qp.post_read(wr, &self.resp_mr, 0, len, addr, rkey)?;
        loop {
            let c = self.cq.wait(self.opts.timeout).map_err(|e| match e {
                Error::Timeout(d, _) => Error::Timeout(d, "RDMP READ"),
                e => e,
            })?;
            if c.wr_id == wr {
                c.ok("RDMP READ")?;
                break;
            }
            if !c.status.is_ok() {
                return Err(Error::Transport(format!("connection lost during RDMP READ: {}", c.status)));
            }
        }
        self.buf.resize(len as usize, 0);
        self.resp_mr.read(0, &mut self.buf)?;
        Ok(Some((0, len as usize)))
    }

    fn rpc_get(&mut self, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let req = self.req();
        let mut b = std::mem::take(&mut self.buf);
        Msg::RpcGet { key: key.to_vec() }.encode_into(req, &mut b);
        let wr = self.wr();
        let r = self.qp.post_send_bytes(wr, &b);
        self.buf = b;
        r?;
        match self.wait_arrival("GET")? {
            Arrival::RpcValue(n) => Ok(Some((RPC_VALUE_OFF, n))),
            Arrival::Msg(Msg::NotFound) => Ok(None),
            Arrival::Msg(Msg::Error { code, message }) => Err(server_error(code, message)),
            Arrival::Msg(m) => Err(Error::Protocol(format!("expected a value, got {m:?}"))),
            Arrival::Data(_) => Err(Error::Protocol("unexpected data write".into())),
        }
    }

    /// Up to `count` live key-value pairs from `start` on, in key order (BOOM protocol;
    /// the server needs `--index ordered`).
    pub fn scan(&mut self, start: &[u8], count: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if self.opts.protocol != Protocol::Boom {
            return Err(Error::invalid(format!(
                "scans are implemented for the boom protocol, not {}",
                self.opts.protocol
            )));
        }
        loop {
            let buf = self.resp_mr.remote();
            let msg = Msg::Scan { start: start.to_vec(), count, buf };
            let req = self.req();
            let mut b = std::mem::take(&mut self.buf);
            msg.encode_into(req, &mut b);
            let wr = self.wr();
            let r = self.qp.post_send_bytes(wr, &b);
            self.buf = b;
            r?;
            match self.wait_arrival("SCAN")? {
                Arrival::Data(DataImm { status: DataStatus::Ok, len }) => {
                    let mut all = vec![0u8; len as usize];
                    self.resp_mr.read(0, &mut all)?;
                    let mut out = Vec::new();
                    let mut off = 0usize;
                    while off < all.len() {
                        let h = fmt::EntryHeader::decode(&all[off..])?;
                        let n = h.entry_len() as usize;
                        let e = all.get(off..off + n).ok_or_else(|| Error::corrupt("scan", "entry past the data"))?;
                        if fmt::entry_checksum(e) != h.checksum {
                            return Err(Error::corrupt("scan", "an entry failed its checksum"));
                        }
                        let k = ENTRY_HEADER_SIZE as usize + h.key_len as usize;
                        out.push((e[ENTRY_HEADER_SIZE as usize..k].to_vec(), e[k..].to_vec()));
                        off += n;
                    }
                    return Ok(out);
                }
                Arrival::Data(DataImm { status: DataStatus::TooSmall, len }) => {
                    self.resp_mr = self
                        .t
                        .alloc_mr((len as usize).next_power_of_two(), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
                }
                Arrival::Data(d) => return Err(Error::Protocol(format!("scan failed: {:?}", d.status))),
                Arrival::Msg(Msg::Error { code, message }) => return Err(server_error(code, message)),
                Arrival::Msg(m) => return Err(Error::Protocol(format!("expected scan data, got {m:?}"))),
                Arrival::RpcValue(_) => return Err(Error::Protocol("unexpected RPC value".into())),
            }
        }
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

fn server_error(code: ErrorCode, message: String) -> Error {
    match code {
        ErrorCode::PoolFull => Error::Protocol(format!("server: pool full: {message}")),
        _ => Error::Protocol(format!("server: {message}")),
    }
}
