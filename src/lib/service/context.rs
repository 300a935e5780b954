//! A client's protocol-neutral state on the server (`Conn`) and the context a
//! protocol's server half runs one request in (`Ctx`): the services every protocol
//! uses (replies, refusals, the commit path, segment grants, the tombstone log, GETs in
//! flight, step timing). What a request means is the protocol's ([`crate::proto`]).
//!
//! May import: `error`, `pmem`, `log`, `index`, `transport`, `units`, `wire`, and its parent
//! `service`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::phases::{self, Phase};
use super::{ConnMap, ServerCore, ServerCounters, Shared};
use crate::error::{Error, Result};
use crate::log::format::{self as fmt, EntryHeader};
use crate::log::{ActiveSegment, CommitError, CommitTimes, Pool, WriteMode};
use crate::transport::{Access, Finished, MemoryRegion, QueuePair, Transport};
use crate::wire::{ErrorCode, Msg, Protocol};

/// Most GET replies one client may have in flight (written, not yet acknowledged by its
/// transport). A client that sends GETs and never reads the replies is disconnected at
/// this bound instead of piling them up in the server's send buffers. (Over shm a reply
/// is done at its post, never in flight: there such a client runs out of posted
/// receives, and its next reply fails with the connection.)
pub const MAX_GETS_IN_FLIGHT: usize = 64;

/// How long a GET's or SCAN's data write may stay unacknowledged by the client's
/// transport before the connection is closed: until then its entries' segments cannot be
/// freed (a `ServerRead`), so a client that stops with replies in flight (stopped, hung,
/// its socket still open) would hold them for good. A live client gives up on its GET
/// well before (its timeout is 10 s by default).
pub const GET_REPLY_DEADLINE: Duration = Duration::from_secs(10);

/// Work requests the server posts carry this bit; receives (slot numbers) do not.
const WR_SEND: u64 = 1 << 63;

/// The server's state of one client, whatever its protocol.
pub(crate) struct Conn<T: Transport> {
    pub(crate) qp: T::Qp,
    pub(crate) id: u64,
    pub(crate) protocol: Protocol,
    pub(crate) recv_mr: T::Mr,
    pub(crate) recv_size: u32,
    /// The segment the client (or the server for it) appends to, and its region (bound
    /// to this client's queue pair).
    pub(crate) seg: Option<ActiveSegment>,
    pub(crate) seg_mr: Option<T::Mr>,
    /// Segments granted so far (for the quota).
    pub(crate) segments: u64,
    /// wr_id -> what each GET (or SCAN) data write not yet completed reads, and when it
    /// was posted (see [`GET_REPLY_DEADLINE`]).
    pub(crate) gets: ConnMap<u64, (Instant, ServerRead)>,
    /// Bytes of those writes (bounded: [`MAX_GETS_IN_FLIGHT`], [`crate::wire::max_get_bytes`]).
    pub(crate) get_bytes: u64,
    next_wr: u64,
    pub(crate) last_active: Instant,
    /// Why the connection is to be dropped (set once; the worker drops it).
    pub(crate) dead: Option<String>,
    /// Where replies go when the client fetches them (RFP) instead of receiving them.
    pub(crate) fetched: Option<FetchedReplies<T>>,
}

/// Whether the planted early-reply bug is in force for `p` (feature `planted-bugs`).
#[cfg(feature = "planted-bugs")]
fn early_reply_planted(p: Protocol) -> bool {
    use crate::log::planted;
    match p {
        Protocol::Herd => planted::herd_early_reply(),
        Protocol::Rfp => planted::rfp_early_result(),
        _ => false,
    }
}

#[cfg(not(feature = "planted-bugs"))]
#[inline(always)]
fn early_reply_planted(_: Protocol) -> bool {
    false
}

/// Replies a client fetches with a READ (RFP): each is left as one [`crate::wire::slot`]
/// in a result region in server memory, readable by this client alone, stamped with the
/// request's sequence number and the server's processing time.
pub(crate) struct FetchedReplies<T: Transport> {
    /// The result region (bound to the client's queue pair, remote read only).
    pub(crate) mr: T::Mr,
    /// The sequence number of the request being answered.
    pub(crate) seq: u32,
    /// When the request was picked up.
    pub(crate) since: Instant,
}

impl<T: Transport> FetchedReplies<T> {
    /// The processing time so far, in ns (saturating), for the slot's protocol word.
    fn processing_ns(&self) -> u32 {
        u32::try_from(self.since.elapsed().as_nanos()).unwrap_or(u32::MAX)
    }

    /// Leaves `payload` (an encoded message) as the reply: the payload first, then the
    /// header, so a client READing early most often sees the old sequence number.
    pub(crate) fn put(&mut self, payload: &[u8]) -> Result<()> {
        let room = self.mr.len().saturating_sub(crate::wire::slot::HEADER as u64);
        if payload.len() as u64 > room {
            return Err(Error::Protocol(format!("a reply of {} bytes over the result region", payload.len())));
        }
        self.mr.write(crate::wire::slot::HEADER as u64, payload)?;
        let h = crate::wire::slot::encode(self.seq, self.processing_ns(), payload);
        self.mr.write(0, &h)
    }

    /// Leaves an entry-carrying reply: `head` (the message header and length), then
    /// `len` bytes copied from `src` at `off` (the entry in PM: one copy, as the RPC
    /// baseline's PM -> DRAM copy), then the slot header.
    pub(crate) fn put_entry(&mut self, head: &[u8], src: &crate::pmem::Mapping, off: u64, len: usize) -> Result<()> {
        let hs = crate::wire::slot::HEADER as u64;
        let total = head.len() as u64 + len as u64;
        if total > self.mr.len().saturating_sub(hs) {
            return Err(Error::Protocol(format!("a reply of {total} bytes over the result region")));
        }
        self.mr.write(hs, head)?;
        let (map, base) = self.mr.mapping();
        src.copy_to(off, map, base + hs + head.len() as u64, len)?;
        // The CRC covers the message and entry headers (wire::slot): read them back
        // from the region, where the client will.
        let covered = (head.len() + fmt::ENTRY_HEADER_SIZE as usize).min(total as usize);
        let mut b = [0u8; 128];
        let b = b.get_mut(..covered).ok_or_else(|| Error::Protocol(format!("a reply head of {} bytes", head.len())))?;
        self.mr.read(hs, b)?;
        let h = crate::wire::slot::encode_covering(self.seq, self.processing_ns(), total as u32, b);
        self.mr.write(0, &h)
    }
}

impl<T: Transport> Conn<T> {
    /// A client on `qp` speaking `protocol`, with `depth` receives of `recv_size` bytes
    /// posted.
    pub(crate) fn new(t: &T, qp: T::Qp, protocol: Protocol, id: u64, recv_size: u32, depth: u32) -> Result<Conn<T>> {
        let recv_mr = t.alloc_mr((recv_size * depth) as usize, Access::LOCAL_WRITE)?;
        for i in 0..depth {
            qp.post_recv(i as u64, &recv_mr, (i * recv_size) as u64, recv_size)?;
        }
        Ok(Conn {
            qp,
            id,
            protocol,
            recv_mr,
            recv_size,
            seg: None,
            seg_mr: None,
            segments: 0,
            gets: ConnMap::default(),
            get_bytes: 0,
            next_wr: 0,
            last_active: Instant::now(),
            dead: None,
            fetched: None,
        })
    }

    /// Counts a GET reply of `len` bytes as in flight, or says why the client is over
    /// its bound.
    pub(crate) fn admit_get(&mut self, len: u32, max_value: u32) -> std::result::Result<(), String> {
        self.admit_scan()?;
        let limit = crate::wire::max_get_bytes(max_value);
        if self.get_bytes + len as u64 > limit {
            return Err(format!(
                "over the limit of {} of GET replies in flight (the client does not read them)",
                crate::units::human_bytes(limit)
            ));
        }
        self.get_bytes += len as u64;
        Ok(())
    }

    /// Counts a SCAN reply as in flight (its size is bounded by the client's buffer),
    /// or says why the client is over its bound.
    pub(crate) fn admit_scan(&self) -> std::result::Result<(), String> {
        if self.gets.len() >= MAX_GETS_IN_FLIGHT {
            return Err(format!(
                "over the limit of {MAX_GETS_IN_FLIGHT} GET replies in flight (the client does not read them)"
            ));
        }
        Ok(())
    }

    /// Holds `read` until data write `wr` completes (or the connection ends).
    pub(crate) fn hold_read(&mut self, wr: u64, read: ServerRead, now: Instant) {
        self.gets.insert(wr, (now, read));
    }

    /// Why the client has to go for a reply it leaves unacknowledged, if it does.
    pub(crate) fn stalled_reply(&self, now: Instant) -> Option<String> {
        self.gets.values().any(|(t, _)| now.saturating_duration_since(*t) > GET_REPLY_DEADLINE).then(|| {
            format!(
                "a GET reply stayed unacknowledged by its transport for more than {}s (the client stopped?)",
                GET_REPLY_DEADLINE.as_secs()
            )
        })
    }

    /// A fresh work-request id for something the server posts on this connection.
    pub(crate) fn wr(&mut self) -> u64 {
        self.next_wr += 1;
        WR_SEND | self.next_wr
    }

    /// Marks the connection to be dropped (the first reason wins).
    pub(crate) fn close(&mut self, why: String) {
        self.dead.get_or_insert(why);
    }
}

/// A worker's own state that requests use: its id (for cooperative write-back), its
/// scratch buffer, its coarse clock and its sampling counter.
pub(crate) struct WorkerState {
    pub(crate) id: usize,
    pub(crate) buf: Vec<u8>,
    /// A coarse clock, refreshed by the polling loop (idle timeouts need ms, not ns).
    pub(crate) now: Instant,
    /// Requests seen, for sampling one in [`phases::SAMPLE_EVERY`].
    seen: u32,
    /// Refused segment grants are not logged again before this.
    pool_full_quiet: Instant,
}

impl WorkerState {
    /// The state of worker `id`.
    pub(crate) fn new(id: usize) -> WorkerState {
        let now = Instant::now();
        WorkerState { id, buf: Vec::new(), now, seen: 0, pool_full_quiet: now }
    }
}

/// The context one request of one client runs in (see the module doc).
pub(crate) struct Ctx<'a, T: Transport> {
    pub(crate) sh: &'a Shared<T>,
    pub(crate) conn: &'a mut Conn<T>,
    pub(crate) w: &'a mut WorkerState,
}

impl<'a, T: Transport> Ctx<'a, T> {
    /// A region over segment `seg` for the server's own posts (never given to a peer),
    /// borrowed from the server for as long as the context's server lives.
    pub(crate) fn local_segment_region(&self, seg: u64) -> Result<&'a T::Mr> {
        self.sh.seg_mr(seg)
    }
}

impl<T: Transport> Ctx<'_, T> {
    /// The pool.
    pub(crate) fn pool(&self) -> &Pool {
        &self.sh.pool
    }

    /// The counters.
    pub(crate) fn counters(&self) -> &ServerCounters {
        self.sh.counters.part(self.w.id)
    }

    /// The largest value the server accepts.
    pub(crate) fn max_value(&self) -> u32 {
        self.sh.cfg.max_value
    }

    /// Whether to time this request's steps (one in [`phases::SAMPLE_EVERY`]).
    pub(crate) fn sampled(&mut self) -> bool {
        self.w.seen = self.w.seen.wrapping_add(1);
        self.w.seen % phases::SAMPLE_EVERY == 0
    }

    /// Where sampled step timings go.
    pub(crate) fn phases(&self) -> &phases::Phases {
        &self.sh.phases
    }

    /// Posts the WRITE_WITH_IMM that `post` makes on the connection as work request
    /// `wr`, of `admitted` bytes counted by [`Conn::admit_get`] (0 if none): `read`,
    /// what it and the writes posted before it read, is released at once when the
    /// transport did the write at the post ([`Finished::Now`]; shm), else held until
    /// its completion or the end of the connection. A completion per GET that only
    /// says the copy is done costs a worker a queue entry, a poll and two map
    /// operations.
    pub(crate) fn post_data(
        &mut self,
        wr: u64,
        admitted: u32,
        read: Option<ServerRead>,
        post: impl FnOnce(&Conn<T>) -> Result<Finished>,
    ) -> Result<()> {
        let r = post(self.conn);
        if let Ok(Finished::Now) = r {
            self.conn.get_bytes = self.conn.get_bytes.saturating_sub(admitted as u64);
            if let Some(read) = read {
                self.sh.end_read(read);
            }
            return Ok(());
        }
        if let Some(read) = read {
            self.conn.hold_read(wr, read, self.w.now);
        }
        r.map(drop)
    }

    /// Sends `msg` as the reply to request `req`.
    pub(crate) fn reply(&mut self, msg: &Msg, req: u32) -> Result<()> {
        let mut b = std::mem::take(&mut self.w.buf);
        msg.encode_into(req, &mut b);
        if let Some(f) = self.conn.fetched.as_mut() {
            let r = f.put(&b);
            self.w.buf = b;
            return r;
        }
        let wr = self.conn.wr();
        let r = self.conn.qp.post_send_bytes_unsignaled(wr, &b);
        self.w.buf = b;
        r
    }

    /// Refuses request `req` with `code`: counts it, logs it (a full pool at most once a
    /// second: clients ask again while the cleaner works) and tells the client. A full
    /// pool's refusals have a count of their own: a client waiting out a full pool asks
    /// many times for one request, and would bury the errors.
    pub(crate) fn refuse(&mut self, req: u32, code: ErrorCode, message: String) -> Result<()> {
        let counter = if code == ErrorCode::PoolFull { &self.counters().pool_full } else { &self.counters().errors };
        counter.fetch_add(1, Ordering::Relaxed);
        let quiet = code == ErrorCode::PoolFull && self.w.now < self.w.pool_full_quiet;
        if !quiet {
            if code == ErrorCode::PoolFull {
                self.w.pool_full_quiet = self.w.now + Duration::from_secs(1);
            }
            self.sh.log(&format!("client {}: {message}", self.conn.id));
        }
        self.reply(&Msg::Error { code, message }, req)
    }

    /// What every protocol answers alike: the stats request; anything else is not a
    /// request of this protocol.
    pub(crate) fn common(&mut self, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::StatsReq => {
                let json = serde_json::to_vec(&self.sh.stats()).unwrap_or_default();
                self.reply(&Msg::Stats { json }, req)
            }
            m => {
                let p = self.conn.protocol;
                self.refuse(req, ErrorCode::BadRequest, format!("{m:?} is not a {p} request"))
            }
        }
    }

    /// A region over segment `seg` only this client can reach, with `access`.
    pub(crate) fn bound_segment_region(&self, seg: u64, access: Access) -> Result<T::Mr> {
        self.sh.bound_seg_mr(&self.conn.qp, seg, access)
    }

    /// A region over `len` bytes of the pool from pool offset `offset` that only this
    /// client can reach, with `access` (the passive protocols' table and arena).
    pub(crate) fn pool_region(&self, offset: u64, len: u64, access: Access) -> Result<T::Mr> {
        let media = self.sh.pool.media();
        self.sh.t.register_bound(&self.conn.qp, media.map_arc().clone(), media.file().cloned(), offset, len, access)
    }

    /// A new zeroed region of `len` bytes in server DRAM that only this client can reach,
    /// with `access` (a memory file, so the `shm` backend can hand it to the peer).
    pub(crate) fn private_region(&self, len: usize, access: Access) -> Result<T::Mr> {
        let (file, map) = crate::pmem::Mapping::memfd("boomkv-client-ring", len)?;
        self.sh.t.register_bound(
            &self.conn.qp,
            std::sync::Arc::new(map),
            Some(std::sync::Arc::new(file)),
            0,
            len as u64,
            access,
        )
    }

    /// Seals the client's segment (if any) and grants it a new one: registered for it
    /// alone where it writes its entries itself, for nobody where the server does.
    pub(crate) fn grant(&mut self) -> std::result::Result<(), (ErrorCode, String)> {
        let q = self.sh.cfg.segment_quota;
        let conn = &mut *self.conn;
        if q > 0 && conn.segments >= q {
            return Err((ErrorCode::Quota, format!("client {} reached its quota of {q} segments", conn.id)));
        }
        let old_mr = &mut conn.seg_mr;
        let revoke = || {
            if let Some(old) = old_mr.take() {
                old.deregister();
            }
        };
        let seg = self.sh.pool.grant_segment_revoking(conn.id, conn.seg.as_ref(), revoke).map_err(|e| match e {
            Error::PoolFull { .. } => (ErrorCode::PoolFull, e.to_string()),
            e => (ErrorCode::Internal, e.to_string()),
        })?;
        // The new segment is the client's from here, registered or not: it is linked
        // after the old one, so a retry must seal it and link the next after it, not
        // link a second segment after the old one (and leave this one an empty orphan).
        let id = seg.id;
        conn.seg = Some(seg);
        conn.segments += 1;
        self.sh.counters.part(self.w.id).grants.fetch_add(1, Ordering::Relaxed);
        // Only a client that writes its entries itself gets at its segment: the RPC
        // designs' clients never do (the server copies their entries in), so theirs is
        // not registered for them at all, and a guessed rkey reaches nothing.
        if !writes_own_segment(conn.protocol) {
            return Ok(());
        }
        let mr = self
            .sh
            // READ too: over verbs a client-durable PUT's FLUSH (RDMP-CC) is a READ of
            // the last bytes it wrote.
            .bound_seg_mr(&conn.qp, id, Access::REMOTE_WRITE | Access::REMOTE_READ)
            .map_err(|e| (ErrorCode::Internal, format!("segment {id} was granted, but registering it failed: {e}")))?;
        conn.seg_mr = Some(mr);
        Ok(())
    }

    /// Commits the entry at `offset` of the client's segment and replies with its
    /// version (`pre`: its header and key, when the server built the entry itself).
    pub(crate) fn commit_and_reply(
        &mut self,
        offset: u64,
        mode: WriteMode,
        pre: Option<(EntryHeader, Vec<u8>)>,
    ) -> Result<()> {
        let sampled = self.sampled();
        let early = early_reply_planted(self.conn.protocol);
        let mut replied = false;
        let Conn { seg, qp, fetched, .. } = &mut *self.conn;
        let Some(seg) = seg.as_mut() else {
            return self.refuse(0, ErrorCode::BadRequest, "PUT before any segment was granted".into());
        };
        let t0 = sampled.then(Instant::now);
        let mut times = CommitTimes::default();
        let (pool, coop, id) = (&self.sh.pool, &self.sh.coop, self.w.id);
        let mut wb = |o: u64, l: usize| {
            if early && !replied {
                // The planted bug (HERD, RFP): acknowledge once the entry has its
                // version, before its first write-back.
                replied = true;
                let mut v = [0u8; 8];
                pool.media().map().read(o + fmt::ENTRY_VERSION_OFF, &mut v)?;
                let m = Msg::PutOk { version: u64::from_le_bytes(v), min_get_version: u64::MAX }.encode(0);
                match fetched.as_mut() {
                    Some(f) => f.put(&m)?,
                    None => qp.post_send_bytes_unsignaled(WR_SEND, &m)?,
                }
            }
            coop.writeback(id, pool.media(), o, l)
        };
        let tm = t0.map(|_| &mut times);
        let r = match pre {
            Some((h, key)) => pool.commit_validated(seg, offset, mode, h, key, &mut wb, tm),
            None => pool.commit(seg, offset, mode, &mut wb, tm),
        };
        match r {
            Ok(c) => {
                let ctr = if c.loc.tombstone { &self.counters().dels } else { &self.counters().puts };
                ctr.fetch_add(1, Ordering::Relaxed);
                let t1 = t0.map(|_| Instant::now());
                let min = self.sh.inflight.min_version(&c.key);
                let r = if replied {
                    Ok(())
                } else {
                    self.reply(&Msg::PutOk { version: c.version, min_get_version: min }, 0)
                };
                if let (Some(t0), Some(t1)) = (t0, t1) {
                    let now = Instant::now();
                    self.sh.phases.record(&[
                        (Phase::PutValidate, times.validate),
                        (Phase::PutSeal, times.seal),
                        (Phase::PutWriteback, times.writeback),
                        (Phase::PutSecondPersist, times.second_persist),
                        (Phase::PutIndex, times.index),
                        (Phase::PutReply, now.duration_since(t1).as_nanos() as u64),
                        (Phase::PutTotal, now.duration_since(t0).as_nanos() as u64),
                    ]);
                }
                r
            }
            Err(CommitError::Media(e @ Error::VersionsExhausted { .. })) => {
                self.refuse(0, ErrorCode::Internal, e.to_string())
            }
            Err(CommitError::Media(e)) => self.refuse(0, ErrorCode::Internal, format!("media error: {e}")),
            Err(e @ CommitError::TooLarge { .. }) => self.refuse(0, ErrorCode::TooLarge, e.to_string()),
            Err(e) => self.refuse(0, ErrorCode::InvalidEntry, e.to_string()),
        }
    }

    /// A DELETE that found no room in its client's segment (BOOM and RDMP clients send
    /// the tombstone as a message; the RPC baseline's own PUT path comes here when no
    /// segment can be granted): the server appends it to its tombstone log, which
    /// draws on a reserved segment, so a full pool can always be emptied.
    pub(crate) fn server_delete(&mut self, entry: &[u8], req: u32) -> Result<()> {
        let h = match EntryHeader::decode(entry) {
            Ok(h)
                if h.is_tombstone()
                    && h.value_len == 0
                    && h.key_len >= 1
                    && h.key_len <= fmt::MAX_KEY_LEN
                    && h.entry_len() == entry.len() as u64 =>
            {
                h
            }
            _ => {
                let m = "a DELETE sent to the server must carry one tombstone entry".to_string();
                return self.refuse(req, ErrorCode::InvalidEntry, m);
            }
        };
        let key = fmt::entry_key(entry, &h);
        let r = self.sh.tombstones.lock().unwrap_or_else(std::sync::PoisonError::into_inner).append(
            &self.sh.pool,
            key,
            b"",
            true,
        );
        match r {
            Ok(c) => {
                self.counters().dels.fetch_add(1, Ordering::Relaxed);
                let min = self.sh.inflight.min_version(&c.key);
                self.reply(&Msg::PutOk { version: c.version, min_get_version: min }, req)
            }
            Err(e @ Error::PoolFull { .. }) => self.refuse(req, ErrorCode::PoolFull, e.to_string()),
            Err(e) => self.refuse(req, ErrorCode::Internal, format!("tombstone log: {e}")),
        }
    }

    /// A GET's index look-up for a client that reads the entry by itself (RDMP-KV's
    /// READ, under the lease of [`crate::wire::READ_LEASE`]), timed when this request is sampled (the timer then goes on to
    /// [`phases::GetTimer::posted`]); an absent key is counted as not found.
    pub(crate) fn lookup(&mut self, key: &[u8]) -> (Option<crate::index::Loc>, Option<phases::GetTimer>) {
        self.timed_lookup(key, |sh| sh.pool.lookup_leased(key, crate::wire::READ_LEASE))
    }

    /// A GET's look-up `look`, after RDMP-CC's completed PUTs of `key` are indexed:
    /// timed when this request is sampled, an absent key counted as not found.
    fn timed_lookup<R>(
        &mut self,
        key: &[u8],
        look: impl FnOnce(&ServerCore) -> Option<R>,
    ) -> (Option<R>, Option<phases::GetTimer>) {
        let mut timer = phases::GetTimer::start(self.sampled());
        super::index_completed(&self.sh.pool, &self.sh.pending_puts, key);
        let found = look(self.sh);
        phases::GetTimer::looked_up(&mut timer);
        if found.is_none() {
            self.counters().not_found.fetch_add(1, Ordering::Relaxed);
        }
        (found, timer)
    }

    /// [`Ctx::lookup`] for a GET whose entry the server reads itself (a copy, a data
    /// write): the entry is held ([`ServerRead`]) until [`ServerCore::end_read`], which
    /// the caller owes on every path, or, for a data write, until the write is done:
    /// at its post when the transport did it there, else at its completion
    /// (`conn.gets`; see [`Ctx::post_data`]).
    pub(crate) fn lookup_read(
        &mut self,
        key: &[u8],
    ) -> (Option<(crate::index::Loc, ServerRead)>, Option<phases::GetTimer>) {
        let worker = self.w.id;
        self.timed_lookup(key, |sh| {
            let (loc, pin, ticket) =
                sh.pool.lookup_pinned(worker, key, |l| sh.inflight.begin(worker, key, l.version))?;
            Some((loc, ServerRead::Get(pin, ticket)))
        })
    }
}

/// What the server is reading for a client from the pool, held from the look-up until
/// the data is out ([`ServerCore::end_read`]).
///
/// - Its entries' segments are pinned ([`crate::log::ReadPin`]): the cleaner does not
///   free them, so no other client is granted one and writes over an entry being sent.
///   (It may have moved the entries meanwhile; the copy reads the old place, unchanged.)
/// - A GET's entry version is in flight ([`crate::service::inflight`]): its client
///   does not rewrite that entry in place. Both are taken inside the index look-up,
///   so a PUT that supersedes the entry after it sees the GET.
#[must_use = "hand it to ServerCore::end_read when the data is out"]
pub(crate) enum ServerRead {
    /// One GET's entry (no allocation, unlike a SCAN's).
    Get(crate::log::ReadPin, crate::service::inflight::GetTicket),
    /// A SCAN's entries (their versions in flight too).
    Scan(Vec<(crate::log::ReadPin, crate::service::inflight::GetTicket)>),
}

impl ServerCore {
    /// The read `r` is over: its data has been copied or written to the client (or
    /// never will be).
    pub(crate) fn end_read(&self, r: ServerRead) {
        let release = |(pin, ticket)| {
            self.inflight.end(ticket);
            self.pool.unpin(pin);
        };
        match r {
            ServerRead::Get(pin, ticket) => release((pin, ticket)),
            ServerRead::Scan(held) => held.into_iter().for_each(release),
        }
    }
}

/// Whether clients of `p` write their entries into their granted segment themselves
/// (with one-sided WRITEs), so that the segment is registered for them: BOOM, RDMP-KV
/// and RDMP-CC. RDMA-KV's RPC, HERD and RFP send their entries, and the server writes
/// them.
fn writes_own_segment(p: Protocol) -> bool {
    match p {
        Protocol::Boom | Protocol::Rdmp | Protocol::RdmpCc => true,
        Protocol::Rpc | Protocol::Herd | Protocol::Rfp | Protocol::PdpmDirect | Protocol::Clover => false,
    }
}
