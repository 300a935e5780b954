//! The RDMA-KV baseline (NVM-oblivious RPC, like HERD + PMEM-Redis). One round trip
//! per PUT and GET, plus the copies BOOM avoids.
//!
//! - **PUT**: the client SENDs the whole entry (`RpcPut`) into a server DRAM receive
//!   buffer; the server places it at the tail of the client's log, copies it DRAM -> PM,
//!   sets `next_offset` and the checksum (the server decides the placement), commits it
//!   and replies.
//! - **GET**: the client SENDs the key (`RpcGet`); the server copies the entry
//!   PM -> a DRAM send buffer and SENDs it back (`RpcValue`).
//!
//! Fairness: one DRAM -> PM copy and one checksum pass per PUT (the request is read
//! where it landed, not copied again), one PM -> DRAM copy per GET; the same commit
//! path, index, worker pool and transport as BOOM.

use std::sync::atomic::Ordering;

use super::{ClientSide, Fetched, ReceiveBuffers, ServerSide};
use crate::error::{Error, Result};
use crate::link::{Arrival, Link, PutInfo, RPC_VALUE_OFF};
use crate::log::format::{self as fmt, EntryHeader, ENTRY_HEADER_SIZE};
use crate::log::WriteMode;
use crate::service::phases::GetTimer;
use crate::service::Ctx;
use crate::transport::{Access, MemoryRegion, QueuePair, Transport};
use crate::wire::{ErrorCode, Msg, MAX_MESSAGE};

/// Each receive holds a whole request (or reply): the entry travels in it.
pub(crate) const RECEIVE_BUFFERS: ReceiveBuffers =
    ReceiveBuffers { client: MAX_MESSAGE as u32, server: MAX_MESSAGE as u32, server_depth: 4 };

/// Where the entry of an RpcPut message starts (header, then a u32 length).
pub(super) const RPC_PUT_OFF: usize = crate::wire::MSG_HEADER + 4;

// ---- server side ----

/// RDMA-KV's server half: the DRAM staging buffer its replies are sent from.
pub(crate) struct Server<T: Transport> {
    send_mr: T::Mr,
}

impl<T: Transport> Server<T> {
    pub(crate) fn new(t: &T) -> Result<Server<T>> {
        Ok(Server { send_mr: t.alloc_mr(MAX_MESSAGE, Access::NONE)? })
    }

    /// GET: copy the entry PM -> DRAM and SEND it.
    fn get(&mut self, cx: &mut Ctx<'_, T>, key: &[u8], req: u32) -> Result<()> {
        let (found, timer) = cx.lookup_read(key);
        let Some((loc, read)) = found else { return cx.reply(&Msg::NotFound, req) };
        // Header of an RpcValue message, then the entry copied from PM.
        let hdr = Msg::RpcValue { entry: Vec::new() }.encode(req);
        if let Some(why) = over_one_reply(hdr.len(), loc.len) {
            cx.sh.end_read(read);
            return cx.refuse(req, ErrorCode::TooLarge, why);
        }
        let body_len_off = hdr.len() - 4;
        let mut h = hdr.clone();
        h[body_len_off..].copy_from_slice(&loc.len.to_le_bytes());
        let copied = self.send_mr.write(0, &h).and_then(|()| {
            let (map, base) = self.send_mr.mapping();
            let src = cx.pool().pool_offset(loc.segment as u64, loc.offset as u64);
            cx.pool().media().map().copy_to(src, map, base + h.len() as u64, loc.len as usize)
        });
        // The entry is in the staging buffer now (or not at all).
        cx.sh.end_read(read);
        copied?;
        cx.counters().gets.fetch_add(1, Ordering::Relaxed);
        cx.counters().bytes_out.fetch_add(loc.len as u64, Ordering::Relaxed);
        let wr = cx.conn.wr();
        let r = cx.conn.qp.post_send(wr, &self.send_mr, 0, h.len() as u32 + loc.len);
        GetTimer::posted(timer, cx.phases());
        r
    }
}

impl<T: Transport> ServerSide<T> for Server<T> {
    fn on_receive(&mut self, cx: &mut Ctx<'_, T>, raw: &[u8]) -> Result<()> {
        if crate::wire::is_rpc_put(raw) {
            // Read the entry where it landed (the DRAM receive buffer): no copy.
            return put(cx, &raw[RPC_PUT_OFF.min(raw.len())..]);
        }
        let (m, req) = Msg::decode(raw)?;
        self.on_msg(cx, m, req)
    }

    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::RpcPut { entry } => put(cx, &entry),
            Msg::RpcGet { key } => self.get(cx, &key, req),
            m => cx.common(m, req),
        }
    }
}

/// PUT: the entry arrived in DRAM; place it, copy it to PM (the staging copy BOOM
/// avoids), seal it with its placement and commit.
pub(super) fn put<T: Transport>(cx: &mut Ctx<'_, T>, entry: &[u8]) -> Result<()> {
    let size = cx.pool().segment_size();
    let slot = fmt::slot_for(entry.len() as u64);
    let h = match EntryHeader::decode(entry) {
        Ok(h) if h.key_len >= 1 && h.key_len <= fmt::MAX_KEY_LEN && h.entry_len() == entry.len() as u64 => h,
        Ok(h) => {
            let m = format!(
                "malformed RPC entry: key of {} bytes, {} bytes in all, {} sent",
                h.key_len,
                h.entry_len(),
                entry.len()
            );
            return cx.refuse(0, ErrorCode::InvalidEntry, m);
        }
        Err(e) => return cx.refuse(0, ErrorCode::InvalidEntry, format!("malformed RPC entry: {e}")),
    };
    if slot > size - fmt::SEGMENT_HEADER_SIZE || h.value_len > cx.max_value() {
        return cx.refuse(0, ErrorCode::TooLarge, format!("entry of {} bytes", entry.len()));
    }
    if cx.conn.seg.as_ref().is_none_or(|s| s.tail + slot > size) {
        match cx.grant() {
            Ok(()) => {}
            // A DELETE on a full pool goes to the server's tombstone log.
            Err((ErrorCode::PoolFull, _)) if h.is_tombstone() => return cx.server_delete(entry, 0),
            Err((code, msg)) => return cx.refuse(0, code, msg),
        }
    }
    let Some(seg) = cx.conn.seg.as_ref() else { return Err(Error::Protocol("no segment".into())) };
    let offset = seg.tail;
    let next = offset + slot;
    let dst = cx.pool().pool_offset(seg.id, offset);
    let map = cx.pool().media().map();
    // The server chose the placement: it sets next_offset in its copy of the header and
    // checksums the bytes it received, never the pool's copy; so it seals and indexes
    // what it checked (these clients are not even given their segment: see `grant`).
    let hdr = ENTRY_HEADER_SIZE as usize;
    let mut head = [0u8; ENTRY_HEADER_SIZE as usize];
    head.copy_from_slice(&entry[..hdr]);
    let checksum = fmt::relink_head(&mut head, &entry[hdr..], next);
    map.write(dst, &head)?;
    map.write(dst + hdr as u64, &entry[hdr..])?;
    let key = entry[hdr..hdr + h.key_len as usize].to_vec();
    let h = EntryHeader { next_offset: next, checksum, version: 0, ..h };
    cx.commit_and_reply(offset, WriteMode::Append, Some((h, key)))
}

/// Why an entry of `len` bytes cannot be a GET's reply (after a header of `head`
/// bytes) in the RPC designs, whose reply is one message: a value stored through
/// another protocol (BOOM's limit is a segment) may be larger. Refused with its own
/// code, so the connection stays and the client says what is wrong.
pub(super) fn over_one_reply(head: usize, len: u32) -> Option<String> {
    let room = MAX_MESSAGE.saturating_sub(head);
    (len as usize > room).then(|| {
        format!(
            "its entry of {len} bytes is over the {room} bytes one reply of this protocol carries (GET it with \
             boom or rdmp)"
        )
    })
}

// ---- client side ----

/// RDMA-KV's client half (it keeps no state between requests).
pub(crate) struct Client;

/// The request of an RPC PUT (also HERD's and RFP's): the whole entry, version 0.
pub(super) fn put_request(key: &[u8], value: &[u8], tomb: bool) -> Result<Msg> {
    let mut e = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len() + value.len()];
    fmt::encode_entry(&mut e, key, value, tomb, 0)?;
    Ok(Msg::RpcPut { entry: e })
}

/// What the reply `m` to an RPC PUT says (a server error arrives as its typed error).
pub(super) fn put_reply<T: Transport>(l: &mut Link<T>, m: Msg) -> Result<PutInfo> {
    match m {
        Msg::PutOk { version, .. } => {
            l.counters.appends += 1;
            Ok(PutInfo { version, in_place: false })
        }
        Msg::Error { code, message } => Err(Error::Server { code, message }),
        m => Err(Error::Protocol(format!("expected a PUT reply, got {m:?}"))),
    }
}

/// What the SENT reply `a` to an RPC GET (also HERD's and RFP's) says: the entry's
/// place in `l.buf`, `None` if the key is absent.
pub(super) fn value_of(a: Arrival) -> Result<Option<(usize, usize)>> {
    match a {
        Arrival::RpcValue(n) => Ok(Some((RPC_VALUE_OFF, n))),
        Arrival::Msg(Msg::NotFound) => Ok(None),
        Arrival::Msg(Msg::Error { code, message }) => Err(Error::Server { code, message }),
        Arrival::Msg(m) => Err(Error::Protocol(format!("expected a value, got {m:?}"))),
        Arrival::Data(_) => Err(Error::Protocol("unexpected data write".into())),
    }
}

/// Waits for the SENT reply to an RPC GET (also HERD's): the entry's place in `l.buf`.
pub(super) fn value_reply<T: Transport>(l: &mut Link<T>) -> Result<Option<(usize, usize)>> {
    value_of(l.wait_arrival("GET")?)
}

/// The reply to a split RPC GET of `key` (also HERD's), if it has come: the value
/// into `out`, checked as [`ClientSide::get_value`] checks it.
pub(super) fn poll_value<T: Transport>(l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
    let Some(a) = l.poll_arrival("GET")? else { return Ok(None) };
    let entry = value_of(a)?;
    Ok(Some(Fetched::in_buf(l, key, entry, out)))
}

/// The reply to a split RPC PUT (also HERD's), if it has come.
pub(super) fn poll_put<T: Transport>(l: &mut Link<T>) -> Result<Option<PutInfo>> {
    let Some(a) = l.poll_arrival("PUT")? else { return Ok(None) };
    put_reply(l, crate::link::message("PUT", a)?).map(Some)
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let m = l.call(&put_request(key, value, tomb)?, "PUT")?;
        put_reply(l, m)
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        l.send(&Msg::RpcGet { key: key.to_vec() })?;
        value_reply(l)
    }

    fn put_start(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8]) -> Result<Option<PutInfo>> {
        l.send(&put_request(key, value, false)?)?;
        Ok(None)
    }

    fn put_poll(&mut self, l: &mut Link<T>, _key: &[u8]) -> Result<Option<PutInfo>> {
        poll_put(l)
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        l.send(&Msg::RpcGet { key: key.to_vec() })?;
        Ok(true)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        poll_value(l, key, out)
    }
}
