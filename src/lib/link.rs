//! The client's connection, protocol-neutral: what a protocol's client half
//! (`crate::proto::ClientSide`) runs on.
//!
//! A `Link` is one queue pair with its completion queue, a ring of posted receives,
//! the buffer the server writes GET results into, the buffer entries are WRITTEN from,
//! and the request and work-request ids. It sends a message and waits for the answer,
//! posts one-sided operations and waits for their completions, and encodes entries
//! through the media format's owner ([`crate::log::format`]). It knows no protocol: the
//! halves in [`crate::proto`] decide which messages and operations make a PUT or a GET.
//!
//! May import: `error`, `log::format` (entry encoding), `log::cells` and `log::clover`
//! (the passive designs' records), `pmem` (a copy), `transport`, `wire`.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::transport::{Access, Completion, CompletionQueue, MemoryRegion, QueuePair, Transport, WcOpcode};
use crate::wire::{DataImm, Msg};

/// What a PUT did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutInfo {
    /// Version the server assigned.
    pub version: u64,
    /// Whether the entry was rewritten in place (BOOM hybrid updates).
    pub in_place: bool,
}

/// Counters of one client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClientCounters {
    /// Segments granted.
    pub grants: u64,
    /// PUTs appended.
    pub appends: u64,
    /// PUTs rewritten in place.
    pub in_place: u64,
    /// GETs retried because the entry was torn.
    pub torn_retries: u64,
    /// RDMP-KV: GETs retried because their READ finished too late to trust (past
    /// half of the server's lease on the place it read; the entry was not looked at).
    pub late_reads: u64,
    /// RFP: READs of a reply that was not there yet (or torn), fetched again.
    pub fetch_retries: u64,
    /// RFP: requests whose result the server sent (server-reply mode) instead of
    /// leaving it to be fetched.
    pub server_replies: u64,
    /// pDPM-Direct, Clover: compare-and-swaps that returned the very word this client
    /// was installing (a retransmitted request the device executed again: seen over
    /// soft-RoCE under load), taken as succeeded.
    pub cas_replays: u64,
    /// Requests given up on after the timeout, whose late replies are dropped when
    /// they come.
    pub abandoned: u64,
}

impl ClientCounters {
    /// The counts since `before` (an earlier reading of the same client).
    pub fn since(&self, before: &ClientCounters) -> ClientCounters {
        self.zip(before, u64::saturating_sub)
    }

    /// Adds another client's counts (the total of a run's clients).
    pub fn add(&mut self, o: &ClientCounters) {
        *self = self.zip(o, u64::saturating_add);
    }

    /// Each counter of `self` combined with the same counter of `o` (the one list of the
    /// fields that `since` and `add` share).
    fn zip(&self, o: &ClientCounters, f: impl Fn(u64, u64) -> u64) -> ClientCounters {
        ClientCounters {
            grants: f(self.grants, o.grants),
            appends: f(self.appends, o.appends),
            in_place: f(self.in_place, o.in_place),
            torn_retries: f(self.torn_retries, o.torn_retries),
            late_reads: f(self.late_reads, o.late_reads),
            fetch_retries: f(self.fetch_retries, o.fetch_retries),
            server_replies: f(self.server_replies, o.server_replies),
            cas_replays: f(self.cas_replays, o.cas_replays),
            abandoned: f(self.abandoned, o.abandoned),
        }
    }

    /// Each counter with the name a report prints it under (YCSB's style of names).
    pub fn named(&self) -> [(&'static str, u64); 9] {
        [
            ("SegmentGrants", self.grants),
            ("Appends", self.appends),
            ("InPlaceUpdates", self.in_place),
            ("TornReadRetries", self.torn_retries),
            ("LateReadRetries", self.late_reads),
            ("FetchRetries", self.fetch_retries),
            ("ServerReplies", self.server_replies),
            ("CasReplays", self.cas_replays),
            ("RepliesAbandoned", self.abandoned),
        ]
    }
}

/// One thing that arrived for the client.
pub(crate) enum Arrival {
    /// A control message.
    Msg(Msg),
    /// A WRITE_WITH_IMM's immediate (data the server wrote into the response buffer).
    Data(DataImm),
    /// An RPC value, left in the receive copy at `buf[RPC_VALUE_OFF..]` (this many bytes).
    RpcValue(usize),
}

/// Where the entry of an RpcValue message starts (header, then a u32 length).
pub(crate) const RPC_VALUE_OFF: usize = crate::wire::MSG_HEADER + 4;

/// Receive slots a client posts.
const RECV_SLOTS: u32 = 4;
/// Consumed receives reposted together.
const REPOST_BATCH: usize = 2;
/// Work requests this side posts carry this bit; receives do not.
const WR_SEND: u64 = 1 << 63;

/// What the server announced at the handshake.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The client's id (the owner of its log).
    pub(crate) id: u64,
    /// Bytes per segment.
    pub(crate) segment_size: u64,
    /// Largest value.
    pub(crate) max_value: u32,
    /// The server's receive buffer size (largest request).
    pub(crate) server_recv: u32,
}

/// An RFP fetch of the reply to a request slot ([`Link::fetch_step`]).
pub(crate) struct SlotFetch {
    seq: u32,
    addr: u64,
    rkey: u32,
    res_len: u32,
    fetch: u32,
    /// The READ out (its work request), and whether it is the second of a long reply.
    out: Option<(u64, bool)>,
    /// The reply's length, once the first READ saw its header.
    total: u64,
    start: std::time::Instant,
    tries: u32,
}

impl SlotFetch {
    /// A fetch of slot `seq` from the result region (`res_len` bytes at `addr` under
    /// `rkey`), `fetch` bytes at a time; nothing is posted yet.
    pub(crate) fn new(seq: u32, addr: u64, rkey: u32, res_len: u32, fetch: u32) -> SlotFetch {
        let fetch = fetch.clamp(crate::wire::slot::HEADER as u32, res_len);
        SlotFetch { seq, addr, rkey, res_len, fetch, out: None, total: 0, start: std::time::Instant::now(), tries: 0 }
    }

    /// The fetch starts over, its timeout counting from now (a fetch taken up again
    /// after it timed out). A READ it left out is forgotten: its completion may have
    /// been taken (and skipped) by another wait meanwhile, so the next step posts a
    /// fresh one, and the old completion, if it is still to come, is skipped by its id.
    pub(crate) fn restart(&mut self) {
        (self.start, self.tries, self.out) = (std::time::Instant::now(), 0, None);
    }
}

/// Two READs posted together ([`Link::post_read_pair`]): their work requests, where
/// the second lands in the response buffer, their lengths, and whether the first has
/// completed.
pub(crate) struct PairRead {
    wa: u64,
    wb: u64,
    second: u64,
    lens: (u32, u32),
    a_done: bool,
}

/// A client's connection (see the module doc).
pub(crate) struct Link<T: Transport> {
    t: T,
    pub(crate) qp: T::Qp,
    cq: T::Cq,
    recv_mr: T::Mr,
    recv_size: u32,
    /// Receive slots consumed and not yet posted again.
    unposted: Vec<u64>,
    /// The buffer the server WRITEs GET results into (and RDMP READs land in).
    pub(crate) resp_mr: T::Mr,
    /// The buffer entries are WRITTEN from.
    entry_mr: T::Mr,
    /// An 8-byte word WRITTEN without waiting (Clover's shortcut): its own buffer, so
    /// the next request's entry does not overwrite it before it is sent.
    word_mr: T::Mr,
    /// Scratch: requests are encoded here, replies and entries copied here.
    pub(crate) buf: Vec<u8>,
    pub(crate) timeout: Duration,
    pub(crate) limits: Limits,
    pub(crate) counters: ClientCounters,
    next_wr: u64,
    next_req: u32,
    /// Scratch for [`Link::poll_arrival`]'s look at the completion queue.
    polled: Vec<Completion>,
    /// Replies still to come for requests given up on (timed out). Replies come in the
    /// order of the requests, one each, so the next arrivals are theirs: they are
    /// dropped, not taken for the answer to a later request.
    stale: u32,
}

impl<T: Transport> Link<T> {
    /// Wraps a connected queue pair and posts its receives.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        t: &T,
        qp: T::Qp,
        cq: T::Cq,
        recv_mr: T::Mr,
        recv_size: u32,
        resp_mr: T::Mr,
        timeout: Duration,
        limits: Limits,
    ) -> Result<Link<T>> {
        for i in 0..RECV_SLOTS {
            qp.post_recv(i as u64, &recv_mr, (i * recv_size) as u64, recv_size)?;
        }
        let entry_mr = t.alloc_mr(4096, Access::NONE)?;
        let word_mr = t.alloc_mr(64, Access::NONE)?;
        Ok(Link {
            t: t.clone(),
            qp,
            cq,
            recv_mr,
            recv_size,
            unposted: Vec::with_capacity(REPOST_BATCH),
            resp_mr,
            entry_mr,
            word_mr,
            buf: Vec::new(),
            timeout,
            limits,
            counters: ClientCounters::default(),
            next_wr: 0,
            next_req: 0,
            polled: Vec::with_capacity(1),
            stale: 0,
        })
    }

    /// Bytes of the receive ring a client needs for `recv_size`-byte receives.
    pub(crate) fn ring_bytes(recv_size: u32) -> usize {
        (recv_size * RECV_SLOTS) as usize
    }

    /// A fresh work-request id for something this side posts.
    fn wr(&mut self) -> u64 {
        self.next_wr += 1;
        WR_SEND | self.next_wr
    }

    fn req(&mut self) -> u32 {
        self.next_req = self.next_req.wrapping_add(1);
        self.next_req
    }

    /// Waits for the next message or data immediate, checking send completions.
    pub(crate) fn wait_arrival(&mut self, what: &'static str) -> Result<Arrival> {
        self.repost()?;
        loop {
            let c: Completion = match self.cq.wait(self.timeout) {
                Ok(c) => c,
                Err(Error::Timeout(d, _)) => {
                    self.abandon_reply();
                    return Err(Error::Timeout(d, what));
                }
                Err(e) => return Err(e),
            };
            if let Some(arrival) = self.arrival(c, what) {
                return arrival;
            }
        }
    }

    /// The reply to the request in flight will not be waited for (it timed out): when
    /// it comes, it is dropped.
    pub(crate) fn abandon_reply(&mut self) {
        self.stale = self.stale.saturating_add(1);
        self.counters.abandoned += 1;
    }

    /// Waits for the late replies of the requests given up on, dropping them, up to the
    /// timeout: what a client does before it reuses a request slot in server memory
    /// (HERD, RFP), which the server reads in sequence. Overwritten before the server
    /// has read it, a request given up on is never served, and the server waits for
    /// its sequence number for ever; once its reply is in, the slot is free.
    pub(crate) fn settle_abandoned(&mut self) -> Result<()> {
        const WHAT: &str = "the reply to an earlier request that timed out";
        let end = crate::transport::deadline(self.timeout);
        while self.stale > 0 {
            self.repost()?;
            let left = end.saturating_duration_since(std::time::Instant::now());
            let c = self.cq.wait(left).map_err(|e| match e {
                Error::Timeout(..) => Error::Timeout(self.timeout, WHAT),
                e => e,
            })?;
            // While replies are owed, every arrival is one of them (dropped), and
            // send and READ completions bring nothing: only a failure is news.
            if let Some(Err(e)) = self.arrival(c, WHAT) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The next message or data immediate if one has come, without waiting: what a
    /// client with several requests in flight on one thread polls (see
    /// [`crate::client::Client::get_start`]).
    pub(crate) fn poll_arrival(&mut self, what: &'static str) -> Result<Option<Arrival>> {
        self.repost()?;
        while let Some(c) = self.poll_one() {
            if let Some(arrival) = self.arrival(c, what) {
                return arrival.map(Some);
            }
        }
        Ok(None)
    }

    /// The next completion if there is one, without waiting.
    fn poll_one(&mut self) -> Option<Completion> {
        self.polled.clear();
        self.cq.poll(&mut self.polled, 1);
        self.polled.pop()
    }

    /// What completion `c` brought: `None` for a send's completion, else the message
    /// or data immediate (its receive slot goes back to the ring).
    fn arrival(&mut self, c: Completion, what: &'static str) -> Option<Result<Arrival>> {
        if !c.status.is_ok() {
            return Some(Err(self.lost(what, &c)));
        }
        if c.wr_id & WR_SEND != 0 {
            return None;
        }
        let slot = c.wr_id;
        // The late reply to a request given up on answers nothing: its slot goes back
        // unread (`buf` may hold what the request in flight is using).
        let stale = self.stale > 0;
        self.stale -= u32::from(stale);
        let arrival = (!stale).then(|| match (c.opcode, c.imm) {
            (WcOpcode::RecvWithImm, Some(imm)) => Ok(Arrival::Data(DataImm::decode(imm))),
            (WcOpcode::Recv, _) => {
                self.buf.resize(c.byte_len as usize, 0);
                match self.recv_mr.read(slot * self.recv_size as u64, &mut self.buf) {
                    Err(e) => Err(e),
                    // Leave the (possibly large) entry where it is: no second copy.
                    Ok(()) if crate::wire::is_rpc_value(&self.buf) && self.buf.len() >= RPC_VALUE_OFF => {
                        Ok(Arrival::RpcValue(self.buf.len() - RPC_VALUE_OFF))
                    }
                    Ok(()) => Msg::decode(&self.buf).map(|(m, _)| Arrival::Msg(m)),
                }
            }
            (op, _) => Err(Error::Protocol(format!("unexpected completion {op:?}"))),
        });
        // The slot goes back with the next wait (see `repost`).
        self.unposted.push(slot);
        arrival
    }

    /// Posts the consumed receive slots again once a pair of them is waiting; every
    /// wait or poll for an arrival begins with it. Pairs: one request is in flight at
    /// a time, so two of the four stay posted, and a pair shares the ring's cache
    /// lines. At the wait, not when the reply came: the post writes ring lines the
    /// server's CPU read last, and the store fence its lock ends with waits for them;
    /// after the next request is sent, that wait overlaps the wait for its reply
    /// instead of lengthening the operation. YCSB-B 2 KiB over shm, interleaved pairs
    /// with the CPU round trip the same before and after both runs: 15 pairs at 1, 4
    /// and 16 threads, 14 faster, median +5% (0.985x to 1.15x).
    fn repost(&mut self) -> Result<()> {
        if self.unposted.len() < REPOST_BATCH {
            return Ok(());
        }
        // One chained post (verbs: one `ibv_post_recv`) for the pair.
        let size = self.recv_size;
        let mut bufs = [(0u64, 0u64, 0u32); REPOST_BATCH];
        for (b, &s) in bufs.iter_mut().zip(&self.unposted) {
            *b = (s, s * size as u64, size);
        }
        self.unposted.clear();
        self.qp.post_recv_batch(&self.recv_mr, &bufs)
    }

    /// The error for a failed completion while waiting for `what`.
    fn lost(&self, what: &'static str, c: &Completion) -> Error {
        let why = self.qp.error_reason().unwrap_or_else(|| c.status.to_string());
        Error::ConnectionLost { during: what, why }
    }

    /// Waits for the completion of this side's work request `wr` (a READ), skipping
    /// the completions of earlier sends.
    fn wait_completion(&mut self, wr: u64, what: &'static str) -> Result<()> {
        loop {
            let c = self.cq.wait(self.timeout).map_err(|e| match e {
                Error::Timeout(d, _) => Error::Timeout(d, what),
                e => e,
            })?;
            if self.completed(c, wr, what)? {
                return Ok(());
            }
        }
    }

    /// Whether `c` completes this side's work request `wr`; an earlier send's is
    /// skipped. No message is due while a READ is out: one that comes anyway (a late
    /// reply, or a server's unasked SEND) gives its receive slot back and is an error,
    /// not dropped with its slot.
    fn completed(&mut self, c: Completion, wr: u64, what: &'static str) -> Result<bool> {
        if !c.status.is_ok() {
            return Err(self.lost(what, &c));
        }
        if c.wr_id == wr {
            return Ok(true);
        }
        match self.arrival(c, what) {
            None => Ok(false),
            Some(Err(e)) => Err(e),
            Some(Ok(_)) => Err(Error::Protocol(format!("a message came while {what} was waiting for a READ"))),
        }
    }

    /// Waits for the next control message; a server error comes back as its typed error.
    pub(crate) fn wait_msg(&mut self, what: &'static str) -> Result<Msg> {
        message(what, self.wait_arrival(what)?)
    }

    /// Sends `m` (the request), without waiting.
    pub(crate) fn send(&mut self, m: &Msg) -> Result<()> {
        self.send_encoded(|req, b| m.encode_into(req, b))
    }

    /// Sends the request `encode` writes into the (cleared) buffer for request id `req`.
    pub(crate) fn send_encoded(&mut self, encode: impl FnOnce(u32, &mut Vec<u8>)) -> Result<()> {
        let req = self.req();
        let mut b = std::mem::take(&mut self.buf);
        encode(req, &mut b);
        if b.len() > self.limits.server_recv as usize {
            let len = b.len() as u64;
            self.buf = b;
            return Err(Error::TooLarge { what: "request", len, limit: self.limits.server_recv as u64 });
        }
        let wr = self.wr();
        let r = self.qp.post_send_bytes_unsignaled(wr, &b);
        self.buf = b;
        r.map_err(|e| self.broken("sending a request", e))
    }

    /// A post that failed because the connection is gone is [`Error::ConnectionLost`]
    /// (fatal: no later request on this link can succeed); others stay as they are.
    fn broken(&self, during: &'static str, e: Error) -> Error {
        match self.qp.error_reason() {
            Some(why) if self.qp.is_error() => Error::ConnectionLost { during, why },
            _ => e,
        }
    }

    /// Sends `m` and waits for the reply; a server error comes back as its typed error.
    pub(crate) fn call(&mut self, m: &Msg, what: &'static str) -> Result<Msg> {
        self.send(m)?;
        self.wait_msg(what)
    }

    /// Encodes an entry into the entry buffer; returns its length.
    pub(crate) fn encode_entry(&mut self, key: &[u8], value: &[u8], tomb: bool, next: u64) -> Result<usize> {
        let len = ENTRY_HEADER_SIZE as usize + key.len() + value.len();
        self.buf.resize(len, 0);
        fmt::encode_entry(&mut self.buf, key, value, tomb, next)?;
        self.entry_room(len)?;
        self.entry_mr.write(0, &self.buf)?;
        Ok(len)
    }

    /// Makes the entry buffer at least `len` bytes (a power of two).
    fn entry_room(&mut self, len: usize) -> Result<()> {
        if (self.entry_mr.len() as usize) < len {
            self.entry_mr = self.t.alloc_mr(len.next_power_of_two(), Access::NONE)?;
        }
        Ok(())
    }

    /// WRITE_WITH_IMMs the first `len` bytes of the entry buffer to `addr` under `rkey`.
    pub(crate) fn write_entry(&mut self, len: usize, addr: u64, rkey: u32, imm: u32) -> Result<()> {
        let wr = self.wr();
        self.qp.post_write_imm(wr, &self.entry_mr, 0, len as u32, addr, rkey, imm).map_err(|e| self.broken("a PUT", e))
    }

    /// Stores `version` and `seal` into the entry in the entry buffer (the server gave
    /// them before the entry was written: RDMP-CC).
    pub(crate) fn seal_entry(&mut self, version: u64, seal: u64) -> Result<()> {
        let mut w = [0u8; 16];
        w[..8].copy_from_slice(&version.to_le_bytes());
        w[8..].copy_from_slice(&seal.to_le_bytes());
        debug_assert_eq!(fmt::ENTRY_SEAL_OFF, fmt::ENTRY_VERSION_OFF + 8);
        self.entry_mr.write(fmt::ENTRY_VERSION_OFF, &w)
    }

    /// WRITEs (unsignaled, no immediate: nothing runs at the target) the first `len`
    /// bytes of the entry buffer to `addr` under `rkey`.
    pub(crate) fn write_entry_quiet(&mut self, len: usize, addr: u64, rkey: u32) -> Result<()> {
        let wr = self.wr();
        self.qp.post_write(wr, &self.entry_mr, 0, len as u32, addr, rkey, false).map_err(|e| self.broken("a PUT", e))
    }

    /// FLUSHes `[addr, addr + len)` under `rkey` (every WRITE posted before it on this
    /// queue pair reaches the target's persistence domain) and waits for it.
    pub(crate) fn flush_remote(&mut self, addr: u64, rkey: u32, len: u32, what: &'static str) -> Result<()> {
        let wr = self.wr();
        self.qp.post_flush(wr, addr, rkey, len).map_err(|e| self.broken(what, e))?;
        self.wait_completion(wr, what)
    }

    /// Compare-and-swap of the 8-byte word at the peer's `addr` under `rkey`: it becomes
    /// `swap` if it equals `compare`; with `flush`, a FLUSH of the word is posted with it
    /// (one round trip: the word is durable when this returns). `before`: words (under
    /// the same `rkey`) FLUSHed ahead of it in the same round trip. Waits; returns the
    /// word's previous value.
    pub(crate) fn compare_swap(
        &mut self,
        (addr, rkey): (u64, u32),
        compare: u64,
        swap: u64,
        flush: bool,
        before: &[u64],
        what: &'static str,
    ) -> Result<u64> {
        // A long list goes first in batches of its own (the send queue is bounded).
        let split = before.len().saturating_sub(Self::FLUSH_BATCH);
        self.flush_words(&before[..split], rkey, what)?;
        for &w in &before[split..] {
            let fwr = self.wr();
            self.qp.post_flush(fwr, w, rkey, 8).map_err(|e| self.broken(what, e))?;
        }
        self.grow_response(8)?;
        let wr = self.wr();
        self.qp.post_compare_swap(wr, &self.resp_mr, 0, addr, rkey, compare, swap).map_err(|e| self.broken(what, e))?;
        let last = if flush {
            let fwr = self.wr();
            self.qp.post_flush(fwr, addr, rkey, 8).map_err(|e| self.broken(what, e))?;
            fwr
        } else {
            wr
        };
        // Completions come in order: waiting for the compare-and-swap passes the FLUSHes
        // posted before it (an error in any of them is returned).
        self.wait_completion(wr, what)?;
        if last != wr {
            self.wait_completion(last, what)?;
        }
        let mut w = [0u8; 8];
        self.resp_mr.read(0, &mut w)?;
        Ok(u64::from_le_bytes(w))
    }

    /// Whether a compare-and-swap of `compare` to `swap` that returned `old` took effect,
    /// for a `swap` word only this client ever installs: `old == compare`, or
    /// `old == swap`, the request executed twice (a retransmission the device ran again;
    /// soft-RoCE does under load) and the second run seeing the first's result. Counted
    /// in [`ClientCounters::cas_replays`].
    pub(crate) fn cas_took_effect(&mut self, old: u64, compare: u64, swap: u64) -> bool {
        if old == compare {
            return true;
        }
        let replayed = old == swap;
        self.counters.cas_replays += u64::from(replayed);
        replayed
    }

    /// FLUSHes posted together before one wait (a bound on what is in flight).
    const FLUSH_BATCH: usize = 16;

    /// FLUSHes of the 8-byte words at `words` under `rkey`, posted in batches of
    /// [`Link::FLUSH_BATCH`]; waits for each batch's last.
    pub(crate) fn flush_words(&mut self, words: &[u64], rkey: u32, what: &'static str) -> Result<()> {
        for batch in words.chunks(Self::FLUSH_BATCH) {
            let mut last = 0;
            for &w in batch {
                last = self.wr();
                self.qp.post_flush(last, w, rkey, 8).map_err(|e| self.broken(what, e))?;
            }
            self.wait_completion(last, what)?;
        }
        Ok(())
    }

    /// WRITEs the 8-byte `word` to the peer's `addr` under `rkey` from the entry buffer
    /// (whose entry must have landed: a FLUSH or a completion after its WRITE) and
    /// waits for the completion.
    pub(crate) fn write_word(&mut self, word: u64, addr: u64, rkey: u32, what: &'static str) -> Result<()> {
        self.entry_mr.write(0, &word.to_le_bytes())?;
        let wr = self.wr();
        self.qp.post_write(wr, &self.entry_mr, 0, 8, addr, rkey, true).map_err(|e| self.broken(what, e))?;
        self.wait_completion(wr, what)
    }

    /// Stores `version` and the cell check into the entry in the entry buffer (`len`
    /// bytes, encoded for cell `cell`: pDPM-Direct).
    pub(crate) fn seal_cell_entry(&mut self, cell: u64, version: u64) -> Result<()> {
        crate::log::cells::seal_slot(&mut self.buf, cell, version)?;
        self.entry_mr.write(0, &self.buf[..fmt::ENTRY_SEAL_OFF as usize + 8])
    }

    /// Encodes a Clover version (a zero `next` word, then the entry with `version` and
    /// its check for arena offset `off`) into `buf` and the entry buffer; returns its
    /// length.
    pub(crate) fn encode_version(
        &mut self,
        off: u64,
        key: &[u8],
        value: &[u8],
        tomb: bool,
        version: u64,
    ) -> Result<usize> {
        let next = crate::log::clover::NEXT_LEN as usize;
        let len = next + ENTRY_HEADER_SIZE as usize + key.len() + value.len();
        self.buf.resize(len, 0);
        self.buf[..next].fill(0);
        fmt::encode_entry(&mut self.buf[next..], key, value, tomb, 0)?;
        crate::log::clover::seal_version(&mut self.buf[next..], off, version)?;
        self.entry_room(len)?;
        self.entry_mr.write(0, &self.buf)?;
        Ok(len)
    }

    /// Gives the encoded version at arena offset `off` (address `addr`) a new
    /// `version` (a retry after another writer linked first): its version word and
    /// check are rewritten in the entry buffer (from the checksum there: `buf` may
    /// hold other versions read since) and WRITTEN there (unsignaled).
    pub(crate) fn reseal_version(&mut self, off: u64, version: u64, addr: u64, rkey: u32) -> Result<()> {
        let next = crate::log::clover::NEXT_LEN;
        let mut c = [0u8; 4];
        self.entry_mr.read(next + fmt::ENTRY_CHECKSUM_OFF, &mut c)?;
        let check = crate::log::clover::version_check(off, version, u32::from_le_bytes(c));
        let mut w = [0u8; 16];
        w[..8].copy_from_slice(&version.to_le_bytes());
        w[8..].copy_from_slice(&check.to_le_bytes());
        let at = next + fmt::ENTRY_VERSION_OFF;
        self.entry_mr.write(at, &w)?;
        let wr = self.wr();
        self.qp
            .post_write(wr, &self.entry_mr, at, 16, addr + at, rkey, false)
            .map_err(|e| self.broken("a Clover retry", e))
    }

    /// WRITEs the 8-byte `word` to `addr` without waiting (from its own buffer, which
    /// the next call reuses only after a waited request on this queue pair).
    pub(crate) fn write_word_quiet(&mut self, word: u64, addr: u64, rkey: u32) -> Result<()> {
        self.word_mr.write(0, &word.to_le_bytes())?;
        let wr = self.wr();
        self.qp.post_write(wr, &self.word_mr, 0, 8, addr, rkey, false).map_err(|e| self.broken("a shortcut", e))
    }

    /// Two READs posted together (one round trip): `a` (len, addr) into `buf`, `b`
    /// (len, addr) returned; both under `rkey`.
    pub(crate) fn read_pair(&mut self, a: (u32, u64), b: (u32, u64), rkey: u32, what: &'static str) -> Result<Vec<u8>> {
        let p = self.post_read_pair(a, b, rkey, what)?;
        self.wait_completion(p.wa, what)?;
        self.wait_completion(p.wb, what)?;
        self.pair_read(&p)
    }

    /// Posts [`Link::read_pair`]'s two READs without waiting, for [`Link::poll_pair`].
    pub(crate) fn post_read_pair(
        &mut self,
        a: (u32, u64),
        b: (u32, u64),
        rkey: u32,
        what: &'static str,
    ) -> Result<PairRead> {
        let second = u64::from(a.0).div_ceil(64) * 64;
        self.grow_response(second + u64::from(b.0))?;
        let wa = self.wr();
        self.qp.post_read(wa, &self.resp_mr, 0, a.0, a.1, rkey).map_err(|e| self.broken(what, e))?;
        let wb = self.wr();
        self.qp.post_read(wb, &self.resp_mr, second, b.0, b.1, rkey).map_err(|e| self.broken(what, e))?;
        Ok(PairRead { wa, wb, second, lens: (a.0, b.0), a_done: false })
    }

    /// [`Link::read_pair`]'s answer once both READs of `p` have completed (`None`:
    /// not yet); polls without waiting.
    pub(crate) fn poll_pair(&mut self, p: &mut PairRead, what: &'static str) -> Result<Option<Vec<u8>>> {
        if !p.a_done {
            if !self.poll_completion(p.wa, what)? {
                return Ok(None);
            }
            p.a_done = true;
        }
        if !self.poll_completion(p.wb, what)? {
            return Ok(None);
        }
        self.pair_read(p).map(Some)
    }

    /// What the two READs of `p` brought: the first into `buf`, the second returned.
    fn pair_read(&mut self, p: &PairRead) -> Result<Vec<u8>> {
        let mut out = vec![0u8; p.lens.1 as usize];
        self.resp_mr.read(p.second, &mut out)?;
        self.take_response(p.lens.0 as usize)?;
        Ok(out)
    }

    /// WRITEs `m` as polled slot `seq` with protocol word `word` ([`crate::wire::slot`];
    /// RFP's result mode, HERD's 0) into the peer's request
    /// region at `addr` (`cap` bytes) under `rkey`, unsignaled (HERD, RFP): the reply
    /// tells that it landed, and the buffer is not reused before the reply.
    pub(crate) fn write_slot(&mut self, seq: u32, word: u32, m: &Msg, addr: u64, rkey: u32, cap: u32) -> Result<()> {
        use crate::wire::slot;
        let req = self.req();
        let mut b = std::mem::take(&mut self.buf);
        m.encode_into(req, &mut b);
        let total = slot::HEADER + b.len();
        if total > cap as usize {
            self.buf = b;
            return Err(Error::TooLarge { what: "request", len: total as u64, limit: cap as u64 });
        }
        let h = slot::encode(seq, word, &b);
        let r = self.entry_room(total);
        if let Err(e) = r {
            self.buf = b;
            return Err(e);
        }
        let r = self.entry_mr.write(0, &h).and_then(|()| self.entry_mr.write(slot::HEADER as u64, &b));
        self.buf = b;
        r?;
        let wr = self.wr();
        self.qp
            .post_write(wr, &self.entry_mr, 0, total as u32, addr, rkey, false)
            .map_err(|e| self.broken("a request", e))
    }

    /// One step of the fetch `f` of the reply to request slot `seq` from the peer's
    /// result region with READs (RFP): one READ of `fetch` bytes, a second for the rest
    /// when the reply is longer, again until the slot carries `seq` and verifies. A step
    /// posts the next READ, or (with `wait`, once it completes; else if it has) looks at
    /// what the last one brought. `Some` once the slot is there and verifies: it is left
    /// in `buf`, and this says where its payload starts and its length.
    pub(crate) fn fetch_step(&mut self, f: &mut SlotFetch, wait: bool) -> Result<Option<(usize, usize)>> {
        use crate::wire::slot;
        let Some((wr, second)) = f.out else {
            self.grow_response(u64::from(f.res_len))?;
            let wr = self.wr();
            self.qp.post_read(wr, &self.resp_mr, 0, f.fetch, f.addr, f.rkey).map_err(|e| self.broken("a fetch", e))?;
            f.out = Some((wr, false));
            return Ok(None);
        };
        if wait {
            self.wait_completion(wr, "fetching a reply")?;
        } else if !self.poll_completion(wr, "fetching a reply")? {
            return Ok(None);
        }
        f.out = None;
        // The reply's length: known once the first READ saw the slot's header, which
        // says whether a second READ must fetch the rest.
        let total = if second { Some(f.total) } else { self.slot_len(f)? };
        if let Some(total) = total.filter(|&t| !second && t > u64::from(f.fetch)) {
            let wr = self.wr();
            let rest = (total - u64::from(f.fetch)) as u32;
            let (off, at) = (u64::from(f.fetch), f.addr + u64::from(f.fetch));
            self.qp.post_read(wr, &self.resp_mr, off, rest, at, f.rkey).map_err(|e| self.broken("a fetch", e))?;
            (f.out, f.total) = (Some((wr, true)), total);
            return Ok(None);
        }
        if let Some(total) = total {
            self.take_response(total as usize)?;
            if let Some((hd, _)) = slot::check(&self.buf, f.seq) {
                return Ok(Some((slot::HEADER, hd.len as usize)));
            }
        }
        // Not there yet (or torn under the READ): fetch again, as RFP's client does.
        self.counters.fetch_retries += 1;
        f.tries = f.tries.wrapping_add(1);
        if f.tries % 64 == 0 && f.start.elapsed() > self.timeout {
            return Err(Error::Timeout(self.timeout, "fetching a reply"));
        }
        std::hint::spin_loop();
        Ok(None)
    }

    /// The length of the reply whose header the first READ of `f` brought (header
    /// included), `None` while the slot does not carry `f`'s sequence number yet; a
    /// length over the result region is an error.
    fn slot_len(&self, f: &SlotFetch) -> Result<Option<u64>> {
        use crate::wire::slot;
        let mut h = [0u8; slot::HEADER];
        self.resp_mr.read(0, &mut h)?;
        let Some(hd) = slot::peek(&h).filter(|hd| hd.seq == f.seq) else { return Ok(None) };
        let total = slot::HEADER as u64 + u64::from(hd.len);
        if total > u64::from(f.res_len) {
            return Err(Error::Protocol(format!("a reply of {} bytes over the result region", hd.len)));
        }
        Ok(Some(total))
    }

    /// The median time of `n` READs of `len` bytes at the peer's `addr` (RFP's profiling
    /// of the fetch size).
    pub(crate) fn time_reads(&mut self, len: u32, addr: u64, rkey: u32, n: usize) -> Result<Duration> {
        self.grow_response(u64::from(len))?;
        let mut t = Vec::with_capacity(n);
        for _ in 0..n {
            let s = std::time::Instant::now();
            let wr = self.wr();
            self.qp.post_read(wr, &self.resp_mr, 0, len, addr, rkey).map_err(|e| self.broken("a fetch", e))?;
            self.wait_completion(wr, "profiling READs")?;
            t.push(s.elapsed());
        }
        t.sort();
        Ok(t.get(n / 2).copied().unwrap_or_default())
    }

    /// READs `len` bytes at the peer's `addr` under `rkey` into the response buffer,
    /// waits for it, and copies them into `buf`.
    pub(crate) fn read_remote(&mut self, len: u32, addr: u64, rkey: u32, what: &'static str) -> Result<()> {
        let wr = self.post_read_response(len, addr, rkey, what)?;
        self.wait_completion(wr, what)?;
        self.take_response(len as usize)
    }

    /// Posts a READ of `len` bytes at the peer's `addr` under `rkey` into the start of
    /// the response buffer, without waiting: its work request, for
    /// [`Link::poll_completion`].
    pub(crate) fn post_read_response(&mut self, len: u32, addr: u64, rkey: u32, what: &'static str) -> Result<u64> {
        self.grow_response(u64::from(len))?;
        let wr = self.wr();
        self.qp.post_read(wr, &self.resp_mr, 0, len, addr, rkey).map_err(|e| self.broken(what, e))?;
        Ok(wr)
    }

    /// Whether this side's work request `wr` (a READ) has completed, skipping the
    /// completions of earlier sends; no message may be due meanwhile.
    pub(crate) fn poll_completion(&mut self, wr: u64, what: &'static str) -> Result<bool> {
        while let Some(c) = self.poll_one() {
            if self.completed(c, wr, what)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Makes the response buffer at least `len` bytes (a power of two).
    pub(crate) fn grow_response(&mut self, len: u64) -> Result<()> {
        if len > self.resp_mr.len() {
            let want = (len as usize).next_power_of_two();
            self.resp_mr = self.t.alloc_mr(want, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        }
        Ok(())
    }

    /// Grows the response buffer for an answer the server says needs `len` bytes (a GET
    /// or SCAN that found it too small), up to `limit`. A server that asks for no more
    /// than the buffer already holds, or for more than any answer can need, is not
    /// believed: asking again would loop for ever, and growing would let the server size
    /// the client's memory.
    pub(crate) fn grow_answer(&mut self, len: u32, limit: u64, what: &'static str) -> Result<()> {
        let (len, have) = (u64::from(len), self.resp_mr.len());
        if len <= have {
            return Err(Error::Protocol(format!(
                "the server found the {have}-byte response buffer too small for {len} bytes of {what} data"
            )));
        }
        if len > limit {
            return Err(Error::Protocol(format!(
                "the server asked for {len} bytes of response buffer for a {what}; its limits allow {limit}"
            )));
        }
        self.grow_response(len)
    }

    /// The most a GET's entry can need: the longest GET reply a server with the
    /// announced largest value sends ([`crate::wire::max_get_bytes`]; more than one
    /// entry with that value, so an entry written under a larger limit before the
    /// server restarted is still read), and never more than one transfer carries
    /// ([`crate::transport::MAX_MESSAGE`]): a server announcing 4 GiB values would
    /// otherwise size a client's buffer at 8 GiB.
    pub(crate) fn get_room(&self) -> u64 {
        crate::wire::max_get_bytes(self.limits.max_value).min(u64::from(crate::transport::MAX_MESSAGE))
    }

    /// Copies the first `len` bytes of the response buffer into `buf`.
    pub(crate) fn take_response(&mut self, len: usize) -> Result<()> {
        // The length may come from the server: never size `buf` past the region.
        if len as u64 > self.resp_mr.len() {
            return Err(Error::Protocol(format!(
                "the server answered with {len} bytes; the response buffer has {}",
                self.resp_mr.len()
            )));
        }
        self.buf.resize(len, 0);
        self.resp_mr.read(0, &mut self.buf)
    }

    /// The value of the `len`-byte entry of `key` at the start of the response region,
    /// into `out`: the header and key are copied into `buf`, the value straight into
    /// `out`, and both checked against the entry's checksum there (the peer may still
    /// write the region: only private copies are trusted). False if the entry is torn
    /// or another key's.
    pub(crate) fn response_value(&mut self, len: usize, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let head = ENTRY_HEADER_SIZE as usize + key.len();
        if len < head || len as u64 > self.resp_mr.len() {
            return Ok(false);
        }
        self.buf.resize(head, 0);
        self.resp_mr.read(0, &mut self.buf)?;
        let Ok(h) = fmt::EntryHeader::decode(&self.buf) else { return Ok(false) };
        if h.entry_len() as usize != len || h.key_len as usize != key.len() || &self.buf[head - key.len()..] != key {
            return Ok(false);
        }
        // Resizing a buffer that already holds a value of this size writes nothing.
        out.resize(len - head, 0);
        self.resp_mr.read(head as u64, out)?;
        Ok(fmt::entry_checksum_parts(&self.buf, out) == h.checksum)
    }
}

/// The message an arrival during `what` brought (a server's refusal as its error).
pub(crate) fn message(what: &'static str, a: Arrival) -> Result<Msg> {
    match a {
        Arrival::Msg(Msg::Error { code, message }) => Err(Error::Server { code, message }),
        Arrival::Msg(m) => Ok(m),
        Arrival::Data(_) | Arrival::RpcValue(_) => Err(Error::Protocol(format!("unexpected data during {what}"))),
    }
}

/// Checks the entry at `buf[start..start + n]` (from the response region or a message)
/// and extracts the value into `out`; false if torn or not `key`'s.
pub(crate) fn decode_value(buf: &[u8], key: &[u8], start: usize, n: usize, out: &mut Vec<u8>) -> bool {
    let Some(e) = buf.get(start..start + n) else { return false };
    let Ok(h) = fmt::EntryHeader::decode(e) else { return false };
    if h.entry_len() as usize != n || fmt::entry_checksum(e) != h.checksum {
        return false;
    }
    let k = &e[ENTRY_HEADER_SIZE as usize..][..h.key_len as usize];
    if k != key {
        // The slot was reused under us (cleaned or rewritten): read again.
        return false;
    }
    out.clear();
    crate::pmem::extend_bytes(out, &e[ENTRY_HEADER_SIZE as usize + key.len()..]);
    true
}
