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

use crate::client::{server_error, Arrival, Client, PutInfo, RPC_VALUE_OFF};
use crate::error::{Error, Result};
use crate::log::format::{self as fmt, EntryHeader, ENTRY_HEADER_SIZE};
use crate::log::WriteMode;
use crate::server::phases::GetTimer;
use crate::server::{Conn, Worker};
use crate::transport::{MemoryRegion, QueuePair, Transport};
use crate::wire::{ErrorCode, Msg};

// ---- server side ----

impl<T: Transport> Worker<T> {
    /// RDMA-KV PUT: the entry arrived in DRAM; place it, copy it to PM (the staging
    /// copy BOOM avoids), seal it with its placement and commit.
    pub(crate) fn rpc_put(&mut self, conn: &mut Conn<T>, entry: &[u8]) -> Result<()> {
        let size = self.sh.pool.segment_size();
        let slot = fmt::slot_for(entry.len() as u64);
        let h = match EntryHeader::decode(entry) {
            Ok(h) if h.key_len >= 1 && h.key_len <= fmt::MAX_KEY_LEN && h.entry_len() == entry.len() as u64 => h,
            _ => return self.error_reply(conn, 0, ErrorCode::InvalidEntry, "malformed RPC entry".into()),
        };
        if slot > size - fmt::SEGMENT_HEADER_SIZE || h.value_len > self.sh.cfg.max_value {
            return self.error_reply(conn, 0, ErrorCode::TooLarge, format!("entry of {} bytes", entry.len()));
        }
        if conn.seg.as_ref().is_none_or(|s| s.tail + slot > size) {
            match self.grant(conn) {
                Ok(()) => {}
                // A DELETE on a full pool goes to the server's tombstone log.
                Err((ErrorCode::PoolFull, _)) if h.is_tombstone() => return self.server_delete(conn, entry, 0),
                Err((code, msg)) => return self.error_reply(conn, 0, code, msg),
            }
        }
        let Some(seg) = conn.seg.as_ref() else { return Err(Error::Protocol("no segment".into())) };
        let offset = seg.tail;
        let next = offset + slot;
        let dst = self.sh.pool.pool_offset(seg.id, offset);
        let map = self.sh.pool.media().map();
        map.write(dst, entry)?;
        // The server chose the placement: it writes next_offset and computes the checksum.
        map.write(dst + fmt::ENTRY_NEXT_OFF, &next.to_le_bytes())?;
        let checksum = fmt::entry_checksum(map.view(dst, entry.len())?);
        map.write(dst, &checksum.to_le_bytes())?;
        let h = EntryHeader { next_offset: next, checksum, version: 0, ..h };
        self.commit_and_reply(conn, offset, WriteMode::Append, Some(h))
    }

    /// RDMA-KV GET: copy the entry PM -> DRAM and SEND it.
    pub(crate) fn rpc_get(&mut self, conn: &mut Conn<T>, key: &[u8], req: u32) -> Result<()> {
        let mut timer = GetTimer::start(self.sampled());
        let found = self.sh.pool.lookup(key);
        GetTimer::looked_up(&mut timer);
        let Some(loc) = found else {
            self.sh.counters.not_found.fetch_add(1, Ordering::Relaxed);
            return self.send(conn, &Msg::NotFound, req);
        };
        let Some(send_mr) = conn.send_mr.clone() else { return Err(Error::Protocol("no send buffer".into())) };
        // Header of an RpcValue message, then the entry copied from PM.
        let hdr = Msg::RpcValue { entry: Vec::new() }.encode(req);
        let body_len_off = hdr.len() - 4;
        let mut h = hdr.clone();
        h[body_len_off..].copy_from_slice(&loc.len.to_le_bytes());
        send_mr.write(0, &h)?;
        let (map, base) = send_mr.mapping();
        let src = self.sh.pool.pool_offset(loc.segment as u64, loc.offset as u64);
        self.sh.pool.media().map().copy_to(src, map, base + h.len() as u64, loc.len as usize)?;
        self.sh.counters.gets.fetch_add(1, Ordering::Relaxed);
        self.sh.counters.bytes_out.fetch_add(loc.len as u64, Ordering::Relaxed);
        let wr = conn.wr();
        let r = conn.qp.post_send(wr, &send_mr, 0, h.len() as u32 + loc.len);
        GetTimer::posted(timer, &self.sh.phases);
        r
    }
}

// ---- client side ----

impl<T: Transport> Client<T> {
    pub(crate) fn rpc_put(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
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

    pub(crate) fn rpc_get(&mut self, key: &[u8]) -> Result<Option<(usize, usize)>> {
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
}
