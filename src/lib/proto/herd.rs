//! HERD-style RPC (Kalia et al., SIGCOMM'14, as Kalia et al.'s "Design Guidelines for
//! High Performance RDMA Systems", ATC'16, describe its RPC): requests WRITTEN into a
//! per-client request region the server polls, responses SENT. One round trip per PUT
//! and GET.
//!
//! # The design
//!
//! HERD's clients WRITE requests (UC) into a request region in server memory, where the
//! server's cores poll; the server answers with a SEND (UD). An inbound WRITE costs the
//! server's NIC less than an inbound SEND (no receive descriptor to fetch), and a SEND
//! out costs less than a WRITE into many client buffers; HERD uses each verb where it is
//! cheapest.
//!
//! # What is reproduced
//!
//! - **Requests**: one unsignaled WRITE of a [`crate::wire::slot`] (the request message
//!   with a sequence number and CRC) into the client's request region
//!   (`proto::polled`); the server's worker polls it on every round of its loop.
//! - **Replies**: a SEND, as in [`super::rpc`]; PUT and GET are then RDMA-KV's (the
//!   entry copied DRAM -> PM on a PUT, PM -> DRAM on a GET; the same commit path).
//! - The guidelines' optimizations where this transport has them: selective signaling
//!   (the request WRITE is unsignaled: the reply completes it), inline (small replies go
//!   with `post_send_bytes`, copied at post time like a verbs inline send); doorbell
//!   batching has nothing to batch with one request in flight per client.
//!
//! # What differs, and why
//!
//! - Reliable connections throughout (the transport interface has no UC or UD).
//! - HERD's server trusts the last byte of a request to arrive last (the NIC writes in
//!   address order); `shm` copies with `memcpy`, whose store order within a copy is not
//!   promised, so the server believes a request only when its CRC verifies over a
//!   private copy (one pass over the request, one copy). A client that never completes
//!   a slot costs its worker a little, not the others their service.
//! - Polling: a worker polls its HERD clients' regions on every round; after 2 ms
//!   without work it parks for at most 50 us at a time (HERD's cores never sleep).
//! - The regions are set up by one SEND round trip on the connection's first request.

use super::polled::{next_seq, RequestRing, Rings};
use super::{rpc, ClientSide, Fetched, ServerSide};
use crate::error::Result;
use crate::link::{Link, PutInfo};
use crate::service::Ctx;
use crate::transport::Transport;
use crate::wire::Msg;

// ---- server side ----

/// HERD's server half: RDMA-KV's request handling behind a polled request region.
pub(crate) struct Server<T: Transport> {
    rpc: rpc::Server<T>,
    ring: Option<RequestRing<T>>,
}

impl<T: Transport> Server<T> {
    pub(crate) fn new(t: &T) -> Result<Server<T>> {
        Ok(Server { rpc: rpc::Server::new(t)?, ring: None })
    }
}

impl<T: Transport> ServerSide<T> for Server<T> {
    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::RingsReq => {
                let ring = match &mut self.ring {
                    Some(r) => r,
                    none => none.insert(RequestRing::new(cx)?),
                };
                let m = Rings::describe(ring.region(), None);
                cx.reply(&m, req)
            }
            m => self.rpc.on_msg(cx, m, req),
        }
    }

    fn poll(&mut self, cx: &mut Ctx<'_, T>) -> Result<bool> {
        let Server { rpc, ring } = self;
        let Some((_, raw)) = ring.as_mut().map(RequestRing::poll).transpose()?.flatten() else { return Ok(false) };
        rpc.on_receive(cx, raw)?;
        Ok(true)
    }

    fn polls(&self) -> bool {
        self.ring.is_some()
    }
}

// ---- client side ----

/// HERD's client half: its request region and the next sequence number.
#[derive(Default)]
pub(crate) struct Client {
    rings: Option<Rings>,
    seq: u32,
}

impl Client {
    /// WRITEs `m` into the request region (set up on first use).
    fn request<T: Transport>(&mut self, l: &mut Link<T>, m: &Msg) -> Result<()> {
        let r = match self.rings {
            Some(r) => r,
            None => *self.rings.insert(Rings::fetch(l, "HERD setup")?),
        };
        // The slot is free once the server answered what it holds (see `polled`).
        l.settle_abandoned()?;
        // The number is used up only by a request written: the server waits for it.
        let seq = next_seq(self.seq);
        l.write_slot(seq, 0, m, r.req_addr, r.req_rkey, r.req_len)?;
        self.seq = seq;
        Ok(())
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        self.request(l, &rpc::put_request(key, value, tomb)?)?;
        let m = l.wait_msg("PUT")?;
        rpc::put_reply(l, m)
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        self.request(l, &Msg::RpcGet { key: key.to_vec() })?;
        rpc::value_reply(l)
    }

    fn put_start(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8]) -> Result<Option<PutInfo>> {
        self.request(l, &rpc::put_request(key, value, false)?)?;
        Ok(None)
    }

    fn put_poll(&mut self, l: &mut Link<T>, _key: &[u8]) -> Result<Option<PutInfo>> {
        rpc::poll_put(l)
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        self.request(l, &Msg::RpcGet { key: key.to_vec() })?;
        Ok(true)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        rpc::poll_value(l, key, out)
    }
}
