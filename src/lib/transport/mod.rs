//! The transport seam: a small verbs-like interface that the protocols are written
//! against, with a shared-memory backend ([`shm`]) for one host and a TCP backend
//! ([`tcp`]) for any two hosts, and a real ibverbs backend (`verbs`, feature `rdma`)
//! behind the same traits.
//!
//! This module owns the interface (the traits [`Transport`], [`QueuePair`],
//! [`CompletionQueue`], [`Listener`], [`MemoryRegion`]), the value types that cross it
//! ([`Completion`], [`RemoteRegion`], [`Access`], [`QpStats`]), address parsing
//! ([`Endpoint`]), and the memory-region table both backends share ([`Mr`]).
//!
//! # The model, named after ibverbs
//!
//! | verbs                         | here                                              |
//! |-------------------------------|---------------------------------------------------|
//! | device + protection domain    | a [`Transport`] value (`ShmTransport`, `TcpTransport`); cheap to clone |
//! | `ibv_reg_mr`                  | [`Transport::alloc_mr`], [`Transport::register`] -> [`Mr`] |
//! | `(addr, len, rkey)`           | [`RemoteRegion`], from [`MemoryRegion::remote`]   |
//! | `ibv_create_cq`               | [`Transport::create_cq`]                          |
//! | `rdma_listen`/`rdma_connect` with private data | [`Transport::listen`] + [`Listener::accept`], [`Transport::connect`] |
//! | RC QP, `ibv_post_send/recv`   | [`QueuePair`]: `post_send`, `post_send_bytes`, `post_recv`, `post_write`, `post_write_imm`, `post_read` |
//! | `ibv_poll_cq`                 | [`CompletionQueue::poll`]; [`CompletionQueue::wait`] spins, then parks |
//!
//! Addresses: `remote_addr` is in the owner's address space, exactly like verbs: a
//! region's [`RemoteRegion::addr`] is the virtual address of its first byte in the
//! owner's process, and an operation names `addr + offset`. Lengths of one operation are
//! `u32` and at most [`MAX_MESSAGE`].
//!
//! # Semantics every backend keeps
//!
//! - One-sided WRITE and READ touch only registered memory of the peer's protection
//!   domain. The rkey must name a live region, `[addr, addr + len)` must lie inside it,
//!   and the region must allow the access ([`Access::REMOTE_WRITE`] /
//!   [`Access::REMOTE_READ`]). A violation completes the operation with
//!   [`WcStatus::RemoteAccessError`] (even when it was posted unsignaled) and moves the
//!   connection to the error state: both ends' queue pairs stop, their posted receives
//!   complete with [`WcStatus::WrFlushError`], later posts return an error. Every other
//!   queue pair keeps working.
//! - One-sided operations run no application code at the target. Only WRITE_WITH_IMM
//!   and SEND consume a posted RECV and produce a completion at the target.
//! - Completions of one queue pair arrive in posting order (send side) and in arrival
//!   order (receive side). An unsignaled WRITE or SEND produces no local completion but
//!   stays ordered with the operations around it, and so does an eager WRITE_WITH_IMM
//!   the backend did at its post ([`QueuePair::post_write_imm_eager`]). A request that
//!   fails, or is flushed, completes whether it was signaled or not.
//! - A SEND or WRITE_WITH_IMM that finds no posted RECV is retried for
//!   [`TransportConfig::rnr_timeout`], then completes with [`WcStatus::RnrRetryExceeded`]
//!   (connection to error). The retries never hold the posting thread: it goes on at
//!   once, and the work requests it posts behind the waiting one on that queue pair wait
//!   with it, in order. A message longer than the posted RECV completes with
//!   [`WcStatus::RemoteInvalidRequest`] at the sender and [`WcStatus::LocalLengthError`]
//!   at the receiver. Nothing is dropped silently.
//! - A local buffer outside its region, from another protection domain, or without
//!   [`Access::LOCAL_WRITE`] where the operation writes into it (READ, RECV) completes
//!   with [`WcStatus::LocalProtectionError`].
//! - Deregistering a region ([`MemoryRegion::deregister`], or dropping its last handle)
//!   revokes remote access before it returns: an operation already copying finishes
//!   first, every later one fails. Closing a queue pair (or the peer dying) moves the
//!   connection to the error state; nothing posted afterwards reaches the peer.
//! - Every blocking call has a timeout.
//!
//! # Connection set-up
//!
//! A listener/connector pair with an address string ([`Endpoint`]). The transport's
//! own handshake carries a magic number and [`PROTOCOL_VERSION`] (a mismatch is refused
//! with a reason both sides can print), the queue-pair numbers and queue depths, and
//! for `shm` the shared-memory files of the queues, the receive completion queue's
//! doorbell and the region table. The protocol's own handshake rides along as private
//! data, like `rdma_cm`: the client's bytes reach the server's accept callback, whose
//! answer comes back from [`Transport::connect`]. Initial region descriptors travel
//! there as [`RemoteRegion::to_bytes`].
//!
//! # Which side pays which thread hop
//!
//! - `shm`: none. The initiator's thread does the copy into the mapped peer memory and
//!   writes the completion into the peer's ring; the peer's polling thread sees it
//!   directly. A per-connection control thread only answers rkey look-ups (first use
//!   of a region) and notices a peer's death; it is never on the data path.
//! - `tcp`: the thread waiting on a completion queue reads the sockets of the
//!   connections attached to that queue itself (while spinning, which it keeps doing as
//!   long as frames arrive, and while parked in `epoll`), so a reply travels socket ->
//!   waiting thread with no hop, on the client and on the server alike. A fixed few
//!   I/O threads shared by all connections of the process (epoll) apply incoming
//!   one-sided operations, acknowledgements and deadlines only while no thread polls or
//!   waits on that connection's queues; they then take a couple of milliseconds (up to
//!   64 ms on a connection that was quiet) to notice traffic that arrives while the
//!   application is busy. So an application that is in `wait` pays no hop; one-sided
//!   operations aimed at a busy process pay the I/O thread's hop and that bounded delay.
//!
//! See [`shm`] and [`tcp`] for the wire and memory layouts.

pub mod crowd;
pub mod region;
pub mod shm;
pub mod tcp;
#[cfg(feature = "rdma")]
pub mod verbs;

#[cfg(test)]
mod conformance;

use std::fmt;
use std::fs::File;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::pmem::Mapping;

pub use region::Mr;
pub use shm::ShmTransport;
pub use tcp::TcpTransport;
#[cfg(feature = "rdma")]
pub use verbs::{VerbsConfig, VerbsTransport, VerbsTuning};

/// Version of the transports' own handshake and framing. Peers must agree exactly.
pub const PROTOCOL_VERSION: u16 = 2;

/// Port used when a TCP address leaves it out.
pub const DEFAULT_PORT: u16 = 7470;

/// Largest payload of one operation (16 MiB).
pub const MAX_MESSAGE: u32 = 1 << 24;

/// Largest private data of a connection request or reply (64 KiB).
pub const MAX_PRIVATE_DATA: usize = 1 << 16;

/// Which backend an address or a `--transport` option selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Shared memory on one host.
    Shm,
    /// TCP between any two hosts.
    Tcp,
    /// Real ibverbs (the `rdma` feature).
    Verbs,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Shm => "shm",
            Backend::Tcp => "tcp",
            Backend::Verbs => "verbs",
        })
    }
}

impl FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "shm" => Ok(Backend::Shm),
            "tcp" => Ok(Backend::Tcp),
            "verbs" | "rdma" | "ib" => Ok(Backend::Verbs),
            o => Err(Error::invalid(format!("unknown transport '{o}' (expected shm, tcp or verbs)"))),
        }
    }
}

/// A transport address.
///
/// Accepted spellings: `shm:/run/boomkv.sock` (also `shm:///run/boomkv.sock`, or a
/// bare path starting with `/` or `.`), `tcp://10.0.0.5:7470`, `10.0.0.5:7470`,
/// `[::1]:7470`, a bare host (port [`DEFAULT_PORT`]), and `verbs://10.0.0.5:7470`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A Unix socket path for the `shm` backend.
    Shm(PathBuf),
    /// `host:port` for the `tcp` backend.
    Tcp(String),
    /// `host:port` of the verbs connection manager.
    Verbs(String),
}

impl Endpoint {
    /// Parses an address (see the type docs for the accepted forms).
    pub fn parse(s: &str) -> Result<Endpoint> {
        let s = s.trim();
        if s.is_empty() {
            return Err(Error::invalid("empty transport address"));
        }
        if let Some(rest) = s.strip_prefix("shm:") {
            let path = rest.strip_prefix("//").filter(|p| p.starts_with('/')).unwrap_or(rest);
            if path.is_empty() {
                return Err(Error::invalid(format!(
                    "'{s}': shm address needs a socket path, e.g. shm:/run/boomkv.sock"
                )));
            }
            return Ok(Endpoint::Shm(PathBuf::from(path)));
        }
        // `tcp:host:port` like `shm:/path`, as well as `tcp://host:port`.
        if let Some(rest) = s.strip_prefix("tcp://").or_else(|| s.strip_prefix("tcp:")) {
            return Ok(Endpoint::Tcp(host_port(s, rest)?));
        }
        if let Some(rest) = s.strip_prefix("verbs://").or_else(|| s.strip_prefix("rdma://")) {
            return Ok(Endpoint::Verbs(host_port(s, rest)?));
        }
        if s.contains("://") {
            return Err(Error::invalid(format!("'{s}': unknown address scheme (expected shm:, tcp:// or verbs://)")));
        }
        if s.starts_with('/') || s.starts_with('.') {
            return Ok(Endpoint::Shm(PathBuf::from(s)));
        }
        Ok(Endpoint::Tcp(host_port(s, s)?))
    }

    /// The backend this address wants.
    pub fn backend(&self) -> Backend {
        match self {
            Endpoint::Shm(_) => Backend::Shm,
            Endpoint::Tcp(_) => Backend::Tcp,
            Endpoint::Verbs(_) => Backend::Verbs,
        }
    }

    /// Parses `s` and checks it against a `--transport` choice, if one was given: a bare
    /// `host:port` with `--transport verbs` becomes a verbs address, and a contradiction
    /// (say `shm:/x` with `--transport tcp`) is an error.
    pub fn parse_for(s: &str, transport: Option<Backend>) -> Result<Endpoint> {
        let ep = Endpoint::parse(s)?;
        match (transport, &ep) {
            (None, _) => Ok(ep),
            (Some(b), _) if b == ep.backend() => Ok(ep),
            (Some(Backend::Verbs), Endpoint::Tcp(hp)) if !s.contains("://") => Ok(Endpoint::Verbs(hp.clone())),
            (Some(b), _) => Err(Error::invalid(format!(
                "address '{s}' is a {} address but --transport {b} was given",
                ep.backend()
            ))),
        }
    }
}

fn host_port(orig: &str, s: &str) -> Result<String> {
    let bad = |why: &str| Error::invalid(format!("'{orig}': {why}"));
    if s.is_empty() {
        return Err(bad("missing host"));
    }
    if s.contains('/') {
        return Err(bad("a TCP address is host:port, without a path"));
    }
    // `[v6]:port`, `[v6]`, `host:port`, `host`; a bare IPv6 address without brackets has
    // several colons and cannot carry a port.
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, tail) = rest.split_once(']').ok_or_else(|| bad("unclosed '[' in IPv6 address"))?;
        match tail {
            "" => (format!("[{h}]"), None),
            t => (format!("[{h}]"), Some(t.strip_prefix(':').ok_or_else(|| bad("expected ':' after ']'"))?)),
        }
    } else if s.matches(':').count() > 1 {
        (format!("[{s}]"), None)
    } else if let Some((h, p)) = s.rsplit_once(':') {
        (h.to_string(), Some(p))
    } else {
        (s.to_string(), None)
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("missing host"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse::<u16>().map_err(|_| bad("port is not a number in 0..=65535"))?,
    };
    Ok(format!("{host}:{port}"))
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Shm(p) => write!(f, "shm:{}", p.display()),
            Endpoint::Tcp(hp) => write!(f, "tcp://{hp}"),
            Endpoint::Verbs(hp) => write!(f, "verbs://{hp}"),
        }
    }
}

impl FromStr for Endpoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Endpoint::parse(s)
    }
}

/// Access rights of a memory region, combined with `|`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// No rights beyond reading it locally (a source for SEND and WRITE).
    pub const NONE: Access = Access(0);
    /// The local side may write into it (READ destination, RECV buffer).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may WRITE into it.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may READ from it.
    pub const REMOTE_READ: Access = Access(4);
    /// Peers may run atomics on its 8-byte words (compare-and-swap, fetch-and-add).
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Everything.
    pub const ALL: Access = Access(15);

    /// True when every right in `other` is in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// True when a peer may reach a region with these rights (any remote right).
    pub fn is_remote(self) -> bool {
        self.0 & (Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0) != 0
    }

    /// The raw bits (for wire encodings).
    pub fn bits(self) -> u32 {
        self.0
    }

    /// From raw bits; unknown bits are dropped.
    pub fn from_bits(bits: u32) -> Access {
        Access(bits & Access::ALL.0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.contains(Access::LOCAL_WRITE) {
            parts.push("LOCAL_WRITE");
        }
        if self.contains(Access::REMOTE_WRITE) {
            parts.push("REMOTE_WRITE");
        }
        if self.contains(Access::REMOTE_READ) {
            parts.push("REMOTE_READ");
        }
        if self.contains(Access::REMOTE_ATOMIC) {
            parts.push("REMOTE_ATOMIC");
        }
        if parts.is_empty() {
            parts.push("NONE");
        }
        f.write_str(&parts.join("|"))
    }
}

/// One WRITE of [`QueuePair::post_write_batch`]: `len` bytes at `off` of the batch's
/// region to `remote_addr` under `rkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteWr {
    /// Reported in the completion.
    pub wr_id: u64,
    /// Offset in the local region.
    pub off: u64,
    /// Bytes.
    pub len: u32,
    /// Target address at the peer.
    pub remote_addr: u64,
    /// The target region's rkey.
    pub rkey: u32,
    /// Complete locally (unsignaled writes complete only when they fail).
    pub signaled: bool,
}

/// What a peer needs to reach a region with one-sided operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// Address of the first byte in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteRegion {
    /// Length of [`RemoteRegion::to_bytes`]: `addr` (u64 LE), `len` (u64 LE), `rkey` (u32 LE).
    pub const ENCODED_LEN: usize = 20;

    /// The 20-byte little-endian encoding, for protocol messages.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Decodes [`RemoteRegion::to_bytes`] from the start of `b`.
    pub fn from_bytes(b: &[u8]) -> Result<RemoteRegion> {
        if b.len() < Self::ENCODED_LEN {
            return Err(Error::corrupt("remote region", format!("{} bytes, need {}", b.len(), Self::ENCODED_LEN)));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        Ok(RemoteRegion {
            addr: u64_at(0),
            len: u64_at(8),
            rkey: u32::from_le_bytes(b[16..20].try_into().unwrap_or([0; 4])),
        })
    }

    /// The address `off` bytes into the region (no bounds check: the target checks).
    pub fn at(&self, off: u64) -> u64 {
        self.addr.wrapping_add(off)
    }
}

/// Status of a completion, as in verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The operation completed.
    Success,
    /// The local buffer was outside its region, in another protection domain, or lacked
    /// the access the operation needs (`IBV_WC_LOC_PROT_ERR`).
    LocalProtectionError,
    /// A received message was longer than the posted receive buffer (`IBV_WC_LOC_LEN_ERR`).
    LocalLengthError,
    /// The target refused a one-sided access: bad rkey, out of bounds, access flags, or
    /// a deregistered region (`IBV_WC_REM_ACCESS_ERR`).
    RemoteAccessError,
    /// The target could not take the message, e.g. longer than its receive buffer
    /// (`IBV_WC_REM_INV_REQ_ERR`).
    RemoteInvalidRequest,
    /// No receive was posted at the target within the RNR timeout (`IBV_WC_RNR_RETRY_EXC_ERR`).
    RnrRetryExceeded,
    /// The queue pair went to the error state before this request completed
    /// (`IBV_WC_WR_FLUSH_ERR`): the connection closed, the peer died, or an earlier
    /// request failed.
    WrFlushError,
}

impl WcStatus {
    /// True for [`WcStatus::Success`].
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocalProtectionError => 1,
            WcStatus::LocalLengthError => 2,
            WcStatus::RemoteAccessError => 3,
            WcStatus::RemoteInvalidRequest => 4,
            WcStatus::RnrRetryExceeded => 5,
            WcStatus::WrFlushError => 6,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<WcStatus> {
        Some(match c {
            0 => WcStatus::Success,
            1 => WcStatus::LocalProtectionError,
            2 => WcStatus::LocalLengthError,
            3 => WcStatus::RemoteAccessError,
            4 => WcStatus::RemoteInvalidRequest,
            5 => WcStatus::RnrRetryExceeded,
            6 => WcStatus::WrFlushError,
            _ => return None,
        })
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WcStatus::Success => "success",
            WcStatus::LocalProtectionError => "local protection error",
            WcStatus::LocalLengthError => "local length error",
            WcStatus::RemoteAccessError => "remote access error",
            WcStatus::RemoteInvalidRequest => "remote invalid request",
            WcStatus::RnrRetryExceeded => "RNR retry exceeded",
            WcStatus::WrFlushError => "flushed",
        })
    }
}

/// What completed, as in verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND posted here (`IBV_WC_SEND`).
    Send,
    /// A WRITE or WRITE_WITH_IMM posted here (`IBV_WC_RDMA_WRITE`).
    Write,
    /// A READ posted here (`IBV_WC_RDMA_READ`).
    Read,
    /// A receive consumed by a peer's SEND (`IBV_WC_RECV`), or a flushed receive.
    Recv,
    /// A receive consumed by a peer's WRITE_WITH_IMM (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RecvWithImm,
    /// A compare-and-swap posted here (`IBV_WC_COMP_SWAP`).
    CompareSwap,
    /// A fetch-and-add posted here (`IBV_WC_FETCH_ADD`).
    FetchAdd,
    /// A FLUSH posted here (`IBV_WC_FLUSH`, or its emulation).
    Flush,
    /// A memory window bound here (`IBV_WC_BIND_MW`; verbs only, and reported only
    /// when it failed).
    Bind,
}

impl WcOpcode {
    pub(crate) fn code(self) -> u8 {
        match self {
            WcOpcode::Send => 0,
            WcOpcode::Write => 1,
            WcOpcode::Read => 2,
            WcOpcode::Recv => 3,
            WcOpcode::RecvWithImm => 4,
            WcOpcode::CompareSwap => 5,
            WcOpcode::FetchAdd => 6,
            WcOpcode::Flush => 7,
            WcOpcode::Bind => 8,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<WcOpcode> {
        Some(match c {
            0 => WcOpcode::Send,
            1 => WcOpcode::Write,
            2 => WcOpcode::Read,
            3 => WcOpcode::Recv,
            4 => WcOpcode::RecvWithImm,
            5 => WcOpcode::CompareSwap,
            6 => WcOpcode::FetchAdd,
            7 => WcOpcode::Flush,
            // 8 (`Bind`) is the verbs backend's alone: no software peer may claim it.
            _ => return None,
        })
    }
}

/// One work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The `wr_id` the work request was posted with.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred (sends, writes, reads).
    pub byte_len: u32,
    /// The immediate of a WRITE_WITH_IMM (receive side only).
    pub imm: Option<u32>,
    /// The local queue pair the work request belonged to.
    pub qp_num: u32,
}

impl Completion {
    /// Turns a failed completion into an error naming `what`.
    pub fn ok(self, what: &str) -> Result<Completion> {
        if self.status.is_ok() {
            Ok(self)
        } else {
            Err(Error::Transport(format!(
                "{what}: {:?} wr_id {} on qp {} completed with {}",
                self.opcode, self.wr_id, self.qp_num, self.status
            )))
        }
    }
}

/// Work requests posted on one queue pair, by kind (for tests that count transport
/// operations per request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpStats {
    /// SENDs (including `post_send_bytes`).
    pub sends: u64,
    /// WRITEs without immediate.
    pub writes: u64,
    /// WRITE_WITH_IMMs.
    pub writes_imm: u64,
    /// READs.
    pub reads: u64,
    /// RECVs.
    pub recvs: u64,
    /// Compare-and-swaps and fetch-and-adds.
    pub atomics: u64,
    /// FLUSHes.
    pub flushes: u64,
}

impl QpStats {
    /// All operations that put bytes on the wire (everything but RECVs).
    pub fn network_ops(&self) -> u64 {
        self.sends + self.writes + self.writes_imm + self.reads + self.atomics + self.flushes
    }
}

/// What [`QueuePair::post_write_imm_eager`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The data was placed and the peer's receive consumed before the post returned:
    /// the source is not read again, and no completion follows.
    Now,
    /// A completion follows, as for [`QueuePair::post_write_imm`] (or the post failed
    /// with its error completion).
    Later,
}

/// Counters behind [`QpStats`].
#[derive(Debug, Default)]
pub(crate) struct StatCounters {
    pub sends: std::sync::atomic::AtomicU64,
    pub writes: std::sync::atomic::AtomicU64,
    pub writes_imm: std::sync::atomic::AtomicU64,
    pub reads: std::sync::atomic::AtomicU64,
    pub recvs: std::sync::atomic::AtomicU64,
    pub atomics: std::sync::atomic::AtomicU64,
    pub flushes: std::sync::atomic::AtomicU64,
}

impl StatCounters {
    pub fn snapshot(&self) -> QpStats {
        use std::sync::atomic::Ordering::Relaxed;
        QpStats {
            sends: self.sends.load(Relaxed),
            writes: self.writes.load(Relaxed),
            writes_imm: self.writes_imm.load(Relaxed),
            reads: self.reads.load(Relaxed),
            recvs: self.recvs.load(Relaxed),
            atomics: self.atomics.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
        }
    }
}

/// Binds `$t` to a new transport of backend `$b` and evaluates `$body` with it: the one
/// place a backend becomes a transport (`boomctl`'s commands and the sweeps use it).
/// verbs takes its device, port and GID index from `BOOMKV_RDMA_DEVICE`, `_PORT` and
/// `_GID_INDEX` ([`verbs_from_env`]); in a build without the `rdma` feature it is an
/// [`Error::Unsupported`](crate::Error::Unsupported). Errors leave through `?`, so the
/// caller's error type must convert from [`crate::Error`].
#[macro_export]
macro_rules! with_transport {
    ($b:expr, $t:ident => $body:expr) => {
        match $b {
            $crate::transport::Backend::Shm => {
                let $t = $crate::transport::ShmTransport::new()?;
                $body
            }
            $crate::transport::Backend::Tcp => {
                let $t = $crate::transport::TcpTransport::new()?;
                $body
            }
            $crate::transport::Backend::Verbs => {
                let $t = $crate::transport::verbs_from_env()?;
                $body
            }
        }
    };
}

/// The verbs transport configured from the environment (`BOOMKV_RDMA_DEVICE`, `_PORT`,
/// `_GID_INDEX`).
#[cfg(feature = "rdma")]
pub fn verbs_from_env() -> Result<VerbsTransport> {
    VerbsTransport::from_env()
}

/// This build has no verbs backend: always [`Error::Unsupported`]. (Typed as the shm
/// transport so that [`with_transport!`](crate::with_transport) compiles its verbs arm.)
#[cfg(not(feature = "rdma"))]
pub fn verbs_from_env() -> Result<ShmTransport> {
    Err(Error::Unsupported("this build has no RDMA support: rebuild with --features rdma, or use shm or tcp".into()))
}

/// Every backend's bound on one message or one-sided transfer ([`MAX_MESSAGE`]).
pub(crate) fn check_len(len: u32) -> Result<()> {
    if len > MAX_MESSAGE {
        return Err(Error::invalid(format!("message of {len} bytes is over the {MAX_MESSAGE}-byte limit")));
    }
    Ok(())
}

/// Atomics work on aligned 8-byte words: a misaligned target address is refused when
/// posted, by every backend alike (verbs providers refuse it there too).
pub fn check_atomic_addr(remote_addr: u64) -> Result<()> {
    if remote_addr % 8 != 0 {
        return Err(Error::invalid(format!("atomic on {remote_addr:#x}: not an 8-byte aligned address")));
    }
    Ok(())
}

/// Tunables shared by the backends.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// Receive queue depth of each queue pair (posted RECVs outstanding at once).
    pub rq_depth: u32,
    /// Send queue depth: requests posted but not yet completed (tcp).
    pub sq_depth: u32,
    /// How long a SEND or WRITE_WITH_IMM waits for a RECV at the target before it fails
    /// with [`WcStatus::RnrRetryExceeded`]. Zero fails at once.
    pub rnr_timeout: Duration,
    /// How long [`CompletionQueue::wait`] spins before it parks (when it gets a
    /// [`spin_slot`], or is a client on CPUs of its own: see `client_cpu_spin`;
    /// otherwise it parks at once).
    pub spin: Duration,
    /// Upper bound for the handshake of one incoming connection in `accept`.
    pub handshake_timeout: Duration,
    /// shm: how long the owner of a region has to answer the first use of its rkey on a
    /// connection (the initiator asks it for the region's file). The work request waits
    /// in its send queue meanwhile, the poster does not; without an answer it fails with
    /// a remote access error.
    pub lookup_timeout: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            rq_depth: 1024,
            sq_depth: 4096,
            // Generous, like verbs RNR retry: a peer that posts its receives right after
            // connecting must not fail a request that raced ahead on a loaded machine.
            rnr_timeout: Duration::from_secs(1),
            spin: Duration::from_micros(100),
            handshake_timeout: Duration::from_secs(5),
            lookup_timeout: Duration::from_secs(2),
        }
    }
}

/// A device plus protection domain: creates regions, completion queues, listeners and
/// connections. Values are cheap to clone (an `Arc` inside) and can be shared by
/// threads. Two transport values made by separate `new` calls are separate protection
/// domains, like two processes.
pub trait Transport: Clone + Send + Sync + 'static {
    /// Memory region.
    type Mr: MemoryRegion;
    /// Completion queue.
    type Cq: CompletionQueue;
    /// Reliable-connected queue pair.
    type Qp: QueuePair<Mr = Self::Mr>;
    /// Listener for incoming connections.
    type Listener: Listener<Qp = Self::Qp, Cq = Self::Cq>;

    /// The backend.
    fn backend(&self) -> Backend;

    /// The configuration the transport was made with.
    fn config(&self) -> &TransportConfig;

    /// A new zeroed buffer of `len` bytes owned by the transport and registered with
    /// `access` (shared memory for `shm`, so peers can map it).
    fn alloc_mr(&self, len: usize, access: Access) -> Result<Self::Mr>;

    /// Registers `[offset, offset + len)` of an existing mapping, e.g. one granted
    /// segment of the pool. `file`, when given, is the file the mapping maps from file
    /// offset 0 (as [`crate::pmem::Media::file`] and shared-memory files are); the
    /// `shm` backend needs it for any region a peer touches (remote access, or a RECV
    /// buffer) and hands it to peers.
    fn register(
        &self,
        mapping: Arc<Mapping>,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Self::Mr>;

    /// Like [`Transport::register`], but peers reach the region only through the local
    /// queue pair `qp` (a type-2 memory window bound to it): an rkey used on any other
    /// connection is a remote access error. Servers bind every region they expose to
    /// the client it is for. The default registers unbound, for backends that cannot
    /// bind (see their docs).
    fn register_bound(
        &self,
        qp: &Self::Qp,
        mapping: Arc<Mapping>,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Self::Mr> {
        let _ = qp;
        self.register(mapping, file, offset, len, access)
    }

    /// Peers' one-sided operations this protection domain refused so far (bad or foreign
    /// rkey, out of bounds, missing access); each also closed the connection it came on.
    fn access_violations(&self) -> u64 {
        0
    }

    /// Regions of this protection domain that peers can reach now: registered with a
    /// remote right ([`Access::is_remote`]) and not deregistered. What a server exposes
    /// to its clients, for `boomctl stats` and for tests that hold a server to exposing
    /// no more than its protocols need.
    fn exposed_regions(&self) -> u64 {
        0
    }

    /// A new completion queue. Any number of queue pairs may share one.
    fn create_cq(&self) -> Result<Self::Cq>;

    /// Listens on `ep` (`tcp://127.0.0.1:0` picks a free port; see [`Listener::endpoint`]).
    fn listen(&self, ep: &Endpoint) -> Result<Self::Listener>;

    /// Connects to a listener. Send completions go to `send_cq`, receive completions to
    /// `recv_cq` (may be the same queue). `private_data` reaches the server's accept
    /// callback; its answer is returned with the queue pair.
    fn connect(
        &self,
        ep: &Endpoint,
        send_cq: &Self::Cq,
        recv_cq: &Self::Cq,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(Self::Qp, Vec<u8>)>;
}

/// A registered memory region.
pub trait MemoryRegion: Clone + fmt::Debug + Send + Sync + 'static {
    /// The descriptor a peer needs for one-sided operations.
    fn remote(&self) -> RemoteRegion;
    /// Length in bytes.
    fn len(&self) -> u64;
    /// True for a zero-length region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Access rights.
    fn access(&self) -> Access;
    /// Copies `buf.len()` bytes at `off` (region-relative) into `buf`.
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()>;
    /// Copies `data` into the region at `off` (region-relative).
    fn write(&self, off: u64, data: &[u8]) -> Result<()>;
    /// The underlying mapping and the offset of the region's first byte in it, for
    /// owners that work on the memory directly (atomics, write-back).
    fn mapping(&self) -> (&Arc<Mapping>, u64);
    /// Revokes remote access now (idempotent). Dropping the last handle does the same.
    fn deregister(&self);
    /// False after [`MemoryRegion::deregister`].
    fn is_registered(&self) -> bool;
}

/// A reliable-connected queue pair. All posts take `&self`; a queue pair may be moved
/// to, and shared with, worker threads. Dropping it closes the connection.
pub trait QueuePair: fmt::Debug + Send + Sync + 'static {
    /// Memory region type of the transport.
    type Mr: MemoryRegion;

    /// This queue pair's number (as reported in [`Completion::qp_num`]).
    fn qp_num(&self) -> u32;
    /// The peer's queue-pair number.
    fn peer_qp_num(&self) -> u32;

    /// SENDs `len` bytes at `off` of `mr`. Completes (signaled) once delivered.
    fn post_send(&self, wr_id: u64, mr: &Self::Mr, off: u64, len: u32) -> Result<()>;
    /// SENDs `data`, copied at post time (like a verbs inline send); for small control
    /// messages. Completes (signaled) like [`QueuePair::post_send`].
    fn post_send_bytes(&self, wr_id: u64, data: &[u8]) -> Result<()>;
    /// Like [`QueuePair::post_send_bytes`], unsignaled: it completes nothing locally
    /// unless it fails (an RNR timeout, a receive too small, a flush), and stays ordered
    /// with the work requests around it, as an unsignaled WRITE does. For requests whose
    /// answer is the news (a client's request, a server's reply): a completion per
    /// message that nobody needs costs the poster a queue entry and a poll.
    fn post_send_bytes_unsignaled(&self, wr_id: u64, data: &[u8]) -> Result<()>;
    /// Posts a receive buffer of `len` bytes at `off` of `mr` (needs [`Access::LOCAL_WRITE`]).
    /// Keep `mr` registered until the receive completes, as with verbs: a backend need
    /// not hold it, and a SEND that reaches a buffer whose region is gone fails, with
    /// the connection.
    fn post_recv(&self, wr_id: u64, mr: &Self::Mr, off: u64, len: u32) -> Result<()>;
    /// WRITEs `len` bytes at `off` of `mr` to the peer's `remote_addr` under `rkey`.
    /// Unsignaled writes complete nothing locally unless they fail.
    #[allow(clippy::too_many_arguments)]
    fn post_write(
        &self,
        wr_id: u64,
        mr: &Self::Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
    ) -> Result<()>;
    /// WRITE_WITH_IMM: like [`QueuePair::post_write`] (signaled), then consumes a RECV at
    /// the peer, which completes with `imm`.
    #[allow(clippy::too_many_arguments)]
    fn post_write_imm(
        &self,
        wr_id: u64,
        mr: &Self::Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<()>;
    /// WRITE_WITH_IMM like [`QueuePair::post_write_imm`], for a poster that releases
    /// what the write reads once it is done (a server's GET reply holds the entry's
    /// segment until then). A backend that does the whole request before the post
    /// returns says so with [`Finished::Now`]: then no completion follows, and every
    /// work request posted before it on the queue pair is done too. shm copies at post
    /// time when nothing waits ahead of the request on its queue pair (a receive is
    /// posted, the rkey known). Otherwise [`Finished::Later`], and it completes as
    /// `post_write_imm` does. The default (a NIC reads the memory after the post) is
    /// always `Later`.
    #[allow(clippy::too_many_arguments)]
    fn post_write_imm_eager(
        &self,
        wr_id: u64,
        mr: &Self::Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<Finished> {
        self.post_write_imm(wr_id, mr, off, len, remote_addr, rkey, imm)?;
        Ok(Finished::Later)
    }
    /// READs `len` bytes from the peer's `remote_addr` under `rkey` into `off` of `mr`
    /// (needs [`Access::LOCAL_WRITE`]).
    fn post_read(&self, wr_id: u64, mr: &Self::Mr, off: u64, len: u32, remote_addr: u64, rkey: u32) -> Result<()>;
    /// Atomic compare-and-swap of the 8-byte word at the peer's `remote_addr` (8-byte
    /// aligned, in a region with [`Access::REMOTE_ATOMIC`]) under `rkey`: if it equals
    /// `compare` it becomes `swap`. The word's previous value (little-endian) lands in
    /// the 8 bytes at `off` of `mr` (needs [`Access::LOCAL_WRITE`]); the caller compares
    /// it with `compare` to know whether the swap happened. Always signaled. Atomic
    /// against every other atomic on the word through this transport, not against
    /// WRITEs (as in verbs, `IBV_ATOMIC_HCA`). A misaligned `remote_addr` is refused at
    /// the post ([`check_atomic_addr`]); a target that finds a forged one misaligned
    /// fails the request with a remote invalid request error.
    #[allow(clippy::too_many_arguments)]
    fn post_compare_swap(
        &self,
        wr_id: u64,
        mr: &Self::Mr,
        off: u64,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Result<()>;
    /// Atomic fetch-and-add of `add` (wrapping) to the 8-byte word at the peer's
    /// `remote_addr`; otherwise like [`QueuePair::post_compare_swap`].
    fn post_fetch_add(&self, wr_id: u64, mr: &Self::Mr, off: u64, remote_addr: u64, rkey: u32, add: u64) -> Result<()>;
    /// FLUSH (the IBTA's RDMA FLUSH, persistence type): completes once every WRITE this
    /// queue pair posted before it to `[remote_addr, remote_addr + len)` under `rkey`
    /// (a region with [`Access::REMOTE_WRITE`]) is in the target's persistence domain,
    /// without the target's CPU taking part in the protocol. Always signaled. Backends
    /// say how they do it (`shm`: the initiator writes the lines back through its own
    /// mapping; `tcp`: the target's software NIC writes back before acknowledging;
    /// `verbs`: a device FLUSH, or a READ after the WRITEs where the device has none).
    fn post_flush(&self, wr_id: u64, remote_addr: u64, rkey: u32, len: u32) -> Result<()>;
    /// WRITEs that go out together, each like [`QueuePair::post_write`]. A backend may
    /// hand them to the device at once (verbs: one chained `ibv_post_send`, one
    /// doorbell); the default posts them one by one.
    fn post_write_batch(&self, mr: &Self::Mr, wrs: &[WriteWr]) -> Result<()> {
        for w in wrs {
            self.post_write(w.wr_id, mr, w.off, w.len, w.remote_addr, w.rkey, w.signaled)?;
        }
        Ok(())
    }
    /// Receive buffers `(wr_id, off, len)` of `mr`, each like [`QueuePair::post_recv`].
    /// A backend may post them at once (verbs: one chained `ibv_post_recv`); the default
    /// posts them one by one.
    fn post_recv_batch(&self, mr: &Self::Mr, bufs: &[(u64, u64, u32)]) -> Result<()> {
        for &(wr_id, off, len) in bufs {
            self.post_recv(wr_id, mr, off, len)?;
        }
        Ok(())
    }

    /// True once the connection is in the error state (posts then return errors).
    fn is_error(&self) -> bool;
    /// Why the connection went to the error state.
    fn error_reason(&self) -> Option<String>;
    /// Work requests posted so far.
    fn stats(&self) -> QpStats;
    /// Closes the connection: the peer's posted receives are flushed; ours too.
    fn close(&self);
}

/// A completion queue. Clones share the queue.
pub trait CompletionQueue: Clone + fmt::Debug + Send + Sync + 'static {
    /// Moves up to `max` completions into `out` (appending) without blocking; returns
    /// how many.
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize;

    /// One completion, or `None` without blocking.
    fn poll_one(&self) -> Option<Completion> {
        let mut v = Vec::with_capacity(1);
        self.poll(&mut v, 1);
        v.pop()
    }

    /// Waits for one completion: spins for [`TransportConfig::spin`], then parks until
    /// one arrives. Returns [`Error::Timeout`] after `timeout`.
    fn wait(&self, timeout: Duration) -> Result<Completion>;
}

/// Accepts incoming connections.
pub trait Listener: Send + Sync + 'static {
    /// Queue pair type.
    type Qp;
    /// Completion queue type.
    type Cq;

    /// The address clients connect to (with the real port when bound to port 0).
    fn endpoint(&self) -> Endpoint;

    /// Waits up to `timeout` for a client. Connection attempts that fail the transport
    /// handshake (wrong version, garbage, a client that hangs up) are refused, logged
    /// and skipped. For a good one, `on_connect` gets the client's private data and
    /// returns the reply's private data; an error from it refuses the client (who is
    /// told the reason) and is returned.
    fn accept<F>(&self, send_cq: &Self::Cq, recv_cq: &Self::Cq, timeout: Duration, on_connect: F) -> Result<Self::Qp>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>;

    /// Like [`Listener::accept`] but returns `Ok(None)` at once when no client is waiting.
    fn try_accept<F>(&self, send_cq: &Self::Cq, recv_cq: &Self::Cq, on_connect: F) -> Result<Option<Self::Qp>>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>;
}

/// Set by [`quiet_events`].
static EVENTS_QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Silences the transport's event lines in this process from here on: for a program
/// whose own error says what happened to its one connection (a command-line `get`),
/// where a line about the broken connection before it would say it twice.
pub fn quiet_events() {
    EVENTS_QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Logs a transport event that the user may need to see (a refused or broken
/// connection) on standard error. Set `BOOMKV_QUIET_TRANSPORT=1` to silence it (or
/// call [`quiet_events`]).
pub(crate) fn log_event(msg: &str) {
    static QUIET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if EVENTS_QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if !*QUIET.get_or_init(|| std::env::var_os("BOOMKV_QUIET_TRANSPORT").is_some_and(|v| v != "0")) {
        eprintln!("boomkv transport: {msg}");
    }
}

/// How one handshake attempt over a TCP socket ended (tcp and verbs backends).
pub(crate) enum Handshake {
    /// The attempt failed before or outside the accept callback: log it, keep listening.
    Refused(String),
    /// The callback refused the client (who was told why): return this error.
    Rejected(Error),
}

/// One handshake attempt of an accept loop: `Ok(Some(qp))` when accepted; `Ok(None)`
/// when it failed before the callback ran (logged; `cb` stays for the next client);
/// an error when the callback refused the client or the attempt failed after it.
pub(crate) fn accept_attempt<Q, F>(
    local: &Endpoint,
    cb: &mut Option<F>,
    handshake: impl FnOnce(&mut dyn FnMut(&[u8]) -> Result<Vec<u8>>) -> Result<Q, Handshake>,
) -> Result<Option<Q>>
where
    F: FnOnce(&[u8]) -> Result<Vec<u8>>,
{
    let mut used = false;
    let r = handshake(&mut |p| {
        used = true;
        match cb.take() {
            Some(f) => f(p),
            None => Err(Error::Transport("accept callback already used".into())),
        }
    });
    match r {
        Ok(qp) => Ok(Some(qp)),
        Err(Handshake::Rejected(e)) => Err(e),
        Err(Handshake::Refused(why)) => {
            log_event(&format!("refused connection on {local}: {why}"));
            if used {
                Err(Error::Transport(why))
            } else {
                Ok(None)
            }
        }
    }
}

/// Most handshakes a listener runs at once; a connection beyond it is closed at once.
pub const MAX_PENDING_HANDSHAKES: usize = 4096;

/// The first half of a handshake, which waits on the peer: run by the greeter's thread
/// for one accepted connection, with the deadline for the whole handshake.
pub(crate) type FirstHalf<S, P> = dyn Fn(S, std::time::Instant) -> std::result::Result<P, String> + Send + Sync;

/// Handshakes off the accept path. A listener's greeter thread accepts connections and
/// gives each its own short-lived thread that reads the peer's half of the handshake
/// under one deadline for the whole of it (not per read: a peer sending a byte a second
/// gets no more time). Finished first halves queue up for [`Listener::accept`], which
/// runs the application's callback and answers. A slow or silent peer so delays only
/// its own handshake: thousands of them never hold up an honest client, up to
/// [`MAX_PENDING_HANDSHAKES`] at once, beyond which new connections are closed.
pub(crate) struct Greeter<P: Send + 'static> {
    ready: std::sync::Mutex<std::sync::mpsc::Receiver<P>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<P: Send + 'static> Greeter<P> {
    /// Starts the greeter: `accept_one` takes one waiting connection without blocking
    /// (`Ok(None)` when none), `readable` is the listening socket to wait on, `first`
    /// the first half of the handshake.
    pub(crate) fn start<S: Send + 'static>(
        local: Endpoint,
        readable: std::os::fd::OwnedFd,
        accept_one: impl Fn() -> std::io::Result<Option<S>> + Send + 'static,
        first: Arc<FirstHalf<S, P>>,
        timeout: Duration,
    ) -> Result<Greeter<P>> {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let (tx, rx) = std::sync::mpsc::channel::<P>();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let pending = Arc::new(AtomicUsize::new(0));
        let quiet = Arc::new(LogLimit::default());
        let thread = std::thread::Builder::new()
            .name("boomkv-greeter".into())
            .spawn(move || {
                let mut refused_quiet = std::time::Instant::now();
                while !stop2.load(Ordering::Acquire) {
                    let ts = rustix::time::Timespec { tv_sec: 0, tv_nsec: 20_000_000 };
                    let mut fds = [rustix::event::PollFd::new(&readable, rustix::event::PollFlags::IN)];
                    let _ = rustix::event::poll(&mut fds, Some(&ts));
                    loop {
                        let s = match accept_one() {
                            Ok(Some(s)) => s,
                            Ok(None) => break,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                            Err(e) => {
                                // Per-connection failures (ECONNABORTED, EMFILE) must not end the server.
                                log_event(&format!("accept on {local}: {e}"));
                                std::thread::sleep(Duration::from_millis(1));
                                break;
                            }
                        };
                        if pending.load(Ordering::Acquire) >= MAX_PENDING_HANDSHAKES {
                            if refused_quiet <= std::time::Instant::now() {
                                log_event(&format!(
                                    "{local}: {MAX_PENDING_HANDSHAKES} handshakes in progress; closing new connections"
                                ));
                                refused_quiet = std::time::Instant::now() + Duration::from_secs(1);
                            }
                            drop(s);
                            continue;
                        }
                        pending.fetch_add(1, Ordering::AcqRel);
                        let (first, tx, pending2, local2) = (first.clone(), tx.clone(), pending.clone(), local.clone());
                        let quiet2 = quiet.clone();
                        let until = deadline(timeout);
                        let spawned = std::thread::Builder::new()
                            .name("boomkv-handshake".into())
                            .stack_size(128 << 10)
                            .spawn(move || {
                                match first(s, until) {
                                    Ok(p) => {
                                        let _ = tx.send(p);
                                    }
                                    Err(why) => {
                                        if quiet2.allow() {
                                            log_event(&format!("refused connection on {local2}: {why}"));
                                        }
                                    }
                                }
                                pending2.fetch_sub(1, Ordering::AcqRel);
                            });
                        if let Err(e) = spawned {
                            pending.fetch_sub(1, Ordering::AcqRel);
                            log_event(&format!("{local}: cannot start a handshake thread: {e}"));
                        }
                    }
                }
            })
            .map_err(|e| Error::io("spawn the greeter thread", e))?;
        Ok(Greeter { ready: std::sync::Mutex::new(rx), stop, thread: Some(thread) })
    }

    /// [`Listener::accept`] over the greeted connections: the first one for which
    /// `finish` (the second half of the handshake, the application's `on_connect`
    /// included) succeeds within `timeout`. One that fails before `on_connect` ran is
    /// logged and skipped; one `on_connect` refused ends the call with its error.
    pub(crate) fn accept<Q, F>(
        &self,
        local: &Endpoint,
        timeout: Duration,
        what: &'static str,
        on_connect: F,
        finish: impl Fn(P, &mut dyn FnMut(&[u8]) -> Result<Vec<u8>>) -> Result<Q, Handshake>,
    ) -> Result<Q>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let end = deadline(timeout);
        let mut cb = Some(on_connect);
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if let Some(g) = self.next(left.max(Duration::from_micros(1))) {
                if let Some(qp) = accept_attempt(local, &mut cb, |f| finish(g, f))? {
                    return Ok(qp);
                }
            }
            if std::time::Instant::now() >= end {
                return Err(Error::Timeout(timeout, what));
            }
        }
    }

    /// [`Listener::try_accept`] over the greeted connections: `Ok(None)` when none is
    /// waiting or the one waiting failed before `on_connect` ran (logged).
    pub(crate) fn try_accept<Q, F>(
        &self,
        local: &Endpoint,
        on_connect: F,
        finish: impl FnOnce(P, F) -> Result<Q, Handshake>,
    ) -> Result<Option<Q>>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let Some(g) = self.next(Duration::ZERO) else { return Ok(None) };
        match finish(g, on_connect) {
            Ok(qp) => Ok(Some(qp)),
            Err(Handshake::Rejected(e)) => Err(e),
            Err(Handshake::Refused(why)) => {
                log_event(&format!("refused connection on {local}: {why}"));
                Ok(None)
            }
        }
    }

    /// The next connection whose first half is done, waiting up to `timeout`.
    pub(crate) fn next(&self, timeout: Duration) -> Option<P> {
        let rx = self.ready.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if timeout.is_zero() {
            rx.try_recv().ok()
        } else {
            rx.recv_timeout(timeout).ok()
        }
    }
}

impl<P: Send + 'static> Drop for Greeter<P> {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// At most [`LogLimit::PER_SECOND`] refused-handshake lines a second, then one line
/// saying how many were left out: a flood of bad connections must not flood the log.
#[derive(Default)]
struct LogLimit(std::sync::Mutex<(Option<std::time::Instant>, u32, u64)>);

impl LogLimit {
    const PER_SECOND: u32 = 10;

    fn allow(&self) -> bool {
        let mut g = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        let (since, n, dropped) = &mut *g;
        if since.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            if *dropped > 0 {
                log_event(&format!("... and {dropped} more refused connections not logged"));
            }
            (*since, *n, *dropped) = (Some(now), 0, 0);
        }
        *n += 1;
        if *n > Self::PER_SECOND {
            *dropped += 1;
            return false;
        }
        true
    }
}

/// Reads exactly `buf.len()` bytes from `s` before `until` (one deadline for all the
/// reads, unlike a socket read timeout, which each read gets afresh).
pub(crate) fn read_exact_by(
    s: &mut std::net::TcpStream,
    buf: &mut [u8],
    until: std::time::Instant,
) -> std::io::Result<()> {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake deadline passed"));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "peer hung up")),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

thread_local! {
    /// This thread's spin record: a score (up on a completion found while spinning, down
    /// twice as fast on a spin that ran out), and its waits, counted.
    static SPIN_SCORE: std::cell::Cell<(i8, u8)> = const { std::cell::Cell::new((0, 0)) };
}

/// Reports how a spin with a [`spin_slot`] ended: `true` when the completion came while
/// spinning, `false` when the spin ran out and the thread parked.
pub fn spin_outcome(found: bool) {
    SPIN_SCORE.with(|s| {
        let (score, waits) = s.get();
        let score = if found { score.saturating_add(1).min(4) } else { score.saturating_sub(2).max(-8) };
        s.set((score, waits));
    });
}

/// Whether the calling thread's spins pay: false when its recent spins ran out before
/// their completion came (see [`spin_outcome`]), except every 16th wait, as the load
/// may change.
fn spin_worth() -> bool {
    SPIN_SCORE.with(|s| {
        let (score, waits) = s.get();
        s.set((score, waits.wrapping_add(1)));
        score >= 0 || waits % 16 == 0
    })
}

/// A permission to spin in a wait, held while spinning (see [`spin_slot`]).
#[derive(Debug)]
pub struct SpinSlot(());

impl Drop for SpinSlot {
    fn drop(&mut self) {
        SPINNERS.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

static SPINNERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many threads of this process may spin at once with a [`spin_slot`]: as many as
/// the cores it may run on (`BOOMKV_SPIN_LIMIT` overrides). Clients on CPUs no server
/// worker uses spin over shm without one (`client_cpu_spin`). A client and a server
/// thread that wait on each other both spin, as before (one fewer made every tcp round
/// trip of the transport floor pay a wake-up: 11 -> 25 us); past the core count the
/// spinners park, and a thread whose spins keep running out stops spinning (see
/// [`spin_slot`]).
pub fn spin_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        // Fixes `cores` on the same (unpinned) thread, whatever the override says.
        let n = cores();
        spin_limit_setting().ok().flatten().unwrap_or(n)
    })
}

/// `BOOMKV_SPIN_LIMIT` as set: `Ok(None)` when unset, an error when it is not a
/// whole number (a program checks it at start; [`spin_limit`] ignores a bad value).
pub fn spin_limit_setting() -> Result<Option<usize>> {
    // Set but empty (`BOOMKV_SPIN_LIMIT= cmd`) is unset, as shells use it.
    let Some(v) = std::env::var_os("BOOMKV_SPIN_LIMIT").filter(|v| !v.is_empty()) else { return Ok(None) };
    match v.to_str().and_then(|s| s.trim().parse().ok()) {
        Some(n) => Ok(Some(n)),
        None => Err(Error::invalid(format!(
            "BOOMKV_SPIN_LIMIT={}: expected a whole number from 0 (no thread spins) to {} of threads that may \
             spin at once",
            v.to_string_lossy(),
            usize::MAX
        ))),
    }
}

/// Threads of this process that polled or waited on a completion queue in the current
/// or the last epoch of [`EPOCH_LEN`] (two counters, one per epoch parity).
static ACTIVE: [std::sync::atomic::AtomicUsize; 2] =
    [std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicUsize::new(0)];
static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// When the current epoch began (nanoseconds since [`epoch_base`]).
static EPOCH_AT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
const EPOCH_LEN: Duration = Duration::from_millis(10);

thread_local! {
    /// The epoch in which this thread last counted itself in [`ACTIVE`].
    static SEEN_EPOCH: std::cell::Cell<u64> = const { std::cell::Cell::new(u64::MAX) };
}

fn epoch_base() -> std::time::Instant {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(std::time::Instant::now)
}

/// Counts this thread as one that drives completion queues now (a polling server
/// worker, a client between its waits): such a thread wants a core. Called by every
/// `poll` and `wait`; after the first call of an epoch it is two loads.
pub fn participate() {
    use std::sync::atomic::Ordering;
    let e = EPOCH.load(Ordering::Relaxed);
    SEEN_EPOCH.with(|s| {
        if s.get() != e {
            s.set(e);
            ACTIVE[(e & 1) as usize].fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Starts a new epoch when the current one is over (any waiter may; one wins).
fn advance_epoch(now: std::time::Instant) {
    use std::sync::atomic::Ordering;
    let t = now.saturating_duration_since(epoch_base()).as_nanos() as u64;
    let at = EPOCH_AT.load(Ordering::Relaxed);
    if t.saturating_sub(at) < EPOCH_LEN.as_nanos() as u64 {
        return;
    }
    if EPOCH_AT.compare_exchange(at, t, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        let e = EPOCH.load(Ordering::Relaxed);
        ACTIVE[((e + 1) & 1) as usize].store(0, Ordering::Relaxed);
        EPOCH.store(e + 1, Ordering::Release);
    }
}

/// Whether every thread of ours that drives completion queues (polled or waited in the
/// last epoch or two) has a core of its own, so a spin takes no core another of them
/// needs. With more such threads than cores a spinner takes the core of a server worker
/// or of a woken client, which costs more than the wake-up its spin saves. Measured on
/// 2 cores, YCSB-B 2 KiB over tcp, 4 interleaved runs each, ops/s median [range]:
/// 1 client thread 66k [60, 69] spinning, 42k [37, 46] never spinning; 2 threads 60k
/// [59, 64] vs 63k [63, 68]; 4 threads 53k [47, 55] vs 59k [58, 60]; 16 threads 51k
/// [47, 51] vs 58k [50, 63]. A rule that let a thread spin while the others were parked
/// still lost at 16 threads: the parked ones are queued at the same server, ahead of it.
fn core_to_spare() -> bool {
    use std::sync::atomic::Ordering;
    let active = ACTIVE[0].load(Ordering::Relaxed).max(ACTIVE[1].load(Ordering::Relaxed));
    active <= cores()
}

/// The CPUs this process may run on (fixed at first use).
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(crate::cpus::count)
}

/// A slot to spin in, or `None` when [`spin_limit`] threads of this process already
/// spin, when the other threads that drive completion queues already keep every core
/// busy, or when this thread's recent spins ran out before their completion came: the
/// caller then parks at once. Spinning is only worth it on a core nobody else needs;
/// past the core count a spinner takes the core from the very thread (a server worker,
/// a woken client) that would complete what it waits for, and throughput falls as
/// clients are added.
pub fn spin_slot() -> Option<SpinSlot> {
    spin_slot_at(std::time::Instant::now())
}

/// [`spin_slot`] for a caller that has just read the clock (`now`): a wait on the hot
/// path reads it as few times as it can.
pub(crate) fn spin_slot_at(now: std::time::Instant) -> Option<SpinSlot> {
    use std::sync::atomic::Ordering;
    // A thread whose recent spins ran out before their completion came (many clients
    // queue at one server worker) parks at once instead: its spin only takes the core
    // the worker needs. It tries a spin again every 16th wait, as the load may change.
    let worth = spin_worth();
    participate();
    advance_epoch(now);
    // A thread beside the threads it waits for never spins (see `set_colocated_wait`).
    if !worth || !core_to_spare() || colocated() {
        return None;
    }
    if SPINNERS.fetch_add(1, Ordering::AcqRel) < spin_limit() {
        Some(SpinSlot(()))
    } else {
        SPINNERS.fetch_sub(1, Ordering::AcqRel);
        None
    }
}

thread_local! {
    /// Whether this thread polls with yields before it sleeps in a wait.
    static YIELD_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How long a wait polls with yields before it sleeps, for a thread that may.
pub const YIELD_WAIT_FOR: Duration = Duration::from_millis(1);

/// Lets the calling thread, when a wait may not spin (or its spin is over), keep
/// polling for up to [`YIELD_WAIT_FOR`] with a yield of its CPU between polls before it
/// sleeps. Only for a thread on CPUs that no thread it waits for needs: the YCSB
/// runner's client threads when an embedded server's workers have CPUs of their own
/// ([`crate::cpus::Layout`]). There a yield hands the CPU to the other clients, and a
/// client that does not sleep needs no wake-up, which on a virtual machine whose idle
/// CPUs halt costs tens of microseconds. Measured on 2 cores, YCSB-B 2 KiB over tcp,
/// placement on (README, "Thread placement"). A thread that shares a CPU with the
/// server worker it waits for must not: each yield would be the worker's time.
pub fn set_yield_wait(on: bool) {
    YIELD_WAIT.with(|y| y.set(on));
    COLOCATED.with(|c| c.set(false));
}

thread_local! {
    /// Whether this thread shares its CPU with the server worker it waits for.
    static COLOCATED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one that shares its CPU with the threads its waits
/// need ([`crate::cpus::Layout::colocate`]): a client beside the server worker that
/// serves it, or that worker beside its clients. Or not. Such a thread never spins in
/// a wait: its reply (or its next request) needs the other threads on that very CPU,
/// so it yields the CPU at every poll (for up to [`YIELD_WAIT_FOR`], then sleeps), and
/// they get it at once. Spinning, or a client's turn, would hold them off for the
/// whole spin.
pub fn set_colocated_wait(on: bool) {
    YIELD_WAIT.with(|y| y.set(on));
    COLOCATED.with(|c| c.set(on));
}

/// Whether the calling thread shares its CPU with the threads its waits need (see
/// [`set_colocated_wait`]): its waits yield instead of spinning, over every transport.
pub(crate) fn colocated() -> bool {
    COLOCATED.with(std::cell::Cell::get)
}

/// How long a client thread that spins on CPUs it shares only with other clients keeps
/// its CPU before it yields it to them (see [`client_cpu_spin`]): its spins are
/// back-to-back operations, each one's reply a microsecond or two away, so without a
/// turn the others' replies, long there, would wait for the scheduler's time slice
/// (a YCSB-B run of 16 threads over shm without turns had a maximum GET latency of
/// 92 to 98 ms).
pub(crate) const CLIENT_TURN: Duration = Duration::from_micros(500);

thread_local! {
    /// When the calling thread's current turn on its CPU began (see [`client_cpu_spin`]).
    static TURN_FROM: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// How a wait of a client on CPUs no server worker uses goes (see [`client_cpu_spin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientSpin {
    /// Its turn on its CPU is over: it yields the CPU to the other clients first.
    pub turn_over: bool,
    /// It spins (its recent spins found their completions; see [`spin_outcome`]).
    pub spin: bool,
}

/// How a wait starting at `now` on a transport whose completions need no thread on the
/// waiter's CPU (shm: a worker writes the reply straight into the waiter's ring) goes
/// when the calling thread polls with yields ([`set_yield_wait`]), that is, when it is
/// a client on CPUs no server worker uses: `None` for any other thread (the rules of
/// [`spin_slot`] hold). Such a client spins whatever the number of threads and
/// spinners, as long as its recent spins found their completions, and, when the
/// process has more threads polling than cores, yields its CPU once per
/// [`CLIENT_TURN`].
///
/// A client that yields in every wait pays a switch between threads per operation,
/// about a microsecond on one CPU, as much as the reply takes over shm; one that spins
/// takes its reply at once and goes on, and only the other clients wait, whose replies
/// are there when their turn comes. Spinning here costs no server worker its CPU,
/// which is what [`spin_slot`] guards against. The price is in the tail: the first
/// operation of a turn waits for the other clients' turns, about (threads - 1) x
/// [`CLIENT_TURN`]. Measured on 2 cores, YCSB-B 2 KiB over shm, 3 interleaved runs
/// each: 2 threads 546k to 551k ops/s against 293k to 375k yielding, 4 threads 446k
/// to 564k against 383k to 420k, 16 threads 393k to 465k against 254k to 344k; GET p99
/// 2 to 5 us against 7 to 144 us, p99.9 0.5 ms (2 threads), 1.5 ms (4) and 8 to 9 ms
/// (16) against 40 to 66 us, 63 to 133 us and 0.4 to 3.9 ms. Those figures are from an
/// AMD VM; on an Intel VM whose cache lines cross between CPUs three times slower,
/// yielding at once was the faster. So with `adaptive` (shm) a crowded client spins in
/// turns or yields at once, whichever the process measured faster (see [`crowd`]);
/// verbs waits keep the turns (no NIC here to measure the other on).
pub(crate) fn client_cpu_spin(now: std::time::Instant, adaptive: bool) -> Option<ClientSpin> {
    if !YIELD_WAIT.with(std::cell::Cell::get) {
        return None;
    }
    participate();
    advance_epoch(now);
    if colocated() {
        // The worker this client waits for is on its CPU (see `set_colocated_wait`).
        return Some(ClientSpin { turn_over: false, spin: false });
    }
    // With no more threads polling than cores nobody waits for this one's CPU, and a
    // yield would only add a system call to the operation it falls in.
    let crowded = !core_to_spare();
    if crowded && adaptive && crowd::mode(now) == crowd::CrowdWait::Yield {
        // The process measured that its crowded clients go faster yielding at once
        // than spinning through turns (see `crowd`): no spin, and the turn is moot.
        return Some(ClientSpin { turn_over: false, spin: false });
    }
    Some(ClientSpin { turn_over: crowded && turn_over(now), spin: spin_worth() })
}

/// The start of a wait at `*start` by a client on CPUs no server worker uses (see
/// [`client_cpu_spin`]): when its turn is over it yields first, then `poll`s once
/// more, and `*start` moves past the yield. `None` for any other thread; else how the
/// wait goes, and whether that poll found the completion (the wait is over).
pub(crate) fn begin_client_wait(
    start: &mut std::time::Instant,
    adaptive: bool,
    poll: impl FnOnce() -> bool,
) -> Option<(ClientSpin, bool)> {
    let c = client_cpu_spin(*start, adaptive)?;
    if c.turn_over {
        std::thread::yield_now();
        if poll() {
            return Some((c, true));
        }
        *start = std::time::Instant::now();
    }
    Some((c, false))
}

/// Ends the calling thread's turn on its CPU: its wait gave the CPU up anyway (its spin
/// ran out), so its next wait begins a turn.
pub(crate) fn end_turn() {
    TURN_FROM.with(|t| t.set(None));
}

/// Whether the calling thread's turn on its CPU is over at `now`, a wait's start (see
/// [`client_cpu_spin`]); the wait that says so yields, and the next one begins a turn
/// (its start is after the yield, which may have lasted the other clients' turns).
fn turn_over(now: std::time::Instant) -> bool {
    TURN_FROM.with(|t| match t.get() {
        None => {
            t.set(Some(now));
            false
        }
        Some(from) if now.saturating_duration_since(from) < CLIENT_TURN => false,
        Some(_) => {
            t.set(None);
            true
        }
    })
}

/// When a wait that starts polling with yields at `now` stops (`now` itself for a
/// thread that may not; see [`set_yield_wait`]).
pub(crate) fn yield_wait_end(now: std::time::Instant) -> std::time::Instant {
    if YIELD_WAIT.with(std::cell::Cell::get) {
        now + YIELD_WAIT_FOR
    } else {
        now
    }
}

/// Yields the CPU, then `poll`s, until a poll finds what the wait is for (true) or
/// `until` has passed (false): the part of a wait that leaves the CPU to the threads
/// it needs ([`set_yield_wait`], [`set_colocated_wait`]). Yield first, then look: the
/// caller's poll found nothing a moment ago. The clock is read after each yield, which
/// may last the other threads' turns.
#[inline]
pub(crate) fn poll_with_yields(until: std::time::Instant, mut poll: impl FnMut() -> bool) -> bool {
    loop {
        std::thread::yield_now();
        if poll() {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
    }
}

/// A point in time `d` from now, saturating far in the future.
pub(crate) fn deadline(d: Duration) -> std::time::Instant {
    deadline_from(std::time::Instant::now(), d)
}

/// A point in time `d` after `now` (a clock reading the caller has already taken),
/// saturating far in the future.
pub(crate) fn deadline_from(now: std::time::Instant, d: Duration) -> std::time::Instant {
    now.checked_add(d).unwrap_or(now + Duration::from_secs(86400 * 365))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_thread_that_asked_polls_with_yields() {
        let now = std::time::Instant::now();
        assert_eq!(yield_wait_end(now), now);
        std::thread::spawn(move || {
            set_yield_wait(true);
            assert_eq!(yield_wait_end(now), now + YIELD_WAIT_FOR);
            set_yield_wait(false);
            assert_eq!(yield_wait_end(now), now);
            set_yield_wait(true);
        })
        .join()
        .unwrap();
        // Another thread's choice is not this one's.
        assert_eq!(yield_wait_end(now), now);
    }

    #[test]
    fn a_spinning_client_yields_its_cpu_once_per_turn() {
        std::thread::spawn(|| {
            let now = std::time::Instant::now();
            assert_eq!(client_cpu_spin(now, false), None, "a thread that may not poll with yields");
            set_yield_wait(true);
            let c = client_cpu_spin(now, false).expect("a client on CPUs of its own");
            assert!(c.spin, "spins whatever the number of threads");
            let t0 = std::time::Instant::now() + Duration::from_secs(1);
            let at = |us: u64| t0 + Duration::from_micros(us);
            let turn = CLIENT_TURN.as_micros() as u64;
            end_turn();
            assert!(!turn_over(at(0)), "the first wait begins a turn");
            assert!(!turn_over(at(turn - 1)), "within the turn");
            assert!(turn_over(at(turn)), "its end");
            assert!(!turn_over(at(5_000)), "the next turn begins after the yield, however long it took");
            assert!(!turn_over(at(5_000 + turn - 1)));
            assert!(turn_over(at(5_000 + turn)));
            // A wait that gave its CPU up anyway (its spin ran out) ends the turn.
            assert!(!turn_over(at(6_000)));
            end_turn();
            assert!(!turn_over(at(6_000 + turn)), "a new turn, not the end of the last");
            // Spins that keep running out stop, but for every 16th wait.
            for _ in 0..8 {
                spin_outcome(false);
            }
            let spins = (0..32).filter(|_| client_cpu_spin(now, false).is_some_and(|c| c.spin)).count();
            assert_eq!(spins, 2);
            set_yield_wait(false);
            assert_eq!(client_cpu_spin(now, false), None);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_client_beside_its_worker_never_spins_nor_takes_turns() {
        std::thread::spawn(|| {
            let now = std::time::Instant::now();
            set_colocated_wait(true);
            // Whatever its recent spins found and however long since its turn began.
            spin_outcome(true);
            for us in [0, 10_000, 20_000] {
                let c = client_cpu_spin(now + Duration::from_micros(us), true).expect("polls with yields");
                assert_eq!(c, ClientSpin { turn_over: false, spin: false });
                let c = client_cpu_spin(now + Duration::from_micros(us), false).unwrap();
                assert_eq!(c, ClientSpin { turn_over: false, spin: false });
            }
            assert_eq!(yield_wait_end(now), now + YIELD_WAIT_FOR, "it yields before it sleeps");
            assert!(spin_slot_at(now).is_none(), "no spin slot either (tcp's waits ask for one)");
            // Back to a client on CPUs of its own: it spins again.
            set_yield_wait(true);
            assert!(client_cpu_spin(now, false).unwrap().spin);
            set_colocated_wait(false);
            assert_eq!(client_cpu_spin(now, false), None);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn endpoint_parsing() {
        assert_eq!(Endpoint::parse("shm:/run/boomkv.sock").unwrap(), Endpoint::Shm("/run/boomkv.sock".into()));
        assert_eq!(Endpoint::parse("shm:///run/b.sock").unwrap(), Endpoint::Shm("/run/b.sock".into()));
        assert_eq!(Endpoint::parse("/tmp/x.sock").unwrap(), Endpoint::Shm("/tmp/x.sock".into()));
        assert_eq!(Endpoint::parse("tcp://10.0.0.5:7470").unwrap(), Endpoint::Tcp("10.0.0.5:7470".into()));
        assert_eq!(Endpoint::parse("10.0.0.5:7471").unwrap(), Endpoint::Tcp("10.0.0.5:7471".into()));
        assert_eq!(Endpoint::parse("10.0.0.5").unwrap(), Endpoint::Tcp("10.0.0.5:7470".into()));
        assert_eq!(Endpoint::parse("tcp://[::1]:9").unwrap(), Endpoint::Tcp("[::1]:9".into()));
        assert_eq!(Endpoint::parse("::1").unwrap(), Endpoint::Tcp("[::1]:7470".into()));
        assert_eq!(Endpoint::parse("verbs://h:1").unwrap(), Endpoint::Verbs("h:1".into()));
        assert_eq!(Endpoint::parse("localhost:80").unwrap().backend(), Backend::Tcp);
        for bad in ["", "shm:", "tcp://", "tcp://h:99999", "tcp://h:x", "ftp://h", "tcp://h:1/path", "[::1"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad:?} should not parse");
        }
        for s in ["shm:/run/boomkv.sock", "tcp://10.0.0.5:7470", "verbs://h:1"] {
            assert_eq!(Endpoint::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(Endpoint::parse_for("h:1", Some(Backend::Verbs)).unwrap(), Endpoint::Verbs("h:1".into()));
        assert!(Endpoint::parse_for("shm:/x", Some(Backend::Tcp)).is_err());
        assert_eq!("TCP".parse::<Backend>().unwrap(), Backend::Tcp);
    }

    #[test]
    fn remote_region_bytes_roundtrip() {
        let r = RemoteRegion { addr: 0x7fff_0000_1234, len: 1 << 26, rkey: 0xdead_beef };
        assert_eq!(RemoteRegion::from_bytes(&r.to_bytes()).unwrap(), r);
        assert!(RemoteRegion::from_bytes(&[0u8; 19]).is_err());
        assert_eq!(r.at(16), r.addr + 16);
    }

    #[test]
    fn access_flags() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_READ;
        assert!(a.contains(Access::REMOTE_READ) && !a.contains(Access::REMOTE_WRITE));
        assert_eq!(format!("{a:?}"), "LOCAL_WRITE|REMOTE_READ");
        assert_eq!(Access::from_bits(0xff), Access::ALL);
        for c in 0..7 {
            assert_eq!(WcStatus::from_code(c).unwrap().code(), c);
        }
        for c in 0..8 {
            assert_eq!(WcOpcode::from_code(c).unwrap().code(), c);
        }
        assert!(WcStatus::from_code(7).is_none() && WcOpcode::from_code(8).is_none());
        assert_eq!(format!("{:?}", Access::ALL), "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC");
    }
}
