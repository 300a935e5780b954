//! What HERD and RFP share: a request region in server DRAM that one client WRITEs its
//! requests into and the server polls (no completion tells the server a WRITE landed),
//! and the client half's view of it.
//!
//! A request is one [`crate::wire::slot`] at the start of the region, stamped with the
//! client's next sequence number. The server copies a slot that carries the sequence
//! number it waits for into a private buffer and serves it only if its CRC verifies
//! there: the client can still write the region, so only the private copy is trusted.
//! A slot that does not verify (a WRITE still landing, or a forged slot) is looked at
//! again after a growing pause (1, 2, 4 .. 4096 polls), so a client that leaves a
//! large slot with a bad CRC costs the worker one copy per few thousand rounds, not
//! one per round: the other clients of the worker keep their service.
//!
//! One request is in flight per client (the client waits for each reply), so one slot
//! is the whole ring; the sequence number runs 1, 2, .. and skips 0 when it wraps. A
//! request the client gave up on (timed out) keeps the slot until its reply is in: the
//! next request first waits for that reply and drops it. Written over before the server
//! read it, the request would never be served, and the server would wait for its
//! sequence number for ever.
//!
//! May import: `error`, `link`, `service`, `transport`, `wire`.

use crate::error::{Error, Result};
use crate::link::Link;
use crate::service::Ctx;
use crate::transport::{Access, MemoryRegion, Transport};
use crate::wire::{slot, Msg, MAX_MESSAGE};

/// Bytes of a request region (or an RFP result region): a slot header and the largest
/// message.
pub(crate) const REGION: usize = slot::HEADER + MAX_MESSAGE;

/// The sequence number after `s` (0 is never used).
pub(crate) fn next_seq(s: u32) -> u32 {
    match s.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// The server's end of one client's request region.
pub(crate) struct RequestRing<T: Transport> {
    mr: T::Mr,
    /// The sequence number of the next request.
    next: u32,
    /// Polls to let pass before looking at a slot that did not verify again.
    skip: u32,
    backoff: u32,
    /// The private copy of the last request.
    buf: Vec<u8>,
}

impl<T: Transport> RequestRing<T> {
    /// A request region only `cx`'s client can WRITE.
    pub(crate) fn new(cx: &Ctx<'_, T>) -> Result<RequestRing<T>> {
        let mr = cx.private_region(REGION, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        Ok(RequestRing { mr, next: 1, skip: 0, backoff: 0, buf: Vec::new() })
    }

    /// The region, for the client's [`Msg::Rings`].
    pub(crate) fn region(&self) -> &T::Mr {
        &self.mr
    }

    /// The next request if its slot is whole: its slot header (sequence number and
    /// protocol word) and the message (a private copy).
    pub(crate) fn poll(&mut self) -> Result<Option<(slot::Header, &[u8])>> {
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(None);
        }
        let (map, base) = self.mr.mapping();
        let mut h = [0u8; slot::HEADER];
        map.read(base, &mut h)?;
        let Some(hd) = slot::peek(&h).filter(|hd| hd.seq == self.next) else { return Ok(None) };
        let total = slot::HEADER + (hd.len as usize).min(REGION - slot::HEADER);
        self.buf.resize(total, 0);
        map.read(base, &mut self.buf)?;
        // The length that counts is the one in the checked copy: the first look at the
        // header may have caught the sequence number new and the length still old.
        let Some((hd, payload)) = slot::check(&self.buf, self.next) else {
            self.backoff = (self.backoff * 2).clamp(1, 4096);
            self.skip = self.backoff;
            return Ok(None);
        };
        self.next = next_seq(self.next);
        self.backoff = 0;
        Ok(Some((hd, payload)))
    }
}

/// The client's view of its regions (from [`Msg::Rings`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rings {
    pub(crate) req_addr: u64,
    pub(crate) req_rkey: u32,
    pub(crate) req_len: u32,
    pub(crate) res_addr: u64,
    pub(crate) res_rkey: u32,
    pub(crate) res_len: u32,
}

impl Rings {
    /// The server's answer to [`Msg::RingsReq`]: the request region `req` and, for RFP,
    /// the result region `res`.
    pub(crate) fn describe<M: MemoryRegion>(req: &M, res: Option<&M>) -> Msg {
        let q = req.remote();
        let r = res.map(M::remote).unwrap_or(crate::transport::RemoteRegion { addr: 0, len: 0, rkey: 0 });
        Msg::Rings {
            req_addr: q.addr,
            req_rkey: q.rkey,
            req_len: u32::try_from(q.len).unwrap_or(u32::MAX),
            res_addr: r.addr,
            res_rkey: r.rkey,
            res_len: u32::try_from(r.len).unwrap_or(u32::MAX),
        }
    }

    /// Asks the server for this client's regions (one SEND round trip, once per
    /// connection).
    pub(crate) fn fetch<T: Transport>(l: &mut Link<T>, what: &'static str) -> Result<Rings> {
        match l.call(&Msg::RingsReq, what)? {
            Msg::Rings { req_addr, req_rkey, req_len, res_addr, res_rkey, res_len } => {
                // The server's lengths size this client's buffers: no more than a slot
                // of the largest message, and room for a header in a request region.
                let most = REGION as u32;
                if (req_len as usize) < slot::HEADER || req_len > most || res_len > most {
                    let m = format!(
                        "regions of {req_len} and {res_len} bytes (at most {most}; a request region holds a header)"
                    );
                    return Err(Error::Protocol(m));
                }
                Ok(Rings { req_addr, req_rkey, req_len, res_addr, res_rkey, res_len })
            }
            m => Err(Error::Protocol(format!("expected the request regions, got {m:?}"))),
        }
    }
}
