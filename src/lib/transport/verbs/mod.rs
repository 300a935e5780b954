//! The `verbs` backend: real ibverbs through rdma-sys (cargo feature `rdma`), for
//! InfiniBand, RoCE and soft-RoCE (`rxe`) devices.
//!
//! **Status:** CI runs this backend on soft-RoCE (`rxe0`) in a QEMU guest
//! (`ci/check-rdma-vm.sh` through `ci/rdma-vm.sh`): the conformance suite, the kv suite,
//! a kill test, a crash test and a CLI session, all over verbs. It has not run on
//! RDMA hardware (a ConnectX NIC) in this project's CI.
//!
//! # Mapping onto verbs
//!
//! | interface                        | verbs                                                   |
//! |----------------------------------|---------------------------------------------------------|
//! | [`VerbsTransport::new`]          | `ibv_get_device_list`, `ibv_open_device`, `ibv_alloc_pd`; port and GID chosen by [`VerbsConfig`] |
//! | [`Transport::alloc_mr`], [`Transport::register`] | `ibv_reg_mr` of the mapping's memory (one region per call, e.g. per granted segment) |
//! | [`Transport::register_bound`]    | `ibv_reg_mr` for local access and `IBV_ACCESS_MW_BIND` only, `ibv_alloc_mw` (type 2) and an `IBV_WR_BIND_MW` on the queue pair; the window's rkey is the region's (see [Memory windows](#memory-windows)) |
//! | [`Transport::create_cq`]         | `ibv_create_comp_channel` + `ibv_create_cq`, resized (`ibv_resize_cq`) as queue pairs attach |
//! | [`Transport::connect`], [`Listener::accept`] | an RC queue pair, RESET -> INIT -> RTR -> RTS with `{lid, qpn, psn, gid, mtu}` exchanged over TCP like perftest (see [Handshake](#handshake)) |
//! | [`QueuePair`] posts              | `ibv_post_send` (SEND, RDMA WRITE, WRITE_WITH_IMM, READ), `ibv_post_recv` |
//! | [`CompletionQueue::poll`]/`wait` | `ibv_poll_cq`; `wait` spins, then `ibv_req_notify_cq` and poll(2) on the channel |
//!
//! Access flags: a region's [`Access`] becomes `ibv_access_flags`; `REMOTE_WRITE` also
//! sets `LOCAL_WRITE` because verbs requires it (receives into such a region are still
//! refused unless the region was registered with [`Access::LOCAL_WRITE`]). The device
//! enforces rkey, bounds and rights of one-sided operations itself.
//!
//! # Where the interface asks more than a NIC does
//!
//! - **Unsignaled WRITEs and SENDs, and selective signaling.** An unsignaled WRITE or
//!   inline SEND is posted unsignaled. So that its send-queue slot is reclaimed, every
//!   `sq_depth / 2`-th consecutive unsignaled request is posted signaled and its
//!   completion is consumed by [`CompletionQueue::poll`] without being reported; an
//!   unsignaled SEND from a staging buffer is always posted signaled, unreported, so
//!   that the buffer goes back to the spares at once. Work-request ids are
//!   translated: the wire `wr_id` carries a per-queue-pair tag and sequence number,
//!   which also supplies `opcode` and `byte_len` for send completions (verbs leaves
//!   them undefined on errors and does not report `byte_len` for sends).
//! - **Small sends are inline.** [`QueuePair::post_send_bytes`] up to the queue pair's
//!   `max_inline_data` (asked for: [`VerbsConfig::max_inline`]) goes out with
//!   `IBV_SEND_INLINE`; larger ones are copied into a registered staging buffer, kept
//!   until the send completes and then reused.
//! - **Receive checks.** A receive buffer without [`Access::LOCAL_WRITE`], outside its
//!   region, or from another protection domain completes at once with
//!   [`WcStatus::LocalProtectionError`] (a NIC would only notice when a message arrives).
//! - **Teardown reaches the peer.** RC has no disconnect message, so the handshake
//!   socket stays open as a control channel (like `rdma_cm`'s): when a queue pair goes
//!   to the error state (an error completion, [`QueuePair::close`], drop) it is moved
//!   to ERR, which flushes its posted receives, and a "bye" goes to the peer, whose
//!   control thread moves its queue pair to ERR too. A peer process that dies closes
//!   the socket, with the same effect.
//! - **RNR.** [`TransportConfig::rnr_timeout`] becomes `min_rnr_timer` x `rnr_retry`
//!   (the shortest timer whose 6 retries cover the timeout); `rnr_retry` 7 (retry
//!   forever) is never used, so a SEND without a RECV fails within a bounded time, as
//!   the interface promises.
//! - **Doorbell batching.** [`QueuePair::post_write_batch`] posts its WRITEs as one
//!   chained `ibv_post_send` and [`QueuePair::post_recv_batch`] its receives as one
//!   chained `ibv_post_recv` (one doorbell each). One queue pair per client thread is
//!   how the client library already works.
//! - **Switches.** Inline data, selective signaling, doorbell batching and batched
//!   receive refill can each be turned off ([`VerbsTuning`]), so that their effect can
//!   be measured (`boomctl bench-transport --transport verbs --tuning-off`). With inline
//!   on, WRITEs, WRITE_WITH_IMMs and SENDs from registered regions up to
//!   `max_inline_data` go inline too, when the source lies inside a live region of this
//!   protection domain (inline data bypasses the lkey check, so anything else keeps the
//!   scatter/gather path and fails at the device as it should).
//!
//! # Memory windows
//!
//! A server binds every region it exposes to the one client it is for
//! ([`Transport::register_bound`]). Here that is a type-2 memory window (a device with
//! `IBV_DEVICE_MEM_WINDOW_TYPE_2A` or `_2B`): the region is registered without remote
//! rights, so its own rkey reaches nothing, and a window over it is bound by a work
//! request on the client's queue pair, with the remote rights asked for and a new key
//! byte. Only that queue pair's peer can use the window's rkey; the device refuses it on
//! any other connection (a remote access error, which moves the offender's queue pair to
//! the error state). The bind is posted unreported ahead of anything posted later on the
//! queue pair, which the device executes in order, so it is done before the message that
//! hands the rkey out; a bind that fails fails the queue pair. [`MemoryRegion::deregister`]
//! deallocates the window (its rkey is then refused) before it deregisters the region,
//! and a queue pair closes the windows still bound to it before it is destroyed. A device
//! without type-2 windows gets unbound regions, as [`Transport::register`] makes, and a
//! log line once per transport. A violation the device raises
//! `IBV_EVENT_QP_ACCESS_ERR` for on this side is counted
//! ([`Transport::access_violations`]).
//!
//! # Handshake
//!
//! The listener is a TCP socket. Every message is a 48-byte little-endian header
//! followed by `payload_len` bytes:
//!
//! | offset | size | field                                                         |
//! |--------|------|---------------------------------------------------------------|
//! | 0      | 8    | magic "BOOMKVIB"                                              |
//! | 8      | 2    | version ([`PROTOCOL_VERSION`](super::PROTOCOL_VERSION))      |
//! | 10     | 2    | kind: 1 hello, 2 accept, 3 reject, 4 ready, 5 bye             |
//! | 12     | 4    | queue-pair number (24 bits)                                   |
//! | 16     | 4    | first PSN (24 bits)                                           |
//! | 20     | 2    | LID                                                           |
//! | 22     | 1    | active MTU (`ibv_mtu` code 1..=5; 0 in reject/ready/bye)      |
//! | 23     | 1    | RDMA READs accepted at once as responder                      |
//! | 24     | 16   | GID (zeros when the port routes by LID)                       |
//! | 40     | 4    | `payload_len`, at most [`MAX_PRIVATE_DATA`]                   |
//! | 44     | 4    | reserved, 0                                                   |
//!
//! The payload is the private data (hello: the client's, accept: the server's answer),
//! or a UTF-8 reason (reject, bye).
//!
//! Sequence: client -> hello; server -> accept (its queue pair is in RTR, then RTS) or
//! reject; client moves its queue pair to RTR and RTS -> ready. The server reads the
//! hello on a thread of its own (the greeter's, as tcp does), within
//! [`TransportConfig::handshake_timeout`] of the connection, and the ready in the
//! connection's control reader, within as long again of the server's answer: a client
//! that sends neither holds up no other client, and one whose ready does not come in
//! time has its queue pair failed. Its accept has returned by then, so meanwhile it has
//! a place among the server's clients (the server sends nothing before the client's
//! first request, which comes after its ready; a control message other than ready fails
//! it at once). The socket then stays
//! open as the connection's control channel: either side sends bye (with a reason)
//! when its queue pair goes to the error state or is closed, and a socket that ends
//! means the peer is gone. Either moves the other side's queue pair to the error state,
//! which flushes its posted receives, as `rdma_cm`'s disconnect does.
//!
//! # Completion-queue waiting
//!
//! [`CompletionQueue::wait`] polls for [`TransportConfig::spin`], then arms the queue
//! (`ibv_req_notify_cq`), polls once more (a completion may have slipped in before the
//! arm), and sleeps in poll(2) on the completion channel's fd and an eventfd (which
//! software-generated completions signal), at most 100 ms at a time before re-arming.
//! Every event is acknowledged at once, so destroying the queue never blocks.
//!
//! # Asynchronous events
//!
//! Each transport (device context) has a thread reading `ibv_get_async_event` (waiting
//! at most 100 ms at a time, so it ends soon after the transport): every event is
//! acknowledged at once and logged; a queue pair the device reports broken
//! (`IBV_EVENT_QP_FATAL`, `_QP_REQ_ERR`, `_QP_ACCESS_ERR`, `_PATH_MIG_ERR`) is moved to
//! the error state with a bye to its peer, which closes that connection only; a fatal
//! device error (`IBV_EVENT_DEVICE_FATAL`) closes them all. Port changes
//! (`IBV_EVENT_PORT_ERR`, `_PORT_ACTIVE`, ...) and completion-queue errors are logged.
//!
//! # Not handled
//!
//! Memory on a file system
//! DAX mount cannot be pinned by the kernel; registration then falls back to
//! on-demand paging (`IBV_ACCESS_ON_DEMAND`), which needs a NIC that supports it, or
//! use a device-DAX node (`/dev/daxX.Y`). `ibv_fork_init` is not called: a child
//! process started with `std::process::Command` (posix_spawn) shares no pinned pages,
//! and kernels since 5.13 copy pinned pages at fork anyway.

mod attr;
mod ffi;
mod handshake;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use rustix::event::EventfdFlags;

use self::attr::{LocalPort, PeerInfo, RnrParams, LINK_LAYER_ETHERNET};
use self::ffi::{Hca, Payload, QpCaps, RawCq, RawMr, RawMw, RawQp, RecvWr, SendOp, SendWr, Sge, Wc};
use self::handshake::{read_msg, Kind, Msg, ReadBy, ReadError};
use super::{
    deadline, log_event, Access, Backend, Completion, CompletionQueue, Endpoint, Handshake, Listener, MemoryRegion,
    QpStats, QueuePair, RemoteRegion, StatCounters, Transport, TransportConfig, WcOpcode, WcStatus, WriteWr,
    MAX_MESSAGE, MAX_PRIVATE_DATA,
};
use crate::error::{Error, Result};
use crate::pmem::Mapping;

/// Environment variable naming the device ([`VerbsConfig::from_env`]).
pub const ENV_DEVICE: &str = "BOOMKV_RDMA_DEVICE";
/// Environment variable with the port number.
pub const ENV_PORT: &str = "BOOMKV_RDMA_PORT";
/// Environment variable with the GID index (RoCE).
pub const ENV_GID_INDEX: &str = "BOOMKV_RDMA_GID_INDEX";

/// Names of the RDMA devices on this machine. Fails with the "no RDMA device found"
/// error where libibverbs finds no devices at all.
pub fn devices() -> Result<Vec<String>> {
    ffi::device_names()
}

/// Device choice and tunables of the verbs backend.
#[derive(Clone, Debug)]
pub struct VerbsConfig {
    /// Device name (`mlx5_0`, `rxe0`); `None` takes the first device.
    pub device: Option<String>,
    /// Port number, from 1.
    pub port: u8,
    /// GID table index for RoCE (or InfiniBand across subnets). `None`: InfiniBand
    /// routes by LID; RoCE picks a RoCE v2 IPv4-mapped GID if there is one.
    pub gid_index: Option<u8>,
    /// Inline data asked for per queue pair; sends up to what the device grants skip the
    /// DMA read of the payload. Falls back to 64 and then 0 when the device refuses.
    pub max_inline: u32,
    /// Send queue depth per queue pair, at most (also bounded by
    /// [`TransportConfig::sq_depth`] and the device). Every queue pair reserves this many
    /// entries in its send completion queue, so it bounds how many queue pairs one
    /// completion queue can serve (soft-RoCE allows 32k entries per queue).
    pub max_send_wr: u32,
    /// Receive queue depth per queue pair, at most (also bounded by
    /// [`TransportConfig::rq_depth`] and the device); reserved like `max_send_wr`.
    pub max_recv_wr: u32,
    /// The RDMA design guidelines' optimizations, each with an on/off switch.
    pub tuning: VerbsTuning,
    /// The tunables every backend shares.
    pub transport: TransportConfig,
}

/// The optimizations of the RDMA design guidelines (Kalia et al., "Design Guidelines
/// for High Performance RDMA Systems"), each switchable so that its effect can be
/// measured (`boomctl bench-transport --transport verbs` measures each one off next to
/// all on, in the same run). All on by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbsTuning {
    /// Inline small WRITEs, WRITE_WITH_IMMs and SENDs (`IBV_SEND_INLINE` up to the
    /// queue pair's `max_inline_data`): the payload travels in the work request, so the
    /// NIC skips one DMA read. Off: no inline data is asked for at all.
    pub inline: bool,
    /// Selective signaling: of a run of unsignaled WRITEs and SENDs only one in
    /// `sq_depth / 2` is signaled (to reclaim send-queue slots) and reaped silently.
    /// Off: every one is signaled, and every completion reaped.
    pub selective_signaling: bool,
    /// Doorbell batching: [`QueuePair::post_write_batch`] posts its WRITEs as one
    /// chained `ibv_post_send` (one doorbell). Off: one `ibv_post_send` each.
    pub doorbell_batching: bool,
    /// Batched receive refill: [`QueuePair::post_recv_batch`] posts its buffers as one
    /// chained `ibv_post_recv`. Off: one `ibv_post_recv` each.
    pub batched_recv: bool,
}

impl Default for VerbsTuning {
    fn default() -> Self {
        VerbsTuning { inline: true, selective_signaling: true, doorbell_batching: true, batched_recv: true }
    }
}

impl VerbsTuning {
    /// Every optimization off.
    pub const NONE: VerbsTuning =
        VerbsTuning { inline: false, selective_signaling: false, doorbell_batching: false, batched_recv: false };
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            device: None,
            port: 1,
            gid_index: None,
            max_inline: 220,
            max_send_wr: 256,
            max_recv_wr: 256,
            tuning: VerbsTuning::default(),
            transport: TransportConfig::default(),
        }
    }
}

impl VerbsConfig {
    /// The default configuration with [`ENV_DEVICE`], [`ENV_PORT`] and [`ENV_GID_INDEX`]
    /// applied where set (empty counts as unset).
    pub fn from_env() -> Result<VerbsConfig> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`VerbsConfig::from_env`] with another source of variables.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<VerbsConfig> {
        let get = |k: &str| get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let mut c = VerbsConfig { device: get(ENV_DEVICE), ..Default::default() };
        if let Some(p) = get(ENV_PORT) {
            c.port = p
                .parse::<u8>()
                .ok()
                .filter(|p| *p >= 1)
                .ok_or_else(|| Error::invalid(format!("{ENV_PORT}={p}: expected a port number 1..=255")))?;
        }
        if let Some(g) = get(ENV_GID_INDEX) {
            c.gid_index = Some(
                g.parse::<u8>()
                    .map_err(|_| Error::invalid(format!("{ENV_GID_INDEX}={g}: expected a GID index 0..=255")))?,
            );
        }
        Ok(c)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `host:port` of a verbs endpoint.
fn host_port(ep: &Endpoint, what: &str) -> Result<String> {
    match ep {
        Endpoint::Verbs(hp) => Ok(hp.clone()),
        other => Err(Error::invalid(format!("the verbs transport cannot {what} {other} (expected verbs://host:port)"))),
    }
}

// ---------------------------------------------------------------------------------------
// Work-request ids

/// Bits of the sequence number in a posted `wr_id`.
const SEQ_BITS: u32 = 39;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const RECV_BIT: u64 = 1 << SEQ_BITS;
/// Queue-pair tags are 24 bits, never 0.
const TAG_MASK: u64 = 0xff_ffff;

static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

fn next_tag() -> u64 {
    loop {
        let t = NEXT_TAG.fetch_add(1, Ordering::Relaxed) & TAG_MASK;
        if t != 0 {
            return t;
        }
    }
}

/// The `wr_id` posted to the device: tag (24 bits), receive flag, sequence (39 bits).
fn encode_wr_id(tag: u64, recv: bool, seq: u64) -> u64 {
    (tag << (SEQ_BITS + 1)) | if recv { RECV_BIT } else { 0 } | (seq & SEQ_MASK)
}

/// `(tag, recv, seq)` of a posted `wr_id`.
fn decode_wr_id(id: u64) -> (u64, bool, u64) {
    (id >> (SEQ_BITS + 1), id & RECV_BIT != 0, id & SEQ_MASK)
}

// ---------------------------------------------------------------------------------------
// Transport

/// The verbs backend: one device context and protection domain. Cheap to clone.
#[derive(Clone)]
pub struct VerbsTransport {
    inner: Arc<TrInner>,
}

struct TrInner {
    cfg: VerbsConfig,
    hca: Arc<Hca>,
    port: LocalPort,
    rnr: RnrParams,
    /// Live queue pairs by number, for asynchronous events that name one.
    live: Mutex<HashMap<u32, Weak<QpShared>>>,
    /// Whether "regions are not bound" has been logged (a device without type-2 memory
    /// windows), once per transport.
    unbound_said: AtomicBool,
    /// `IBV_EVENT_QP_ACCESS_ERR` events: peers' one-sided operations the device refused.
    violations: AtomicU64,
    /// Live regions registered with a remote right ([`Transport::exposed_regions`]).
    exposed: Arc<AtomicU64>,
}

impl fmt::Debug for VerbsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsTransport")
            .field("device", &self.inner.hca.name)
            .field("port", &self.inner.port.port_num)
            .field("link_layer", &attr::link_layer_name(self.inner.port.link_layer))
            .field("gid_index", &self.inner.port.gid_index)
            .finish()
    }
}

/// The RoCE GID types sysfs reports, by index (`None` where unknown).
fn gid_type(device: &str, port: u8, index: u32) -> Option<String> {
    let p = format!("/sys/class/infiniband/{device}/ports/{port}/gid_attrs/types/{index}");
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

impl VerbsTransport {
    /// Opens the device, allocates a protection domain and reads the port. On a machine
    /// without RDMA devices this fails with "no RDMA device found; use --transport shm
    /// or tcp".
    pub fn new(cfg: VerbsConfig) -> Result<VerbsTransport> {
        let hca = Arc::new(Hca::open(cfg.device.as_deref())?);
        let pa = hca.query_port(cfg.port).map_err(|e| {
            Error::Transport(format!("{} port {}: {e} (choose the port with {ENV_PORT} or --port)", hca.name, cfg.port))
        })?;
        const PORT_ACTIVE: u32 = 4;
        if pa.state != PORT_ACTIVE {
            let state = match pa.state {
                1 => "DOWN",
                2 => "INIT",
                3 => "ARMED",
                _ => "not active",
            };
            return Err(Error::Transport(format!(
                "{} port {} is {state}: is the link up (and, on InfiniBand, a subnet manager running)?",
                hca.name, cfg.port
            )));
        }
        let gid_index = match cfg.gid_index {
            Some(i) => Some(i),
            None if pa.link_layer == LINK_LAYER_ETHERNET => {
                let mut table = Vec::new();
                for i in 0..pa.gid_tbl_len.min(256) {
                    if let Ok(gid) = hca.query_gid(cfg.port, i) {
                        table.push((i as u8, gid, gid_type(&hca.name, cfg.port, i)));
                    }
                }
                Some(attr::pick_gid(&table).ok_or_else(|| {
                    Error::Transport(format!(
                        "{} port {} (RoCE) has no usable GID: give the port's netdev an IP address",
                        hca.name, cfg.port
                    ))
                })?)
            }
            None => None,
        };
        let gid = hca.query_gid(cfg.port, gid_index.unwrap_or(0) as u32).unwrap_or([0; 16]);
        let port = LocalPort {
            port_num: cfg.port,
            lid: pa.lid,
            link_layer: pa.link_layer,
            active_mtu: pa.active_mtu,
            gid_index,
            gid,
            responder_resources: hca.limits.max_qp_rd_atom.min(attr::MAX_RD_ATOMIC),
            initiator_depth: hca.limits.max_qp_init_rd_atom.min(attr::MAX_RD_ATOMIC),
        };
        let rnr = attr::rnr_params(cfg.transport.rnr_timeout);
        hca.async_events_nonblocking()?;
        let inner = Arc::new(TrInner {
            cfg,
            hca,
            port,
            rnr,
            live: Mutex::new(HashMap::new()),
            unbound_said: AtomicBool::new(false),
            violations: AtomicU64::new(0),
            exposed: Arc::new(AtomicU64::new(0)),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name(format!("boomkv-verbs-events-{}", inner.hca.name))
            .spawn(move || async_events(weak))
            .map_err(|e| Error::io("spawn the verbs event thread", e))?;
        Ok(VerbsTransport { inner })
    }

    /// [`VerbsTransport::new`] with [`VerbsConfig::from_env`].
    pub fn from_env() -> Result<VerbsTransport> {
        VerbsTransport::new(VerbsConfig::from_env()?)
    }

    /// The device in use.
    pub fn device_name(&self) -> &str {
        &self.inner.hca.name
    }

    /// The GID index used as source GID, if any.
    pub fn gid_index(&self) -> Option<u8> {
        self.inner.port.gid_index
    }

    /// Whether the device has type-2 memory windows, through which the regions a server
    /// exposes are bound to the one client each is for ([`Transport::register_bound`]).
    pub fn binds_regions(&self) -> bool {
        self.inner.hca.limits.mw_type2
    }

    fn check_cq(&self, cq: &VerbsCq) -> Result<()> {
        if self.inner.hca.owns(&cq.inner.raw) {
            Ok(())
        } else {
            Err(Error::invalid("completion queue belongs to another verbs transport"))
        }
    }

    /// A queue pair in INIT, registered with its completion queues.
    fn new_qp(&self, send_cq: &VerbsCq, recv_cq: &VerbsCq) -> Result<Arc<QpShared>> {
        self.check_cq(send_cq)?;
        self.check_cq(recv_cq)?;
        let t = &self.inner;
        let lim = t.hca.limits;
        let cfg = &t.cfg.transport;
        let mut want = QpCaps {
            max_send_wr: cfg.sq_depth.min(t.cfg.max_send_wr).clamp(1, lim.max_qp_wr),
            max_recv_wr: cfg.rq_depth.min(t.cfg.max_recv_wr).clamp(1, lim.max_qp_wr),
            max_inline: if t.cfg.tuning.inline { t.cfg.max_inline } else { 0 },
        };
        let mut tries = vec![want.max_inline, want.max_inline.min(64), 0];
        tries.dedup();
        let mut created = None;
        let mut last = None;
        for inline in tries {
            want.max_inline = inline;
            match t.hca.create_qp(&send_cq.inner.raw, &recv_cq.inner.raw, want) {
                Ok(x) => {
                    created = Some(x);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some((raw, caps)) = created else {
            return Err(last.unwrap_or_else(|| Error::Transport("ibv_create_qp failed".into())));
        };
        // Room in the completion queues for everything this queue pair can have
        // outstanding: a completion queue that overflows breaks every queue pair on it.
        let reserved =
            [send_cq.inner.reserve(caps.max_send_wr as u64)?, recv_cq.inner.reserve(caps.max_recv_wr as u64)?];
        let sh = Arc::new(QpShared {
            raw,
            _reserved: reserved,
            tag: next_tag(),
            caps,
            signal_every: if t.cfg.tuning.selective_signaling { (caps.max_send_wr / 2).max(1) } else { 1 },
            psn: rand::random::<u32>() & 0xff_ffff,
            peer_qp_num: AtomicU32::new(0),
            send_cq: send_cq.inner.clone(),
            recv_cq: recv_cq.inner.clone(),
            sq: Mutex::new(SendQueue::default()),
            rq: Mutex::new(RecvQueue::default()),
            error: AtomicBool::new(false),
            reason: Mutex::new(None),
            ctrl: OnceLock::new(),
            flush_mr: OnceLock::new(),
            windows: Mutex::new(Vec::new()),
            stats: StatCounters::default(),
            t: t.clone(),
        });
        sh.raw.to_init(&attr::init_attrs(&t.port))?;
        lock(&t.live).insert(sh.raw.qp_num, Arc::downgrade(&sh));
        for cq in [&sh.send_cq, &sh.recv_cq] {
            lock(&cq.qps).insert(sh.raw.qp_num, (sh.tag, Arc::downgrade(&sh)));
        }
        Ok(sh)
    }
}

impl Transport for VerbsTransport {
    type Mr = VerbsMr;
    type Cq = VerbsCq;
    type Qp = VerbsQp;
    type Listener = VerbsListener;

    fn backend(&self) -> Backend {
        Backend::Verbs
    }

    fn config(&self) -> &TransportConfig {
        &self.inner.cfg.transport
    }

    fn alloc_mr(&self, len: usize, access: Access) -> Result<VerbsMr> {
        let m = Arc::new(Mapping::anonymous(len.max(1))?);
        VerbsMr::register(&self.inner.hca, m, 0, len as u64, access).map(|mr| mr.counted(&self.inner.exposed))
    }

    fn register(
        &self,
        mapping: Arc<Mapping>,
        _file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<VerbsMr> {
        VerbsMr::register(&self.inner.hca, mapping, offset, len, access).map(|mr| mr.counted(&self.inner.exposed))
    }

    /// A region only the peer of `qp` reaches: a type-2 memory window over it, bound by
    /// a work request on `qp` ahead of anything posted there later (so ahead of the
    /// message that hands its rkey out). The region itself is registered for local
    /// access and window binding only: its own rkey reaches nothing. A device without
    /// type-2 windows gets an unbound region, as [`Transport::register`] makes, and a
    /// log line once.
    fn register_bound(
        &self,
        qp: &VerbsQp,
        mapping: Arc<Mapping>,
        _file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<VerbsMr> {
        if !access.is_remote() {
            return VerbsMr::register(&self.inner.hca, mapping, offset, len, access);
        }
        if !qp.sh.same_hca(&self.inner.hca) {
            return Err(Error::invalid("the queue pair belongs to another RDMA device"));
        }
        if !self.inner.hca.limits.mw_type2 {
            if !self.inner.unbound_said.swap(true, Ordering::Relaxed) {
                log_event(&format!(
                    "{}: the device has no type-2 memory windows: the regions this server exposes are \
                     reachable from any connection of the device that has their rkey",
                    self.inner.hca.name
                ));
            }
            return VerbsMr::register(&self.inner.hca, mapping, offset, len, access)
                .map(|mr| mr.counted(&self.inner.exposed));
        }
        VerbsMr::register_window(&qp.sh, mapping, offset, len, access).map(|mr| mr.counted(&self.inner.exposed))
    }

    fn access_violations(&self) -> u64 {
        self.inner.violations.load(Ordering::Relaxed)
    }

    fn exposed_regions(&self) -> u64 {
        self.inner.exposed.load(Ordering::Relaxed)
    }

    fn create_cq(&self) -> Result<VerbsCq> {
        let cfg = &self.inner.cfg.transport;
        let raw = self.inner.hca.create_cq(cfg.sq_depth.saturating_add(cfg.rq_depth))?;
        let wake = rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
            .map_err(|e| Error::io("eventfd", e.into()))?;
        Ok(VerbsCq {
            inner: Arc::new(CqInner {
                raw: Arc::new(raw),
                max_cqe: self.inner.hca.limits.max_cqe,
                spin: cfg.spin,
                qps: Mutex::new(HashMap::new()),
                injected: Mutex::new(VecDeque::new()),
                wake,
                budget: Mutex::new(CqBudget::default()),
                generation: AtomicU64::new(0),
                has_ghosts: AtomicBool::new(false),
                poll_failed: AtomicBool::new(false),
            }),
        })
    }

    fn listen(&self, ep: &Endpoint) -> Result<VerbsListener> {
        let hp = host_port(ep, "listen on")?;
        let l = TcpListener::bind(hp.as_str()).map_err(|e| Error::io(format!("listen on {ep}"), e))?;
        l.set_nonblocking(true).map_err(|e| Error::io("set_nonblocking", e))?;
        let local = Endpoint::Verbs(l.local_addr().map_err(|e| Error::io("local_addr", e))?.to_string());
        VerbsListener::start(self.clone(), l, local)
    }

    fn connect(
        &self,
        ep: &Endpoint,
        send_cq: &VerbsCq,
        recv_cq: &VerbsCq,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(VerbsQp, Vec<u8>)> {
        let hp = host_port(ep, "connect to")?;
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(Error::invalid(format!("private data over {MAX_PRIVATE_DATA} bytes")));
        }
        let end = deadline(timeout);
        let left = || end.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let addrs: Vec<_> =
            hp.to_socket_addrs().map_err(|e| Error::Transport(format!("cannot resolve {ep}: {e}")))?.collect();
        let mut last = None;
        let mut sock = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, left()) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let mut sock = sock.ok_or_else(|| Error::Unreachable {
            addr: ep.to_string(),
            why: last.map_or("no address".into(), |e| e.to_string()),
        })?;
        let _ = sock.set_nodelay(true);
        sock.set_read_timeout(Some(left())).map_err(|e| Error::io("set_read_timeout", e))?;
        sock.set_write_timeout(Some(left())).map_err(|e| Error::io("set_write_timeout", e))?;
        let sh = self.new_qp(send_cq, recv_cq)?;
        sock.write_all(&Msg::qp(Kind::Hello, sh.info(), private_data).encode())
            .map_err(|e| Error::Transport(format!("{ep}: sending the verbs handshake: {e}")))?;
        let reply = match read_msg(&mut ReadBy { sock: &mut sock, until: end }) {
            Ok(m) => m,
            Err(ReadError::TimedOut) => return Err(Error::Timeout(timeout, "the verbs connection handshake")),
            Err(e) => return Err(Error::Transport(format!("{ep}: {e}"))),
        };
        match reply.kind {
            Kind::Accept => {}
            Kind::Reject => {
                return Err(Error::Transport(format!("{ep} refused the connection: {}", reply.reason())));
            }
            k => return Err(Error::Transport(format!("{ep}: unexpected {k:?} in the verbs handshake"))),
        }
        if let Err(e) = sh.connect_to(&reply.info) {
            let _ = sock.write_all(&Msg::bare(Kind::Bye, &e.to_string()).encode());
            return Err(Error::Transport(format!("{ep}: {e}")));
        }
        sock.set_read_timeout(Some(left())).map_err(|e| Error::io("set_read_timeout", e))?;
        sock.write_all(&Msg::bare(Kind::Ready, "").encode())
            .map_err(|e| Error::Transport(format!("{ep}: finishing the verbs handshake: {e}")))?;
        sh.finish(sock, reply.info.qpn, None)?;
        Ok((VerbsQp { sh }, reply.payload))
    }
}

// ---------------------------------------------------------------------------------------
// Memory regions

/// A registered memory region. Clones share the registration; the last one dropped
/// deregisters it.
#[derive(Clone)]
pub struct VerbsMr {
    inner: Arc<MrInner>,
}

struct MrInner {
    /// The window peers reach the region through, for a region bound to one queue pair
    /// ([`Transport::register_bound`]); closed before the region is deregistered.
    window: Option<Arc<Window>>,
    /// `None` after [`MemoryRegion::deregister`]. Taken in `Drop`, so the device lets go
    /// of the memory before the mapping can be unmapped.
    raw: Mutex<Option<RawMr>>,
    registered: AtomicBool,
    /// The transport's count of exposed regions, for a region with a remote right: one
    /// less once it is deregistered (or dropped).
    exposed: OnceLock<Arc<AtomicU64>>,
    hca: Arc<Hca>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    access: Access,
    mapping: Arc<Mapping>,
    map_off: u64,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        if *self.registered.get_mut() {
            if let Some(c) = self.exposed.get() {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // The window first (a region with a window bound cannot be deregistered), then
        // the region (ibv_dereg_mr) before `mapping` is released.
        if let Some(w) = &self.window {
            w.close();
        }
        drop(self.raw.get_mut().unwrap_or_else(|p| p.into_inner()).take());
    }
}

/// A type-2 memory window bound to one queue pair. Closed (deallocated, which
/// invalidates its rkey) by whichever comes first: its region's deregistration or the
/// end of the queue pair, which must not be destroyed with a window still bound to it.
///
/// A window closed before its bind ran (a region revoked right after it was
/// registered) fails the bind, and with it the queue pair: only a client that asked
/// for the region and its revocation back to back can cause that.
struct Window {
    mw: Mutex<Option<RawMw>>,
    qp: Weak<QpShared>,
}

impl Window {
    fn close(&self) {
        let Some(mw) = lock(&self.mw).take() else { return };
        if let Err(e) = mw.dealloc() {
            // The window may still be bound, and its rkey good: only its queue pair can
            // use it, so that queue pair stops.
            if let Some(qp) = self.qp.upgrade() {
                qp.fail(format!("a memory window could not be closed ({e})"));
            }
        }
    }
}

impl VerbsMr {
    fn register(hca: &Arc<Hca>, mapping: Arc<Mapping>, offset: u64, len: u64, access: Access) -> Result<VerbsMr> {
        Self::register_with(hca, mapping, offset, len, access, attr::mr_access_flags(access), None)
    }

    /// A region reached through a type-2 window bound to `qp` (see
    /// [`VerbsTransport::register_bound`]).
    fn register_window(
        qp: &Arc<QpShared>,
        mapping: Arc<Mapping>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<VerbsMr> {
        let hca = qp.raw.hca();
        let window = Arc::new(Window { mw: Mutex::new(Some(hca.alloc_mw()?)), qp: Arc::downgrade(qp) });
        let flags = attr::window_region_flags(access);
        Self::register_with(hca, mapping, offset, len, access, flags, Some((qp.clone(), window)))
    }

    fn register_with(
        hca: &Arc<Hca>,
        mapping: Arc<Mapping>,
        offset: u64,
        len: u64,
        access: Access,
        flags: u32,
        window: Option<(Arc<QpShared>, Arc<Window>)>,
    ) -> Result<VerbsMr> {
        let end = offset.checked_add(len).filter(|e| *e <= mapping.len() as u64);
        if end.is_none() {
            return Err(Error::OutOfBounds { offset, len, limit: mapping.len() as u64 });
        }
        let len_usize = usize::try_from(len).map_err(|_| Error::invalid("region too large"))?;
        // In bounds of the mapping (checked above), so this stays inside its allocation.
        let addr = mapping.as_ptr().wrapping_add(offset as usize);
        // SAFETY: `[addr, addr + len)` lies inside `mapping`, which MrInner keeps alive
        // (Arc) until after the region is deregistered (MrInner's Drop, or
        // `deregister`), so the device never touches unmapped memory.
        let raw = unsafe { hca.reg_mr(addr, len_usize, flags) }?;
        let (lkey, mut rkey) = (raw.lkey, raw.rkey);
        if let Some((qp, w)) = &window {
            let mw = lock(&w.mw);
            let mw = mw.as_ref().ok_or_else(|| Error::Transport("the memory window closed".into()))?;
            // A new key byte: an rkey this window had before never works again.
            rkey = ffi::next_key(mw.rkey);
            let bind = mw.bind(&raw, addr as u64, len, attr::remote_access_flags(access), rkey);
            qp.post_bind(bind)?;
        }
        Ok(VerbsMr {
            inner: Arc::new(MrInner {
                window: window.map(|(qp, w)| {
                    qp.keep_window(&w);
                    w
                }),
                lkey,
                rkey,
                raw: Mutex::new(Some(raw)),
                registered: AtomicBool::new(true),
                exposed: OnceLock::new(),
                hca: hca.clone(),
                addr: addr as u64,
                len,
                access,
                mapping,
                map_off: offset,
            }),
        })
    }

    /// Counts this region in `exposed` if it has a remote right (a new region, once).
    fn counted(self, exposed: &Arc<AtomicU64>) -> VerbsMr {
        if self.inner.access.is_remote() && self.inner.exposed.set(exposed.clone()).is_ok() {
            exposed.fetch_add(1, Ordering::Relaxed);
        }
        self
    }

    /// The scatter/gather element for `[off, off + len)` (not bounds-checked: the
    /// device checks it against the lkey).
    fn sge(&self, off: u64, len: u32) -> Sge {
        Sge { addr: self.inner.addr.wrapping_add(off), len, lkey: self.inner.lkey }
    }

    fn check(&self, off: u64, len: usize) -> Result<u64> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.inner.len => Ok(self.inner.map_off + off),
            _ => Err(Error::OutOfBounds { offset: off, len: len as u64, limit: self.inner.len }),
        }
    }
}

impl fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsMr")
            .field("addr", &format_args!("{:#x}", self.inner.addr))
            .field("len", &self.inner.len)
            .field("rkey", &format_args!("{:#x}", self.inner.rkey))
            .field("access", &self.inner.access)
            .field("registered", &self.is_registered())
            .finish()
    }
}

impl MemoryRegion for VerbsMr {
    fn remote(&self) -> RemoteRegion {
        RemoteRegion { addr: self.inner.addr, len: self.inner.len, rkey: self.inner.rkey }
    }

    fn len(&self) -> u64 {
        self.inner.len
    }

    fn access(&self) -> Access {
        self.inner.access
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.check(off, buf.len())?;
        self.inner.mapping.read(at, buf)
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let at = self.check(off, data.len())?;
        self.inner.mapping.write(at, data)
    }

    fn mapping(&self) -> (&Arc<Mapping>, u64) {
        (&self.inner.mapping, self.inner.map_off)
    }

    fn deregister(&self) {
        if self.inner.registered.swap(false, Ordering::SeqCst) {
            if let Some(c) = self.inner.exposed.get() {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // The window first: from here on its rkey is a remote access error.
        if let Some(w) = &self.inner.window {
            w.close();
        }
        // ibv_dereg_mr returns once the device no longer uses the region.
        drop(lock(&self.inner.raw).take());
    }

    fn is_registered(&self) -> bool {
        self.inner.registered.load(Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------
// Completion queues

/// A completion queue. Clones share it.
#[derive(Clone)]
pub struct VerbsCq {
    inner: Arc<CqInner>,
}

struct CqInner {
    raw: Arc<RawCq>,
    max_cqe: u32,
    spin: Duration,
    /// Queue pairs that complete here, by number, with their tag.
    qps: Mutex<HashMap<u32, (u64, Weak<QpShared>)>>,
    /// Completions the backend generated itself (receive protection errors).
    injected: Mutex<VecDeque<Completion>>,
    /// Signaled when a completion is injected, to wake a parked waiter.
    wake: OwnedFd,
    /// Entries the attached queue pairs may need at once.
    budget: Mutex<CqBudget>,
    /// Advanced by every `ibv_poll_cq` call (see [`CqBudget`]).
    generation: AtomicU64,
    has_ghosts: AtomicBool,
    poll_failed: AtomicBool,
}

impl fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsCq").field("capacity", &self.inner.raw.capacity()).finish()
    }
}

/// The entries of a completion queue that queue pairs may fill, so that it never
/// overflows (an overflow breaks every queue pair on it).
///
/// A live queue pair reserves its queue depths. A destroyed one's reservation becomes a
/// "ghost" until the queue has been seen empty after the destruction: completions it
/// produced (flushes) may still sit in the queue until then. A ghost released at
/// generation `v` is cleared by an empty `ibv_poll_cq` that began at generation `g >= v`
/// (the generation advances at the start of every poll, so that poll started after the
/// queue pair was destroyed and could add nothing more).
#[derive(Debug, Default)]
struct CqBudget {
    demand: u64,
    ghosts: Vec<(u64, u64)>,
}

impl CqBudget {
    /// The capacity needed to reserve `n` more entries: `Ok(None)` when `cap` suffices,
    /// `Ok(Some(new_cap))` when the queue must grow first.
    fn plan(&self, n: u64, cap: u64, max: u64) -> std::result::Result<Option<u64>, String> {
        let want = self.demand.saturating_add(n);
        if want <= cap {
            Ok(None)
        } else if want > max {
            Err(format!(
                "a completion queue would need {want} entries; the device allows {max} \
                 (attach fewer queue pairs to one completion queue, or lower the queue depths)"
            ))
        } else {
            Ok(Some(want.max(cap.saturating_mul(2)).min(max)))
        }
    }

    fn release_later(&mut self, generation: u64, n: u64) {
        self.ghosts.push((generation, n));
    }

    /// An empty poll that began at generation `g`: ghosts released up to `g` are gone.
    fn clear(&mut self, g: u64) {
        let mut freed = 0;
        self.ghosts.retain(|&(v, n)| {
            let gone = v <= g;
            if gone {
                freed += n;
            }
            !gone
        });
        self.demand = self.demand.saturating_sub(freed);
    }
}

/// Entries reserved in a completion queue by one queue pair; released (as a ghost) on drop.
struct Reservation {
    cq: Arc<CqInner>,
    n: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let g = self.cq.generation.load(Ordering::SeqCst);
        let mut b = lock(&self.cq.budget);
        b.release_later(g, self.n);
        // Under the lock, so a concurrent clear cannot reset the flag over this ghost.
        self.cq.has_ghosts.store(true, Ordering::SeqCst);
    }
}

impl CqInner {
    /// Makes room for `n` more outstanding completions, growing the queue if needed.
    fn reserve(self: &Arc<Self>, n: u64) -> Result<Reservation> {
        let mut b = lock(&self.budget);
        if let Some(cap) = b.plan(n, self.raw.capacity() as u64, self.max_cqe as u64).map_err(Error::Transport)? {
            self.raw.resize(cap.min(u32::MAX as u64) as u32)?;
        }
        b.demand += n;
        Ok(Reservation { cq: self.clone(), n })
    }

    /// After an empty poll that began at generation `g`.
    fn clear_ghosts(&self, g: u64) {
        let mut b = lock(&self.budget);
        b.clear(g);
        if b.ghosts.is_empty() {
            self.has_ghosts.store(false, Ordering::SeqCst);
        }
    }

    fn inject(&self, c: Completion) {
        lock(&self.injected).push_back(c);
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    fn lookup(&self, qp_num: u32, tag: u64) -> Option<Arc<QpShared>> {
        let m = lock(&self.qps);
        let (t, w) = m.get(&qp_num)?;
        if *t == tag {
            w.upgrade()
        } else {
            None
        }
    }
}

impl CompletionQueue for VerbsCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let inner = &self.inner;
        let mut got = 0;
        {
            let mut inj = lock(&inner.injected);
            while got < max {
                match inj.pop_front() {
                    Some(c) => {
                        out.push(c);
                        got += 1;
                    }
                    None => break,
                }
            }
        }
        let mut wcs = Vec::with_capacity(16);
        while got < max {
            wcs.clear();
            let generation = inner.generation.fetch_add(1, Ordering::SeqCst);
            match inner.raw.poll(&mut wcs, max - got) {
                Ok(0) => {
                    if inner.has_ghosts.load(Ordering::SeqCst) {
                        inner.clear_ghosts(generation);
                    }
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    if !inner.poll_failed.swap(true, Ordering::Relaxed) {
                        log_event(&format!("completion queue failed: {e}"));
                    }
                    break;
                }
            }
            for wc in wcs.drain(..) {
                let (tag, _, _) = decode_wr_id(wc.wr_id);
                // Completions of a queue pair that is gone (dropped) are dropped too.
                if let Some(qp) = inner.lookup(wc.qp_num, tag) {
                    if let Some(c) = qp.complete(&wc) {
                        out.push(c);
                        got += 1;
                    }
                }
            }
        }
        got
    }

    fn wait(&self, timeout: Duration) -> Result<Completion> {
        let inner = &self.inner;
        let mut out = Vec::with_capacity(1);
        let timed_out = || Error::Timeout(timeout, "a completion");
        if self.poll(&mut out, 1) == 1 {
            return out.pop().ok_or_else(timed_out);
        }
        let mut start = Instant::now();
        // A client on CPUs no server worker uses gives them to the other clients once
        // per turn (see `transport::client_cpu_spin`): spinning here, it would
        // otherwise keep them for the scheduler's whole time slice. It spins whatever
        // its recent spins found: one that stops spinning here arms the completion
        // channel at once (over shm it first polls with yields), and an interrupt-driven
        // wake-up is milliseconds under soft-RoCE; no NIC here to measure otherwise.
        if let Some((_, true)) = crate::transport::begin_client_wait(&mut start, false, || self.poll(&mut out, 1) == 1)
        {
            return out.pop().ok_or_else(timed_out);
        }
        let end = crate::transport::deadline_from(start, timeout);
        // Beside the worker it waits for (colocated), a client polls with yields
        // instead: its spin would be the worker's time.
        let colocated = crate::transport::colocated();
        let spin_end = if colocated { start } else { start + inner.spin.min(timeout) };
        while Instant::now() < spin_end {
            if self.poll(&mut out, 1) == 1 {
                return out.pop().ok_or_else(timed_out);
            }
            std::hint::spin_loop();
        }
        let until = crate::transport::yield_wait_end(start).min(end);
        if colocated && crate::transport::poll_with_yields(until, || self.poll(&mut out, 1) == 1) {
            return out.pop().ok_or_else(timed_out);
        }
        crate::transport::end_turn();
        loop {
            inner.raw.arm()?;
            if self.poll(&mut out, 1) == 1 {
                return out.pop().ok_or_else(timed_out);
            }
            let now = Instant::now();
            if now >= end {
                return Err(timed_out());
            }
            if inner.raw.sleep(inner.wake.as_raw_fd(), (end - now).min(Duration::from_millis(100))) {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&inner.wake, &mut b);
            }
            if self.poll(&mut out, 1) == 1 {
                return out.pop().ok_or_else(timed_out);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Queue pairs

/// A reliable-connected queue pair. Dropping it closes the connection.
pub struct VerbsQp {
    sh: Arc<QpShared>,
}

#[derive(Default)]
struct SendQueue {
    entries: VecDeque<SendEntry>,
    next_seq: u64,
    unsignaled_run: u32,
    /// Staging buffers for `post_send_bytes` beyond the inline size, for reuse.
    spare: Vec<VerbsMr>,
}

struct SendEntry {
    seq: u64,
    wr_id: u64,
    opcode: WcOpcode,
    len: u32,
    /// Report a successful completion (the user asked for one). Errors always are.
    report: bool,
    staging: Option<VerbsMr>,
}

#[derive(Default)]
struct RecvQueue {
    /// `(seq, wr_id)` of posted receives, in order.
    entries: VecDeque<(u64, u64)>,
    next_seq: u64,
}

/// One send-queue request on its way to [`QpShared::post_reqs`].
struct Req<'a> {
    wr_id: u64,
    op: SendOp,
    opcode: WcOpcode,
    payload: Payload<'a>,
    len: u32,
    remote: (u64, u32),
    imm: u32,
    report: bool,
    staging: Option<VerbsMr>,
}

/// The `wr_id` of window binds: reported only when one fails, which fails the queue pair.
const BIND_WR_ID: u64 = u64::MAX;

/// Staging buffers kept per queue pair, and the largest one kept.
const SPARE_BUFFERS: usize = 8;
const SPARE_MAX: u64 = 1 << 20;

struct QpShared {
    /// Declared first: destroyed before anything else of the queue pair goes.
    raw: RawQp,
    /// Released after `raw` is destroyed (field order), as ghosts.
    _reserved: [Reservation; 2],
    tag: u64,
    caps: QpCaps,
    signal_every: u32,
    psn: u32,
    peer_qp_num: AtomicU32,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    sq: Mutex<SendQueue>,
    rq: Mutex<RecvQueue>,
    error: AtomicBool,
    reason: Mutex<Option<String>>,
    /// The control socket (set once the handshake finished).
    ctrl: OnceLock<TcpStream>,
    /// Where the READs that stand for FLUSH put the bytes they read (made at the first).
    flush_mr: OnceLock<VerbsMr>,
    /// The memory windows bound to this queue pair, closed before it is destroyed.
    windows: Mutex<Vec<Weak<Window>>>,
    stats: StatCounters,
    t: Arc<TrInner>,
}

impl QpShared {
    /// What the peer needs to know about this queue pair.
    fn info(&self) -> PeerInfo {
        let p = &self.t.port;
        PeerInfo {
            qpn: self.raw.qp_num,
            psn: self.psn,
            lid: p.lid,
            gid: p.gid,
            mtu: p.active_mtu as u8,
            rd_atomic: p.responder_resources,
        }
    }

    /// INIT -> RTR -> RTS towards `peer`.
    fn connect_to(&self, peer: &PeerInfo) -> Result<()> {
        let t = &self.t;
        let rtr = attr::rtr_attrs(&t.port, peer, &t.rnr).map_err(Error::Transport)?;
        self.raw.to_rtr(&rtr)?;
        self.raw.to_rts(&attr::rts_attrs(&t.port, peer, self.psn, &t.rnr))
    }

    /// Keeps the handshake socket as the control channel and starts its reader, which
    /// first waits for the peer's ready until `ready_by` when given (a server's side:
    /// the peer's failure to say it in time fails the queue pair, off the accept path).
    fn finish(self: &Arc<Self>, sock: TcpStream, peer_qpn: u32, ready_by: Option<Instant>) -> Result<()> {
        self.peer_qp_num.store(peer_qpn, Ordering::Relaxed);
        sock.set_read_timeout(None).map_err(|e| Error::io("set_read_timeout", e))?;
        sock.set_write_timeout(Some(Duration::from_secs(1))).map_err(|e| Error::io("set_write_timeout", e))?;
        let reader = sock.try_clone().map_err(|e| Error::io("clone the control socket", e))?;
        let _ = self.ctrl.set(sock);
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name(format!("boomkv-verbs-ctl-{}", self.raw.qp_num))
            .spawn(move || control_reader(reader, weak, ready_by))
            .map_err(|e| Error::io("spawn the verbs control thread", e))?;
        Ok(())
    }

    fn qp_num(&self) -> u32 {
        self.raw.qp_num
    }

    fn check_open(&self) -> Result<()> {
        if self.error.load(Ordering::SeqCst) {
            let why = lock(&self.reason).clone().unwrap_or_default();
            return Err(Error::Transport(format!("qp {} is in the error state: {why}", self.qp_num())));
        }
        Ok(())
    }

    /// Moves the queue pair to the error state once: ERR at the device (posted requests
    /// flush), and a bye to the peer so its side follows.
    fn fail(&self, reason: String) {
        if self.error.swap(true, Ordering::SeqCst) {
            return;
        }
        *lock(&self.reason) = Some(reason.clone());
        if let Err(e) = self.raw.to_error() {
            log_event(&format!("qp {}: {e}", self.qp_num()));
        }
        if let Some(s) = self.ctrl.get() {
            let _ = (&*s).write_all(&Msg::bare(Kind::Bye, &reason).encode());
            let _ = s.shutdown(Shutdown::Write);
        }
    }

    fn same_device(&self, mr: &VerbsMr) -> bool {
        self.same_hca(&mr.inner.hca)
    }

    fn same_hca(&self, hca: &Arc<Hca>) -> bool {
        Arc::ptr_eq(hca, self.raw.hca()) || hca.name == self.raw.hca().name
    }

    /// Posts a window bind, unreported: the device does it in order, before whatever is
    /// posted after it; if it fails, the queue pair fails (with a [`WcOpcode::Bind`]
    /// completion).
    fn post_bind(&self, bind: ffi::Bind) -> Result<()> {
        let op = SendOp::Bind(bind);
        self.post(BIND_WR_ID, op, WcOpcode::Bind, Payload::None, 0, (0, 0), 0, false, None)
    }

    /// Remembers a window bound here, to close it before the queue pair goes.
    fn keep_window(&self, w: &Arc<Window>) {
        let mut ws = lock(&self.windows);
        ws.retain(|w| w.strong_count() > 0);
        ws.push(Arc::downgrade(w));
    }

    #[allow(clippy::too_many_arguments)]
    fn post(
        &self,
        wr_id: u64,
        op: SendOp,
        opcode: WcOpcode,
        payload: Payload<'_>,
        len: u32,
        remote: (u64, u32),
        imm: u32,
        report: bool,
        staging: Option<VerbsMr>,
    ) -> Result<()> {
        self.post_reqs(vec![Req { wr_id, op, opcode, payload, len, remote, imm, report, staging }], true)
    }

    /// Posts send-queue requests in order: as one chained `ibv_post_send` when `chain`,
    /// else one call each.
    fn post_reqs(&self, reqs: Vec<Req<'_>>, chain: bool) -> Result<()> {
        self.check_open()?;
        if let Some(r) = reqs.iter().find(|r| r.len > MAX_MESSAGE) {
            return Err(Error::invalid(format!("{} bytes is over the {MAX_MESSAGE}-byte message limit", r.len)));
        }
        let mut sq = lock(&self.sq);
        if sq.entries.len() + reqs.len() > self.caps.max_send_wr as usize {
            return Err(Error::Transport(format!(
                "qp {}: send queue full ({} requests outstanding); poll its completion queue",
                self.qp_num(),
                sq.entries.len()
            )));
        }
        let mut wrs = Vec::with_capacity(reqs.len());
        let mut entries = Vec::with_capacity(reqs.len());
        let (mut seq, mut run) = (sq.next_seq, sq.unsignaled_run);
        for r in reqs {
            // Selective signaling: an unsignaled request is signaled now and then so
            // that its send-queue slots come back; that completion is not reported.
            // One from a staging buffer is always signaled, so that the buffer comes
            // back to the spares at once, not after a run of them had to be registered.
            let signaled = r.report || r.staging.is_some() || run + 1 >= self.signal_every;
            wrs.push(SendWr {
                wr_id: encode_wr_id(self.tag, false, seq),
                op: r.op,
                payload: r.payload,
                signaled,
                remote_addr: r.remote.0,
                rkey: r.remote.1,
                imm: r.imm,
            });
            entries.push((
                signaled,
                SendEntry { seq, wr_id: r.wr_id, opcode: r.opcode, len: r.len, report: r.report, staging: r.staging },
            ));
            seq += 1;
            run = if signaled { 0 } else { run + 1 };
        }
        // SAFETY: every InlineSge comes from `local`, which makes one only for a range
        // inside a region (`fits` its length) whose `VerbsMr` the caller holds across
        // this call; the region's `Arc<Mapping>` keeps that memory mapped, registered
        // or not, so the range is readable until the post returns. Every Bind comes
        // from `register_with`, which holds the window (its lock) and the region
        // (`raw`) across this call.
        let posted = unsafe {
            if chain {
                self.raw.post_sends(&wrs)
            } else {
                wrs.iter().try_for_each(|w| self.raw.post_send(w))
            }
        };
        match posted {
            Ok(()) => {
                for (signaled, e) in entries {
                    sq.next_seq += 1;
                    sq.unsignaled_run = if signaled { 0 } else { sq.unsignaled_run + 1 };
                    sq.entries.push_back(e);
                }
                Ok(())
            }
            Err(e) => {
                let err = Error::Transport(format!("qp {}: {e}", self.qp_num()));
                if wrs.len() > 1 {
                    // Part of the batch may be on the queue: its completions could not be
                    // told apart any more, so the connection ends here.
                    drop(sq);
                    self.fail(format!("posting a batch failed: {e}"));
                }
                Err(err)
            }
        }
    }

    /// The payload for `[off, off + len)` of `mr`. Sources of WRITEs and SENDs up to the
    /// inline size go inline (when [`VerbsTuning::inline`] is on), but only from a live
    /// region of this protection domain and in its bounds: inline data skips the lkey
    /// check, and every other case must fail at the device as without inlining.
    fn local(&self, mr: &VerbsMr, off: u64, len: u32, may_inline: bool) -> Result<Payload<'static>> {
        if !self.same_device(mr) {
            return Err(Error::invalid("the memory region belongs to another RDMA device"));
        }
        if len == 0 {
            return Ok(Payload::None);
        }
        let inline = may_inline
            && len <= self.caps.max_inline
            && Arc::ptr_eq(&mr.inner.hca, self.raw.hca())
            && fits(off, len, mr.inner.len)
            && mr.is_registered();
        Ok(if inline { Payload::InlineSge(mr.sge(off, len)) } else { Payload::Sge(mr.sge(off, len)) })
    }

    /// The buffer the READs that stand for FLUSH read into (never looked at).
    fn flush_buf(&self) -> Result<&VerbsMr> {
        if let Some(b) = self.flush_mr.get() {
            return Ok(b);
        }
        let b = VerbsMr::register(self.raw.hca(), Arc::new(Mapping::anonymous(4096)?), 0, 4096, Access::LOCAL_WRITE)?;
        // Another thread may have set one meanwhile: either does.
        let _ = self.flush_mr.set(b);
        self.flush_mr.get().ok_or_else(|| Error::invalid("the FLUSH buffer was not kept"))
    }

    /// Why a receive buffer is unusable, if it is.
    fn recv_problem(&self, mr: &VerbsMr, off: u64, len: u32) -> Option<&'static str> {
        if !Arc::ptr_eq(&mr.inner.hca, self.raw.hca()) {
            Some("receive buffer in another protection domain")
        } else if !mr.inner.access.contains(Access::LOCAL_WRITE) {
            Some("receive buffer without LOCAL_WRITE")
        } else if !fits(off, len, mr.inner.len) {
            Some("receive buffer outside its region")
        } else if !mr.is_registered() {
            Some("receive buffer in a deregistered region")
        } else {
            None
        }
    }

    fn post_recvs(&self, mr: &VerbsMr, bufs: &[(u64, u64, u32)]) -> Result<()> {
        self.check_open()?;
        for &(wr_id, off, len) in bufs {
            if len > MAX_MESSAGE {
                return Err(Error::invalid(format!("{len} bytes is over the {MAX_MESSAGE}-byte message limit")));
            }
            if let Some(why) = self.recv_problem(mr, off, len) {
                // Verbs would fail this receive only when a message arrives; fail it now.
                self.stats.recvs.fetch_add(1, Ordering::Relaxed);
                self.recv_cq.inject(Completion {
                    wr_id,
                    status: WcStatus::LocalProtectionError,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm: None,
                    qp_num: self.qp_num(),
                });
                self.fail(format!("local protection error: {why}"));
                return Ok(());
            }
        }
        let mut rq = lock(&self.rq);
        let first = rq.next_seq;
        let wrs: Vec<RecvWr> = bufs
            .iter()
            .enumerate()
            .map(|(i, &(_, off, len))| RecvWr {
                wr_id: encode_wr_id(self.tag, true, first + i as u64),
                sge: mr.sge(off, len),
            })
            .collect();
        let posted = if self.t.cfg.tuning.batched_recv || wrs.len() == 1 {
            self.raw.post_recvs(&wrs)
        } else {
            wrs.chunks(1).try_for_each(|w| self.raw.post_recvs(w))
        };
        if let Err(e) = posted {
            if wrs.len() > 1 {
                // Part of the batch may be posted: its completions could not be matched.
                drop(rq);
                self.fail(format!("posting receives failed: {e}"));
            }
            return Err(Error::Transport(format!("qp {}: {e}", self.qp_num())));
        }
        for (i, &(wr_id, _, _)) in bufs.iter().enumerate() {
            rq.entries.push_back((first + i as u64, wr_id));
        }
        rq.next_seq += bufs.len() as u64;
        self.stats.recvs.fetch_add(bufs.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Translates a device completion of this queue pair; `None` for completions the
    /// user did not ask for (internal signaling) or does not know (stale).
    fn complete(&self, wc: &Wc) -> Option<Completion> {
        let (_, recv, seq) = decode_wr_id(wc.wr_id);
        let status = attr::wc_status(wc.status);
        let ok = status.is_ok();
        let c = if recv {
            let wr_id = {
                let mut rq = lock(&self.rq);
                loop {
                    match rq.entries.front() {
                        Some(&(s, _)) if s < seq => {
                            rq.entries.pop_front();
                        }
                        Some(&(s, id)) if s == seq => {
                            rq.entries.pop_front();
                            break Some(id);
                        }
                        _ => break None,
                    }
                }
            }?;
            let with_imm = ok && wc.opcode == rdma_sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM;
            Completion {
                wr_id,
                status,
                opcode: if with_imm { WcOpcode::RecvWithImm } else { WcOpcode::Recv },
                byte_len: if ok { wc.byte_len } else { 0 },
                imm: if with_imm { wc.imm } else { None },
                qp_num: self.qp_num(),
            }
        } else {
            let entry = {
                let mut sq = lock(&self.sq);
                let mut found = None;
                // Requests before this one completed too (in order; they were unsignaled).
                while sq.entries.front().is_some_and(|e| e.seq <= seq) {
                    let Some(mut e) = sq.entries.pop_front() else { break };
                    if let Some(buf) = e.staging.take() {
                        if sq.spare.len() < SPARE_BUFFERS && buf.len() <= SPARE_MAX {
                            sq.spare.push(buf);
                        }
                    }
                    if e.seq == seq {
                        found = Some(e);
                        break;
                    }
                }
                found
            }?;
            if ok && !entry.report {
                return None;
            }
            Completion {
                wr_id: entry.wr_id,
                status,
                opcode: entry.opcode,
                byte_len: if ok { entry.len } else { 0 },
                imm: None,
                qp_num: self.qp_num(),
            }
        };
        if !ok {
            let what = if recv { "receive".to_string() } else { format!("{:?}", c.opcode) };
            self.fail(format!("{what} wr_id {} completed with {}", c.wr_id, attr::wc_status_name(wc.status)));
        }
        Some(c)
    }

    /// A staging buffer of at least `len` bytes for an out-of-line `post_send_bytes`.
    fn staging(&self, len: usize) -> Result<VerbsMr> {
        {
            let mut sq = lock(&self.sq);
            if let Some(i) = sq.spare.iter().position(|b| b.len() >= len as u64) {
                return Ok(sq.spare.swap_remove(i));
            }
        }
        let size = len.next_power_of_two().max(4096);
        VerbsMr::register(self.raw.hca(), Arc::new(Mapping::anonymous(size)?), 0, size as u64, Access::NONE)
    }
}

/// True when `[off, off + len)` lies inside `limit` bytes.
fn fits(off: u64, len: u32, limit: u64) -> bool {
    off.checked_add(len as u64).is_some_and(|end| end <= limit)
}

impl Drop for QpShared {
    fn drop(&mut self) {
        let (n, tag) = (self.raw.qp_num, self.tag);
        {
            let mut live = lock(&self.t.live);
            if live.get(&n).is_some_and(|w| w.strong_count() == 0) {
                live.remove(&n);
            }
        }
        for cq in [&self.send_cq, &self.recv_cq] {
            let mut m = lock(&cq.qps);
            if m.get(&n).is_some_and(|(t, _)| *t == tag) {
                m.remove(&n);
            }
        }
        if let Some(s) = self.ctrl.get() {
            // Ends the control reader, which holds only a weak reference.
            let _ = s.shutdown(Shutdown::Both);
        }
        // Windows still bound here go first: a queue pair is not destroyed under them.
        for w in lock(&self.windows).drain(..) {
            if let Some(w) = w.upgrade() {
                w.close();
            }
        }
        // Then the fields: `raw` first (ibv_destroy_qp), then the reservations.
    }
}

/// Reads the device's asynchronous events while the transport lives, and logs them. A
/// queue pair the device reports broken (QP fatal, request or access error) is moved to
/// the error state, which closes that connection only; a fatal device error fails them
/// all. Port changes and completion-queue errors are logged.
fn async_events(t: Weak<TrInner>) {
    loop {
        let Some(t) = t.upgrade() else { return };
        let Some(ev) = t.hca.next_async_event(Duration::from_millis(100)) else { continue };
        let (name, action) = attr::async_event(ev.kind);
        let dev = &t.hca.name;
        match (action, ev.qp_num) {
            (attr::AsyncAction::Ignore, _) => {}
            (attr::AsyncAction::FailQp, Some(n)) => {
                if ev.kind == attr::EVENT_QP_ACCESS_ERR {
                    t.violations.fetch_add(1, Ordering::Relaxed);
                }
                let qp = lock(&t.live).get(&n).and_then(Weak::upgrade);
                log_event(&format!("{dev}: {name} on qp {n}: closing that connection"));
                if let Some(qp) = qp {
                    qp.fail(format!("the device reported {name}"));
                }
            }
            (attr::AsyncAction::FailAll, _) => {
                log_event(&format!("{dev}: {name}: closing every connection of this device"));
                let all: Vec<_> = lock(&t.live).values().filter_map(Weak::upgrade).collect();
                for qp in all {
                    qp.fail(format!("the device reported {name}"));
                }
            }
            _ => match ev.port {
                Some(p) => log_event(&format!("{dev} port {p}: {name}")),
                None => log_event(&format!("{dev}: {name}")),
            },
        }
    }
}

/// The control channel's reader: a bye or the end of the socket moves the queue pair to
/// the error state. With `ready_by` (a server's side), the peer's ready must come first,
/// before then.
fn control_reader(mut sock: TcpStream, qp: Weak<QpShared>, ready_by: Option<Instant>) {
    let ready = match ready_by {
        None => Ok(()),
        Some(until) => match read_msg(&mut ReadBy { sock: &mut sock, until }) {
            Ok(m) if m.kind == Kind::Ready => sock.set_read_timeout(None).map_err(|e| format!("control channel: {e}")),
            Ok(m) if m.kind == Kind::Bye => Err(format!("the client gave up the handshake: {}", m.reason())),
            Ok(m) => Err(format!("expected ready, got {:?}", m.kind)),
            Err(ReadError::TimedOut) => Err("the client did not finish the handshake in time".to_string()),
            Err(e) => Err(format!("finishing the handshake: {e}")),
        },
    };
    let why = match ready {
        Err(why) => why,
        Ok(()) => match read_msg(&mut sock) {
            Ok(m) if m.kind == Kind::Bye => format!("the peer closed the connection: {}", m.reason()),
            Ok(m) => format!("unexpected {:?} on the control channel", m.kind),
            Err(ReadError::Closed) => "the peer closed the connection (its process may have exited)".to_string(),
            Err(e) => format!("control channel: {e}"),
        },
    };
    let Some(qp) = qp.upgrade() else { return };
    qp.fail(why);
    drop(qp);
    // Keep reading until the socket ends (the peer's own shutdown, or ours on drop).
    let mut b = [0u8; 256];
    while let Ok(n) = std::io::Read::read(&mut sock, &mut b) {
        if n == 0 {
            break;
        }
    }
}

impl fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsQp")
            .field("qp_num", &self.sh.qp_num())
            .field("peer_qp_num", &self.peer_qp_num())
            .field("error", &self.is_error())
            .finish()
    }
}

impl VerbsQp {
    /// Largest payload [`QueuePair::post_send_bytes`] sends inline.
    pub fn max_inline(&self) -> u32 {
        self.sh.caps.max_inline
    }

    /// SENDs `data` (inline, or from a staging buffer), completing it locally only if
    /// `report` or it fails: an unreported inline one is signaled only now and then (the
    /// selective signaling of `QpShared::post_reqs`), one from a staging buffer always,
    /// without reporting it.
    fn send_bytes(&self, wr_id: u64, data: &[u8], report: bool) -> Result<()> {
        let len = u32::try_from(data.len()).ok().filter(|l| *l <= MAX_MESSAGE).ok_or_else(|| {
            Error::invalid(format!("{} bytes is over the {MAX_MESSAGE}-byte message limit", data.len()))
        })?;
        self.sh.check_open()?;
        if len <= self.sh.caps.max_inline {
            let p = if len == 0 { Payload::None } else { Payload::Inline(data) };
            self.sh.post(wr_id, SendOp::Send, WcOpcode::Send, p, len, (0, 0), 0, report, None)?;
        } else {
            let buf = self.sh.staging(data.len())?;
            buf.write(0, data)?;
            let p = Payload::Sge(buf.sge(0, len));
            self.sh.post(wr_id, SendOp::Send, WcOpcode::Send, p, len, (0, 0), 0, report, Some(buf))?;
        }
        self.sh.stats.sends.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl QueuePair for VerbsQp {
    type Mr = VerbsMr;

    fn qp_num(&self) -> u32 {
        self.sh.qp_num()
    }

    fn peer_qp_num(&self) -> u32 {
        self.sh.peer_qp_num.load(Ordering::Relaxed)
    }

    fn post_send(&self, wr_id: u64, mr: &VerbsMr, off: u64, len: u32) -> Result<()> {
        let p = self.sh.local(mr, off, len, true)?;
        self.sh.post(wr_id, SendOp::Send, WcOpcode::Send, p, len, (0, 0), 0, true, None)?;
        self.sh.stats.sends.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn post_send_bytes(&self, wr_id: u64, data: &[u8]) -> Result<()> {
        self.send_bytes(wr_id, data, true)
    }

    fn post_send_bytes_unsignaled(&self, wr_id: u64, data: &[u8]) -> Result<()> {
        self.send_bytes(wr_id, data, false)
    }

    fn post_recv(&self, wr_id: u64, mr: &VerbsMr, off: u64, len: u32) -> Result<()> {
        self.sh.post_recvs(mr, &[(wr_id, off, len)])
    }

    fn post_write(
        &self,
        wr_id: u64,
        mr: &VerbsMr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
    ) -> Result<()> {
        let p = self.sh.local(mr, off, len, true)?;
        self.sh.post(wr_id, SendOp::Write, WcOpcode::Write, p, len, (remote_addr, rkey), 0, signaled, None)?;
        self.sh.stats.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn post_write_imm(
        &self,
        wr_id: u64,
        mr: &VerbsMr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<()> {
        let p = self.sh.local(mr, off, len, true)?;
        self.sh.post(wr_id, SendOp::WriteImm, WcOpcode::Write, p, len, (remote_addr, rkey), imm, true, None)?;
        self.sh.stats.writes_imm.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn post_read(&self, wr_id: u64, mr: &VerbsMr, off: u64, len: u32, remote_addr: u64, rkey: u32) -> Result<()> {
        let p = self.sh.local(mr, off, len, false)?;
        self.sh.post(wr_id, SendOp::Read, WcOpcode::Read, p, len, (remote_addr, rkey), 0, true, None)?;
        self.sh.stats.reads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn post_compare_swap(
        &self,
        wr_id: u64,
        mr: &VerbsMr,
        off: u64,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Result<()> {
        super::check_atomic_addr(remote_addr)?;
        let p = self.sh.local(mr, off, 8, false)?;
        let op = SendOp::CompareSwap { compare, swap };
        self.sh.post(wr_id, op, WcOpcode::CompareSwap, p, 8, (remote_addr, rkey), 0, true, None)?;
        self.sh.stats.atomics.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn post_fetch_add(&self, wr_id: u64, mr: &VerbsMr, off: u64, remote_addr: u64, rkey: u32, add: u64) -> Result<()> {
        super::check_atomic_addr(remote_addr)?;
        let p = self.sh.local(mr, off, 8, false)?;
        self.sh.post(wr_id, SendOp::FetchAdd { add }, WcOpcode::FetchAdd, p, 8, (remote_addr, rkey), 0, true, None)?;
        self.sh.stats.atomics.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The devices this builds against have no FLUSH verb: the classic emulation, a
    /// READ on the same queue pair after the WRITEs, of the last (up to 8) bytes they
    /// wrote. Not a zero-length READ: the specification lets one skip the target's
    /// memory, and with it the wait for the WRITEs before it. A READ response leaves the
    /// target only after the earlier WRITEs were placed in its memory, so on a platform
    /// whose persistence domain covers what the device placed (ADR with the device's
    /// writes not held in the CPU's caches, or eADR), the WRITEs are durable when it
    /// completes; elsewhere it orders, and the target's CPU must still write back. The
    /// range must be readable under `rkey`.
    fn post_flush(&self, wr_id: u64, remote_addr: u64, rkey: u32, len: u32) -> Result<()> {
        let n = len.min(8);
        let p = if n == 0 { Payload::None } else { Payload::Sge(self.sh.flush_buf()?.sge(0, n)) };
        let at = remote_addr + u64::from(len - n);
        self.sh.post(wr_id, SendOp::Read, WcOpcode::Flush, p, n, (at, rkey), 0, true, None)?;
        self.sh.stats.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn post_write_batch(&self, mr: &VerbsMr, wrs: &[WriteWr]) -> Result<()> {
        let mut reqs = Vec::with_capacity(wrs.len());
        for w in wrs {
            reqs.push(Req {
                wr_id: w.wr_id,
                op: SendOp::Write,
                opcode: WcOpcode::Write,
                payload: self.sh.local(mr, w.off, w.len, true)?,
                len: w.len,
                remote: (w.remote_addr, w.rkey),
                imm: 0,
                report: w.signaled,
                staging: None,
            });
        }
        self.sh.post_reqs(reqs, self.sh.t.cfg.tuning.doorbell_batching)?;
        self.sh.stats.writes.fetch_add(wrs.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn post_recv_batch(&self, mr: &VerbsMr, bufs: &[(u64, u64, u32)]) -> Result<()> {
        self.sh.post_recvs(mr, bufs)
    }

    fn is_error(&self) -> bool {
        self.sh.error.load(Ordering::SeqCst)
    }

    fn error_reason(&self) -> Option<String> {
        lock(&self.sh.reason).clone()
    }

    fn stats(&self) -> QpStats {
        self.sh.stats.snapshot()
    }

    fn close(&self) {
        self.sh.fail("closed by the application".into());
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        self.close();
    }
}

// ---------------------------------------------------------------------------------------
// Listener

/// Accepts verbs connections: a TCP listener for the handshake, whose connections are
/// greeted off the accept path (a greeter thread, see the `transport` module), as tcp's.
pub struct VerbsListener {
    t: VerbsTransport,
    local: Endpoint,
    greeter: super::Greeter<Greeted>,
}

/// A connection whose hello has arrived, waiting for the application's answer.
struct Greeted {
    sock: TcpStream,
    peer: String,
    hello: Msg,
}

impl VerbsListener {
    fn start(t: VerbsTransport, l: TcpListener, local: Endpoint) -> Result<VerbsListener> {
        let readable: OwnedFd = l.try_clone().map_err(|e| Error::io("dup the listening socket", e))?.into();
        let timeout = t.inner.cfg.transport.handshake_timeout;
        let accept_one = move || match l.accept() {
            Ok((s, _)) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        };
        let first: Arc<super::FirstHalf<TcpStream, Greeted>> = Arc::new(greet);
        let greeter = super::Greeter::start(local.clone(), readable, accept_one, first, timeout)?;
        Ok(VerbsListener { t, local, greeter })
    }

    /// The second half of a handshake, on the accepting thread: the queue pair, the
    /// application's answer, the reply. Nothing here waits on the peer (the reply is
    /// small enough for the socket's buffer, and the write is bounded anyway); the
    /// client's ready is awaited by the connection's control reader, which fails the
    /// queue pair if it does not come by the handshake's deadline.
    fn finish<F>(&self, g: Greeted, send_cq: &VerbsCq, recv_cq: &VerbsCq, f: F) -> Result<VerbsQp, Handshake>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let Greeted { sock: mut s, peer, hello } = g;
        let refused = |why: String| Handshake::Refused(format!("{peer}: {why}"));
        if let Err(e) = s.set_write_timeout(Some(Duration::from_secs(1))) {
            return Err(refused(e.to_string()));
        }
        let reject = |s: &mut TcpStream, why: &str| {
            let _ = s.write_all(&Msg::bare(Kind::Reject, why).encode());
        };
        // The queue pair goes to RTR before the application sees the client, so a
        // device that cannot reach the peer refuses it without involving the callback.
        let sh = self.t.new_qp(send_cq, recv_cq).map_err(|e| {
            reject(&mut s, &format!("server: {e}"));
            refused(e.to_string())
        })?;
        let rtr = attr::rtr_attrs(&self.t.inner.port, &hello.info, &self.t.inner.rnr)
            .map_err(Error::Transport)
            .and_then(|a| sh.raw.to_rtr(&a));
        if let Err(e) = rtr {
            reject(&mut s, &format!("server: {e}"));
            return Err(refused(e.to_string()));
        }
        let reply = match f(&hello.payload) {
            Ok(r) if r.len() <= MAX_PRIVATE_DATA => r,
            Ok(r) => {
                let why = format!("server private data of {} bytes is over the limit", r.len());
                reject(&mut s, &why);
                return Err(Handshake::Rejected(Error::invalid(why)));
            }
            Err(e) => {
                reject(&mut s, &e.to_string());
                return Err(Handshake::Rejected(e));
            }
        };
        let t = &self.t.inner;
        if let Err(e) = sh.raw.to_rts(&attr::rts_attrs(&t.port, &hello.info, sh.psn, &t.rnr)) {
            reject(&mut s, &format!("server: {e}"));
            return Err(refused(e.to_string()));
        }
        if let Err(e) = s.write_all(&Msg::qp(Kind::Accept, sh.info(), &reply).encode()) {
            return Err(refused(format!("sending the handshake reply: {e}")));
        }
        // The ready gets a deadline of its own from here: the hello's counted the time
        // the connection waited for this thread, which is not the client's.
        let ready_by = Instant::now() + self.t.inner.cfg.transport.handshake_timeout;
        sh.finish(s, hello.info.qpn, Some(ready_by)).map_err(|e| refused(e.to_string()))?;
        Ok(VerbsQp { sh })
    }
}

/// The first half of a server's handshake, on a greeter thread: the client's hello by
/// the deadline, or a refusal (a reject when the client can understand one).
fn greet(mut s: TcpStream, until: Instant) -> std::result::Result<Greeted, String> {
    let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    s.set_nonblocking(false).and_then(|()| s.set_nodelay(true)).map_err(|e| format!("{peer}: {e}"))?;
    let reject = |mut s: &TcpStream, why: &str| {
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = s.write_all(&Msg::bare(Kind::Reject, why).encode());
    };
    // One deadline for the hello, however the peer paces its bytes (the ready gets one
    // of its own once the server has answered).
    let hello = match read_msg(&mut ReadBy { sock: &mut s, until }) {
        Ok(m) if m.kind == Kind::Hello => m,
        Ok(m) => {
            let why = format!("expected a hello, got {:?}", m.kind);
            reject(&s, &why);
            return Err(format!("{peer}: {why}"));
        }
        Err(e @ ReadError::Version(..)) => {
            reject(&s, &e.to_string());
            return Err(format!("{peer}: {e}"));
        }
        Err(e) => return Err(format!("{peer}: {e}")),
    };
    Ok(Greeted { sock: s, peer, hello })
}

impl Listener for VerbsListener {
    type Qp = VerbsQp;
    type Cq = VerbsCq;

    fn endpoint(&self) -> Endpoint {
        self.local.clone()
    }

    fn accept<F>(&self, send_cq: &VerbsCq, recv_cq: &VerbsCq, timeout: Duration, on_connect: F) -> Result<VerbsQp>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let finish = |g, f: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>>| self.finish(g, send_cq, recv_cq, f);
        self.greeter.accept(&self.local, timeout, "a verbs connection", on_connect, finish)
    }

    fn try_accept<F>(&self, send_cq: &VerbsCq, recv_cq: &VerbsCq, on_connect: F) -> Result<Option<VerbsQp>>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        self.greeter.try_accept(&self.local, on_connect, |g, f| self.finish(g, send_cq, recv_cq, f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::conformance;

    fn make() -> VerbsTransport {
        let cfg = VerbsConfig::from_env().expect("BOOMKV_RDMA_* variables");
        assert!(cfg.device.is_some(), "set {ENV_DEVICE} to an RDMA device (e.g. rxe0) to run the verbs suite");
        VerbsTransport::new(VerbsConfig { transport: conformance::test_config(), ..cfg }).expect("open the device")
    }

    fn ep() -> Endpoint {
        Endpoint::Verbs("127.0.0.1:0".into())
    }

    crate::conformance_suite!(
        #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (see the README)"]
        make,
        ep
    );

    #[test]
    fn no_device_is_one_clear_error() {
        // Here (no kernel RDMA support) the device list fails with ENOSYS, or is empty
        // where libibverbs has no providers; either way: one clear error, no crash.
        match devices() {
            Ok(names) if !names.is_empty() => {
                // A machine with a device: a wrong name is still a clear error.
                let e = VerbsTransport::new(VerbsConfig { device: Some("no-such-dev".into()), ..Default::default() })
                    .expect_err("bogus device");
                assert!(e.to_string().contains("RDMA device 'no-such-dev' not found"), "{e}");
            }
            other => {
                if let Err(e) = &other {
                    assert!(e.to_string().contains("no RDMA device found; use --transport shm or tcp"), "{e}");
                }
                let e = VerbsTransport::new(VerbsConfig::default()).expect_err("no device here");
                let msg = e.to_string();
                assert!(msg.contains("no RDMA device found; use --transport shm or tcp"), "{msg}");
                assert!(matches!(e, Error::Transport(_)));
                // Asking for a specific device says the same.
                let e = VerbsTransport::new(VerbsConfig { device: Some("mlx5_0".into()), ..Default::default() })
                    .expect_err("no device here");
                assert!(e.to_string().contains("no RDMA device found"), "{e}");
            }
        }
    }

    #[test]
    fn config_from_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let c = VerbsConfig::from_lookup(env(&[])).unwrap();
        assert_eq!((c.device, c.port, c.gid_index), (None, 1, None));
        let c =
            VerbsConfig::from_lookup(env(&[(ENV_DEVICE, "rxe0"), (ENV_PORT, "2"), (ENV_GID_INDEX, " 3 ")])).unwrap();
        assert_eq!((c.device.as_deref(), c.port, c.gid_index), (Some("rxe0"), 2, Some(3)));
        let c = VerbsConfig::from_lookup(env(&[(ENV_DEVICE, ""), (ENV_PORT, "")])).unwrap();
        assert_eq!((c.device, c.port), (None, 1), "empty means unset");
        for bad in [&[(ENV_PORT, "0")][..], &[(ENV_PORT, "x")], &[(ENV_PORT, "256")], &[(ENV_GID_INDEX, "-1")]] {
            let e = VerbsConfig::from_lookup(env(bad)).expect_err("bad value");
            assert!(matches!(e, Error::Invalid(_)), "{e}");
        }
    }

    #[test]
    fn wr_ids_roundtrip() {
        for (tag, recv, seq) in [(1, false, 0), (TAG_MASK, true, SEQ_MASK), (0x1234, false, 99), (7, true, 1 << 38)] {
            let id = encode_wr_id(tag, recv, seq);
            assert_eq!(decode_wr_id(id), (tag, recv, seq));
        }
        assert_ne!(encode_wr_id(1, false, 5), encode_wr_id(1, true, 5));
        assert_ne!(encode_wr_id(1, false, 5), encode_wr_id(2, false, 5));
        let a = next_tag();
        let b = next_tag();
        assert!(a != 0 && b != 0 && a != b && a <= TAG_MASK);
    }

    #[test]
    fn verbs_addresses() {
        for (s, hp) in [
            ("verbs://0.0.0.0:7471", "0.0.0.0:7471"),
            ("verbs://10.0.0.5:7471", "10.0.0.5:7471"),
            ("rdma://[fe80::1]:7471", "[fe80::1]:7471"),
            ("verbs://node7", "node7:7470"),
        ] {
            let ep = Endpoint::parse(s).unwrap();
            assert_eq!(ep.backend(), Backend::Verbs);
            assert_eq!(host_port(&ep, "listen on").unwrap(), hp);
        }
        let ep = Endpoint::parse_for("10.0.0.5:7471", Some(Backend::Verbs)).unwrap();
        assert_eq!(host_port(&ep, "connect to").unwrap(), "10.0.0.5:7471");
        let e = host_port(&Endpoint::parse("tcp://h:1").unwrap(), "connect to").unwrap_err();
        assert!(e.to_string().contains("cannot connect to tcp://h:1"), "{e}");
        assert!(Endpoint::parse("verbs://h:99999").is_err());
    }

    #[test]
    fn completion_queue_budget() {
        let mut b = CqBudget::default();
        assert_eq!(b.plan(256, 512, 32767), Ok(None));
        b.demand += 256;
        assert_eq!(b.plan(256, 512, 32767), Ok(None));
        b.demand += 256;
        // Grows by doubling, capped at the device maximum.
        assert_eq!(b.plan(256, 512, 32767), Ok(Some(1024)));
        assert_eq!(b.plan(10_000, 512, 32767), Ok(Some(10_512)));
        assert_eq!(b.plan(32_000, 16_384, 32767), Ok(Some(32767)));
        assert!(b.plan(40_000, 512, 32767).unwrap_err().contains("would need 40512 entries"));
        // A destroyed queue pair's entries stay reserved until an empty poll that began
        // after its destruction.
        b.release_later(5, 256);
        b.clear(4);
        assert_eq!(b.demand, 512, "a poll that began before the destruction proves nothing");
        b.release_later(7, 256);
        b.clear(6);
        assert_eq!((b.demand, b.ghosts.len()), (256, 1));
        b.clear(7);
        assert_eq!((b.demand, b.ghosts.len()), (0, 0));
        b.clear(100);
        assert_eq!(b.demand, 0);
    }

    #[test]
    fn receive_bounds_helper() {
        assert!(fits(0, 10, 10) && fits(10, 0, 10));
        assert!(!fits(1, 10, 10) && !fits(11, 0, 10));
        assert!(!fits(u64::MAX, 1, u64::MAX));
    }

    #[test]
    fn a_window_bind_changes_only_the_key_byte() {
        assert_eq!(ffi::next_key(0x1234_5600), 0x1234_5601);
        assert_eq!(ffi::next_key(0x1234_56ff), 0x1234_5600, "the key byte wraps; the index stays");
        assert_eq!(ffi::next_key(u32::MAX), 0xffff_ff00);
        use rdma_sys::ibv_access_flags as F;
        let (lw, rw, rr, ra, bind) = (
            F::IBV_ACCESS_LOCAL_WRITE.0,
            F::IBV_ACCESS_REMOTE_WRITE.0,
            F::IBV_ACCESS_REMOTE_READ.0,
            F::IBV_ACCESS_REMOTE_ATOMIC.0,
            F::IBV_ACCESS_MW_BIND.0,
        );
        // The region under a window has no remote right of its own, and local write
        // where the window writes.
        assert_eq!(attr::window_region_flags(Access::REMOTE_WRITE), bind | lw);
        assert_eq!(attr::window_region_flags(Access::REMOTE_ATOMIC | Access::REMOTE_READ), bind | lw);
        assert_eq!(attr::window_region_flags(Access::REMOTE_READ), bind);
        // The window has the remote rights alone.
        assert_eq!(attr::remote_access_flags(Access::LOCAL_WRITE | Access::REMOTE_WRITE), rw);
        assert_eq!(attr::remote_access_flags(Access::REMOTE_READ | Access::REMOTE_ATOMIC), rr | ra);
        assert_eq!(attr::remote_access_flags(Access::LOCAL_WRITE), 0);
        // `register_bound` decides by `Access::is_remote` whether a window is needed:
        // the same question as whether the window would grant anything.
        for bits in 0..=Access::ALL.bits() {
            let a = Access::from_bits(bits);
            assert_eq!(a.is_remote(), attr::remote_access_flags(a) != 0, "{a:?}");
        }
    }

    /// A transport whose handshakes must finish within `secs`, listening on loopback
    /// with an [`acceptor`] running for `run`: the transport, the listener's address,
    /// the accepted queue pairs as they come, and the acceptor.
    fn serving(
        secs: u64,
        run: Duration,
    ) -> (VerbsTransport, String, std::sync::mpsc::Receiver<VerbsQp>, std::thread::JoinHandle<()>) {
        let cfg = VerbsConfig::from_env().expect("BOOMKV_RDMA_* variables");
        let transport = TransportConfig { handshake_timeout: Duration::from_secs(secs), ..conformance::test_config() };
        let t = VerbsTransport::new(VerbsConfig { transport, ..cfg }).expect("open the device");
        let l = t.listen(&ep()).unwrap();
        let Endpoint::Verbs(addr) = l.endpoint() else { unreachable!() };
        let (tx, rx) = std::sync::mpsc::channel();
        let accepting = acceptor(l, t.create_cq().unwrap(), run, tx);
        (t, addr, rx, accepting)
    }

    /// Accepts every connection for `run`, handing each to `out`.
    fn acceptor(
        l: VerbsListener,
        cq: VerbsCq,
        run: Duration,
        out: std::sync::mpsc::Sender<VerbsQp>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let end = Instant::now() + run;
            while Instant::now() < end {
                if let Ok(qp) = l.accept(&cq, &cq, Duration::from_millis(50), |_| Ok(b"welcome".to_vec())) {
                    let _ = out.send(qp);
                }
            }
        })
    }

    #[test]
    #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (see the README)"]
    fn silent_and_slow_sockets_hold_up_no_honest_client() {
        // Handshakes ran on the accepting thread: each silent socket held every later
        // client for the whole handshake deadline.
        let (t, addr, rx, accepting) = serving(5, Duration::from_secs(8));
        let mut socks = Vec::new();
        for i in 0..50 {
            let mut c = TcpStream::connect(&addr).unwrap();
            if i % 2 == 0 {
                // The start of a valid hello, then nothing.
                c.write_all(b"BOOMKVIB").unwrap();
            }
            socks.push(c);
        }
        let start = Instant::now();
        let (qp, _cq, server_side) = connected(&t, &addr, &rx);
        let took = start.elapsed();
        assert!(took < Duration::from_secs(3), "the honest client waited {took:?}");
        assert!(!qp.is_error() && !server_side.is_error());
        drop(socks);
        accepting.join().unwrap();
    }

    #[test]
    #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (see the README)"]
    fn a_client_that_never_says_ready_holds_up_no_one_and_is_dropped() {
        // The server waited for the client's ready on the accepting thread, up to the
        // handshake deadline per such client.
        let (t, addr, rx, accepting) = serving(2, Duration::from_secs(6));
        // Rogues: valid hellos with real queue pairs (the server's RTR succeeds), read
        // the accept, never say ready.
        let cq = t.create_cq().unwrap();
        let mut rogues = Vec::new();
        for _ in 0..3 {
            let qp = t.new_qp(&cq, &cq).unwrap();
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(&Msg::qp(Kind::Hello, qp.info(), b"rogue").encode()).unwrap();
            let until = Instant::now() + Duration::from_secs(2);
            let reply = read_msg(&mut ReadBy { sock: &mut s, until }).unwrap();
            assert_eq!(reply.kind, Kind::Accept);
            rogues.push((qp, s));
        }
        let start = Instant::now();
        let (qp, _) = t.connect(&ep_of(&addr), &cq, &cq, b"hello", Duration::from_secs(2)).unwrap();
        let took = start.elapsed();
        assert!(took < Duration::from_millis(1500), "the honest client waited {took:?}");
        let accepted: Vec<VerbsQp> = (0..4).map(|_| rx.recv_timeout(Duration::from_secs(3)).unwrap()).collect();
        // Past the deadline the rogues' queue pairs are in the error state; the honest
        // client's is not.
        std::thread::sleep(Duration::from_millis(2500));
        let broken = accepted.iter().filter(|q| q.is_error()).count();
        assert_eq!(broken, 3, "{accepted:?}");
        let honest = accepted.iter().find(|q| !q.is_error()).unwrap();
        assert_eq!(honest.peer_qp_num(), qp.qp_num());
        assert!(honest.error_reason().is_none());
        let why: Vec<_> = accepted.iter().filter_map(QueuePair::error_reason).collect();
        assert!(why.iter().all(|w| w.contains("did not finish the handshake in time")), "{why:?}");
        accepting.join().unwrap();
    }

    /// A client's connection over `t` to the listener at `addr`, and the server's side
    /// of it (from the acceptor's `rx`).
    fn connected(
        t: &VerbsTransport,
        addr: &str,
        rx: &std::sync::mpsc::Receiver<VerbsQp>,
    ) -> (VerbsQp, VerbsCq, VerbsQp) {
        let cq = t.create_cq().unwrap();
        let (qp, welcome) = t.connect(&ep_of(addr), &cq, &cq, b"hello", Duration::from_secs(3)).unwrap();
        assert_eq!(welcome, b"welcome", "the acceptor's answer");
        let server_side = rx.recv_timeout(Duration::from_secs(3)).expect("the server accepted it");
        (qp, cq, server_side)
    }

    /// WRITEs 8 bytes at `addr` with `rkey` from `qp` and waits: whether it succeeded.
    fn write8(t: &VerbsTransport, qp: &VerbsQp, cq: &VerbsCq, addr: u64, rkey: u32) -> bool {
        let src = t.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
        src.write(0, b"intruder").unwrap();
        if qp.post_write(9, &src, 0, 8, addr, rkey, true).is_err() {
            return false;
        }
        cq.wait(Duration::from_secs(5)).is_ok_and(|c| c.status.is_ok())
    }

    #[test]
    #[ignore = "needs an RDMA device: BOOMKV_RDMA_DEVICE=rxe0 (see the README)"]
    fn a_bound_region_is_reached_through_its_window_by_its_client_alone() {
        let (t, addr, rx, accepting) = serving(5, Duration::from_secs(6));
        let (owner, owner_cq, owner_at_server) = connected(&t, &addr, &rx);
        let memory = Arc::new(Mapping::anonymous(1 << 16).unwrap());
        let region = t.register_bound(&owner_at_server, memory, None, 4096, 4096, Access::REMOTE_WRITE).unwrap();
        let own_rkey = lock(&region.inner.raw).as_ref().unwrap().rkey;
        let window = region.remote();
        assert_ne!(window.rkey, own_rkey, "peers get the window's rkey");
        // The client it is bound to writes through the window.
        assert!(write8(&t, &owner, &owner_cq, window.addr, window.rkey));
        let mut got = [0u8; 8];
        region.read(0, &mut got).unwrap();
        assert_eq!(&got, b"intruder");
        region.write(0, &[0; 8]).unwrap();
        // Another client cannot, with the window's rkey or the region's own.
        for rkey in [window.rkey, own_rkey] {
            let (other, other_cq, _keep) = connected(&t, &addr, &rx);
            assert!(!write8(&t, &other, &other_cq, window.addr, rkey), "rkey {rkey:#x} from another connection");
        }
        // Nor can the owner with the region's own rkey.
        assert!(!write8(&t, &owner, &owner_cq, window.addr, own_rkey), "the region's own rkey reaches nothing");
        region.read(0, &mut got).unwrap();
        assert_eq!(got, [0; 8], "no refused WRITE changed a byte");
        accepting.join().unwrap();
    }

    fn ep_of(addr: &str) -> Endpoint {
        Endpoint::Verbs(addr.to_string())
    }
}
