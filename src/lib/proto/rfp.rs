//! Remote fetching (RFP; Su et al., EuroSys'17, "RFP: When RPC is Faster than
//! Server-Bypass with RDMA"): the client WRITEs its request into server memory, the
//! server polls, processes and leaves the result in a result buffer it owns, and the
//! client fetches the result with READs. The server's NIC only ever serves inbound
//! operations (the paper's point: a NIC's inbound rate is several times its outbound
//! rate).
//!
//! # The design
//!
//! The result buffer starts with a header (ready flag, size, the server's processing
//! time). *Hybrid fetching*: the client READs a fixed fetch size (FS) that covers the
//! header and most results; a result larger than FS takes a second READ of the rest; a
//! result not ready yet is READ again. FS comes from a profiling step: the paper reads
//! the NIC's READ latency over sizes and takes the largest size before it rises.
//! *Hybrid transfer*: a client whose fetches keep finding nothing (the server takes
//! long) switches to server-reply, where the server sends the result; it switches back
//! when results come quickly again. The paper's client switches after N > 1 calls in a
//! row each fetched T = 5 times in vain (one slow call, the long tail, does not switch)
//! and back when the result header's processing time gets short.
//!
//! # What is reproduced
//!
//! - **Requests**: one unsignaled WRITE of a [`crate::wire::slot`] into the client's
//!   request region, which the server polls (`proto::polled`), as HERD's.
//! - **Results**: one [`crate::wire::slot`] at the start of a per-client result region in
//!   server DRAM, readable by that client alone: sequence number (the ready flag: the
//!   request's number), size, the server's processing time in ns, CRC; then the reply
//!   message. A GET's entry is copied PM -> result region once (RDMA-KV's PM -> DRAM
//!   copy); a PUT's entry DRAM -> PM once, committed as every protocol's is.
//! - **Hybrid fetching**: READ FS bytes; if the slot carries the request's number and
//!   is longer than FS, READ the rest; if it carries an older number, READ FS again
//!   (counted: [`crate::link::ClientCounters::fetch_retries`]). So a PUT or GET is one
//!   WRITE and one or two READs when the result is ready at the first fetch.
//! - **FS** (`--fetch-size auto|BYTES`, [`FetchSize`]): `auto` times 16 READs of 64 B,
//!   128 B .. 4 KiB of the result region when the client connects and takes the
//!   largest size whose median is within 15% (+50 ns) of the 64 B median: where this
//!   transport's READ latency stops being flat. A `--rfp-mode reply` client, which
//!   never fetches, times nothing.
//! - **Hybrid transfer** (`--rfp-mode hybrid`, the default; [`ResultMode`]): after
//!   [`SWITCH_STREAK`] (2) requests in a row that each took [`VAIN_FETCHES`] (5) or more
//!   vain fetches, the client's requests ask for server-reply; the server then answers
//!   as RDMA-KV's does (a GET's entry copied PM -> DRAM and SENT), counted in
//!   [`crate::link::ClientCounters::server_replies`]. After 2 replies in a row that came
//!   sooner than 5 READs of FS bytes take (timed at connect), it fetches again.
//!   `--rfp-mode fetch` and `reply` fix either way, for comparing them.
//!
//! # What differs, and why
//!
//! - The ready flag is the request's sequence number, and the client believes a result
//!   only when the slot's CRC verifies (the message and entry headers; the entry's own
//!   checksum covers its value): a READ may overlap the server's writing, and nothing
//!   in `shm` or `tcp` orders the bytes of one copy.
//! - Polling and region setup as [`super::herd`] (a worker parks for at most 50 us after
//!   2 ms of quiet; one SEND round trip sets the regions up on the first request).
//! - The mode travels in each request (the slot's protocol word: 0 fetch, 1 reply;
//!   any other value is a protocol error that closes the connection), not in a flag
//!   the client WRITEs apart and the server re-reads every microsecond: a switch takes
//!   effect from the next request, so the server never answers a request in a mode
//!   the client no longer waits in, and a result never arrives twice.
//! - Switching back: the paper's client watches the server's processing time in the
//!   result header. A request here waits mostly in the server's queue, which the
//!   processing time does not see (over `shm` a READ is a local copy taking a fraction
//!   of a microsecond, so five are over before a busy worker polls the request), so
//!   the client times the reply's whole round trip instead.
//! - Server-reply results are SENT (into the client's receive buffers, as HERD's and
//!   RDMA-KV's replies are), not WRITTEN into a client buffer the client polls.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::polled::{next_seq, RequestRing, Rings};
use super::{rpc, ClientSide, Fetched, ServerSide};
use crate::error::{Error, Result};
use crate::link::{Arrival, Link, PutInfo, SlotFetch, RPC_VALUE_OFF};
use crate::service::context::FetchedReplies;
use crate::service::phases::GetTimer;
use crate::service::Ctx;
use crate::transport::{Access, Transport};
use crate::wire::{is_rpc_put, is_rpc_value, ErrorCode, Msg};

/// The fetch size: measured when the client connects, or given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FetchSize {
    /// Profile the READ latency and take its knee (see the module doc).
    #[default]
    Auto,
    /// This many bytes (at least a slot header, at most the result region).
    Bytes(u32),
}

impl std::str::FromStr for FetchSize {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(FetchSize::Auto);
        }
        let n = crate::units::parse_bytes(s).map_err(|e| format!("fetch size '{s}': {e} (or auto)"))?;
        match u32::try_from(n) {
            Ok(n) if n >= crate::wire::slot::HEADER as u32 => Ok(FetchSize::Bytes(n)),
            _ => Err(format!("fetch size '{s}': between {} bytes and 4 GiB, or auto", crate::wire::slot::HEADER)),
        }
    }
}

/// How results come back ([`ClientOptions`](crate::client::ClientOptions)`::rfp_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResultMode {
    /// The paper's hybrid: fetch, and switch to server-reply after [`SWITCH_STREAK`]
    /// requests in a row fetched in vain [`VAIN_FETCHES`] times or more; back to
    /// fetching after as many server replies in a row came within what that many
    /// fetches take.
    #[default]
    Hybrid,
    /// Always fetch (remote fetching alone).
    Fetch,
    /// Always let the server send the result (server-reply alone).
    Reply,
}

impl ResultMode {
    /// Every mode.
    pub const ALL: [ResultMode; 3] = [ResultMode::Hybrid, ResultMode::Fetch, ResultMode::Reply];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            ResultMode::Hybrid => "hybrid",
            ResultMode::Fetch => "fetch",
            ResultMode::Reply => "reply",
        }
    }
}

impl std::str::FromStr for ResultMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        ResultMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("RFP result mode '{s}': expected hybrid, fetch or reply"))
    }
}

/// Fetches of one request that found no result before the client counts the request
/// as fetched in vain (the paper's T: 5).
pub const VAIN_FETCHES: u32 = 5;
/// Requests in a row that decide a switch (the paper's N > 1: one slow call, the long
/// tail, does not switch).
pub const SWITCH_STREAK: u32 = 2;

/// The request slot's protocol word: where the result goes.
const WORD_FETCH: u32 = 0;
const WORD_REPLY: u32 = 1;

/// The hybrid's decision, request by request (pure, so it is tested alone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Switch {
    /// Results come by server reply now.
    replying: bool,
    /// Requests in a row that spoke for switching.
    streak: u32,
}

impl Switch {
    fn vote(&mut self, for_switch: bool) {
        self.streak = if for_switch { self.streak + 1 } else { 0 };
        if self.streak >= SWITCH_STREAK {
            self.replying = !self.replying;
            self.streak = 0;
        }
    }

    /// A fetched request: `vain` fetches found nothing.
    fn fetched(&mut self, vain: u64) {
        self.vote(vain >= u64::from(VAIN_FETCHES));
    }

    /// A server-reply request whose result came `after` the request was posted; fetching
    /// would have found it within [`VAIN_FETCHES`] READs of `read` each if `after` is
    /// shorter than those.
    fn replied(&mut self, after: Duration, read: Duration) {
        self.vote(after < read * VAIN_FETCHES);
    }
}

// ---- server side ----

/// RFP's server half: the polled request region, the result region, and RDMA-KV's
/// request handling for requests in server-reply mode.
pub(crate) struct Server<T: Transport> {
    ring: Option<RequestRing<T>>,
    results: Option<FetchedReplies<T>>,
    rpc: rpc::Server<T>,
}

impl<T: Transport> Server<T> {
    pub(crate) fn new(t: &T) -> Result<Server<T>> {
        Ok(Server { ring: None, results: None, rpc: rpc::Server::new(t)? })
    }
}

/// GET: the entry copied PM -> the result region.
fn get<T: Transport>(cx: &mut Ctx<'_, T>, key: &[u8], req: u32) -> Result<()> {
    let (found, timer) = cx.lookup_read(key);
    let Some((loc, read)) = found else { return cx.reply(&Msg::NotFound, req) };
    let mut h = Msg::RpcValue { entry: Vec::new() }.encode(req);
    if let Some(why) = rpc::over_one_reply(h.len(), loc.len) {
        cx.sh.end_read(read);
        return cx.refuse(req, ErrorCode::TooLarge, why);
    }
    let n = h.len();
    h[n - 4..].copy_from_slice(&loc.len.to_le_bytes());
    let src = cx.pool().pool_offset(loc.segment as u64, loc.offset as u64);
    let copied = match cx.conn.fetched.as_mut() {
        Some(f) => f.put_entry(&h, cx.sh.pool.media().map(), src, loc.len as usize),
        None => Err(Error::Protocol("a GET outside a fetched request".into())),
    };
    // The entry is in the result region now (or not at all).
    cx.sh.end_read(read);
    copied?;
    cx.counters().gets.fetch_add(1, Ordering::Relaxed);
    cx.counters().bytes_out.fetch_add(loc.len as u64, Ordering::Relaxed);
    GetTimer::posted(timer, cx.phases());
    Ok(())
}

/// One polled request, its replies left in the result region.
fn serve<T: Transport>(cx: &mut Ctx<'_, T>, raw: &[u8]) -> Result<()> {
    if is_rpc_put(raw) {
        return rpc::put(cx, &raw[rpc::RPC_PUT_OFF.min(raw.len())..]);
    }
    let (m, req) = Msg::decode(raw)?;
    match m {
        Msg::RpcGet { key } => get(cx, &key, req),
        m => cx.common(m, req),
    }
}

impl<T: Transport> ServerSide<T> for Server<T> {
    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::RingsReq => {
                if self.ring.is_none() {
                    self.ring = Some(RequestRing::new(cx)?);
                    let mr = cx.private_region(super::polled::REGION, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
                    self.results = Some(FetchedReplies { mr, seq: 0, since: Instant::now() });
                }
                let (Some(q), Some(r)) = (&self.ring, &self.results) else {
                    return Err(Error::Protocol("no regions".into()));
                };
                let m = Rings::describe(q.region(), Some(&r.mr));
                cx.reply(&m, req)
            }
            m => cx.common(m, req),
        }
    }

    fn poll(&mut self, cx: &mut Ctx<'_, T>) -> Result<bool> {
        let Server { ring, results, rpc } = self;
        let Some(ring) = ring.as_mut() else { return Ok(false) };
        let Some((hd, raw)) = ring.poll()? else { return Ok(false) };
        match hd.word {
            WORD_FETCH => {}
            // Server-reply: RDMA-KV's handling, the result SENT.
            WORD_REPLY => return rpc.on_receive(cx, raw).map(|()| true),
            w => return Err(Error::Protocol(format!("a request slot with result mode {w} (0 fetch, 1 reply)"))),
        }
        let Some(mut f) = results.take() else { return Err(Error::Protocol("no result region".into())) };
        (f.seq, f.since) = (hd.seq, Instant::now());
        // Replies of this request go to the result region (Ctx::reply), not a SEND.
        cx.conn.fetched = Some(f);
        let r = serve(cx, raw);
        *results = cx.conn.fetched.take();
        r.map(|()| true)
    }

    fn polls(&self) -> bool {
        self.ring.is_some()
    }
}

// ---- client side ----

/// RFP's client half: its regions, the next sequence number, the fetch size, and the
/// hybrid's state.
pub(crate) struct Client {
    rings: Option<Rings>,
    seq: u32,
    want: FetchSize,
    fetch: u32,
    mode: ResultMode,
    switch: Switch,
    /// The median READ of `fetch` bytes, timed at connect (the hybrid's yardstick).
    read: Duration,
    /// How the result of the split request in flight comes back; or of the request
    /// that timed out unanswered, which the next one settles first.
    pending: Option<Via>,
}

/// How the result of a request comes back.
enum Via {
    /// Fetched by READs: this fetch, begun when the fetch retries stood at the count.
    Fetch(SlotFetch, u64),
    /// The server SENDs it; the request was posted at this instant (timed only by
    /// the hybrid).
    Sent(Option<Instant>),
}

/// What a fetched reply `l.buf[at..at + n]` to an RPC GET says: the entry's place in
/// `l.buf`, `None` if the key is absent.
fn fetched_value<T: Transport>(l: &Link<T>, at: usize, n: usize) -> Result<Option<(usize, usize)>> {
    let reply = &l.buf[at..at + n];
    if is_rpc_value(reply) && n >= RPC_VALUE_OFF {
        return Ok(Some((at + RPC_VALUE_OFF, n - RPC_VALUE_OFF)));
    }
    match Msg::decode(reply)?.0 {
        Msg::NotFound => Ok(None),
        Msg::Error { code, message } => Err(Error::Server { code, message }),
        m => Err(Error::Protocol(format!("expected a value, got {m:?}"))),
    }
}

impl Client {
    pub(crate) fn new(want: FetchSize, mode: ResultMode) -> Client {
        let switch = Switch { replying: mode == ResultMode::Reply, streak: 0 };
        Client { rings: None, seq: 0, want, fetch: 0, mode, switch, read: Duration::ZERO, pending: None }
    }

    /// The knee of the READ latency over the result region (see the module doc), and
    /// the median READ at that size.
    fn profile<T: Transport>(l: &mut Link<T>, r: &Rings) -> Result<(u32, Duration)> {
        let mut base = None;
        let mut best = (64u32.min(r.res_len), Duration::ZERO);
        for size in [64u32, 128, 256, 512, 1024, 2048, 4096] {
            if size > r.res_len {
                break;
            }
            let t = l.time_reads(size, r.res_addr, r.res_rkey, 16)?;
            let b = *base.get_or_insert(t);
            if t <= b.mul_f64(1.15) + Duration::from_nanos(50) {
                best = (size, t);
            }
        }
        Ok(best)
    }

    /// WRITEs `m`; says how its reply is to come: fetched, or SENT by the server in
    /// server-reply mode.
    fn post<T: Transport>(&mut self, l: &mut Link<T>, m: &Msg) -> Result<Via> {
        let r = match self.rings {
            Some(r) => r,
            None => {
                let r = Rings::fetch(l, "RFP setup")?;
                if (r.res_len as usize) < crate::wire::slot::HEADER {
                    return Err(Error::Protocol(format!("a result region of {} bytes", r.res_len)));
                }
                // Only the hybrid needs the READ time, and a client that never fetches
                // needs no fetch size: connect does no timing READs it would not use.
                (self.fetch, self.read) = match (self.want, self.mode) {
                    (_, ResultMode::Reply) => (r.res_len, Duration::ZERO),
                    (FetchSize::Bytes(n), ResultMode::Fetch) => (n.min(r.res_len), Duration::ZERO),
                    (FetchSize::Bytes(n), ResultMode::Hybrid) => {
                        let n = n.min(r.res_len);
                        (n, l.time_reads(n, r.res_addr, r.res_rkey, 16)?)
                    }
                    (FetchSize::Auto, _) => Self::profile(l, &r)?,
                };
                *self.rings.insert(r)
            }
        };
        self.settle(l)?;
        // The number is used up only by a request written: the server waits for it.
        let seq = next_seq(self.seq);
        if self.switch.replying {
            // The clock only for the hybrid's vote on switching back.
            let posted = (self.mode == ResultMode::Hybrid).then(Instant::now);
            l.write_slot(seq, WORD_REPLY, m, r.req_addr, r.req_rkey, r.req_len)?;
            self.seq = seq;
            l.counters.server_replies += 1;
            return Ok(Via::Sent(posted));
        }
        l.write_slot(seq, WORD_FETCH, m, r.req_addr, r.req_rkey, r.req_len)?;
        self.seq = seq;
        let f = SlotFetch::new(seq, r.res_addr, r.res_rkey, r.res_len, self.fetch);
        Ok(Via::Fetch(f, l.counters.fetch_retries))
    }

    /// Waits for the result of the request given up on before (it timed out), if any,
    /// and drops it: the request slot is free once the server answered what it holds
    /// (see `polled`). A fetched result is fetched to the end; a SENT one the link
    /// drops when it comes.
    fn settle<T: Transport>(&mut self, l: &mut Link<T>) -> Result<()> {
        if let Some(Via::Fetch(mut f, before)) = self.pending.take() {
            f.restart();
            loop {
                match l.fetch_step(&mut f, true) {
                    Ok(Some(_)) => break,
                    Ok(None) => {}
                    Err(e) => {
                        self.pending = Some(Via::Fetch(f, before));
                        return Err(match e {
                            Error::Timeout(d, _) => Error::Timeout(d, "the reply to an earlier request that timed out"),
                            e => e,
                        });
                    }
                }
            }
        }
        l.settle_abandoned()
    }

    /// Takes the next step of the reply `via` is bringing (with `wait`, steps until the
    /// reply is there): `Some` with the reply once it is, and `via` gone.
    fn step<T: Transport>(
        &mut self,
        l: &mut Link<T>,
        via: &mut Via,
        wait: bool,
        what: &'static str,
    ) -> Result<Option<Reply>> {
        match via {
            Via::Fetch(f, before) => loop {
                if let Some((at, n)) = l.fetch_step(f, wait)? {
                    if self.mode == ResultMode::Hybrid {
                        self.switch.fetched(l.counters.fetch_retries - *before);
                    }
                    return Ok(Some(Reply::Fetched(at, n)));
                }
                if !wait {
                    return Ok(None);
                }
            },
            Via::Sent(posted) => {
                let a = if wait {
                    l.wait_arrival(what)?
                } else {
                    let Some(a) = l.poll_arrival(what)? else { return Ok(None) };
                    a
                };
                self.replied(*posted);
                Ok(Some(Reply::Sent(a)))
            }
        }
    }

    /// WRITEs `m` and waits for its reply.
    fn request<T: Transport>(&mut self, l: &mut Link<T>, m: &Msg, what: &'static str) -> Result<Reply> {
        let mut via = self.post(l, m)?;
        let r = self.step(l, &mut via, true, what);
        if matches!(r, Err(Error::Timeout(..))) {
            // Unanswered: the next request settles it first.
            self.pending = Some(via);
        }
        r?.ok_or_else(|| Error::Protocol(format!("no reply to the {what}")))
    }

    /// The next step of the split request in flight (`None`: its reply is still to come).
    fn poll<T: Transport>(&mut self, l: &mut Link<T>, what: &'static str) -> Result<Option<Reply>> {
        let mut via = self.pending.take().ok_or_else(|| Error::invalid("no request in flight"))?;
        // Kept while unanswered, also after it timed out: the next request settles it.
        // Any other error came with or after the answer: nothing is left to settle.
        let r = self.step(l, &mut via, false, what);
        if matches!(r, Ok(None) | Err(Error::Timeout(..))) {
            self.pending = Some(via);
        }
        r
    }

    /// A server reply came: the hybrid's vote on switching back to fetching.
    fn replied(&mut self, posted: Option<Instant>) {
        if let Some(posted) = posted {
            self.switch.replied(posted.elapsed(), self.read);
        }
    }
}

/// A request's reply.
enum Reply {
    /// Fetched: the reply message is at `l.buf[at..at + n]`.
    Fetched(usize, usize),
    /// SENT by the server.
    Sent(Arrival),
}

/// The reply to a PUT, as a message.
fn put_message<T: Transport>(l: &Link<T>, r: Reply) -> Result<Msg> {
    match r {
        Reply::Fetched(at, n) => Ok(Msg::decode(&l.buf[at..at + n])?.0),
        Reply::Sent(a) => crate::link::message("PUT", a),
    }
}

/// The reply to a GET: the entry's place in `l.buf`, `None` if the key is absent.
fn get_entry<T: Transport>(l: &Link<T>, r: Reply) -> Result<Option<(usize, usize)>> {
    match r {
        Reply::Fetched(at, n) => fetched_value(l, at, n),
        Reply::Sent(a) => rpc::value_of(a),
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let r = self.request(l, &rpc::put_request(key, value, tomb)?, "PUT")?;
        let m = put_message(l, r)?;
        rpc::put_reply(l, m)
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let r = self.request(l, &Msg::RpcGet { key: key.to_vec() }, "GET")?;
        get_entry(l, r)
    }

    fn put_start(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8]) -> Result<Option<PutInfo>> {
        self.pending = Some(self.post(l, &rpc::put_request(key, value, false)?)?);
        Ok(None)
    }

    fn put_poll(&mut self, l: &mut Link<T>, _key: &[u8]) -> Result<Option<PutInfo>> {
        let Some(r) = self.poll(l, "PUT")? else { return Ok(None) };
        let m = put_message(l, r)?;
        rpc::put_reply(l, m).map(Some)
    }

    fn awaits_reply(&self) -> bool {
        matches!(self.pending, Some(Via::Sent(_)))
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        self.pending = Some(self.post(l, &Msg::RpcGet { key: key.to_vec() })?);
        Ok(true)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        let Some(r) = self.poll(l, "GET")? else { return Ok(None) };
        let entry = get_entry(l, r)?;
        Ok(Some(Fetched::in_buf(l, key, entry, out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hybrid_switches_only_after_a_streak() {
        let mut s = Switch::default();
        // The long tail: one request fetched in vain, then a quick one: no switch.
        s.fetched(u64::from(VAIN_FETCHES));
        s.fetched(0);
        s.fetched(u64::from(VAIN_FETCHES) + 3);
        assert!(!s.replying);
        // Two in a row: server-reply from the next request on.
        s.fetched(u64::from(VAIN_FETCHES));
        assert!(s.replying);
        let read = Duration::from_micros(2);
        // Replies slower than five fetches keep it; one quick reply alone does not
        // switch back either.
        s.replied(read * 6, read);
        s.replied(read * 4, read);
        s.replied(read * VAIN_FETCHES, read);
        assert!(s.replying);
        s.replied(read * 4, read);
        s.replied(Duration::from_nanos(1), read);
        assert!(!s.replying);
        assert_eq!(s.streak, 0);
        // Fewer vain fetches than the threshold never switch.
        for _ in 0..100 {
            s.fetched(u64::from(VAIN_FETCHES) - 1);
        }
        assert!(!s.replying);
    }

    #[test]
    fn result_modes_parse_by_name() {
        for m in ResultMode::ALL {
            assert_eq!(m.name().to_uppercase().parse::<ResultMode>(), Ok(m));
        }
        assert!("both".parse::<ResultMode>().unwrap_err().contains("hybrid, fetch or reply"));
    }
}
