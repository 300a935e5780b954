//! The BOOM protocol (the paper's section 3): one network round trip per PUT and GET.
//!
//! - **Segment grant** (once per segment): the client SENDs `GrantSegment`; the server
//!   allocates a segment, links it to the tail of the client's persistent log, registers
//!   it as a region of its own (so the client can write only its segments) and replies
//!   with `(segment, addr, len, rkey)`.
//! - **PUT**: the client builds the entry locally, picks append or in-place by the
//!   hybrid rules ([`hybrid`]) and WRITE_WITH_IMMs it into its segment
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

pub mod hybrid;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{ClientSide, ClientTuning, Fetched, ServerSide};
use crate::error::{Error, Result};
use crate::index::Loc;
use crate::link::{Arrival, Link, PutInfo};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::log::WriteMode;
use crate::service::phases::GetTimer;
use crate::service::{Ctx, ServerRead};
use crate::transport::{MemoryRegion, QueuePair, Transport, WriteWr};
use crate::wire::{DataImm, DataStatus, ErrorCode, Msg, PutImm, RegionDesc};
use hybrid::{Decision, HybridTable, SlotInfo};

/// Where a BOOM PUT is about to write (reported to the client's `on_write` hook).
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
pub struct WriteHook(pub Arc<dyn Fn(&WriteIntent) + Send + Sync>);

impl std::fmt::Debug for WriteHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteHook")
    }
}

// ---- server side ----

/// BOOM's server half (it keeps nothing per client beyond the connection's segment).
pub(crate) struct Server;

impl<T: Transport> ServerSide<T> for Server {
    /// A GET is served with its key read where it landed (no copy; every GET comes this
    /// way); anything else is decoded.
    fn on_receive(&mut self, cx: &mut Ctx<'_, T>, raw: &[u8]) -> Result<()> {
        if let Some(g) = crate::wire::decode_get(raw)? {
            return get(cx, g.key, g.buf);
        }
        let (m, req) = Msg::decode(raw)?;
        self.on_msg(cx, m, req)
    }

    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::GrantSegment => grant(cx, req),
            Msg::Get { key, buf } => get(cx, &key, buf),
            Msg::Scan { start, count, buf } => scan(cx, start, count, buf),
            Msg::RpcPut { entry } => cx.server_delete(&entry, req),
            m => cx.common(m, req),
        }
    }

    /// A PUT: the entry is in the client's segment at the immediate's offset.
    fn on_write_imm(&mut self, cx: &mut Ctx<'_, T>, imm: u32) -> Result<()> {
        let p = PutImm::decode(imm);
        let mode = if p.in_place { WriteMode::InPlace } else { WriteMode::Append };
        cx.commit_and_reply(p.offset, mode, None)
    }
}

/// Seals the client's segment and grants it the next one.
fn grant<T: Transport>(cx: &mut Ctx<'_, T>, req: u32) -> Result<()> {
    match cx.grant() {
        Ok(()) => {
            let (Some(seg), Some(mr)) = (&cx.conn.seg, &cx.conn.seg_mr) else {
                return Err(Error::Protocol("grant left no segment".into()));
            };
            let msg = Msg::SegmentGranted { segment: seg.id, region: mr.remote() };
            cx.reply(&msg, req)
        }
        Err((code, msg)) => cx.refuse(req, code, msg),
    }
}

/// Tells the client's buffer `buf` the GET's `status` and length; `read`, what the
/// data writes before it read, is held until this write is done (it is done after
/// theirs: at its post, or at its completion; see [`Ctx::post_data`]).
fn data_imm<T: Transport>(
    cx: &mut Ctx<'_, T>,
    buf: &RegionDesc,
    status: DataStatus,
    len: u32,
    read: Option<ServerRead>,
) -> Result<()> {
    let wr = cx.conn.wr();
    let imm = DataImm { status, len }.encode();
    cx.post_data(wr, 0, read, |c| c.qp.post_write_imm_eager(wr, &c.recv_mr, 0, 0, buf.addr, buf.rkey, imm))
}

/// A GET: WRITE_WITH_IMM the entry from PM into the client's buffer.
fn get<T: Transport>(cx: &mut Ctx<'_, T>, key: &[u8], buf: RegionDesc) -> Result<()> {
    let (found, timer) = cx.lookup_read(key);
    let Some((loc, read)) = found else { return data_imm(cx, &buf, DataStatus::NotFound, 0, None) };
    if loc.len as u64 > buf.len {
        cx.sh.end_read(read);
        return data_imm(cx, &buf, DataStatus::TooSmall, loc.len, None);
    }
    if let Err(why) = cx.conn.admit_get(loc.len, cx.max_value()) {
        cx.sh.end_read(read);
        cx.counters().over_limit.fetch_add(1, Ordering::Relaxed);
        cx.conn.close(why);
        return Ok(());
    }
    let mr = match cx.local_segment_region(loc.segment as u64) {
        Ok(mr) => mr,
        Err(e) => {
            cx.sh.end_read(read);
            return Err(e);
        }
    };
    let wr = cx.conn.wr();
    let imm = DataImm { status: DataStatus::Ok, len: loc.len }.encode();
    cx.counters().gets.fetch_add(1, Ordering::Relaxed);
    cx.counters().bytes_out.fetch_add(loc.len as u64, Ordering::Relaxed);
    // Held until the write is done (or the connection is dropped, which flushes it).
    let r = cx.post_data(wr, loc.len, Some(read), |c| {
        c.qp.post_write_imm_eager(wr, mr, loc.offset as u64, loc.len, buf.addr, buf.rkey, imm)
    });
    GetTimer::posted(timer, cx.phases());
    r
}

/// The most entries one SCAN answers.
const MAX_SCAN: u32 = 10_000;

/// A SCAN: the entries written back to back into the client's buffer, then one
/// immediate with the total length.
fn scan<T: Transport>(cx: &mut Ctx<'_, T>, start: Vec<u8>, count: u32, buf: RegionDesc) -> Result<()> {
    // RDMP-CC's PUTs that completed are in the index before it is walked.
    crate::service::index_all_completed(cx.pool(), &cx.sh.pending_puts);
    // Each entry's version is in flight too: its client does not rewrite it in place
    // under the scan's write.
    let inflight = &cx.sh.inflight;
    let worker = cx.w.id;
    let (items, held) = match cx
        .sh
        .pool
        .scan_pinned(worker, &start, count.min(MAX_SCAN) as usize, |k, l| inflight.begin(worker, k, l.version))
    {
        Ok(v) => v,
        Err(e) => return cx.refuse(0, ErrorCode::NoScan, e.to_string()),
    };
    let read = ServerRead::Scan(held);
    let total: u64 = items.iter().map(|(_, l)| l.len as u64).sum();
    if total > buf.len {
        cx.sh.end_read(read);
        return data_imm(cx, &buf, DataStatus::TooSmall, total.min((1 << 30) - 1) as u32, None);
    }
    if let Err(why) = cx.conn.admit_scan() {
        cx.sh.end_read(read);
        cx.counters().over_limit.fetch_add(1, Ordering::Relaxed);
        cx.conn.close(why);
        return Ok(());
    }
    if let Err(e) = post_scan(cx, &items, &buf) {
        // Writes posted before the failure may still read their entries: the read is
        // held until the connection, which the error ends, is closed.
        let wr = cx.conn.wr();
        cx.conn.hold_read(wr, read, cx.w.now);
        return Err(e);
    }
    cx.counters().scans.fetch_add(1, Ordering::Relaxed);
    data_imm(cx, &buf, DataStatus::Ok, total as u32, Some(read))
}

/// A SCAN's data writes: `items`' entries back to back into `buf`.
fn post_scan<T: Transport>(cx: &mut Ctx<'_, T>, items: &[(Vec<u8>, Loc)], buf: &RegionDesc) -> Result<()> {
    // The entries go out together: one batch (verbs: one doorbell) per run of entries
    // in the same segment.
    let mut off = 0u64;
    let mut batch: Vec<WriteWr> = Vec::new();
    for (i, (_, loc)) in items.iter().enumerate() {
        let wr = cx.conn.wr();
        batch.push(WriteWr {
            wr_id: wr,
            off: loc.offset as u64,
            len: loc.len,
            remote_addr: buf.addr + off,
            rkey: buf.rkey,
            signaled: false,
        });
        off += loc.len as u64;
        if items.get(i + 1).is_none_or(|(_, next)| next.segment != loc.segment) {
            let mr = cx.local_segment_region(loc.segment as u64)?;
            cx.conn.qp.post_write_batch(mr, &batch)?;
            batch.clear();
        }
    }
    Ok(())
}

// ---- client side ----

/// The client's current segment.
struct Segment {
    id: u64,
    region: RegionDesc,
    tail: u64,
}

/// BOOM's client half: the granted segment and the hybrid-update bookkeeping.
pub(crate) struct Client {
    seg: Option<Segment>,
    hybrid: HybridTable,
    on_write: Option<WriteHook>,
    pool_full_wait: Duration,
    /// The PUT [`ClientSide::put_start`] left in flight.
    put_in_flight: Option<Written>,
}

impl Client {
    pub(crate) fn new(tuning: &ClientTuning) -> Client {
        Client {
            seg: None,
            hybrid: HybridTable::new(tuning.update_mode),
            on_write: tuning.on_write.clone(),
            pool_full_wait: tuning.pool_full_wait,
            put_in_flight: None,
        }
    }

    /// Asks for a segment (a full pool is often waiting for the cleaner: segments of
    /// clients that left are sealed and compacted in the background, so ask again for a
    /// while).
    fn grant<T: Transport>(&mut self, l: &mut Link<T>) -> Result<()> {
        match super::while_pool_full(self.pool_full_wait, || l.call(&Msg::GrantSegment, "segment grant"))? {
            Msg::SegmentGranted { segment, region } => {
                self.seg = Some(Segment { id: segment, region, tail: fmt::SEGMENT_HEADER_SIZE });
                self.hybrid.reset();
                l.counters.grants += 1;
                Ok(())
            }
            m => Err(Error::Protocol(format!("expected a segment grant, got {m:?}"))),
        }
    }

    /// After a PUT whose entry was written but whose answer did not come (a timeout, a
    /// refusal, a lost connection): whether the server committed the slot is unknown,
    /// so the segment's tail and its hybrid slots are no longer known either. Writing on
    /// from the old tail would overwrite the slot if it was committed (an acknowledged
    /// entry the index replaced its key's older one with: lost at recovery), and the
    /// server would refuse every later append as misplaced. The next PUT takes a new
    /// segment (the server seals this one, whatever became of the slot).
    fn forget_segment(&mut self) {
        self.seg = None;
        self.hybrid.reset();
    }

    fn tell(&self, intent: &WriteIntent) {
        if let Some(h) = &self.on_write {
            (h.0)(intent);
        }
    }

    /// A PUT up to its WRITE_WITH_IMM (a grant first when the segment is full):
    /// `Written` once the entry is on its way, `Done` when the server did it whole (a
    /// DELETE that takes no segment).
    fn post_put<T: Transport>(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<Posted> {
        let segment_size = l.limits.segment_size;
        let len = ENTRY_HEADER_SIZE + key.len() as u64 + value.len() as u64;
        let slot = fmt::slot_size(key.len(), value.len());
        if slot > segment_size - fmt::SEGMENT_HEADER_SIZE {
            return Err(Error::TooLarge { what: "entry", len, limit: segment_size - fmt::SEGMENT_HEADER_SIZE });
        }
        let (offset, capacity, in_place) = match self.hybrid.decide(key, len) {
            Decision::InPlace(s) if self.seg.is_some() => (s.offset, s.capacity, true),
            _ => {
                if self.seg.as_ref().is_none_or(|s| s.tail + slot > segment_size) {
                    if tomb {
                        // A DELETE never takes a segment: the server logs the tombstone.
                        return super::server_delete(l, key, self.pool_full_wait).map(Posted::Done);
                    }
                    self.grant(l)?;
                }
                let tail = self.seg.as_ref().map(|s| s.tail).unwrap_or(fmt::SEGMENT_HEADER_SIZE);
                (tail, slot, false)
            }
        };
        let n = l.encode_entry(key, value, tomb, offset + capacity)?;
        let (seg_id, region) =
            self.seg.as_ref().map(|s| (s.id, s.region)).ok_or_else(|| Error::Protocol("no segment".into()))?;
        let imm = PutImm { offset, in_place }.encode().ok_or_else(|| Error::invalid("segment offset too large"))?;
        let intent = WriteIntent { segment: seg_id, offset, in_place, done: false };
        self.tell(&intent);
        l.write_entry(n, region.at(offset), region.rkey, imm)?;
        Ok(Posted::Written(Written { intent, capacity }))
    }

    /// The rest of a PUT once the server's answer `m` came.
    fn put_done<T: Transport>(&mut self, key: &[u8], w: Written, m: Msg, l: &mut Link<T>) -> Result<PutInfo> {
        let (version, min_get) = match m {
            Msg::PutOk { version, min_get_version } => (version, min_get_version),
            m => return Err(Error::Protocol(format!("expected a PUT reply, got {m:?}"))),
        };
        let Written { mut intent, capacity } = w;
        let (offset, in_place) = (intent.offset, intent.in_place);
        intent.done = true;
        self.tell(&intent);
        if in_place {
            l.counters.in_place += 1;
        } else {
            if let Some(s) = self.seg.as_mut() {
                s.tail = offset + capacity;
            }
            l.counters.appends += 1;
        }
        self.hybrid.record(key, SlotInfo { offset, capacity, version }, min_get);
        Ok(PutInfo { version, in_place })
    }

    /// Sends `m` (a GET or SCAN naming the response buffer) and waits for its data
    /// immediate, growing the buffer and asking again when it is too small.
    /// The server's "too small" must ask for more than the buffer holds and at most
    /// `room` bytes ([`Link::grow_answer`]), so this asks at most once more per growth.
    fn fetch<T: Transport>(
        l: &mut Link<T>,
        what: &'static str,
        room: u64,
        mut encode: impl FnMut(u32, RegionDesc, &mut Vec<u8>),
    ) -> Result<Option<u32>> {
        loop {
            let buf = l.resp_mr.remote();
            l.send_encoded(|req, out| encode(req, buf, out))?;
            match answer(l.wait_arrival(what)?, what)? {
                Answer::Len(len) => return Ok(Some(len)),
                Answer::Absent => return Ok(None),
                Answer::TooSmall(len) => l.grow_answer(len, room, what)?,
            }
        }
    }

    /// A whole GET of `key` ([`Client::fetch`]): the entry's length, `None` if absent.
    fn fetch_get<T: Transport>(l: &mut Link<T>, key: &[u8]) -> Result<Option<u32>> {
        let room = l.get_room();
        Self::fetch(l, "GET", room, |req, buf, out| Msg::encode_get_into(req, key, &buf, out))
    }
}

/// How far [`Client::post_put`] took a PUT.
enum Posted {
    /// The server did it whole (a DELETE without a segment).
    Done(PutInfo),
    /// The entry is written; the server's answer is to come.
    Written(Written),
}

/// A PUT whose entry is written and whose answer is to come.
struct Written {
    intent: WriteIntent,
    capacity: u64,
}

/// What the server answered a GET or SCAN with.
enum Answer {
    /// The data is in the response region: this many bytes.
    Len(u32),
    /// No such key.
    Absent,
    /// The response region is smaller than the data (this many bytes): grow, ask again.
    TooSmall(u32),
}

fn answer(a: Arrival, what: &'static str) -> Result<Answer> {
    match a {
        Arrival::Data(DataImm { status: DataStatus::Ok, len }) => Ok(Answer::Len(len)),
        Arrival::Data(DataImm { status: DataStatus::NotFound, .. }) => Ok(Answer::Absent),
        Arrival::Data(DataImm { status: DataStatus::TooSmall, len }) => Ok(Answer::TooSmall(len)),
        Arrival::Data(DataImm { status: DataStatus::Error, .. }) => {
            Err(Error::Protocol(format!("the server failed the {what}")))
        }
        Arrival::Msg(Msg::Error { code, message }) => Err(Error::Server { code, message }),
        Arrival::Msg(m) => Err(Error::Protocol(format!("expected {what} data, got {m:?}"))),
        Arrival::RpcValue(_) => Err(Error::Protocol("unexpected RPC value".into())),
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        match self.post_put(l, key, value, tomb)? {
            Posted::Done(info) => Ok(info),
            Posted::Written(w) => {
                let m = l.wait_msg("PUT").inspect_err(|_| self.forget_segment())?;
                self.put_done(key, w, m, l)
            }
        }
    }

    fn put_start(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8]) -> Result<Option<PutInfo>> {
        match self.post_put(l, key, value, false)? {
            Posted::Done(info) => Ok(Some(info)),
            Posted::Written(w) => {
                self.put_in_flight = Some(w);
                Ok(None)
            }
        }
    }

    fn put_poll(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<PutInfo>> {
        let arrival = l.poll_arrival("PUT").inspect_err(|_| {
            self.put_in_flight = None;
            self.forget_segment();
        });
        let Some(a) = arrival? else { return Ok(None) };
        let w = self.put_in_flight.take().ok_or_else(|| Error::invalid("no PUT in flight"))?;
        let m = crate::link::message("PUT", a).inspect_err(|_| self.forget_segment())?;
        self.put_done(key, w, m, l).map(Some)
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let Some(len) = Self::fetch_get(l, key)? else {
            return Ok(None);
        };
        l.take_response(len as usize)?;
        Ok(Some((0, len as usize)))
    }

    /// The entry lands in the response region: the value goes from there into `out`.
    fn get_value(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Fetched> {
        let Some(len) = Self::fetch_get(l, key)? else {
            return Ok(Fetched::Absent);
        };
        Fetched::in_response(l, key, len, out)
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        let buf = l.resp_mr.remote();
        l.send_encoded(|req, out| Msg::encode_get_into(req, key, &buf, out))?;
        Ok(true)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        let Some(a) = l.poll_arrival("GET")? else { return Ok(None) };
        let len = match answer(a, "GET")? {
            Answer::Len(len) => len,
            Answer::Absent => return Ok(Some(Fetched::Absent)),
            // Rare (the buffer grows once to the largest value): finish it as a whole GET.
            Answer::TooSmall(len) => {
                l.grow_answer(len, l.get_room(), "GET")?;
                return self.get_value(l, key, out).map(Some);
            }
        };
        Fetched::in_response(l, key, len, out).map(Some)
    }

    fn scan(&mut self, l: &mut Link<T>, start: &[u8], count: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let scan = |buf| Msg::Scan { start: start.to_vec(), count, buf };
        // The immediate carries a length below 2^30.
        let room = (u64::from(count.min(MAX_SCAN)) * l.get_room()).min(1 << 30);
        let len = Self::fetch(l, "SCAN", room, |req, buf, out| scan(buf).encode_into(req, out))?
            .ok_or_else(|| Error::Protocol("SCAN failed: NotFound".into()))?;
        l.take_response(len as usize)?;
        let all = &l.buf;
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
        Ok(out)
    }
}
