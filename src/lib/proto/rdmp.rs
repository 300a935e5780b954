//! The RDMP-KV baseline (two-phase, NVM-aware; SC'20, as Liu Xuran's "Survey on
//! Distributed Storage Systems Based on NVM and RDMA" (HUST, 2020), section 3.1, and
//! the BOOM-KV paper section 1.3 describe it). Two round trips per PUT and per GET.
//!
//! - **PUT**: phase 1, `Alloc { len }`: the server allocates a persistent object of
//!   that size at the tail of the client's log (granting segments itself, no extra round
//!   trip) and returns `(addr, rkey, token)`; phase 2, the client WRITE_WITH_IMMs the
//!   entry there (immediate = the offset as a [`crate::wire::PutImm`]); the server
//!   writes it back (server-assisted persistence, RDMP-SA), indexes it and replies.
//! - **GET**: phase 1, `Locate { key }` returns `(addr, rkey, len)`; phase 2, the client
//!   READs the entry from PM and verifies it.
//!
//! Fairness: the same entry format, checksums, commit path (write-back primitive,
//! durability, index), worker pool and transport as BOOM; only the message flow
//! differs. RDMP-KV registers the whole PM pool once; here each segment is its own
//! region, registered when it is granted or first located, so no registration is on
//! the request path of either protocol.

use std::sync::atomic::Ordering;

use super::{ClientSide, ServerSide};
use crate::error::{Error, Result};
use crate::link::{Link, PutInfo};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::log::WriteMode;
use crate::service::phases::GetTimer;
use crate::service::{ConnMap, Ctx};
use crate::transport::{Access, MemoryRegion, Transport};
use crate::wire::{ErrorCode, Msg, PutImm};

// ---- server side ----

/// RDMP-KV's server half: the read-only regions over the segments this client READs,
/// bound to its queue pair and revoked when it leaves.
pub(crate) struct Server<T: Transport> {
    read_mrs: ConnMap<u64, T::Mr>,
}

impl<T: Transport> Default for Server<T> {
    fn default() -> Self {
        Server { read_mrs: ConnMap::default() }
    }
}

impl<T: Transport> ServerSide<T> for Server<T> {
    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::Alloc { len } => alloc(cx, len, req),
            Msg::Locate { key } => self.locate(cx, &key, req),
            Msg::RpcPut { entry } => cx.server_delete(&entry, req),
            m => cx.common(m, req),
        }
    }

    /// Phase 2 of a PUT: the entry is where phase 1 placed it (appends only).
    fn on_write_imm(&mut self, cx: &mut Ctx<'_, T>, imm: u32) -> Result<()> {
        let p = PutImm::decode(imm);
        if p.in_place {
            return cx.refuse(0, ErrorCode::BadRequest, "WRITE_WITH_IMM not valid here".into());
        }
        cx.commit_and_reply(p.offset, WriteMode::Append, None)
    }

    fn on_close(&mut self) {
        self.read_mrs.clear();
    }
}

/// Phase 1 of a PUT: place an object of `len` bytes in the client's log.
fn alloc<T: Transport>(cx: &mut Ctx<'_, T>, len: u32, req: u32) -> Result<()> {
    let slot = fmt::slot_for(len as u64);
    let largest = ENTRY_HEADER_SIZE + fmt::MAX_KEY_LEN as u64 + cx.max_value() as u64;
    if len as u64 > largest {
        let m = format!("object of {len} bytes is over the largest entry ({largest} bytes: --max-value)");
        return cx.refuse(req, ErrorCode::TooLarge, m);
    }
    let size = cx.pool().segment_size();
    if slot > size - fmt::SEGMENT_HEADER_SIZE || len < ENTRY_HEADER_SIZE as u32 + 1 {
        return cx.refuse(req, ErrorCode::TooLarge, format!("object of {len} bytes does not fit a segment"));
    }
    let fits = cx.conn.seg.as_ref().is_some_and(|s| s.tail + slot <= size);
    if !fits {
        if let Err((code, msg)) = cx.grant() {
            return cx.refuse(req, code, msg);
        }
    }
    let (Some(seg), Some(mr)) = (&cx.conn.seg, &cx.conn.seg_mr) else {
        return Err(Error::Protocol("no segment after grant".into()));
    };
    let r = mr.remote();
    let msg = Msg::Allocated { addr: r.at(seg.tail), rkey: r.rkey, token: (seg.tail / 8) as u32 };
    cx.reply(&msg, req)
}

impl<T: Transport> Server<T> {
    /// Phase 1 of a GET: where the entry of `key` is (the client then READs it).
    pub(super) fn locate(&mut self, cx: &mut Ctx<'_, T>, key: &[u8], req: u32) -> Result<()> {
        let (found, timer) = cx.lookup(key);
        let Some(loc) = found else { return cx.reply(&Msg::NotFound, req) };
        let seg = loc.segment as u64;
        let r = match self.read_mrs.get(&seg) {
            Some(mr) => mr.remote(),
            None => {
                let mr = cx.bound_segment_region(seg, Access::REMOTE_READ)?;
                let r = mr.remote();
                self.read_mrs.insert(seg, mr);
                r
            }
        };
        cx.counters().gets.fetch_add(1, Ordering::Relaxed);
        let r = cx.reply(&Msg::Located { addr: r.at(loc.offset as u64), rkey: r.rkey, len: loc.len }, req);
        GetTimer::posted(timer, cx.phases());
        r
    }
}

// ---- client side ----

/// RDMP-KV's client half (it keeps no state between requests).
pub(crate) struct Client;

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let len = ENTRY_HEADER_SIZE as u32 + key.len() as u32 + value.len() as u32;
        let (addr, rkey, token) = match l.call(&Msg::Alloc { len }, "RDMP allocation") {
            Ok(Msg::Allocated { addr, rkey, token }) => (addr, rkey, token),
            // A DELETE on a full pool: the server logs the tombstone itself.
            Err(Error::Server { code: ErrorCode::PoolFull, .. }) if tomb => return super::server_delete(l, key),
            Err(e) => return Err(e),
            Ok(m) => return Err(Error::Protocol(format!("expected an allocation, got {m:?}"))),
        };
        let offset = token as u64 * 8;
        let n = l.encode_entry(key, value, tomb, offset + fmt::slot_size(key.len(), value.len()))?;
        let imm = PutImm { offset, in_place: false }.encode().ok_or_else(|| Error::Protocol("bad token".into()))?;
        l.write_entry(n, addr, rkey, imm)?;
        let version = match l.wait_msg("PUT")? {
            Msg::PutOk { version, .. } => version,
            m => return Err(Error::Protocol(format!("expected a PUT reply, got {m:?}"))),
        };
        l.counters.appends += 1;
        Ok(PutInfo { version, in_place: false })
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let (addr, rkey, len) = match l.call(&Msg::Locate { key: key.to_vec() }, "RDMP locate")? {
            Msg::Located { addr, rkey, len } => (addr, rkey, len),
            Msg::NotFound => return Ok(None),
            m => return Err(Error::Protocol(format!("expected a location, got {m:?}"))),
        };
        l.read_remote(len, addr, rkey, "RDMP READ")?;
        Ok(Some((0, len as usize)))
    }
}
