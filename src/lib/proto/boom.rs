//! The BOOM protocol (the paper's section 3): one network round trip per PUT and GET.
//!
//! - **Segment grant** (once per segment): the client SENDs `GrantSegment`; the server
//!   allocates a segment, links it to the tail of the client's persistent log, registers
//!   it as a region of its own (so the client can write only its segments) and replies
//!   with `(segment, addr, len, rkey)`.
//! - **PUT**: the client builds the entry locally, picks append or in-place by the
//!   hybrid rules ([`crate::client::hybrid`]) and WRITE_WITH_IMMs it into its segment
//!   (immediate = [`PutImm`]: offset and mode). The server commits it
//!   ([`crate::log::Pool::commit`]: validate, write back, version, `count`, index; with
//!   cooperative write-back for large entries) and replies `PutOk` with the version and
//!   the smallest version any GET of the key is still reading.
//! - **GET**: the client SENDs the key and `(addr, len, rkey)` of its own buffer; the
//!   server WRITE_WITH_IMMs the entry from PM straight into it (immediate =
//!   [`DataImm`]: status and length); the client verifies the checksum and retries a
//!   torn read. Not found and buffer-too-small come back in the immediate.
//! - **SCAN** (boomkv's addition for YCSB E; ordered index only): like GET, entries
//!   written back to back, then one immediate with the total length.
//!
//! Differences from the paper: an in-place rewrite persists `version_num` after the
//! entry's content (one more fence than an append's entry write-back), because the
//! checksum does not cover it and a torn rewrite must not pair a new version with old
//! content; appends write back the entry and its version together, then `count`, as
//! the paper does. Entries carry a checksum and GETs verify it.

use std::sync::atomic::Ordering;

use crate::client::hybrid::{Decision, SlotInfo};
use crate::client::{server_error, Arrival, Client, PutInfo, WriteIntent};
use crate::error::{Error, Result};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::server::phases::GetTimer;
use crate::server::{Conn, Worker};
use crate::transport::{Access, MemoryRegion, QueuePair, Transport};
use crate::wire::{DataImm, DataStatus, ErrorCode, Msg, Protocol, PutImm};

// ---- server side ----

impl<T: Transport> Worker<T> {
    pub(crate) fn data_imm(
        &mut self,
        conn: &mut Conn<T>,
        buf: &crate::wire::RegionDesc,
        status: DataStatus,
        len: u32,
    ) -> Result<()> {
        let wr = conn.wr();
        let imm = DataImm { status, len }.encode();
        conn.qp.post_write_imm(wr, &conn.recv_mr, 0, 0, buf.addr, buf.rkey, imm)
    }

    pub(crate) fn boom_get(&mut self, conn: &mut Conn<T>, key: Vec<u8>, buf: crate::wire::RegionDesc) -> Result<()> {
        let mut timer = GetTimer::start(self.sampled());
        let found = self.sh.pool.lookup(&key);
        GetTimer::looked_up(&mut timer);
        let Some(loc) = found else {
            self.sh.counters.not_found.fetch_add(1, Ordering::Relaxed);
            return self.data_imm(conn, &buf, DataStatus::NotFound, 0);
        };
        if loc.len as u64 > buf.len {
            return self.data_imm(conn, &buf, DataStatus::TooSmall, loc.len);
        }
        if let Err(why) = conn.admit_get(loc.len, self.sh.cfg.max_value) {
            self.sh.counters.over_limit.fetch_add(1, Ordering::Relaxed);
            conn.dead.get_or_insert(why);
            return Ok(());
        }
        let mr = self.sh.seg_mr(loc.segment as u64)?;
        let wr = conn.wr();
        self.sh.inflight.begin(&key, loc.version);
        conn.gets.insert(wr, (key, loc.version));
        let imm = DataImm { status: DataStatus::Ok, len: loc.len }.encode();
        self.sh.counters.gets.fetch_add(1, Ordering::Relaxed);
        self.sh.counters.bytes_out.fetch_add(loc.len as u64, Ordering::Relaxed);
        let r = conn.qp.post_write_imm(wr, &mr, loc.offset as u64, loc.len, buf.addr, buf.rkey, imm);
        GetTimer::posted(timer, &self.sh.phases);
        r
    }

    pub(crate) fn boom_scan(
        &mut self,
        conn: &mut Conn<T>,
        start: Vec<u8>,
        count: u32,
        buf: crate::wire::RegionDesc,
    ) -> Result<()> {
        let items = match self.sh.pool.index().scan(&start, count.min(10_000) as usize) {
            Ok(v) => v,
            Err(e) => return self.error_reply(conn, 0, ErrorCode::NoScan, e.to_string()),
        };
        let total: u64 = items.iter().map(|(_, l)| l.len as u64).sum();
        if total > buf.len {
            return self.data_imm(conn, &buf, DataStatus::TooSmall, total.min((1 << 30) - 1) as u32);
        }
        let mut off = 0u64;
        for (_, loc) in &items {
            let mr = self.sh.seg_mr(loc.segment as u64)?;
            let wr = conn.wr();
            conn.qp.post_write(wr, &mr, loc.offset as u64, loc.len, buf.addr + off, buf.rkey, false)?;
            off += loc.len as u64;
        }
        self.sh.counters.scans.fetch_add(1, Ordering::Relaxed);
        self.data_imm(conn, &buf, DataStatus::Ok, total as u32)
    }
}

// ---- client side ----

impl<T: Transport> Client<T> {
    pub(crate) fn boom_put(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let len = ENTRY_HEADER_SIZE + key.len() as u64 + value.len() as u64;
        let slot = fmt::slot_size(key.len(), value.len());
        if slot > self.segment_size - fmt::SEGMENT_HEADER_SIZE {
            return Err(Error::TooLarge { what: "entry", len, limit: self.segment_size - fmt::SEGMENT_HEADER_SIZE });
        }
        let (offset, capacity, in_place) = match self.hybrid.decide(key, len) {
            Decision::InPlace(s) if self.seg.is_some() => (s.offset, s.capacity, true),
            _ => {
                if self.seg.as_ref().is_none_or(|s| s.tail + slot > self.segment_size) {
                    if tomb {
                        // A DELETE never takes a segment: the server logs the tombstone.
                        return self.server_delete(key);
                    }
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

    pub(crate) fn boom_get(&mut self, key: &[u8]) -> Result<Option<(usize, usize)>> {
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
}
