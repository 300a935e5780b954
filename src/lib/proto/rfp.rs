//! Remote fetching (RFP; Su et al., EuroSys'17, "Jakiro"; `shared/papers/remote-fetching.txt`):
//! the client WRITEs its request into server memory, the server polls, processes and
//! leaves the result in a result buffer it owns, and the client fetches the result with
//! READs. The server's NIC only ever serves inbound operations (the paper's point: a
//! NIC's inbound rate is several times its outbound rate).
//!
//! # The design
//!
//! The result buffer starts with a header (ready flag, size, the server's processing
//! time). *Hybrid fetching*: the client READs a fixed fetch size (FS) that covers the
//! header and most results; a result larger than FS takes a second READ of the rest; a
//! result not ready yet is READ again. FS comes from a profiling step: the paper reads
//! the NIC's READ latency over sizes and takes the largest size before it rises.
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
//!   transport's READ latency stops being flat.
//!
//! # What differs, and why
//!
//! - The ready flag is the request's sequence number, and the client believes a result
//!   only when the slot's CRC verifies (the message and entry headers; the entry's own
//!   checksum covers its value): a READ may overlap the server's writing, and nothing
//!   in `shm` or `tcp` orders the bytes of one copy.
//! - Polling and region setup as [`super::herd`] (a worker parks for at most 50 us after
//!   2 ms of quiet; one SEND round trip sets the regions up on the first request).
//! - The paper's client falls back to server-reply RPC when it fetches in vain too
//!   often; this one keeps fetching (the fetch retries are counted and reported).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::polled::{next_seq, RequestRing, Rings};
use super::{rpc, ClientSide, ServerSide};
use crate::error::{Error, Result};
use crate::link::{Link, PutInfo, RPC_VALUE_OFF};
use crate::service::context::FetchedReplies;
use crate::service::phases::GetTimer;
use crate::service::Ctx;
use crate::transport::{Access, Transport};
use crate::wire::{is_rpc_put, is_rpc_value, Msg};

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

// ---- server side ----

/// RFP's server half: the polled request region and the result region.
pub(crate) struct Server<T: Transport> {
    ring: Option<RequestRing<T>>,
    results: Option<FetchedReplies<T>>,
}

impl<T: Transport> Default for Server<T> {
    fn default() -> Self {
        Server { ring: None, results: None }
    }
}

/// GET: the entry copied PM -> the result region.
fn get<T: Transport>(cx: &mut Ctx<'_, T>, key: &[u8], req: u32) -> Result<()> {
    let (found, timer) = cx.lookup(key);
    let Some(loc) = found else { return cx.reply(&Msg::NotFound, req) };
    let mut h = Msg::RpcValue { entry: Vec::new() }.encode(req);
    let n = h.len();
    h[n - 4..].copy_from_slice(&loc.len.to_le_bytes());
    let src = cx.pool().pool_offset(loc.segment as u64, loc.offset as u64);
    let f = cx.conn.fetched.as_mut().ok_or_else(|| Error::Protocol("a GET outside a fetched request".into()))?;
    f.put_entry(&h, cx.sh.pool.media().map(), src, loc.len as usize)?;
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
        let Server { ring, results } = self;
        let Some(ring) = ring.as_mut() else { return Ok(false) };
        let Some((seq, raw)) = ring.poll()? else { return Ok(false) };
        let Some(mut f) = results.take() else { return Err(Error::Protocol("no result region".into())) };
        (f.seq, f.since) = (seq, Instant::now());
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

/// RFP's client half: its regions, the next sequence number, the fetch size.
pub(crate) struct Client {
    rings: Option<Rings>,
    seq: u32,
    want: FetchSize,
    fetch: u32,
}

impl Client {
    pub(crate) fn new(want: FetchSize) -> Client {
        Client { rings: None, seq: 0, want, fetch: 0 }
    }

    /// The knee of the READ latency over the result region (see the module doc).
    fn profile<T: Transport>(l: &mut Link<T>, r: &Rings) -> Result<u32> {
        let mut base = None;
        let mut best = 64u32.min(r.res_len);
        for size in [64u32, 128, 256, 512, 1024, 2048, 4096] {
            if size > r.res_len {
                break;
            }
            let t = l.time_reads(size, r.res_addr, r.res_rkey, 16)?;
            let b = *base.get_or_insert(t);
            if t <= b.mul_f64(1.15) + Duration::from_nanos(50) {
                best = size;
            }
        }
        Ok(best)
    }

    /// WRITEs `m` and fetches its reply; returns where the reply message is in `l.buf`.
    fn request<T: Transport>(&mut self, l: &mut Link<T>, m: &Msg) -> Result<(usize, usize)> {
        let r = match self.rings {
            Some(r) => r,
            None => {
                let r = Rings::fetch(l, "RFP setup")?;
                if (r.res_len as usize) < crate::wire::slot::HEADER {
                    return Err(Error::Protocol(format!("a result region of {} bytes", r.res_len)));
                }
                self.fetch = match self.want {
                    FetchSize::Bytes(n) => n.min(r.res_len),
                    FetchSize::Auto => Self::profile(l, &r)?,
                };
                *self.rings.insert(r)
            }
        };
        self.seq = next_seq(self.seq);
        l.write_slot(self.seq, m, r.req_addr, r.req_rkey, r.req_len)?;
        l.fetch_slot(self.seq, r.res_addr, r.res_rkey, r.res_len, self.fetch)
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let (at, n) = self.request(l, &rpc::put_request(key, value, tomb)?)?;
        let m = Msg::decode(&l.buf[at..at + n])?.0;
        rpc::put_reply(l, m)
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let (at, n) = self.request(l, &Msg::RpcGet { key: key.to_vec() })?;
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
}
