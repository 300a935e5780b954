//! RDMP-KV's client-centric mode, RDMP-CC (SC'20; Liu Xuran's "Survey on Distributed
//! Storage Systems Based on NVM and RDMA" (HUST, 2020), section 3.1, figure 6): like
//! [`super::rdmp`] two phases, but the client makes its own WRITE durable, bypassing
//! the server's CPU, with the persistence the RDMA hardware offers (the paper's "RDMA
//! Commit"; here the transport's one-sided FLUSH, the IBTA's RDMA FLUSH:
//! [`crate::transport::QueuePair::post_flush`]).
//!
//! # The paper's design
//!
//! RDMP-KV splits a request into a server-reply phase (the server only allocates space,
//! or looks the key up, and returns an address) and a server-bypass phase (the client
//! WRITEs or READs PM with one-sided RDMA). For a PUT the WRITE must also be made
//! durable: RDMP-SA (server-assisted, our [`super::rdmp`]) has the server flush the
//! lines after a WRITE_WITH_IMM and acknowledge; RDMP-CC has the client commit them
//! with the NIC's persistence operation, so after the allocation the server's CPU takes
//! no part in the PUT.
//!
//! # What is reproduced
//!
//! - **PUT**: 2 round trips and a FLUSH: `CcAlloc { key, value_len, value_crc }` (a
//!   SEND, answered), then an unsignaled WRITE of the whole entry into the slot and a
//!   FLUSH of it, whose completion is the acknowledgement: the PUT returns durable
//!   once the FLUSH completes (3 network operations: send, write, flush).
//! - **GET**: as RDMP: `Locate` (a SEND, answered), then a READ (2 operations).
//! - The same entry format, checksum, index, recovery and transport as every protocol.
//!
//! # What differs, and why
//!
//! - **The server seals in the allocation phase.** Recovery here believes only entries
//!   the server sealed (SipHash under a key clients never see, over the slot, version,
//!   header and key; [`crate::log::format`]). So the allocation carries the key, the
//!   value's length and the CRC-32C of the value; the server places the slot at its
//!   client's segment tail, builds the header (its checksum combined from the key part
//!   and the value's CRC, [`fmt::encode_entry_head`]), assigns the version and returns
//!   the version and seal with the address. The client writes the entry with both, so
//!   what it FLUSHes is complete: recovery accepts it with its usual check. The paper's
//!   server learns nothing of the key in the allocation; ours must, for the seal.
//! - **Counting and indexing come later.** Recovery walks a segment by its `count`
//!   (stored by the server only) and now on past it while entries verify
//!   ([`crate::log::recovery::WalkLimit::CountThenSealed`]), so a client-durable entry
//!   the server has not counted yet survives a crash. The server counts the entry and
//!   indexes it when the client sends its next request (the previous PUT's FLUSH has
//!   completed by then), or when the client leaves. A GET of a key with such a pending
//!   PUT checks its slot first (the server-wide table of pending PUTs,
//!   `service::pending`): a complete entry is written back by the server (so
//!   nothing is read that a crash could take back) and indexed at once; one still being
//!   written is left, and the GET returns the older value (the PUT has not returned,
//!   so either order is linearizable). This costs the server's CPU a checksum pass per
//!   pending PUT on those GETs and on the next request, never on the PUT itself.
//! - **A slot the client never completes** (a hostile client, or one that died between
//!   the phases) is not counted; the next allocation reuses the offset with a new
//!   version and seal, and recovery's walk past `count` stops at it.
//! - **FLUSH on this machine**: `shm` writes the lines back from the initiator's own
//!   mapping of the target, `tcp`'s software NIC writes them back before acknowledging,
//!   `verbs` without a device FLUSH does a READ after the WRITE (on ADR hardware a
//!   completed READ means the WRITEs before it left the NIC for the memory controller).
//!   The crash simulator learns of a FLUSH through [`crate::pmem::persist_remote`].
//! - RDMP-KV registers the whole pool; as in [`super::rdmp`], each segment here is its own
//!   region, bound to its client's queue pair.

use std::sync::atomic::Ordering;

use super::{ClientSide, Fetched, ServerSide};
use crate::error::{Error, Result};
use crate::index::Loc;
use crate::link::{Link, PutInfo};
use crate::log::format::{self as fmt, SlotPlace, ENTRY_HEADER_SIZE};
use crate::service::pending::PendingPut;
use crate::service::Ctx;
use crate::transport::{MemoryRegion, Transport};
use crate::wire::{ErrorCode, Msg};

// ---- server side ----

/// RDMP-CC's server half: RDMP's (for `Locate` and its read regions) and the PUT this
/// client was last given a slot for, not yet counted.
pub(crate) struct Server<T: Transport> {
    rdmp: super::rdmp::Server<T>,
    last: Option<(Vec<u8>, PendingPut)>,
}

impl<T: Transport> Default for Server<T> {
    fn default() -> Self {
        Server { rdmp: super::rdmp::Server::default(), last: None }
    }
}

impl<T: Transport> Server<T> {
    /// Counts and indexes this client's last PUT if it completed; with `writeback`, its
    /// lines are written back first (the client may have left before its FLUSH).
    fn settle(&mut self, cx: &mut Ctx<'_, T>, writeback: bool) -> Result<()> {
        let Some((key, p)) = self.last.take() else { return Ok(()) };
        // From here on no GET indexes it: this half decides.
        let still_pending = cx.sh.pending_puts.remove(&key, &p);
        let found = crate::service::check_pending(cx.pool(), &key, &p);
        let Some(seg) = cx.conn.seg.as_mut().filter(|s| s.id == p.segment && s.tail == p.offset) else {
            return Ok(());
        };
        let loc = match found {
            Some(loc) => loc,
            // Indexed by a GET while it verified, damaged by its client since: counted
            // all the same, so the cleaner walks the slot the index points into.
            None if !still_pending => {
                Loc { segment: p.segment as u32, offset: p.offset as u32, len: 0, version: p.version, tombstone: false }
            }
            // Never completed: not counted; the next allocation reuses the slot.
            None => return Ok(()),
        };
        let pool = &cx.sh.pool;
        if writeback && loc.len > 0 {
            pool.writeback(pool.pool_offset(p.segment, p.offset), loc.len as usize)?;
        }
        pool.media().crash_point();
        pool.persist_count(seg.id, seg.generation, seg.count + 1)?;
        seg.push_slot(p.offset, p.next_offset);
        pool.note_append(seg.id, p.next_offset - p.offset);
        if loc.len > 0 {
            pool.index_entry(&key, loc);
            let ctr = if loc.tombstone { &cx.counters().dels } else { &cx.counters().puts };
            ctr.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Phase 1 of a PUT: place, version and seal an entry of `key` at the client's tail.
    fn alloc(
        &mut self,
        cx: &mut Ctx<'_, T>,
        key: &[u8],
        value_len: u32,
        value_crc: u32,
        tomb: bool,
        req: u32,
    ) -> Result<()> {
        self.settle(cx, false)?;
        if key.is_empty() || key.len() > fmt::MAX_KEY_LEN as usize {
            return cx.refuse(req, ErrorCode::InvalidEntry, format!("key of {} bytes", key.len()));
        }
        if tomb && value_len != 0 {
            return cx.refuse(req, ErrorCode::InvalidEntry, "a DELETE carries no value".into());
        }
        if value_len > cx.max_value() {
            let m = format!("value of {value_len} bytes is over the server's limit of {} bytes", cx.max_value());
            return cx.refuse(req, ErrorCode::TooLarge, m);
        }
        let slot = fmt::slot_for(ENTRY_HEADER_SIZE + key.len() as u64 + value_len as u64);
        let size = cx.pool().segment_size();
        if slot > size - fmt::SEGMENT_HEADER_SIZE {
            return cx.refuse(req, ErrorCode::TooLarge, format!("an entry of {slot} bytes does not fit a segment"));
        }
        if cx.conn.seg.as_ref().is_none_or(|s| s.tail + slot > size) {
            match cx.grant() {
                Ok(()) => {}
                // A DELETE on a full pool goes to the server's tombstone log.
                Err((ErrorCode::PoolFull, _)) if tomb => {
                    let mut e = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len()];
                    fmt::encode_entry(&mut e, key, b"", true, 0)?;
                    return cx.server_delete(&e, req);
                }
                Err((code, msg)) => return cx.refuse(req, code, msg),
            }
        }
        let (Some(seg), Some(mr)) = (&cx.conn.seg, &cx.conn.seg_mr) else {
            return Err(Error::Protocol("no segment after grant".into()));
        };
        let (offset, next_offset) = (seg.tail, seg.tail + slot);
        let (id, generation) = (seg.id, seg.generation);
        let r = mr.remote();
        let (_, h) = fmt::encode_entry_head(key, value_len, value_crc, tomb, next_offset)?;
        let version = match cx.pool().next_version() {
            Ok(v) => v,
            Err(e) => return cx.refuse(req, ErrorCode::Internal, e.to_string()),
        };
        let seal = cx.pool().sealer().entry_seal(SlotPlace { segment: id, generation, offset }, version, &h, key);
        let p = PendingPut { segment: id, generation, offset, next_offset, version };
        cx.sh.pending_puts.add(key, p);
        self.last = Some((key.to_vec(), p));
        cx.reply(&Msg::CcPlaced { addr: r.at(offset), rkey: r.rkey, offset, version, seal }, req)
    }
}

impl<T: Transport> ServerSide<T> for Server<T> {
    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::CcAlloc { key, value_len, value_crc, tomb } => self.alloc(cx, &key, value_len, value_crc, tomb, req),
            Msg::Locate { key } => {
                self.settle(cx, false)?;
                // Every protocol's look-up indexes the key's completed pending PUTs
                // first (`Ctx::lookup`).
                self.rdmp.locate(cx, &key, req)
            }
            Msg::RpcPut { entry } => {
                self.settle(cx, false)?;
                cx.server_delete(&entry, req)
            }
            m => cx.common(m, req),
        }
    }

    fn before_close(&mut self, cx: &mut Ctx<'_, T>) {
        if let Err(e) = self.settle(cx, true) {
            cx.sh.log(&format!("client {}: settling its last PUT: {e}", cx.conn.id));
        }
    }

    fn on_close(&mut self) {
        self.rdmp.on_close();
    }
}

// ---- client side ----

/// RDMP-CC's client half: its GETs are RDMP-KV's, split ones included.
#[derive(Default)]
pub(crate) struct Client {
    gets: super::rdmp::Client,
}

/// Whether this build plants the bug of acknowledging a PUT without its FLUSH.
fn skip_flush() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        crate::log::planted::cc_skip_flush()
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let value_len = u32::try_from(value.len()).map_err(|_| Error::TooLarge {
            what: "value",
            len: value.len() as u64,
            limit: u32::MAX as u64,
        })?;
        let m = Msg::CcAlloc { key: key.to_vec(), value_len, value_crc: fmt::value_crc(value), tomb };
        let (addr, rkey, offset, version, seal) = match l.call(&m, "RDMP-CC allocation") {
            Ok(Msg::CcPlaced { addr, rkey, offset, version, seal }) => (addr, rkey, offset, version, seal),
            // A DELETE on a full pool: the server logs the tombstone itself.
            Err(Error::Server { code: ErrorCode::PoolFull, .. }) if tomb => {
                return super::server_delete(l, key, super::POOL_FULL_WAIT)
            }
            Err(e) => return Err(e),
            Ok(m) => return Err(Error::Protocol(format!("expected a placement, got {m:?}"))),
        };
        let next = offset.checked_add(fmt::slot_size(key.len(), value.len()));
        if offset % fmt::ENTRY_ALIGN != 0 || next.is_none_or(|n| n > l.limits.segment_size) {
            return Err(Error::Protocol(format!("the server placed the entry at offset {offset}, outside a segment")));
        }
        let n = l.encode_entry(key, value, tomb, next.unwrap_or(0))?;
        l.seal_entry(version, seal)?;
        l.write_entry_quiet(n, addr, rkey)?;
        if !skip_flush() {
            l.flush_remote(addr, rkey, n as u32, "RDMP-CC FLUSH")?;
        }
        l.counters.appends += 1;
        Ok(PutInfo { version, in_place: false })
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        ClientSide::<T>::get(&mut self.gets, l, key)
    }

    fn get_value(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Fetched> {
        ClientSide::<T>::get_value(&mut self.gets, l, key, out)
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        ClientSide::<T>::get_start(&mut self.gets, l, key)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        ClientSide::<T>::get_poll(&mut self.gets, l, key, out)
    }

    fn awaits_reply(&self) -> bool {
        ClientSide::<T>::awaits_reply(&self.gets)
    }
}
