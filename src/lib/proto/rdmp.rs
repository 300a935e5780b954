//! The RDMP-KV baseline (two-phase, NVM-aware; SC'20, as the survey in
//! `shared/papers/survey-nvm-rdma-rdmp-kv.txt` section 3.1 and the BOOM-KV paper
//! section 1.3 describe it). Two round trips per PUT and per GET.
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

use crate::client::{server_error, Client, PutInfo};
use crate::error::{Error, Result};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::server::phases::GetTimer;
use crate::server::{Conn, Worker};
use crate::transport::{Access, CompletionQueue, MemoryRegion, QueuePair, Transport};
use crate::wire::{ErrorCode, Msg, PutImm};

// ---- server side ----

impl<T: Transport> Worker<T> {
    /// RDMP phase 1 of a PUT: place an object of `len` bytes in the client's log.
    pub(crate) fn rdmp_alloc(&mut self, conn: &mut Conn<T>, len: u32, req: u32) -> Result<()> {
        let slot = fmt::slot_for(len as u64);
        let largest = ENTRY_HEADER_SIZE + fmt::MAX_KEY_LEN as u64 + self.sh.cfg.max_value as u64;
        if len as u64 > largest {
            let m = format!("object of {len} bytes is over the largest entry ({largest} bytes: --max-value)");
            return self.error_reply(conn, req, ErrorCode::TooLarge, m);
        }
        if slot > self.sh.pool.segment_size() - fmt::SEGMENT_HEADER_SIZE || len < ENTRY_HEADER_SIZE as u32 + 1 {
            return self.error_reply(
                conn,
                req,
                ErrorCode::TooLarge,
                format!("object of {len} bytes does not fit a segment"),
            );
        }
        let fits = conn.seg.as_ref().is_some_and(|s| s.tail + slot <= self.sh.pool.segment_size());
        if !fits {
            if let Err((code, msg)) = self.grant(conn) {
                return self.error_reply(conn, req, code, msg);
            }
        }
        let (Some(seg), Some(mr)) = (&conn.seg, &conn.seg_mr) else {
            return Err(Error::Protocol("no segment after grant".into()));
        };
        let r = mr.remote();
        let msg = Msg::Allocated { addr: r.at(seg.tail), rkey: r.rkey, token: (seg.tail / 8) as u32 };
        self.send(conn, &msg, req)
    }

    /// RDMP phase 1 of a GET: where the entry of `key` is (the client then READs it).
    pub(crate) fn rdmp_locate(&mut self, conn: &mut Conn<T>, key: &[u8], req: u32) -> Result<()> {
        let mut timer = GetTimer::start(self.sampled());
        let found = self.sh.pool.lookup(key);
        GetTimer::looked_up(&mut timer);
        match found {
            Some(loc) => {
                let seg = loc.segment as u64;
                let r = match conn.read_mrs.get(&seg) {
                    Some(mr) => mr.remote(),
                    None => {
                        let mr = self.sh.bound_seg_mr(&conn.qp, seg, Access::REMOTE_READ)?;
                        let r = mr.remote();
                        conn.read_mrs.insert(seg, mr);
                        r
                    }
                };
                self.sh.counters.gets.fetch_add(1, Ordering::Relaxed);
                let r =
                    self.send(conn, &Msg::Located { addr: r.at(loc.offset as u64), rkey: r.rkey, len: loc.len }, req);
                GetTimer::posted(timer, &self.sh.phases);
                r
            }
            None => {
                self.sh.counters.not_found.fetch_add(1, Ordering::Relaxed);
                self.send(conn, &Msg::NotFound, req)
            }
        }
    }
}

// ---- client side ----

impl<T: Transport> Client<T> {
    pub(crate) fn rdmp_put(&mut self, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let len = ENTRY_HEADER_SIZE as u32 + key.len() as u32 + value.len() as u32;
        let (addr, rkey, token) = match self.call_raw(&Msg::Alloc { len }, "RDMP allocation")? {
            Msg::Allocated { addr, rkey, token } => (addr, rkey, token),
            // A DELETE on a full pool: the server logs the tombstone itself.
            Msg::Error { code: ErrorCode::PoolFull, .. } if tomb => return self.server_delete(key),
            Msg::Error { code, message } => return Err(server_error(code, message)),
            m => return Err(Error::Protocol(format!("expected an allocation, got {m:?}"))),
        };
        let offset = token as u64 * 8;
        let n = self.encode(key, value, tomb, offset + fmt::slot_size(key.len(), value.len()))?;
        let imm = PutImm { offset, in_place: false }.encode().ok_or_else(|| Error::Protocol("bad token".into()))?;
        let wr = self.wr();
        self.qp.post_write_imm(wr, &self.entry_mr, 0, n as u32, addr, rkey, imm)?;
        let (version, _) = self.wait_put_ok()?;
        self.counters.appends += 1;
        Ok(PutInfo { version, in_place: false })
    }

    pub(crate) fn rdmp_get(&mut self, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let (addr, rkey, len) = match self.call(&Msg::Locate { key: key.to_vec() }, "RDMP locate")? {
            Msg::Located { addr, rkey, len } => (addr, rkey, len),
            Msg::NotFound => return Ok(None),
            m => return Err(Error::Protocol(format!("expected a location, got {m:?}"))),
        };
        if len as u64 > self.resp_mr.len() {
            self.resp_mr =
                self.t.alloc_mr((len as usize).next_power_of_two(), Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        }
        let wr = self.wr();
        self.qp.post_read(wr, &self.resp_mr, 0, len, addr, rkey)?;
        loop {
            let c = self.cq.wait(self.opts.timeout).map_err(|e| match e {
                Error::Timeout(d, _) => Error::Timeout(d, "RDMP READ"),
                e => e,
            })?;
            if c.wr_id == wr {
                c.ok("RDMP READ")?;
                break;
            }
            if !c.status.is_ok() {
                return Err(Error::Transport(format!("connection lost during RDMP READ: {}", c.status)));
            }
        }
        self.buf.resize(len as usize, 0);
        self.resp_mr.read(0, &mut self.buf)?;
        Ok(Some((0, len as usize)))
    }
}
