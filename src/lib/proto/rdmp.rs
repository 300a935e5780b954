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
use std::time::Duration;

use super::{ClientSide, Fetched, ServerSide};
use crate::error::{Error, Result};
use crate::link::{Link, PutInfo};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::log::WriteMode;
use crate::service::phases::GetTimer;
use crate::service::{ConnMap, Ctx};
use crate::transport::{Access, MemoryRegion, Transport};
use crate::wire::{ErrorCode, Msg, PutImm, READ_LEASE};

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

/// RDMP-KV's client half: what a split request ([`ClientSide::get_start`],
/// [`ClientSide::put_start`]) has done so far.
#[derive(Default)]
pub(crate) struct Client {
    pending: Option<Pending>,
    /// The value of the PUT in flight, until its allocation comes.
    value: Vec<u8>,
}

/// The phase a split request is in.
enum Pending {
    /// GET, phase 1: the `Locate` is out (sent at `asked`).
    Locating { asked: Asked },
    /// GET, phase 2: the READ of the `len`-byte entry is out (work request `wr`).
    Reading { wr: u64, len: u32, asked: Asked },
    /// PUT, phase 1: the `Alloc` is out; the value waits in [`Client::value`].
    Allocating,
    /// PUT, phase 2: the entry is written; the server's answer is to come.
    Writing,
}

/// When a GET asked for a place: a reading of CLOCK_BOOTTIME, which goes on counting
/// while the machine sleeps (a client suspended between the server's answer and its
/// READ must see that time pass; `Instant` would not).
#[derive(Clone, Copy, Debug)]
struct Asked(Duration);

impl Asked {
    fn now() -> Asked {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Asked(Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32))
    }
}

/// Whether a READ of a place asked for at `asked` came too late to trust: the server
/// keeps the place's segment for [`READ_LEASE`] from its look-up, which came after
/// `asked`; past half of it the place may have been freed and hold another client's
/// entry (of the same key, even), so the GET is asked again.
fn late(asked: Asked) -> bool {
    Asked::now().0.saturating_sub(asked.0) >= READ_LEASE / 2
}

/// The entry length of `key` with `value`.
fn entry_len(key: &[u8], value: &[u8]) -> u32 {
    ENTRY_HEADER_SIZE as u32 + key.len() as u32 + value.len() as u32
}

/// What the server answered an `Alloc` with: where the entry goes.
fn allocated(m: Msg) -> Result<(u64, u32, u32)> {
    match m {
        Msg::Allocated { addr, rkey, token } => Ok((addr, rkey, token)),
        m => Err(Error::Protocol(format!("expected an allocation, got {m:?}"))),
    }
}

/// Phase 2 of a PUT: the entry WRITE_WITH_IMMed where the allocation `at` says.
fn write_entry<T: Transport>(l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool, at: (u64, u32, u32)) -> Result<()> {
    let (addr, rkey, token) = at;
    let offset = token as u64 * 8;
    let n = l.encode_entry(key, value, tomb, offset + fmt::slot_size(key.len(), value.len()))?;
    let imm = PutImm { offset, in_place: false }.encode().ok_or_else(|| Error::Protocol("bad token".into()))?;
    l.write_entry(n, addr, rkey, imm)
}

/// The server's answer to a written entry.
fn put_done<T: Transport>(l: &mut Link<T>, m: Msg) -> Result<PutInfo> {
    let version = match m {
        Msg::PutOk { version, .. } => version,
        m => return Err(Error::Protocol(format!("expected a PUT reply, got {m:?}"))),
    };
    l.counters.appends += 1;
    Ok(PutInfo { version, in_place: false })
}

/// What the server answered a `Locate` of a key with: the entry's place, `None` if
/// absent. An entry longer than any GET reply the server's limits allow (`room`,
/// [`Link::get_room`]) is not READ: a lying server would size the client's response
/// buffer at will.
fn located(m: Msg, room: u64) -> Result<Option<(u64, u32, u32)>> {
    match m {
        Msg::Located { len, .. } if u64::from(len) > room => {
            Err(Error::Protocol(format!("the server located an entry of {len} bytes; its limits allow {room}")))
        }
        Msg::Located { addr, rkey, len } => Ok(Some((addr, rkey, len))),
        Msg::NotFound => Ok(None),
        m => Err(Error::Protocol(format!("expected a location, got {m:?}"))),
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let at = match l.call(&Msg::Alloc { len: entry_len(key, value) }, "RDMP allocation") {
            Ok(m) => allocated(m)?,
            // A DELETE on a full pool: the server logs the tombstone itself.
            Err(Error::Server { code: ErrorCode::PoolFull, .. }) if tomb => {
                return super::server_delete(l, key, super::POOL_FULL_WAIT)
            }
            Err(e) => return Err(e),
        };
        write_entry(l, key, value, tomb, at)?;
        let m = l.wait_msg("PUT")?;
        put_done(l, m)
    }

    fn get_value(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Fetched> {
        let asked = Asked::now();
        let entry = ClientSide::<T>::get(self, l, key)?;
        if entry.is_some() && late(asked) {
            return Ok(Fetched::Late);
        }
        Ok(Fetched::in_buf(l, key, entry, out))
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let m = l.call(&Msg::Locate { key: key.to_vec() }, "RDMP locate")?;
        let Some((addr, rkey, len)) = located(m, l.get_room())? else {
            return Ok(None);
        };
        l.read_remote(len, addr, rkey, "RDMP READ")?;
        Ok(Some((0, len as usize)))
    }

    fn put_start(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8]) -> Result<Option<PutInfo>> {
        l.send(&Msg::Alloc { len: entry_len(key, value) })?;
        self.value.clear();
        self.value.extend_from_slice(value);
        self.pending = Some(Pending::Allocating);
        Ok(None)
    }

    fn put_poll(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<PutInfo>> {
        let Some(a) = l.poll_arrival("PUT")? else { return Ok(None) };
        let m = crate::link::message("PUT", a);
        match self.pending.take() {
            Some(Pending::Allocating) => {
                write_entry(l, key, &self.value, false, allocated(m?)?)?;
                self.pending = Some(Pending::Writing);
                Ok(None)
            }
            Some(Pending::Writing) => put_done(l, m?).map(Some),
            _ => Err(Error::invalid("no PUT in flight")),
        }
    }

    fn awaits_reply(&self) -> bool {
        !matches!(self.pending, Some(Pending::Reading { .. }))
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        let asked = Asked::now();
        l.send(&Msg::Locate { key: key.to_vec() })?;
        self.pending = Some(Pending::Locating { asked });
        Ok(true)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        match self.pending.take() {
            Some(Pending::Locating { asked }) => {
                let Some(a) = l.poll_arrival("RDMP locate")? else {
                    self.pending = Some(Pending::Locating { asked });
                    return Ok(None);
                };
                let Some((addr, rkey, len)) = located(crate::link::message("RDMP locate", a)?, l.get_room())? else {
                    return Ok(Some(Fetched::Absent));
                };
                let wr = l.post_read_response(len, addr, rkey, "RDMP READ")?;
                self.pending = Some(Pending::Reading { wr, len, asked });
                Ok(None)
            }
            Some(Pending::Reading { wr, len, asked }) => {
                if !l.poll_completion(wr, "RDMP READ")? {
                    self.pending = Some(Pending::Reading { wr, len, asked });
                    return Ok(None);
                }
                if late(asked) {
                    return Ok(Some(Fetched::Late));
                }
                Fetched::in_response(l, key, len, out).map(Some)
            }
            _ => Err(Error::invalid("no GET in flight")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_is_late_from_half_the_lease_on() {
        let now = Asked::now();
        assert!(!late(now));
        assert!(!late(Asked(now.0.saturating_sub(READ_LEASE / 4))));
        assert!(late(Asked(now.0.saturating_sub(READ_LEASE / 2))));
        assert!(Asked::now().0 >= now.0, "the clock never goes back");
    }
}
