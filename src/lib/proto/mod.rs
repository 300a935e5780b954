//! The protocols, one file each, behind two narrow traits:
//!
//! - [`boom`]: BOOM, one round trip per PUT and GET (the default);
//! - [`rdmp`]: the RDMP-KV baseline, two phases;
//! - [`rpc`]: the RDMA-KV baseline, RPC through server DRAM;
//! - [`rdmp_cc`]: RDMP-KV's client-centric mode, the client makes its WRITE durable
//!   itself with a one-sided FLUSH;
//! - [`herd`]: HERD-style RPC, requests WRITTEN into memory the server polls, replies SENT;
//! - [`rfp`]: remote fetching (Jakiro), requests WRITTEN, results READ by the client;
//! - [`pdpm_direct`]: pDPM-Direct, passive memory: clients lock, write and read a key's
//!   cell with one-sided operations, the server's CPU only hands out the table;
//! - [`clover`]: Clover, passive data: versions written out of place into chunks a
//!   metadata server hands out, linked by compare-and-swap.
//!
//! A protocol's client half implements `ClientSide` over a `Link` (the client's
//! connection: send a message, wait for a reply or a completion, post a one-sided
//! operation, its buffers); its server half implements `ServerSide` over a `Ctx`
//! (the pool and its commit path, the index, versions, GETs in flight, replies).
//! [`crate::client`] and [`crate::server`] know no protocol: they make the halves with
//! `client_side` and `server_side` and dispatch through the traits. Adding a
//! protocol is adding its file, its wire messages and its line in those two functions.
//!
//! The protocols share the wire format ([`crate::wire`]), the log and its commit path
//! ([`crate::log`]), the index, recovery, the server's worker pool and the transport:
//! only the message flow differs, so their latencies compare the protocols alone.
//!
//! May import: `error`, `link`, `service`, `log`, `index`, `transport`, `wire`, `units`.

pub mod boom;
pub mod clover;
pub mod herd;
pub mod pdpm_direct;
pub(crate) mod polled;
pub mod rdmp;
pub mod rdmp_cc;
pub mod rfp;
pub mod rpc;

use std::time::Duration;

use crate::error::{Error, Result};
use crate::link::{Link, PutInfo};
use crate::log::format::{self as fmt, ENTRY_HEADER_SIZE};
use crate::service::Ctx;
use crate::transport::Transport;
use crate::wire::{ErrorCode, Msg, Protocol};

/// What a GET found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// The key has no value.
    Absent,
    /// The value is in the caller's buffer, verified.
    Value,
    /// The entry read failed its checksum or is another key's (the slot was reused
    /// under the reader): read again.
    Torn,
    /// The READ finished too late to trust what it read (RDMP-KV's lease on the
    /// place), whatever it holds: read again.
    Late,
}

impl Fetched {
    /// What a GET of `key` found with its entry at `l.buf[start..start + n]` (`None`:
    /// the key is absent): the value goes into `out` once the entry verifies.
    pub(crate) fn in_buf<T: Transport>(
        l: &Link<T>,
        key: &[u8],
        entry: Option<(usize, usize)>,
        out: &mut Vec<u8>,
    ) -> Fetched {
        match entry {
            None => Fetched::Absent,
            Some((start, n)) if crate::link::decode_value(&l.buf, key, start, n, out) => Fetched::Value,
            Some(_) => Fetched::Torn,
        }
    }

    /// What a GET of `key` found with its `len`-byte entry at the start of the
    /// response region ([`Link::response_value`]).
    pub(crate) fn in_response<T: Transport>(
        l: &mut Link<T>,
        key: &[u8],
        len: u32,
        out: &mut Vec<u8>,
    ) -> Result<Fetched> {
        Ok(if l.response_value(len as usize, key, out)? { Fetched::Value } else { Fetched::Torn })
    }
}

/// A protocol's client half: how a PUT, a GET and a SCAN travel.
pub(crate) trait ClientSide<T: Transport>: Send {
    /// Stores (or, with `tomb`, deletes) `key`; returns once the server acknowledged it
    /// as durable. Sizes are already checked against the server's limits.
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo>;

    /// Fetches the entry of `key` into `l.buf`; returns where it starts and its length,
    /// or `None` when the server has no such key. The caller verifies it.
    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>>;

    /// Fetches `key`'s value into `out`, verified against its entry's checksum and key.
    /// The default fetches the entry into `l.buf` with [`ClientSide::get`] and takes the
    /// value from there; a protocol whose entry lands in the link's response region
    /// overrides it to take the value from the region straight into `out`, one copy of
    /// the value fewer (see [`Link::response_value`]).
    fn get_value(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Fetched> {
        let entry = self.get(l, key)?;
        Ok(Fetched::in_buf(l, key, entry, out))
    }

    /// Starts a PUT of `key` (not a DELETE) and returns without waiting for the
    /// server's answer, which [`ClientSide::put_poll`] then collects: `None` while it
    /// is in flight, `Some` when it is already done, as it always is with the default
    /// (a whole [`ClientSide::put`]).
    fn put_start(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8]) -> Result<Option<PutInfo>> {
        self.put(l, key, value, false).map(Some)
    }

    /// The answer to the PUT [`ClientSide::put_start`] left in flight, if it has come.
    fn put_poll(&mut self, _l: &mut Link<T>, _key: &[u8]) -> Result<Option<PutInfo>> {
        Err(Error::invalid("no PUT in flight: this protocol has no split PUT"))
    }

    /// Sends a GET of `key` and returns without waiting for the answer, which
    /// [`ClientSide::get_poll`] then collects: how a thread keeps requests of several
    /// clients in flight at once. `false` for a protocol without such a split GET (the
    /// default): the caller does a whole [`ClientSide::get_value`] instead.
    fn get_start(&mut self, _l: &mut Link<T>, _key: &[u8]) -> Result<bool> {
        Ok(false)
    }

    /// The answer to the GET [`ClientSide::get_start`] sent, if it has come (`None`:
    /// not yet), with the value in `out` as [`ClientSide::get_value`] leaves it.
    fn get_poll(&mut self, _l: &mut Link<T>, _key: &[u8], _out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        Err(Error::invalid("no GET in flight: this protocol has no split GET"))
    }

    /// Whether the split request in flight waits for a reply (a message or a data
    /// immediate) rather than a READ of its own: a request given up on then has a
    /// late reply to drop ([`Link::abandon_reply`]).
    fn awaits_reply(&self) -> bool {
        true
    }

    /// Up to `count` live entries from `start` on, in key order.
    fn scan(&mut self, _l: &mut Link<T>, _start: &[u8], _count: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Err(Error::Unsupported("scans are implemented for the boom protocol only".into()))
    }
}

/// A protocol's server half for one client: what each request does.
pub(crate) trait ServerSide<T: Transport>: Send {
    /// A message arrived in a receive buffer; `raw` is read where it landed (DRAM).
    fn on_receive(&mut self, cx: &mut Ctx<'_, T>, raw: &[u8]) -> Result<()> {
        let (m, req) = Msg::decode(raw)?;
        self.on_msg(cx, m, req)
    }

    /// A decoded message; what a protocol does not handle goes to [`Ctx::common`].
    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()>;

    /// A WRITE_WITH_IMM of the client landed (immediate `imm`).
    fn on_write_imm(&mut self, cx: &mut Ctx<'_, T>, _imm: u32) -> Result<()> {
        cx.refuse(0, ErrorCode::BadRequest, "WRITE_WITH_IMM not valid here".into())
    }

    /// Serves the next request this half finds by polling memory (HERD, RFP: requests
    /// WRITTEN into a region of the server, which no completion announces); called on
    /// every round of the worker's loop once [`ServerSide::polls`] said so. Returns
    /// whether it served one.
    fn poll(&mut self, _cx: &mut Ctx<'_, T>) -> Result<bool> {
        Ok(false)
    }

    /// Whether this half polls memory (asked after every request it receives).
    fn polls(&self) -> bool {
        false
    }

    /// The client is leaving, its segment still active and registered: settle what
    /// this half left unfinished in it (RDMP-CC counts its client's last PUT).
    fn before_close(&mut self, _cx: &mut Ctx<'_, T>) {}

    /// The client is leaving: release what this half holds for it.
    fn on_close(&mut self) {}
}

/// Receive buffers of a protocol: what each side posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveBuffers {
    /// Bytes of each receive the client posts.
    pub client: u32,
    /// Bytes of each receive the server posts (the largest request).
    pub server: u32,
    /// Receives the server keeps posted per client.
    pub server_depth: u32,
}

/// The largest value protocol `p` carries with the longest key, whatever the server
/// allows: the RPC designs (RDMA-KV, HERD, RFP) carry a PUT's entry and a GET's value
/// in one message ([`crate::wire::MAX_MESSAGE`], with its header and length word);
/// the others in one transfer ([`crate::service::MAX_VALUE_LIMIT`]). A server
/// announces the smaller of this and its own limit, so a client refuses a value
/// before sending it.
pub fn value_limit(p: Protocol) -> u32 {
    match p {
        Protocol::Rpc | Protocol::Herd | Protocol::Rfp => {
            let overhead = crate::wire::MSG_HEADER as u64 + 4 + ENTRY_HEADER_SIZE + u64::from(fmt::MAX_KEY_LEN);
            (crate::wire::MAX_MESSAGE as u64 - overhead) as u32
        }
        _ => crate::service::MAX_VALUE_LIMIT,
    }
}

/// Receive buffers for the one-sided protocols' control messages.
const CONTROL_BUFFERS: ReceiveBuffers = ReceiveBuffers { client: 64 << 10, server: 4096, server_depth: 8 };

/// The receive buffers protocol `p` needs.
pub fn receive_buffers(p: Protocol) -> ReceiveBuffers {
    match p {
        Protocol::Boom | Protocol::Rdmp | Protocol::RdmpCc | Protocol::PdpmDirect | Protocol::Clover => CONTROL_BUFFERS,
        Protocol::Rpc => rpc::RECEIVE_BUFFERS,
        // Replies (with values) are SENT; requests come by WRITE, the receives only
        // carry the setup and stats requests.
        // RFP's the same: its results come SENT in server-reply mode.
        Protocol::Herd | Protocol::Rfp => ReceiveBuffers { client: rpc::RECEIVE_BUFFERS.client, ..CONTROL_BUFFERS },
    }
}

/// Settings of a client half (from [`crate::client::ClientOptions`]).
#[derive(Clone, Debug)]
pub(crate) struct ClientTuning {
    /// BOOM: hybrid or append-only updates.
    pub(crate) update_mode: boom::hybrid::UpdateMode,
    /// BOOM: told of every write's target.
    pub(crate) on_write: Option<boom::WriteHook>,
    /// How long a segment grant keeps asking a full pool.
    pub(crate) pool_full_wait: Duration,
    /// RFP: the fetch size.
    pub(crate) fetch_size: rfp::FetchSize,
    /// RFP: how results come back.
    pub(crate) rfp_mode: rfp::ResultMode,
    /// pDPM-Direct: the cells and value size to ask for if the pool has no table.
    pub(crate) cells: (u64, u32),
    /// Clover: the bytes of chunks to ask for if the pool has no arena.
    pub(crate) clover_data: u64,
}

/// The client half of protocol `p`.
pub(crate) fn client_side<T: Transport>(p: Protocol, tuning: &ClientTuning) -> Box<dyn ClientSide<T>> {
    match p {
        Protocol::Boom => Box::new(boom::Client::new(tuning)),
        Protocol::Rdmp => Box::new(rdmp::Client::default()),
        Protocol::Rpc => Box::new(rpc::Client),
        Protocol::RdmpCc => Box::new(rdmp_cc::Client::default()),
        Protocol::Herd => Box::<herd::Client>::default(),
        Protocol::Rfp => Box::new(rfp::Client::new(tuning.fetch_size, tuning.rfp_mode)),
        Protocol::PdpmDirect => Box::new(pdpm_direct::Client::new(tuning.cells.0, tuning.cells.1)),
        Protocol::Clover => Box::new(clover::Client::new(tuning.cells.0, tuning.clover_data, tuning.cells.1)),
    }
}

/// The server half of protocol `p` for one client.
pub(crate) fn server_side<T: Transport>(p: Protocol, t: &T) -> Result<Box<dyn ServerSide<T>>> {
    Ok(match p {
        Protocol::Boom => Box::new(boom::Server),
        Protocol::Rdmp => Box::new(rdmp::Server::default()),
        Protocol::Rpc => Box::new(rpc::Server::new(t)?),
        Protocol::RdmpCc => Box::new(rdmp_cc::Server::default()),
        Protocol::Herd => Box::new(herd::Server::new(t)?),
        Protocol::Rfp => Box::new(rfp::Server::new(t)?),
        Protocol::PdpmDirect => Box::new(pdpm_direct::Server::default()),
        Protocol::Clover => Box::new(clover::Server::default()),
    })
}

/// A DELETE sent to the server as a tombstone entry for its own log (BOOM with no room
/// in its segment, RDMP on a full pool): no segment is needed.
fn server_delete<T: Transport>(l: &mut Link<T>, key: &[u8], wait: Duration) -> Result<PutInfo> {
    let mut e = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len()];
    fmt::encode_entry(&mut e, key, b"", true, 0)?;
    // The tombstone log's reserved segment can be full too; then the DELETE waits for
    // the cleaner, which compacts a pool that refuses clients, as a PUT's grant does.
    let m = Msg::RpcPut { entry: e };
    match while_pool_full(wait, || l.call(&m, "DELETE"))? {
        Msg::PutOk { version, .. } => Ok(PutInfo { version, in_place: false }),
        m => Err(Error::Protocol(format!("expected a DELETE reply, got {m:?}"))),
    }
}

/// How long a client asks a full pool again ([`crate::client::ClientOptions::pool_full_wait`]'s
/// default; the DELETEs of RDMP-KV and RDMP-CC, which take no option, wait this).
pub const POOL_FULL_WAIT: Duration = Duration::from_secs(2);

/// `ask` again while the server refuses it for a full pool, for up to `wait` (pauses
/// from 2 ms, doubling to 50 ms): the cleaner frees segments in the background, and
/// compacts at once a pool that refuses clients. Any other answer is returned.
fn while_pool_full<R>(wait: Duration, mut ask: impl FnMut() -> Result<R>) -> Result<R> {
    let deadline = std::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(2);
    loop {
        match ask() {
            Err(Error::Server { code: ErrorCode::PoolFull, .. }) if std::time::Instant::now() + pause < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}
