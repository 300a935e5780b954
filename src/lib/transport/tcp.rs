//! The `tcp` backend: verbs semantics over one TCP connection per queue pair, like
//! soft-iWARP. The receiving side applies one-sided operations to its registered memory
//! after checking rkey, bounds and access.
//!
//! # Framing
//!
//! After the handshake every frame is a fixed 40-byte little-endian header followed by
//! `len` payload bytes:
//!
//! | offset | size | field                                                        |
//! |--------|------|--------------------------------------------------------------|
//! | 0      | 1    | opcode: 1 SEND, 2 WRITE, 3 WRITE_IMM, 4 READ_REQ, 5 READ_RESP, 6 ACK, 7 NAK, 8 CAS_REQ, 9 FAA_REQ, 10 FLUSH_REQ |
//! | 1      | 1    | flags: bit 0 = ACK_REQ (acknowledge at once); other bits 0   |
//! | 2      | 1    | status (NAK: a [`WcStatus`] code), else 0                    |
//! | 3      | 1    | reserved, 0                                                  |
//! | 4      | 4    | `len`: payload bytes, at most [`MAX_MESSAGE`]                |
//! | 8      | 8    | `psn`: request sequence number (requests), the request answered (READ_RESP, NAK) |
//! | 16     | 8    | `ack`: how many of the receiver's requests the sender has executed |
//! | 24     | 8    | remote address (WRITE, WRITE_IMM, READ_REQ, CAS_REQ, FAA_REQ, FLUSH_REQ) |
//! | 32     | 4    | rkey (the same)                                              |
//! | 36     | 4    | immediate (WRITE_IMM), read length (READ_REQ), flush length (FLUSH_REQ) |
//!
//! Atomics carry their operands as the payload: CAS_REQ 16 bytes (compare, swap), FAA_REQ
//! 8 bytes (the addend), all u64 little-endian; the target runs them on the 8-byte word
//! with the CPU's atomics (so they are atomic against every connection's atomics) and
//! answers with a READ_RESP of the word's previous value (8 bytes). A FLUSH_REQ
//! (always ACK_REQ) writes the range's cache lines back and fences before the target
//! acknowledges it; requests execute in order, so every earlier WRITE is covered.
//!
//! Requests (SEND, WRITE, WRITE_IMM, READ_REQ, CAS_REQ, FAA_REQ, FLUSH_REQ) carry
//! consecutive `psn`s from 0. The
//! receiver executes them in order; every frame it sends carries the cumulative `ack`,
//! which completes the sender's requests below it, in order. An explicit ACK frame is
//! sent at once for requests flagged ACK_REQ (signaled WRITEs, and whenever the send
//! queue is half full), otherwise when a frame of the other direction can carry it or
//! after [`ACK_DELAY`]. A READ_RESP answers a READ_REQ with its data. A NAK fails one
//! request (remote access error, RNR, invalid request) and closes the connection.
//!
//! A frame with an unknown opcode, non-zero reserved bits, an oversized or inconsistent
//! length, an out-of-sequence psn, or an `ack` for requests never sent, and a stream
//! that ends inside a frame, close the connection with a logged reason; the listener
//! and other connections are unaffected.
//!
//! The handshake is a 24-byte header (`magic` u64 = "BOOMKVTC", `version` u16, `kind`
//! u16: 1 hello, 2 accept, 3 reject; `qp_num` u32, reserved u32, `private_len` u32)
//! followed by the private data (for a reject: the reason as UTF-8).
//!
//! # Threads
//!
//! Posting writes the frame to the socket from the posting thread (`TCP_NODELAY`); what
//! the socket does not take at once waits in a send buffer (at most 64 MiB) that an I/O
//! thread drains. Incoming frames are executed by whichever thread holds the
//! connection's receive lock: a thread waiting in [`CompletionQueue::wait`] on one of
//! the connection's completion queues reads the sockets itself — while spinning it
//! calls `recv` on each (up to two connections) or `epoll_wait(0)` (more), and keeps
//! spinning as long as frames arrive, even ones that complete nothing here (one-sided
//! operations); then it parks in `epoll_wait` on the sockets, or, alone on its queue's
//! only connection, in that socket's `recv` (for at most 10 ms at a time). So a reply or
//! a one-sided operation reaches a waiting thread with no thread hop.
//!
//! A fixed set of I/O threads covers the rest for every connection of the process (one
//! per four CPUs, at most four; a connection is given to one of them round robin): each
//! keeps an epoll set over its connections' sockets with one-shot interest and a timer
//! per connection. It reads a socket when no thread polls or waits on the connection's
//! queues (so one-sided operations land while the application is busy); while a thread
//! does, it leaves the socket to that thread and only looks every [`NIC_RECHECK`] while
//! frames flow, backing off to [`NIC_RECHECK_IDLE`] on a quiet connection, with the
//! rechecks of all such connections batched into one wake-up. It also sends delayed
//! acknowledgements, enforces the RNR deadline, and drains a send backlog when the
//! socket buffer was full. Before, each connection had an I/O thread of its own on both
//! sides: 16 client threads meant 32 more threads, whose rechecks cost about a tenth
//! of a 2-core machine.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use rustix::event::{epoll, EventfdFlags};

use super::region::{guard_enter, guard_exit, Pd};
use super::{
    deadline, deadline_from, log_event, Access, Backend, Completion, CompletionQueue, Endpoint, Handshake, Listener,
    MemoryRegion, Mr, QpStats, QueuePair, StatCounters, Transport, TransportConfig, WcOpcode, WcStatus, MAX_MESSAGE,
    MAX_PRIVATE_DATA, PROTOCOL_VERSION,
};
use crate::error::{Error, Result};
use crate::pmem::Mapping;

/// Size of every frame header.
pub(crate) const HDR: usize = 40;
/// How long an acknowledgement may wait for a frame to ride on.
pub const ACK_DELAY: Duration = Duration::from_micros(200);
/// How often an I/O thread re-checks a busy connection that a waiting thread serves.
pub const NIC_RECHECK: Duration = Duration::from_millis(2);
/// How often it re-checks such a connection after it has been quiet for a while.
pub const NIC_RECHECK_IDLE: Duration = Duration::from_millis(64);

const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"BOOMKVTC");
const HELLO_LEN: usize = 24;
const KIND_HELLO: u16 = 1;
const KIND_ACCEPT: u16 = 2;
const KIND_REJECT: u16 = 3;

pub(crate) const OP_SEND: u8 = 1;
pub(crate) const OP_WRITE: u8 = 2;
pub(crate) const OP_WRITE_IMM: u8 = 3;
pub(crate) const OP_READ_REQ: u8 = 4;
pub(crate) const OP_READ_RESP: u8 = 5;
pub(crate) const OP_ACK: u8 = 6;
pub(crate) const OP_NAK: u8 = 7;
pub(crate) const OP_CAS_REQ: u8 = 8;
pub(crate) const OP_FAA_REQ: u8 = 9;
pub(crate) const OP_FLUSH_REQ: u8 = 10;
const FLAG_ACK_REQ: u8 = 1;

const RX_BUF: usize = 256 << 10;
/// Longest a waiter blocks in `recv` before it looks at its queue again (a completion
/// pushed by another thread, which cannot interrupt the `recv`, waits at most this).
const BLOCKING_RECV: Duration = Duration::from_millis(10);
/// Most bytes one call reads from a socket before it returns (and the I/O thread turns
/// to its other connections).
const DRAIN_BUDGET: usize = 1 << 20;
/// Most bytes a connection queues for a socket the peer does not drain.
const TX_BACKLOG_LIMIT: usize = 64 << 20;

fn ts(d: Duration) -> rustix::time::Timespec {
    rustix::time::Timespec { tv_sec: d.as_secs().min(i32::MAX as u64) as i64, tv_nsec: d.subsec_nanos() as _ }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a transport lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A frame header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hdr {
    pub op: u8,
    pub flags: u8,
    pub status: u8,
    pub reserved: u8,
    pub len: u32,
    pub psn: u64,
    pub ack: u64,
    pub raddr: u64,
    pub rkey: u32,
    pub imm: u32,
}

impl Hdr {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.op, self.flags, self.status, self.reserved]);
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.ack.to_le_bytes());
        out.extend_from_slice(&self.raddr.to_le_bytes());
        out.extend_from_slice(&self.rkey.to_le_bytes());
        out.extend_from_slice(&self.imm.to_le_bytes());
    }

    pub fn decode(b: &[u8; HDR]) -> Hdr {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| (u32_at(o) as u64) | ((u32_at(o + 4) as u64) << 32);
        Hdr {
            op: b[0],
            flags: b[1],
            status: b[2],
            reserved: b[3],
            len: u32_at(4),
            psn: u64_at(8),
            ack: u64_at(16),
            raddr: u64_at(24),
            rkey: u32_at(32),
            imm: u32_at(36),
        }
    }
}

/// Encodes a handshake message.
pub(crate) fn encode_hello(version: u16, kind: u16, qp_num: u32, private: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HELLO_LEN + private.len());
    v.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(&qp_num.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&(private.len() as u32).to_le_bytes());
    v.extend_from_slice(private);
    v
}

struct Hello {
    version: u16,
    kind: u16,
    qp_num: u32,
    private: Vec<u8>,
}

const HANDSHAKE_TIMED_OUT: &str = "handshake timed out";

fn io_why(what: &str, e: std::io::Error) -> String {
    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
        HANDSHAKE_TIMED_OUT.into()
    } else {
        format!("{what}: {e}")
    }
}

/// Reads a handshake message before `until` (one deadline for all of it).
fn read_hello(s: &mut TcpStream, until: Instant) -> std::result::Result<Hello, String> {
    let mut h = [0u8; HELLO_LEN];
    super::read_exact_by(s, &mut h, until).map_err(|e| io_why("handshake", e))?;
    let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let magic = u64::from_le_bytes(h[0..8].try_into().unwrap_or([0; 8]));
    if magic != HELLO_MAGIC {
        return Err("handshake: not a boomkv tcp transport peer (bad magic)".into());
    }
    let plen = u32_at(20) as usize;
    if plen > MAX_PRIVATE_DATA {
        return Err(format!("handshake: private data of {plen} bytes is over the {MAX_PRIVATE_DATA}-byte limit"));
    }
    let mut private = vec![0u8; plen];
    super::read_exact_by(s, &mut private, until).map_err(|e| io_why("handshake: truncated private data", e))?;
    Ok(Hello { version: u16_at(8), kind: u16_at(10), qp_num: u32_at(12), private })
}

// ---------------------------------------------------------------------------------------
// Transport

/// The TCP transport: a protection domain plus configuration. Cheap to clone.
#[derive(Clone)]
pub struct TcpTransport {
    inner: Arc<Shared>,
}

struct Shared {
    pd: Arc<Pd>,
    cfg: TransportConfig,
    next_qp: AtomicU32,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport").field("pd", &self.inner.pd.id).finish()
    }
}

impl TcpTransport {
    /// A new transport (a new protection domain) with the default configuration.
    pub fn new() -> Result<TcpTransport> {
        Self::with_config(TransportConfig::default())
    }

    /// A new transport with `cfg`.
    pub fn with_config(cfg: TransportConfig) -> Result<TcpTransport> {
        // Fix the spin limit now, on the creating thread: a benchmark may pin the threads
        // that wait later, and a pinned thread sees a single CPU.
        let _ = super::spin_limit();
        if cfg.rq_depth == 0 || cfg.sq_depth == 0 {
            return Err(Error::invalid("queue depths must be at least 1"));
        }
        Ok(TcpTransport { inner: Arc::new(Shared { pd: Arc::new(Pd::new(false)?), cfg, next_qp: AtomicU32::new(1) }) })
    }

    fn new_conn(&self, sock: TcpStream, qp_num: u32, peer_qp: u32, send_cq: &TcpCq, recv_cq: &TcpCq) -> Result<TcpQp> {
        sock.set_nodelay(true).map_err(|e| Error::io("TCP_NODELAY", e))?;
        // The socket stays blocking: every send and recv passes MSG_DONTWAIT, except the
        // one a lone waiter blocks in (see `Conn::progress_blocking`), which
        // SO_RCVTIMEO bounds.
        sock.set_nonblocking(false).map_err(|e| Error::io("set_nonblocking", e))?;
        sock.set_read_timeout(Some(BLOCKING_RECV)).map_err(|e| Error::io("set_read_timeout", e))?;
        let reactor = Reactor::pick()?;
        let peer = sock.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
        let conn = Arc::new(Conn {
            id: NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed),
            qp_num,
            peer_qp_num: peer_qp,
            peer,
            sock,
            pd: self.inner.pd.clone(),
            cfg: self.inner.cfg.clone(),
            send_cq: send_cq.inner.clone(),
            recv_cq: recv_cq.inner.clone(),
            rx: Mutex::new(Rx { buf: vec![0u8; RX_BUF], start: 0, end: 0, stall_until: None }),
            sq: Mutex::new(Sq { next_psn: 0, outstanding: VecDeque::new() }),
            tx: Mutex::new(Tx { out: Vec::with_capacity(64 << 10), sent: 0, ack_sent: 0 }),
            rq: Mutex::new(VecDeque::new()),
            rx_processed: AtomicU64::new(0),
            owed_since: Mutex::new(None),
            error: AtomicBool::new(false),
            torn_down: AtomicBool::new(false),
            reason: Mutex::new(None),
            reactor,
            io_idle: AtomicBool::new(false),
            backlog: AtomicBool::new(false),
            rx_seen: AtomicBool::new(false),
            frames: AtomicU64::new(0),
            stats: StatCounters::default(),
            nic_stop: AtomicBool::new(false),
        });
        send_cq.inner.attach(&conn)?;
        if !Arc::ptr_eq(&send_cq.inner, &recv_cq.inner) {
            recv_cq.inner.attach(&conn)?;
        }
        conn.reactor.adopt(conn.clone());
        Ok(TcpQp { conn })
    }
}

impl Transport for TcpTransport {
    type Mr = Mr;
    type Cq = TcpCq;
    type Qp = TcpQp;
    type Listener = TcpListenerHandle;

    fn backend(&self) -> Backend {
        Backend::Tcp
    }

    fn config(&self) -> &TransportConfig {
        &self.inner.cfg
    }

    fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        let m = Arc::new(Mapping::anonymous(len)?);
        self.inner.pd.register(m, None, 0, len as u64, access)
    }

    fn register(
        &self,
        mapping: Arc<Mapping>,
        file: Option<Arc<std::fs::File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Mr> {
        self.inner.pd.register(mapping, file, offset, len, access)
    }

    fn register_bound(
        &self,
        qp: &TcpQp,
        mapping: Arc<Mapping>,
        file: Option<Arc<std::fs::File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Mr> {
        self.inner.pd.register_bound(mapping, file, offset, len, access, Some(qp.conn.qp_num))
    }

    fn access_violations(&self) -> u64 {
        self.inner.pd.violations()
    }

    fn exposed_regions(&self) -> u64 {
        self.inner.pd.exposed()
    }

    fn create_cq(&self) -> Result<TcpCq> {
        TcpCq::new(self.inner.cfg.spin)
    }

    fn listen(&self, ep: &Endpoint) -> Result<TcpListenerHandle> {
        let Endpoint::Tcp(hp) = ep else {
            return Err(Error::invalid(format!("tcp transport cannot listen on {ep}")));
        };
        let l = TcpListener::bind(hp.as_str()).map_err(|e| Error::io(format!("listen on {ep}"), e))?;
        l.set_nonblocking(true).map_err(|e| Error::io("set_nonblocking", e))?;
        let local = l.local_addr().map_err(|e| Error::io("local_addr", e))?;
        TcpListenerHandle::start(self.clone(), l, Endpoint::Tcp(local.to_string()))
    }

    fn connect(
        &self,
        ep: &Endpoint,
        send_cq: &TcpCq,
        recv_cq: &TcpCq,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(TcpQp, Vec<u8>)> {
        let Endpoint::Tcp(hp) = ep else {
            return Err(Error::invalid(format!("tcp transport cannot connect to {ep}")));
        };
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(Error::invalid(format!("private data over {MAX_PRIVATE_DATA} bytes")));
        }
        let end = deadline(timeout);
        let addrs: Vec<_> =
            hp.to_socket_addrs().map_err(|e| Error::Transport(format!("cannot resolve {ep}: {e}")))?.collect();
        let mut last = None;
        let mut sock = None;
        for a in addrs {
            let left = end.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&a, left) {
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
        let left = end.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        sock.set_read_timeout(Some(left)).map_err(|e| Error::io("set_read_timeout", e))?;
        sock.set_write_timeout(Some(left)).map_err(|e| Error::io("set_write_timeout", e))?;
        let qp_num = self.inner.next_qp.fetch_add(1, Ordering::Relaxed);
        sock.write_all(&encode_hello(PROTOCOL_VERSION, KIND_HELLO, qp_num, private_data))
            .map_err(|e| Error::Transport(format!("{ep}: sending handshake: {e}")))?;
        let h = read_hello(&mut sock, end).map_err(|e| {
            if e == HANDSHAKE_TIMED_OUT {
                Error::Timeout(timeout, "the tcp connection handshake")
            } else {
                Error::Transport(format!("{ep}: {e}"))
            }
        })?;
        if h.kind == KIND_REJECT {
            return Err(Error::Transport(format!(
                "{ep} refused the connection: {}",
                String::from_utf8_lossy(&h.private)
            )));
        }
        if h.version != PROTOCOL_VERSION || h.kind != KIND_ACCEPT {
            return Err(Error::Transport(format!(
                "{ep}: unexpected handshake reply (version {}, kind {}; we speak version {PROTOCOL_VERSION})",
                h.version, h.kind
            )));
        }
        sock.set_write_timeout(None).map_err(|e| Error::io("set_write_timeout", e))?;
        let qp = self.new_conn(sock, qp_num, h.qp_num, send_cq, recv_cq)?;
        Ok((qp, h.private))
    }
}

// ---------------------------------------------------------------------------------------
// Listener

/// A TCP listener. Handshakes run off the accept path (a greeter thread, see the `transport` module).
pub struct TcpListenerHandle {
    t: TcpTransport,
    local: Endpoint,
    greeter: super::Greeter<Greeted>,
}

/// A connection whose hello has arrived, waiting for the application's answer.
struct Greeted {
    sock: TcpStream,
    peer: String,
    hello: Hello,
}

impl TcpListenerHandle {
    fn start(t: TcpTransport, l: TcpListener, local: Endpoint) -> Result<TcpListenerHandle> {
        let readable: OwnedFd = l.try_clone().map_err(|e| Error::io("dup the listening socket", e))?.into();
        let timeout = t.inner.cfg.handshake_timeout;
        let accept_one = move || match l.accept() {
            Ok((s, _)) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        };
        let first: Arc<super::FirstHalf<TcpStream, Greeted>> = Arc::new(|mut s: TcpStream, until: Instant| {
            let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
            s.set_nonblocking(false).map_err(|e| format!("{peer}: {e}"))?;
            let hello = read_hello(&mut s, until).map_err(|e| format!("{peer}: {e}"))?;
            if hello.version != PROTOCOL_VERSION || hello.kind != KIND_HELLO {
                let why = format!(
                    "transport protocol version {} (kind {}) is not supported; this server speaks version {PROTOCOL_VERSION}",
                    hello.version, hello.kind
                );
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = s.write_all(&encode_hello(PROTOCOL_VERSION, KIND_REJECT, 0, why.as_bytes()));
                return Err(format!("{peer}: {why}"));
            }
            Ok(Greeted { sock: s, peer, hello })
        });
        let greeter = super::Greeter::start(local.clone(), readable, accept_one, first, timeout)?;
        Ok(TcpListenerHandle { t, local, greeter })
    }

    /// The second half of a handshake: the application's answer, then the queue pair.
    /// Runs on the accepting thread; nothing here waits on the peer (the reply is small
    /// enough for the socket's buffer, and the write is bounded anyway).
    fn finish<F>(&self, g: Greeted, send_cq: &TcpCq, recv_cq: &TcpCq, f: F) -> std::result::Result<TcpQp, Handshake>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let Greeted { sock: mut s, peer, hello: h } = g;
        if let Err(e) = s.set_write_timeout(Some(Duration::from_secs(1))) {
            return Err(Handshake::Refused(format!("{peer}: {e}")));
        }
        let qp_num = self.t.inner.next_qp.fetch_add(1, Ordering::Relaxed);
        let reply = match f(&h.private) {
            Ok(r) if r.len() <= MAX_PRIVATE_DATA => r,
            Ok(r) => {
                let why = format!("server private data of {} bytes is over the limit", r.len());
                let _ = s.write_all(&encode_hello(PROTOCOL_VERSION, KIND_REJECT, qp_num, why.as_bytes()));
                return Err(Handshake::Rejected(Error::invalid(why)));
            }
            Err(e) => {
                let _ = s.write_all(&encode_hello(PROTOCOL_VERSION, KIND_REJECT, qp_num, e.to_string().as_bytes()));
                return Err(Handshake::Rejected(e));
            }
        };
        if let Err(e) = s.write_all(&encode_hello(PROTOCOL_VERSION, KIND_ACCEPT, qp_num, &reply)) {
            return Err(Handshake::Refused(format!("{peer}: sending handshake reply: {e}")));
        }
        if let Err(e) = s.set_write_timeout(None) {
            return Err(Handshake::Refused(format!("{peer}: {e}")));
        }
        self.t.new_conn(s, qp_num, h.qp_num, send_cq, recv_cq).map_err(|e| Handshake::Refused(format!("{peer}: {e}")))
    }
}

impl Listener for TcpListenerHandle {
    type Qp = TcpQp;
    type Cq = TcpCq;

    fn endpoint(&self) -> Endpoint {
        self.local.clone()
    }

    fn accept<F>(&self, send_cq: &TcpCq, recv_cq: &TcpCq, timeout: Duration, on_connect: F) -> Result<TcpQp>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let finish = |g, f: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>>| self.finish(g, send_cq, recv_cq, f);
        self.greeter.accept(&self.local, timeout, "a tcp connection", on_connect, finish)
    }

    fn try_accept<F>(&self, send_cq: &TcpCq, recv_cq: &TcpCq, on_connect: F) -> Result<Option<TcpQp>>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        self.greeter.try_accept(&self.local, on_connect, |g, f| self.finish(g, send_cq, recv_cq, f))
    }
}

// ---------------------------------------------------------------------------------------
// Completion queue

/// A completion queue of the tcp backend. Clones share the queue.
#[derive(Clone)]
pub struct TcpCq {
    inner: Arc<CqInner>,
}

struct CqInner {
    q: Mutex<VecDeque<Completion>>,
    len: AtomicUsize,
    /// Threads inside `wait` (they serve the attached connections' sockets).
    waiting: AtomicU32,
    /// Threads parked in `epoll_wait` (pushes must write the eventfd).
    parked: AtomicU32,
    /// Calls of `poll` and `wait`, counted: an I/O thread that sees it move knows an
    /// application thread drives the connections and stands back (see `Reactor::look`).
    activity: AtomicU64,
    evfd: OwnedFd,
    epfd: OwnedFd,
    conns: Mutex<HashMap<u64, Weak<Conn>>>,
    spin: Duration,
}

const EV_WAKE: u64 = u64::MAX;

/// An epoll set (the first fd) holding an eventfd (the second) under [`EV_WAKE`]: a
/// write to the eventfd wakes whoever waits in the set.
fn epoll_with_wake() -> Result<(OwnedFd, OwnedFd)> {
    let evfd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| Error::io("eventfd", e.into()))?;
    let epfd = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| Error::io("epoll_create", e.into()))?;
    epoll::add(&epfd, &evfd, epoll::EventData::new_u64(EV_WAKE), epoll::EventFlags::IN)
        .map_err(|e| Error::io("epoll_ctl", e.into()))?;
    Ok((epfd, evfd))
}
/// Up to this many connections a spinning waiter reads their sockets directly.
const SPIN_DIRECT: usize = 2;

impl std::fmt::Debug for TcpCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpCq").field("queued", &self.inner.len.load(Ordering::Relaxed)).finish()
    }
}

impl TcpCq {
    fn new(spin: Duration) -> Result<TcpCq> {
        let (epfd, evfd) = epoll_with_wake()?;
        Ok(TcpCq {
            inner: Arc::new(CqInner {
                q: Mutex::new(VecDeque::new()),
                len: AtomicUsize::new(0),
                waiting: AtomicU32::new(0),
                parked: AtomicU32::new(0),
                activity: AtomicU64::new(0),
                evfd,
                epfd,
                conns: Mutex::new(HashMap::new()),
                spin,
            }),
        })
    }
}

impl CqInner {
    fn attach(&self, c: &Arc<Conn>) -> Result<()> {
        lock(&self.conns).insert(c.id, Arc::downgrade(c));
        epoll::add(&self.epfd, &c.sock, epoll::EventData::new_u64(c.id), epoll::EventFlags::IN)
            .map_err(|e| Error::io("epoll_ctl(add)", e.into()))
    }

    fn detach(&self, c: &Conn) {
        lock(&self.conns).remove(&c.id);
        let _ = epoll::delete(&self.epfd, &c.sock);
    }

    fn push(&self, c: Completion) {
        {
            let mut q = lock(&self.q);
            q.push_back(c);
            self.len.store(q.len(), Ordering::Release);
        }
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) > 0 {
            let _ = rustix::io::write(&self.evfd, &1u64.to_ne_bytes());
        }
    }

    fn pop_into(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        if self.len.load(Ordering::Acquire) == 0 || max == 0 {
            return 0;
        }
        let mut q = lock(&self.q);
        let n = max.min(q.len());
        out.extend(q.drain(..n));
        self.len.store(q.len(), Ordering::Release);
        n
    }

    /// The queue's connection when it has exactly one (a client's queue).
    fn lone_conn(&self) -> Option<Arc<Conn>> {
        let conns = lock(&self.conns);
        if conns.len() != 1 {
            return None;
        }
        conns.values().next().and_then(Weak::upgrade)
    }

    fn conn(&self, id: u64) -> Option<Arc<Conn>> {
        lock(&self.conns).get(&id).and_then(Weak::upgrade)
    }

    /// Serves the sockets that `epoll` reports ready (`timeout` zero: just look).
    /// Returns whether any socket had traffic. `parked` (the caller's count in
    /// [`CqInner::parked`]) ends when `epoll_wait` returns: the completions this thread
    /// pushes while it serves the sockets must not write the eventfd to wake itself (a
    /// wasted write, and a wasted wake-up and read at its next park).
    fn serve_ready(&self, events: &mut Vec<epoll::Event>, timeout: Duration, parked: Option<WaitGuard<'_>>) -> bool {
        events.clear();
        let t = ts(timeout);
        let r = epoll::wait(&self.epfd, rustix::buffer::spare_capacity(events), Some(&t));
        drop(parked);
        if r.is_err() {
            return false;
        }
        let mut traffic = false;
        for ev in events.iter() {
            let id = ev.data.u64();
            if id == EV_WAKE {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&self.evfd, &mut b);
            } else if let Some(c) = self.conn(id) {
                traffic = true;
                c.progress();
            }
        }
        traffic
    }

    /// One spin round: with a few connections, try their sockets directly (one `recv`
    /// each, which is what a busy-polling TCP client does); with many, ask `epoll`.
    fn spin_once(&self, events: &mut Vec<epoll::Event>, few: &mut Vec<Arc<Conn>>) -> bool {
        few.clear();
        {
            let conns = lock(&self.conns);
            if conns.len() > SPIN_DIRECT {
                drop(conns);
                return self.serve_ready(events, Duration::ZERO, None);
            }
            few.extend(conns.values().filter_map(Weak::upgrade));
        }
        let mut traffic = false;
        for c in few.drain(..) {
            traffic |= c.progress();
        }
        traffic
    }
}

thread_local! {
    /// The buffers of [`CompletionQueue::poll`] (one poll per round of a polling loop:
    /// no allocation in it).
    static POLL_SCRATCH: std::cell::RefCell<(Vec<epoll::Event>, Vec<Arc<Conn>>)> =
        std::cell::RefCell::new((Vec::with_capacity(64), Vec::with_capacity(SPIN_DIRECT)));
}

struct WaitGuard<'a>(&'a AtomicU32);
impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CompletionQueue for TcpCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        super::participate();
        self.inner.activity.fetch_add(1, Ordering::Relaxed);
        let n = self.inner.pop_into(out, max);
        if n > 0 {
            return n;
        }
        // Nobody may be reading the sockets right now (the I/O thread stands back while
        // a thread waits); a poll loop must make progress on its own: a recv on each of a
        // few sockets, or one epoll_wait that names the ready ones among many (a server
        // worker polling 16 idle sockets would otherwise spend 16 syscalls per round).
        POLL_SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let (events, few) = &mut *s;
            self.inner.spin_once(events, few);
        });
        self.inner.pop_into(out, max)
    }

    fn wait(&self, timeout: Duration) -> Result<Completion> {
        let inner = &self.inner;
        inner.activity.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::with_capacity(1);
        if inner.pop_into(&mut out, 1) == 1 {
            return out.pop().ok_or(Error::Timeout(timeout, "a completion"));
        }
        // One clock reading for the deadline, the spin slot and the spin's end.
        let start = Instant::now();
        let end = deadline_from(start, timeout);
        // Spin while there is traffic: a thread that executes one-sided operations
        // inline (which complete nothing here) stays hot instead of parking between them.
        let mut slot = super::spin_slot_at(start);
        let spin =
            |slot: &Option<super::SpinSlot>| if slot.is_some() { inner.spin.min(timeout) } else { Duration::ZERO };
        let mut spin_end = deadline_from(start, spin(&slot));
        inner.waiting.fetch_add(1, Ordering::SeqCst);
        let _g = WaitGuard(&inner.waiting);
        let mut events = Vec::with_capacity(64);
        let mut few = Vec::with_capacity(SPIN_DIRECT);
        // After the spin (or instead of it), a thread allowed to poll with yields does
        // so for a while before it sleeps (see `transport::set_yield_wait`).
        let mut yield_end: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if now >= end {
                return Err(Error::Timeout(timeout, "a completion"));
            }
            let traffic = if now < spin_end {
                let t = inner.spin_once(&mut events, &mut few);
                std::hint::spin_loop();
                t
            } else {
                // The spin is over: it counts as one that ran out, whatever comes next.
                if slot.take().is_some() {
                    super::spin_outcome(false);
                }
                if *yield_end.get_or_insert_with(|| super::yield_wait_end(now)) > now {
                    // Yield first, then look: what this thread waits for has just been
                    // asked for, and a look before the other threads have had their
                    // turn finds the socket empty (a recv for nothing per wait).
                    std::thread::yield_now();
                    inner.spin_once(&mut events, &mut few)
                } else {
                    match if end - now >= BLOCKING_RECV { inner.lone_conn() } else { None } {
                        // Alone on one connection: sleep in its socket (no eventfd to wake).
                        Some(c) => {
                            let t = c.progress_blocking();
                            if inner.pop_into(&mut out, 1) == 1 {
                                return out.pop().ok_or(Error::Timeout(timeout, "a completion"));
                            }
                            t
                        }
                        None => {
                            inner.parked.fetch_add(1, Ordering::SeqCst);
                            let p = WaitGuard(&inner.parked);
                            if inner.pop_into(&mut out, 1) == 1 {
                                return out.pop().ok_or(Error::Timeout(timeout, "a completion"));
                            }
                            inner.serve_ready(&mut events, (end - now).min(Duration::from_millis(100)), Some(p))
                        }
                    }
                }
            };
            if traffic {
                if slot.is_none() {
                    slot = super::spin_slot();
                }
                spin_end = deadline(spin(&slot));
            }
            if inner.pop_into(&mut out, 1) == 1 {
                if slot.is_some() {
                    super::spin_outcome(true);
                }
                return out.pop().ok_or(Error::Timeout(timeout, "a completion"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Connection (queue pair)

static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

struct Rx {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Set while the frame at `start` waits for a RECV (RNR): give up at this instant.
    stall_until: Option<Instant>,
}

struct Wqe {
    psn: u64,
    wr_id: u64,
    opcode: WcOpcode,
    signaled: bool,
    len: u32,
    /// READ: where the data goes.
    read_to: Option<(Mr, u64)>,
}

struct Sq {
    next_psn: u64,
    outstanding: VecDeque<Wqe>,
}

struct Tx {
    out: Vec<u8>,
    sent: usize,
    ack_sent: u64,
}

struct RecvWqe {
    wr_id: u64,
    mr: Mr,
    map_off: u64,
    len: u32,
}

struct Conn {
    id: u64,
    qp_num: u32,
    peer_qp_num: u32,
    /// The peer's socket address, for log lines.
    peer: String,
    sock: TcpStream,
    pd: Arc<Pd>,
    cfg: TransportConfig,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    rx: Mutex<Rx>,
    sq: Mutex<Sq>,
    tx: Mutex<Tx>,
    rq: Mutex<VecDeque<RecvWqe>>,
    /// Peer requests executed (the `ack` we owe).
    rx_processed: AtomicU64,
    /// Since when an acknowledgement is owed without ACK_REQ.
    owed_since: Mutex<Option<Instant>>,
    error: AtomicBool,
    torn_down: AtomicBool,
    reason: Mutex<Option<String>>,
    /// The I/O thread that covers this connection.
    reactor: Arc<Reactor>,
    /// The I/O thread sleeps with no deadline of this connection's near (see
    /// [`Conn::executed`]).
    io_idle: AtomicBool,
    backlog: AtomicBool,
    /// Set when a read returned bytes (tells a spinning waiter there is traffic).
    rx_seen: AtomicBool,
    /// Frames executed so far (the I/O thread's measure of activity).
    frames: AtomicU64,
    stats: StatCounters,
    nic_stop: AtomicBool,
}

/// Outcome of executing buffered frames.
enum Step {
    /// Need more bytes.
    More,
    /// The head frame waits for a RECV.
    Stalled,
}

impl Conn {
    fn is_error(&self) -> bool {
        self.error.load(Ordering::Acquire)
    }

    /// Enters the error state (first reason wins) before an error completion is
    /// pushed, so whoever sees that completion also sees the state. [`Conn::fail`]
    /// does the teardown.
    fn mark_error(&self, why: &str) {
        let mut r = lock(&self.reason);
        if r.is_none() {
            *r = Some(why.to_string());
        }
        self.error.store(true, Ordering::Release);
    }

    fn attended(&self) -> bool {
        self.send_cq.waiting.load(Ordering::SeqCst) > 0 || self.recv_cq.waiting.load(Ordering::SeqCst) > 0
    }

    /// Calls of `poll` and `wait` on the connection's queues, summed (see [`CqInner::activity`]).
    fn activity(&self) -> u64 {
        self.send_cq.activity.load(Ordering::Relaxed).wrapping_add(self.recv_cq.activity.load(Ordering::Relaxed))
    }

    /// Asks the I/O thread to look at this connection now.
    fn wake_nic(&self) {
        self.reactor.kick(self.id);
    }

    fn completion(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
    ) -> Completion {
        Completion { wr_id, status, opcode, byte_len, imm, qp_num: self.qp_num }
    }

    /// Moves the connection to the error state: logs `why`, closes the socket, flushes
    /// outstanding requests and posted receives. Call without holding `sq`, `tx` or `rq`.
    fn fail(&self, why: String) {
        self.fail_with(why, true);
    }

    /// [`Conn::fail`], logging only when `log` (an orderly close is not news).
    fn fail_with(&self, why: String, log: bool) {
        self.mark_error(&why);
        if self.torn_down.swap(true, Ordering::AcqRel) {
            return;
        }
        if log {
            log_event(&format!("qp {} (peer qp {}): closing connection: {why}", self.qp_num, self.peer_qp_num));
        }
        let _ = self.sock.shutdown(Shutdown::Both);
        self.send_cq.detach(self);
        self.recv_cq.detach(self);
        // Every request not acknowledged is flushed, signaled or not, as a NIC flushes
        // its send queue: an unsignaled SEND whose connection fails must not vanish.
        let flushed: Vec<Wqe> = lock(&self.sq).outstanding.drain(..).collect();
        for w in flushed {
            self.send_cq.push(self.completion(w.wr_id, WcStatus::WrFlushError, w.opcode, 0, None));
        }
        let recvs: Vec<RecvWqe> = lock(&self.rq).drain(..).collect();
        for r in recvs {
            self.recv_cq.push(self.completion(r.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, 0, None));
        }
        self.nic_stop.store(true, Ordering::Release);
        self.wake_nic();
    }

    /// Appends a frame to the send buffer and tries to write it out. `payload` copies
    /// the payload into the buffer. Call with `tx` held.
    fn emit(
        &self,
        tx: &mut Tx,
        mut hdr: Hdr,
        payload_len: usize,
        payload: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        hdr.ack = self.rx_processed.load(Ordering::Acquire);
        hdr.len = payload_len as u32;
        hdr.encode(&mut tx.out);
        let start = tx.out.len();
        tx.out.resize(start + payload_len, 0);
        if let Err(e) = payload(&mut tx.out[start..]) {
            tx.out.truncate(start - HDR);
            return Err(e);
        }
        if hdr.ack > tx.ack_sent {
            tx.ack_sent = hdr.ack;
        }
        self.flush_tx(tx)
    }

    /// Bytes queued for the socket but not yet written.
    fn backlog_bytes(&self) -> usize {
        if !self.backlog.load(Ordering::Acquire) {
            return 0;
        }
        let tx = lock(&self.tx);
        tx.out.len() - tx.sent
    }

    fn flush_tx(&self, tx: &mut Tx) -> Result<()> {
        while tx.sent < tx.out.len() {
            let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
            match rustix::net::send(&self.sock, &tx.out[tx.sent..], flags).map_err(std::io::Error::from) {
                Ok(0) => return Err(Error::Transport("connection closed while sending".into())),
                Ok(n) => tx.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !self.backlog.swap(true, Ordering::AcqRel) {
                        self.wake_nic();
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::Transport(format!("send failed: {e}"))),
            }
        }
        tx.out.clear();
        tx.sent = 0;
        self.backlog.store(false, Ordering::Release);
        if tx.out.capacity() > 4 << 20 {
            tx.out.shrink_to(64 << 10);
        }
        Ok(())
    }

    fn send_ack(&self) -> Result<()> {
        let mut tx = lock(&self.tx);
        if self.rx_processed.load(Ordering::Acquire) > tx.ack_sent {
            self.emit(&mut tx, Hdr { op: OP_ACK, ..Hdr::default() }, 0, |_| Ok(()))?;
        }
        *lock(&self.owed_since) = None;
        Ok(())
    }

    fn send_nak(&self, psn: u64, status: WcStatus) {
        let mut tx = lock(&self.tx);
        let _ = self.emit(&mut tx, Hdr { op: OP_NAK, psn, status: status.code(), ..Hdr::default() }, 0, |_| Ok(()));
    }

    /// Completes our requests below `ack` (the peer executed them).
    fn complete_acked(&self, ack: u64) -> std::result::Result<(), String> {
        let mut sq = lock(&self.sq);
        if ack > sq.next_psn {
            return Err(format!("peer acknowledged request {ack} but only {} were sent", sq.next_psn));
        }
        while sq.outstanding.front().is_some_and(|w| w.psn < ack) {
            let Some(w) = sq.outstanding.pop_front() else { break };
            if w.read_to.is_some() {
                return Err(format!("peer acknowledged READ {} without answering it", w.psn));
            }
            if w.signaled {
                self.send_cq.push(self.completion(w.wr_id, WcStatus::Success, w.opcode, w.len, None));
            }
        }
        Ok(())
    }

    /// Reads and executes whatever the socket has, if no other thread is doing so.
    /// Returns whether bytes arrived.
    fn progress(&self) -> bool {
        self.progress_with(false)
    }

    /// [`Conn::progress`], but blocks in the first `recv` (at most [`BLOCKING_RECV`]) when
    /// no complete frame is buffered: a waiter whose queue has this one connection sleeps
    /// in the socket itself, one syscall per reply where `epoll_wait` and `recv` are two.
    fn progress_blocking(&self) -> bool {
        self.progress_with(true)
    }

    fn progress_with(&self, block: bool) -> bool {
        if self.is_error() {
            return false;
        }
        let mut rx = match self.rx.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return true,
        };
        let before = rx.end.wrapping_sub(rx.start);
        let r = self.drain(&mut rx, block);
        let traffic =
            r.is_err() || rx.end.wrapping_sub(rx.start) != before || self.rx_seen.swap(false, Ordering::AcqRel);
        drop(rx);
        match r {
            Ok(ack_now) => {
                let overdue = lock(&self.owed_since).is_some_and(|t| t.elapsed() >= ACK_DELAY);
                if ack_now || overdue {
                    if let Err(e) = self.send_ack() {
                        self.fail(e.to_string());
                    }
                }
            }
            Err(why) => {
                let orderly = why == PEER_CLOSED;
                self.fail_with(why, !orderly);
            }
        }
        traffic
    }

    /// Reads until the socket is empty (a short read says so), executing complete
    /// frames. Returns whether a request asked for an immediate acknowledgement.
    fn drain(&self, rx: &mut Rx, mut block: bool) -> std::result::Result<bool, String> {
        let mut ack_now = false;
        let mut taken = 0usize;
        loop {
            match self.execute(rx, &mut ack_now)? {
                Step::Stalled => return Ok(ack_now),
                Step::More => {}
            }
            if rx.end == rx.buf.len() {
                if rx.start > 0 {
                    rx.buf.copy_within(rx.start..rx.end, 0);
                    rx.end -= rx.start;
                    rx.start = 0;
                } else {
                    // `execute` grows the buffer for a large frame before asking for more.
                    let n = rx.buf.len() * 2;
                    rx.buf.resize(n, 0);
                }
            }
            let end = rx.end;
            let flags = if block { rustix::net::RecvFlags::empty() } else { rustix::net::RecvFlags::DONTWAIT };
            block = false;
            match rustix::net::recv(&self.sock, &mut rx.buf[end..], flags).map(|(n, _)| n).map_err(std::io::Error::from)
            {
                Ok(0) => {
                    return Err(if rx.end > rx.start {
                        format!(
                            "peer closed the connection inside a frame ({} bytes of it received)",
                            rx.end - rx.start
                        )
                    } else {
                        PEER_CLOSED.into()
                    })
                }
                Ok(n) => {
                    rx.end += n;
                    taken += n;
                    self.rx_seen.store(true, Ordering::Relaxed);
                    if rx.end < rx.buf.len() || taken >= DRAIN_BUDGET {
                        // A short read emptied the socket: execute what came and stop,
                        // instead of a second `recv` that would only say EAGAIN (one
                        // syscall per wake-up saved; every caller looks again later).
                        // A peer that keeps the socket full stops at the budget: the
                        // I/O thread it shares with other connections moves on.
                        self.execute(rx, &mut ack_now)?;
                        return Ok(ack_now);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(ack_now),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("receive failed: {e}")),
            }
        }
    }

    /// Executes the complete frames in the buffer.
    fn execute(&self, rx: &mut Rx, ack_now: &mut bool) -> std::result::Result<Step, String> {
        loop {
            let avail = rx.end - rx.start;
            if avail < HDR {
                if rx.start == rx.end {
                    rx.start = 0;
                    rx.end = 0;
                    if rx.buf.len() > 4 * RX_BUF {
                        rx.buf.truncate(RX_BUF);
                        rx.buf.shrink_to_fit();
                    }
                }
                return Ok(Step::More);
            }
            let mut hb = [0u8; HDR];
            hb.copy_from_slice(&rx.buf[rx.start..rx.start + HDR]);
            let h = Hdr::decode(&hb);
            self.validate(&h)?;
            let total = HDR + h.len as usize;
            if avail < total {
                if rx.buf.len() - rx.start < total {
                    rx.buf.copy_within(rx.start..rx.end, 0);
                    rx.end -= rx.start;
                    rx.start = 0;
                    if rx.buf.len() < total {
                        // Memory for a frame is spent only on one that can land: a peer
                        // cannot make us buffer 16 MiB by announcing it.
                        if let Exec::NoRecv = self.precheck(&h, rx.stall_until)? {
                            rx.stall_until.get_or_insert_with(|| deadline(self.cfg.rnr_timeout));
                            return Ok(Step::Stalled);
                        }
                        rx.buf.resize(total, 0);
                        // A wait for a receive (above) is over: the connection is read
                        // again as any other.
                        rx.stall_until = None;
                    }
                }
                return Ok(Step::More);
            }
            self.complete_acked(h.ack)?;
            let payload_at = rx.start + HDR;
            let payload = &rx.buf[payload_at..payload_at + h.len as usize];
            match self.execute_one(&h, payload, rx.stall_until)? {
                Exec::Done => {
                    rx.stall_until = None;
                    rx.start += total;
                    self.frames.fetch_add(1, Ordering::Relaxed);
                    if h.flags & FLAG_ACK_REQ != 0 {
                        *ack_now = true;
                    }
                }
                Exec::NoRecv => {
                    if rx.stall_until.is_none() {
                        rx.stall_until = Some(deadline(self.cfg.rnr_timeout));
                    }
                    return Ok(Step::Stalled);
                }
            }
        }
    }

    /// Before buffering a large frame: would it be executed at all? A WRITE must name a
    /// region this connection may write, with the bytes inside it; a READ response must
    /// answer a READ of that length; a SEND must fit the receive it will consume. With no
    /// receive posted there is nothing to check a SEND against: `NoRecv`, and the
    /// caller waits for one as for a whole SEND without one (RNR, failing at `stalled`),
    /// reading nothing more meanwhile.
    fn precheck(&self, h: &Hdr, stalled: Option<Instant>) -> std::result::Result<Exec, String> {
        let len = h.len as u64;
        match h.op {
            OP_WRITE | OP_WRITE_IMM => {
                let ok = self
                    .pd
                    .lookup_remote(h.rkey, self.qp_num, Access::REMOTE_WRITE)
                    .is_some_and(|i| i.translate(h.raddr, len).is_some());
                if !ok {
                    self.pd.count_violation();
                    self.send_nak(h.psn, WcStatus::RemoteAccessError);
                    return Err(format!(
                        "remote access error from {}: WRITE of {len} bytes at {:#x} with rkey {:#x}",
                        self.peer, h.raddr, h.rkey
                    ));
                }
            }
            OP_READ_RESP => {
                let sq = lock(&self.sq);
                let ok = sq.outstanding.iter().any(|w| w.psn == h.psn && w.read_to.is_some() && w.len as u64 == len);
                if !ok {
                    return Err(format!("READ response of {len} bytes for psn {} answers no such READ", h.psn));
                }
            }
            OP_SEND => {
                let (posted, short) = {
                    let mut rq = lock(&self.rq);
                    match rq.front() {
                        None => (false, None),
                        Some(r) if (r.len as u64) < len => (true, rq.pop_front()),
                        _ => (true, None),
                    }
                };
                if !posted {
                    return self.rnr(h, stalled);
                }
                if let Some(r) = short {
                    // As when the whole frame is here (see `execute_one`), without the wait.
                    self.mark_error("incoming SEND longer than the receive buffer");
                    let c = self.completion(r.wr_id, WcStatus::LocalLengthError, WcOpcode::Recv, h.len, None);
                    self.recv_cq.push(c);
                    self.send_nak(h.psn, WcStatus::RemoteInvalidRequest);
                    return Err(format!("incoming SEND of {len} bytes: receive buffer of {} bytes", r.len));
                }
            }
            _ => {}
        }
        Ok(Exec::Done)
    }

    fn validate(&self, h: &Hdr) -> std::result::Result<(), String> {
        if h.reserved != 0 || h.flags & !FLAG_ACK_REQ != 0 {
            return Err(format!("malformed frame header (flags {:#x}, reserved {:#x})", h.flags, h.reserved));
        }
        if h.len > MAX_MESSAGE {
            return Err(format!("frame length {} is over the {MAX_MESSAGE}-byte limit", h.len));
        }
        let expect = self.rx_processed.load(Ordering::Acquire);
        match h.op {
            OP_SEND | OP_WRITE | OP_WRITE_IMM | OP_READ_REQ | OP_CAS_REQ | OP_FAA_REQ | OP_FLUSH_REQ => {
                if h.psn != expect {
                    return Err(format!("out-of-sequence request psn {} (expected {expect})", h.psn));
                }
                if h.op == OP_READ_REQ && (h.len != 0 || h.imm > MAX_MESSAGE) {
                    return Err(format!("malformed READ request (len {}, read length {})", h.len, h.imm));
                }
                let operands = match h.op {
                    OP_CAS_REQ => Some(16),
                    OP_FAA_REQ => Some(8),
                    OP_FLUSH_REQ => Some(0),
                    _ => None,
                };
                if operands.is_some_and(|n| h.len != n) {
                    return Err(format!("malformed request {} with a {}-byte payload", h.op, h.len));
                }
            }
            OP_READ_RESP => {}
            OP_ACK | OP_NAK => {
                if h.len != 0 {
                    return Err(format!(
                        "{} frame with a {}-byte payload",
                        if h.op == OP_ACK { "ACK" } else { "NAK" },
                        h.len
                    ));
                }
            }
            op => return Err(format!("unknown opcode {op}")),
        }
        Ok(())
    }

    fn execute_one(&self, h: &Hdr, payload: &[u8], stalled: Option<Instant>) -> std::result::Result<Exec, String> {
        match h.op {
            OP_SEND => {
                let r = lock(&self.rq).pop_front();
                let Some(r) = r else { return self.rnr(h, stalled) };
                let status = if payload.len() > r.len as usize {
                    self.mark_error("incoming SEND longer than the receive buffer");
                    WcStatus::LocalLengthError
                } else if !r.mr.is_registered() || r.mr.info().mapping.write(r.map_off, payload).is_err() {
                    WcStatus::LocalProtectionError
                } else {
                    WcStatus::Success
                };
                self.recv_cq.push(self.completion(r.wr_id, status, WcOpcode::Recv, payload.len() as u32, None));
                if status != WcStatus::Success {
                    self.send_nak(h.psn, WcStatus::RemoteInvalidRequest);
                    return Err(format!("incoming SEND of {} bytes: receive buffer {}", payload.len(), status));
                }
                self.executed();
                Ok(Exec::Done)
            }
            OP_WRITE | OP_WRITE_IMM => {
                if h.op == OP_WRITE_IMM && lock(&self.rq).is_empty() {
                    return self.rnr(h, stalled);
                }
                if !self.apply_write(h.raddr, h.rkey, payload) {
                    self.send_nak(h.psn, WcStatus::RemoteAccessError);
                    return Err(format!(
                        "remote access error from {}: WRITE of {} bytes at {:#x} with rkey {:#x}",
                        self.peer,
                        payload.len(),
                        h.raddr,
                        h.rkey
                    ));
                }
                if h.op == OP_WRITE_IMM {
                    let r = lock(&self.rq).pop_front();
                    if let Some(r) = r {
                        self.recv_cq.push(self.completion(
                            r.wr_id,
                            WcStatus::Success,
                            WcOpcode::RecvWithImm,
                            payload.len() as u32,
                            Some(h.imm),
                        ));
                    }
                }
                self.executed();
                Ok(Exec::Done)
            }
            OP_READ_REQ => {
                let len = h.imm as usize;
                if self.backlog_bytes() + len > TX_BACKLOG_LIMIT {
                    return Err("peer keeps asking for READs but does not read the responses".into());
                }
                let region = self
                    .pd
                    .lookup_remote(h.rkey, self.qp_num, Access::REMOTE_READ)
                    .and_then(|i| i.translate(h.raddr, len as u64).map(|off| (i, off)));
                let ok = match region {
                    Some((info, off)) if guard_enter(&self.pd.table, info.slot, info.rkey) => {
                        // The response's `ack` does not cover the READ itself: the response
                        // completes it at the initiator.
                        let mut tx = lock(&self.tx);
                        let r =
                            self.emit(&mut tx, Hdr { op: OP_READ_RESP, psn: h.psn, ..Hdr::default() }, len, |dst| {
                                info.mapping.read(off, dst)
                            });
                        drop(tx);
                        guard_exit(&self.pd.table, info.slot);
                        r.map_err(|e| e.to_string())?;
                        self.executed();
                        true
                    }
                    _ => false,
                };
                if !ok {
                    self.pd.count_violation();
                    self.send_nak(h.psn, WcStatus::RemoteAccessError);
                    return Err(format!(
                        "remote access error from {}: READ of {len} bytes at {:#x} with rkey {:#x}",
                        self.peer, h.raddr, h.rkey
                    ));
                }
                Ok(Exec::Done)
            }
            OP_CAS_REQ | OP_FAA_REQ => self.execute_atomic(h, payload),
            OP_FLUSH_REQ => self.execute_flush(h),
            OP_READ_RESP => {
                let mut sq = lock(&self.sq);
                // Requests before the READ were executed before it.
                while sq.outstanding.front().is_some_and(|w| w.psn < h.psn) {
                    let Some(w) = sq.outstanding.pop_front() else { break };
                    if w.read_to.is_some() {
                        return Err(format!("READ response for {} skipped READ {}", h.psn, w.psn));
                    }
                    if w.signaled {
                        self.send_cq.push(self.completion(w.wr_id, WcStatus::Success, w.opcode, w.len, None));
                    }
                }
                let Some(w) = sq.outstanding.pop_front() else {
                    return Err(format!("READ response for psn {} with no READ outstanding", h.psn));
                };
                let Some((mr, off)) = w.read_to.as_ref().filter(|_| w.psn == h.psn) else {
                    return Err(format!("READ response for psn {} does not match request {}", h.psn, w.psn));
                };
                if payload.len() != w.len as usize {
                    return Err(format!("READ response of {} bytes for a {}-byte READ", payload.len(), w.len));
                }
                let status = if mr.is_registered() && mr.info().mapping.write(*off, payload).is_ok() {
                    WcStatus::Success
                } else {
                    WcStatus::LocalProtectionError
                };
                // A READ's data, or an atomic's previous value.
                self.send_cq.push(self.completion(w.wr_id, status, w.opcode, w.len, None));
                Ok(Exec::Done)
            }
            OP_ACK => Ok(Exec::Done),
            OP_NAK => {
                let status = WcStatus::from_code(h.status).unwrap_or(WcStatus::RemoteInvalidRequest);
                let mut sq = lock(&self.sq);
                while sq.outstanding.front().is_some_and(|w| w.psn < h.psn) {
                    let Some(w) = sq.outstanding.pop_front() else { break };
                    if w.signaled && w.read_to.is_none() {
                        self.send_cq.push(self.completion(w.wr_id, WcStatus::Success, w.opcode, w.len, None));
                    }
                }
                self.mark_error(&format!("peer failed request {}: {status}", h.psn));
                if let Some(w) = sq.outstanding.front().filter(|w| w.psn == h.psn) {
                    // Errors complete even unsignaled requests.
                    self.send_cq.push(self.completion(w.wr_id, status, w.opcode, 0, None));
                    sq.outstanding.pop_front();
                }
                Err(format!("peer failed request {}: {status}", h.psn))
            }
            op => Err(format!("unknown opcode {op}")),
        }
    }

    /// CAS_REQ or FAA_REQ: the operation on the target word, and a READ_RESP with the
    /// word's previous value.
    fn execute_atomic(&self, h: &Hdr, payload: &[u8]) -> std::result::Result<Exec, String> {
        if self.backlog_bytes() + 8 > TX_BACKLOG_LIMIT {
            return Err("peer keeps sending atomics but does not read the responses".into());
        }
        let operand = |i: usize| payload.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        let region = self
            .pd
            .lookup_remote(h.rkey, self.qp_num, Access::REMOTE_ATOMIC)
            .and_then(|i| i.translate(h.raddr, 8).map(|off| (i, off)));
        let Some((info, off)) = region.filter(|(i, _)| guard_enter(&self.pd.table, i.slot, i.rkey)) else {
            self.pd.count_violation();
            self.send_nak(h.psn, WcStatus::RemoteAccessError);
            return Err(format!(
                "remote access error from {}: atomic at {:#x} with rkey {:#x}",
                self.peer, h.raddr, h.rkey
            ));
        };
        let old = info.mapping.atomic_u64(off).map(|w| match (h.op, operand(0), operand(1)) {
            (OP_CAS_REQ, Some(cmp), Some(swap)) => {
                match w.compare_exchange(cmp, swap, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(v) | Err(v) => v,
                }
            }
            (_, Some(add), _) => w.fetch_add(add, Ordering::AcqRel),
            // `validate` checked the payload's length.
            _ => w.load(Ordering::Acquire),
        });
        guard_exit(&self.pd.table, info.slot);
        let Ok(old) = old else {
            self.send_nak(h.psn, WcStatus::RemoteInvalidRequest);
            return Err(format!("atomic from {} at {:#x}: not an aligned 8-byte word", self.peer, h.raddr));
        };
        let mut tx = lock(&self.tx);
        let r = self.emit(&mut tx, Hdr { op: OP_READ_RESP, psn: h.psn, ..Hdr::default() }, 8, |dst| {
            dst.copy_from_slice(&old.to_le_bytes());
            Ok(())
        });
        drop(tx);
        r.map_err(|e| e.to_string())?;
        self.executed();
        Ok(Exec::Done)
    }

    /// FLUSH_REQ: the range's lines written back and fenced; the acknowledgement
    /// (ACK_REQ) completes it at the initiator.
    fn execute_flush(&self, h: &Hdr) -> std::result::Result<Exec, String> {
        let len = h.imm as u64;
        let region = self
            .pd
            .lookup_remote(h.rkey, self.qp_num, Access::REMOTE_WRITE)
            .and_then(|i| i.translate(h.raddr, len).map(|off| (i, off)));
        let Some((info, off)) = region.filter(|(i, _)| guard_enter(&self.pd.table, i.slot, i.rkey)) else {
            self.pd.count_violation();
            self.send_nak(h.psn, WcStatus::RemoteAccessError);
            return Err(format!(
                "remote access error from {}: FLUSH of {len} bytes at {:#x} with rkey {:#x}",
                self.peer, h.raddr, h.rkey
            ));
        };
        let r = crate::pmem::persist_remote(&info.mapping, crate::pmem::FlushKind::detect(), off, len as usize);
        guard_exit(&self.pd.table, info.slot);
        r.map_err(|e| format!("FLUSH from {}: {e}", self.peer))?;
        self.executed();
        Ok(Exec::Done)
    }

    fn rnr(&self, h: &Hdr, stalled: Option<Instant>) -> std::result::Result<Exec, String> {
        match stalled {
            Some(t) if Instant::now() >= t => {
                self.send_nak(h.psn, WcStatus::RnrRetryExceeded);
                Err(format!("no receive posted for incoming request {} within {:?} (RNR)", h.psn, self.cfg.rnr_timeout))
            }
            _ => Ok(Exec::NoRecv),
        }
    }

    fn executed(&self) {
        self.rx_processed.fetch_add(1, Ordering::AcqRel);
        let mut o = lock(&self.owed_since);
        if o.is_none() {
            *o = Some(Instant::now());
            drop(o);
            // The I/O thread may be asleep with no timer for this connection (it left
            // the socket to a waiting thread, which took the frame before the socket's
            // readiness could wake it): it owns the ack deadline, so tell it once.
            fence(Ordering::SeqCst);
            if self.io_idle.load(Ordering::SeqCst) && self.io_idle.swap(false, Ordering::SeqCst) {
                self.wake_nic();
            }
        }
    }

    fn apply_write(&self, raddr: u64, rkey: u32, data: &[u8]) -> bool {
        let Some(info) = self.pd.lookup_remote(rkey, self.qp_num, Access::REMOTE_WRITE) else {
            return false;
        };
        let Some(off) = info.translate(raddr, data.len() as u64) else {
            self.pd.count_violation();
            return false;
        };
        if !guard_enter(&self.pd.table, info.slot, info.rkey) {
            self.pd.count_violation();
            return false;
        }
        let ok = info.mapping.write(off, data).is_ok();
        guard_exit(&self.pd.table, info.slot);
        ok
    }
}

const PEER_CLOSED: &str = "peer closed the connection";

enum Exec {
    Done,
    NoRecv,
}

// ---------------------------------------------------------------------------------------
// The I/O threads (the NIC's engine)

/// How many I/O threads the process's connections share: one per four CPUs, at most
/// four. They only cover what no application thread is doing (see the module docs), so
/// one is plenty on a small machine; connections are spread over them round robin.
fn io_thread_count() -> usize {
    super::cores().div_ceil(4).clamp(1, 4)
}

/// The I/O threads, started with the process's first connection and kept for its life.
fn reactors() -> Result<&'static [Arc<Reactor>]> {
    static REACTORS: std::sync::OnceLock<Vec<Arc<Reactor>>> = std::sync::OnceLock::new();
    static START: Mutex<()> = Mutex::new(());
    if let Some(r) = REACTORS.get() {
        return Ok(r);
    }
    let _one = lock(&START);
    if let Some(r) = REACTORS.get() {
        return Ok(r);
    }
    let mut all = Vec::new();
    for i in 0..io_thread_count() {
        let r = Arc::new(Reactor::new()?);
        let r2 = r.clone();
        std::thread::Builder::new()
            .name(format!("boomkv-tcp-io-{i}"))
            .spawn(move || r2.run())
            .map_err(|e| Error::io("spawn the tcp I/O thread", e))?;
        all.push(r);
    }
    Ok(REACTORS.get_or_init(|| all))
}

/// One I/O thread: an epoll set over the sockets of its connections (one-shot
/// interest, armed only for what it has to do) and a timer per connection.
struct Reactor {
    epfd: OwnedFd,
    wake: OwnedFd,
    /// Connections handed over since the thread last looked.
    incoming: Mutex<Vec<Arc<Conn>>>,
    /// Connections that asked to be looked at now (a send backlog, a teardown).
    kicked: Mutex<Vec<u64>>,
}

/// What the I/O thread keeps per connection.
struct Watch {
    conn: Weak<Conn>,
    /// When to look at it next.
    due: Instant,
    /// `due` is a recheck that may run up to [`NIC_RECHECK`]/2 early (with others).
    lazy: bool,
    /// The interest armed in the epoll set (one-shot: empty once it fired).
    armed: epoll::EventFlags,
    recheck: Duration,
    seen_frames: u64,
    seen_activity: u64,
}

impl Reactor {
    fn new() -> Result<Reactor> {
        let (epfd, wake) = epoll_with_wake()?;
        Ok(Reactor { epfd, wake, incoming: Mutex::new(Vec::new()), kicked: Mutex::new(Vec::new()) })
    }

    /// The I/O thread for a new connection (round robin).
    fn pick() -> Result<Arc<Reactor>> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let all = reactors()?;
        Ok(all[NEXT.fetch_add(1, Ordering::Relaxed) % all.len()].clone())
    }

    fn adopt(&self, c: Arc<Conn>) {
        lock(&self.incoming).push(c);
        self.poke();
    }

    fn kick(&self, id: u64) {
        lock(&self.kicked).push(id);
        self.poke();
    }

    fn poke(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    fn run(&self) {
        let mut watches: HashMap<u64, Watch> = HashMap::new();
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let mut due: Vec<u64> = Vec::new();
        loop {
            let now = Instant::now();
            for c in lock(&self.incoming).drain(..) {
                watches.insert(
                    c.id,
                    Watch {
                        conn: Arc::downgrade(&c),
                        due: now,
                        lazy: false,
                        armed: epoll::EventFlags::empty(),
                        recheck: NIC_RECHECK,
                        seen_frames: 0,
                        seen_activity: c.activity(),
                    },
                );
                // Registered without interest; `look` arms what it needs.
                let _ = epoll::add(&self.epfd, &c.sock, epoll::EventData::new_u64(c.id), epoll::EventFlags::ONESHOT);
            }
            for id in lock(&self.kicked).drain(..) {
                if let Some(w) = watches.get_mut(&id) {
                    w.due = now;
                    w.lazy = false;
                }
            }
            let soonest = watches.values().map(|w| w.due).min();
            let timeout = soonest.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
            events.clear();
            if timeout > Duration::ZERO {
                let _ = epoll::wait(&self.epfd, rustix::buffer::spare_capacity(&mut events), Some(&ts(timeout)));
            }
            let now = Instant::now();
            for ev in &events {
                match ev.data.u64() {
                    EV_WAKE => {
                        let mut b = [0u8; 8];
                        let _ = rustix::io::read(&self.wake, &mut b);
                    }
                    id => {
                        if let Some(w) = watches.get_mut(&id) {
                            w.armed = epoll::EventFlags::empty();
                            w.due = now;
                            w.lazy = false;
                        }
                    }
                }
            }
            // Rechecks that fall due soon run now, with the others: one wake-up per
            // round for all the connections that application threads serve.
            let early = now + NIC_RECHECK / 2;
            due.clear();
            due.extend(watches.iter().filter(|(_, w)| w.due <= now || (w.lazy && w.due <= early)).map(|(id, _)| *id));
            for id in &due {
                let Some(w) = watches.get_mut(id) else { continue };
                // A bug in executing one connection's frames must not stop the thread
                // every other connection relies on: that connection fails alone.
                let keep =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.look(w, now))).unwrap_or_else(|_| {
                        if let Some(c) = w.conn.upgrade() {
                            c.fail("internal error in the tcp I/O thread".into());
                            let _ = epoll::delete(&self.epfd, &c.sock);
                        }
                        false
                    });
                if !keep {
                    watches.remove(id);
                }
            }
        }
    }

    /// Serves one connection: drains a send backlog, reads the socket if no application
    /// thread does, sends an overdue acknowledgement, enforces the RNR deadline; then
    /// sets when to look again and what to wait for. Returns false to forget it.
    fn look(&self, w: &mut Watch, now: Instant) -> bool {
        let Some(c) = w.conn.upgrade() else { return false };
        if c.nic_stop.load(Ordering::Acquire) || c.is_error() {
            let _ = epoll::delete(&self.epfd, &c.sock);
            return false;
        }
        if c.backlog.load(Ordering::Acquire) {
            if let Err(e) = c.flush_tx(&mut lock(&c.tx)) {
                c.fail(e.to_string());
                let _ = epoll::delete(&self.epfd, &c.sock);
                return false;
            }
        }
        // A thread that polled or waited on the connection's queues since the last look
        // drives it: it reads the socket, and its requests and progress carry the acks
        // (every frame sent carries the cumulative ack; progress sends overdue ones).
        // An I/O thread that woke at every frame or ack deadline of request/response
        // traffic would wake once per request, for nothing: 16 client threads over tcp
        // spent a third of the machine in such wake-ups when each connection had a
        // thread of its own. Such connections are looked at every NIC_RECHECK while
        // frames flow, backing off to NIC_RECHECK_IDLE while they are quiet.
        let frames = c.frames.load(Ordering::Relaxed);
        w.recheck = if frames == w.seen_frames { (w.recheck * 2).min(NIC_RECHECK_IDLE) } else { NIC_RECHECK };
        w.seen_frames = frames;
        let activity = c.activity();
        let driven = activity != w.seen_activity;
        w.seen_activity = activity;
        let attended = c.attended() || driven;
        c.progress();
        if c.is_error() {
            let _ = epoll::delete(&self.epfd, &c.sock);
            return false;
        }
        // Never wait for the receive lock: a lone waiter may hold it while it blocks in
        // `recv`, and this thread serves every other connection. A thread that holds it
        // reads the socket and sees a stalled frame itself.
        let stalled = c.rx.try_lock().ok().and_then(|rx| rx.stall_until);
        // Idle: nothing here is due soon. An ack that becomes owed after this look
        // either is seen below or makes `Conn::executed` wake this thread.
        let idle = !attended && stalled.is_none();
        c.io_idle.store(idle, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let owed = *lock(&c.owed_since);
        let mut wait = if attended { w.recheck } else { Duration::from_secs(1) };
        w.lazy = attended;
        if let Some(t) = stalled {
            wait = wait.min(t.saturating_duration_since(now).max(Duration::from_micros(50)));
            w.lazy = false;
        }
        if let (Some(t), false) = (owed, attended) {
            wait = wait.min(ACK_DELAY.saturating_sub(t.elapsed()).max(Duration::from_micros(20)));
        }
        w.due = now + wait;
        let mut want = epoll::EventFlags::empty();
        if !attended && stalled.is_none() {
            want |= epoll::EventFlags::IN;
        }
        if c.backlog.load(Ordering::Acquire) {
            want |= epoll::EventFlags::OUT;
        }
        // Re-arming is a syscall: only when the interest is not armed already. An IN
        // left armed on a connection that became attended fires once, for nothing.
        if !want.is_empty() && !w.armed.contains(want) {
            let flags = want | w.armed | epoll::EventFlags::ONESHOT;
            if epoll::modify(&self.epfd, &c.sock, epoll::EventData::new_u64(c.id), flags).is_ok() {
                w.armed = want | w.armed;
            }
        }
        true
    }
}

/// A queue pair of the tcp backend. Dropping it closes the connection.
pub struct TcpQp {
    conn: Arc<Conn>,
}

impl std::fmt::Debug for TcpQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpQp").field("qp_num", &self.conn.qp_num).field("peer", &self.conn.peer_qp_num).finish()
    }
}

impl Drop for TcpQp {
    fn drop(&mut self) {
        self.close();
    }
}

enum Payload<'a> {
    None,
    Mr(&'a Mr, u64, u32),
    Bytes(&'a [u8]),
}

impl TcpQp {
    fn check_open(&self) -> Result<()> {
        if self.conn.is_error() {
            let why = lock(&self.conn.reason).clone().unwrap_or_default();
            return Err(Error::Transport(format!("qp {} is in the error state: {why}", self.conn.qp_num)));
        }
        Ok(())
    }

    /// A CAS_REQ or FAA_REQ with its operands; the previous value lands at `off` of `mr`.
    #[allow(clippy::too_many_arguments)]
    fn post_atomic(&self, op: u8, wr_id: u64, mr: &Mr, off: u64, raddr: u64, rkey: u32, operands: &[u8]) -> Result<()> {
        self.check_open()?;
        super::check_atomic_addr(raddr)?;
        self.conn.stats.atomics.fetch_add(1, Ordering::Relaxed);
        let opcode = if op == OP_CAS_REQ { WcOpcode::CompareSwap } else { WcOpcode::FetchAdd };
        let Ok(map_off) = mr.check_local(self.conn.pd.id, off, 8, Access::LOCAL_WRITE) else {
            return self.local_error(wr_id, opcode, "atomic result outside its region or not LOCAL_WRITE");
        };
        self.post(op, wr_id, Payload::Bytes(operands), raddr, rkey, 0, true, Some((mr.clone(), map_off)), 8)
    }

    /// Completes a request that failed a local check and moves the connection to error.
    fn local_error(&self, wr_id: u64, opcode: WcOpcode, why: &str) -> Result<()> {
        let c = &self.conn;
        // Earlier requests flush first; the failed one completes after them.
        c.fail(format!("local protection error: {why}"));
        c.send_cq.push(c.completion(wr_id, WcStatus::LocalProtectionError, opcode, 0, None));
        Ok(())
    }

    /// SENDs `data` (copied now), completing it locally only if `signaled` or it fails.
    fn send_bytes(&self, wr_id: u64, data: &[u8], signaled: bool) -> Result<()> {
        self.check_open()?;
        let len = u32::try_from(data.len()).map_err(|_| Error::invalid("message too large"))?;
        super::check_len(len)?;
        self.conn.stats.sends.fetch_add(1, Ordering::Relaxed);
        self.post(OP_SEND, wr_id, Payload::Bytes(data), 0, 0, 0, signaled, None, len)
    }

    #[allow(clippy::too_many_arguments)]
    fn post(
        &self,
        op: u8,
        wr_id: u64,
        payload: Payload<'_>,
        raddr: u64,
        rkey: u32,
        imm: u32,
        signaled: bool,
        read_to: Option<(Mr, u64)>,
        len: u32,
    ) -> Result<()> {
        let c = &self.conn;
        let opcode = match op {
            OP_SEND => WcOpcode::Send,
            OP_READ_REQ => WcOpcode::Read,
            OP_CAS_REQ => WcOpcode::CompareSwap,
            OP_FAA_REQ => WcOpcode::FetchAdd,
            OP_FLUSH_REQ => WcOpcode::Flush,
            _ => WcOpcode::Write,
        };
        // Resolve the local source now; a bad one fails like a verbs local protection error.
        let src = match payload {
            Payload::Mr(mr, off, l) => match mr.check_local(c.pd.id, off, l, Access::NONE) {
                Ok(o) => Some((mr.info().mapping.clone(), o, l as usize)),
                Err(()) => return self.local_error(wr_id, opcode, "source buffer outside its region or not ours"),
            },
            _ => None,
        };
        let plen = match (&payload, &src) {
            (Payload::Bytes(b), _) => b.len(),
            (_, Some((_, _, l))) => *l,
            _ => 0,
        };
        let r = {
            let mut sq = lock(&c.sq);
            if sq.outstanding.len() >= c.cfg.sq_depth as usize {
                return Err(Error::Transport(format!(
                    "qp {}: send queue full ({} requests outstanding); poll the send completion queue",
                    c.qp_num, c.cfg.sq_depth
                )));
            }
            if c.backlog_bytes() + plen > TX_BACKLOG_LIMIT {
                return Err(Error::Transport(format!(
                    "qp {}: {} bytes wait for the socket already (the peer is not reading); try again later",
                    c.qp_num,
                    c.backlog_bytes()
                )));
            }
            let psn = sq.next_psn;
            sq.next_psn += 1;
            let mut flags = 0;
            if (op == OP_WRITE && signaled) || op == OP_FLUSH_REQ || sq.outstanding.len() * 2 >= c.cfg.sq_depth as usize
            {
                flags |= FLAG_ACK_REQ;
            }
            sq.outstanding.push_back(Wqe { psn, wr_id, opcode, signaled, len, read_to });
            let mut tx = lock(&c.tx);
            let hdr = Hdr { op, flags, psn, raddr, rkey, imm, ..Hdr::default() };
            let r = match (&payload, &src) {
                (Payload::Bytes(b), _) => c.emit(&mut tx, hdr, plen, |dst| {
                    dst.copy_from_slice(b);
                    Ok(())
                }),
                (_, Some((m, o, _))) => c.emit(&mut tx, hdr, plen, |dst| m.read(*o, dst)),
                _ => {
                    let mut h = hdr;
                    if op == OP_READ_REQ || op == OP_FLUSH_REQ {
                        h.imm = len;
                    }
                    c.emit(&mut tx, h, 0, |_| Ok(()))
                }
            };
            if r.is_ok() {
                // Our frame carried the ack we owed.
                if c.rx_processed.load(Ordering::Acquire) <= tx.ack_sent {
                    *lock(&c.owed_since) = None;
                }
            }
            r
        };
        if let Err(e) = r {
            c.fail(e.to_string());
        }
        Ok(())
    }
}

impl QueuePair for TcpQp {
    type Mr = Mr;

    fn qp_num(&self) -> u32 {
        self.conn.qp_num
    }

    fn peer_qp_num(&self) -> u32 {
        self.conn.peer_qp_num
    }

    fn post_send(&self, wr_id: u64, mr: &Mr, off: u64, len: u32) -> Result<()> {
        self.check_open()?;
        super::check_len(len)?;
        self.conn.stats.sends.fetch_add(1, Ordering::Relaxed);
        self.post(OP_SEND, wr_id, Payload::Mr(mr, off, len), 0, 0, 0, true, None, len)
    }

    fn post_send_bytes(&self, wr_id: u64, data: &[u8]) -> Result<()> {
        self.send_bytes(wr_id, data, true)
    }

    fn post_send_bytes_unsignaled(&self, wr_id: u64, data: &[u8]) -> Result<()> {
        self.send_bytes(wr_id, data, false)
    }

    fn post_recv(&self, wr_id: u64, mr: &Mr, off: u64, len: u32) -> Result<()> {
        self.check_open()?;
        let c = &self.conn;
        let Ok(map_off) = mr.check_local(c.pd.id, off, len, Access::LOCAL_WRITE) else {
            c.fail("local protection error: receive buffer outside its region, not ours, or not LOCAL_WRITE".into());
            c.recv_cq.push(c.completion(wr_id, WcStatus::LocalProtectionError, WcOpcode::Recv, 0, None));
            return Ok(());
        };
        {
            let mut rq = lock(&c.rq);
            if rq.len() >= c.cfg.rq_depth as usize {
                return Err(Error::Transport(format!("qp {}: receive queue full ({})", c.qp_num, c.cfg.rq_depth)));
            }
            rq.push_back(RecvWqe { wr_id, mr: mr.clone(), map_off, len });
        }
        c.stats.recvs.fetch_add(1, Ordering::Relaxed);
        // A request may be waiting for exactly this receive. A thread that holds the
        // receive lock is reading the socket and comes back to a stalled frame (it never
        // blocks in `recv` while one is stalled), so do not wait for the lock.
        if c.rx.try_lock().is_ok_and(|rx| rx.stall_until.is_some()) {
            c.progress();
        }
        Ok(())
    }

    fn post_write(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        signaled: bool,
    ) -> Result<()> {
        self.check_open()?;
        super::check_len(len)?;
        self.conn.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.post(OP_WRITE, wr_id, Payload::Mr(mr, off, len), remote_addr, rkey, 0, signaled, None, len)
    }

    fn post_write_imm(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<()> {
        self.check_open()?;
        super::check_len(len)?;
        self.conn.stats.writes_imm.fetch_add(1, Ordering::Relaxed);
        self.post(OP_WRITE_IMM, wr_id, Payload::Mr(mr, off, len), remote_addr, rkey, imm, true, None, len)
    }

    fn post_read(&self, wr_id: u64, mr: &Mr, off: u64, len: u32, remote_addr: u64, rkey: u32) -> Result<()> {
        self.check_open()?;
        super::check_len(len)?;
        self.conn.stats.reads.fetch_add(1, Ordering::Relaxed);
        let c = &self.conn;
        let Ok(map_off) = mr.check_local(c.pd.id, off, len, Access::LOCAL_WRITE) else {
            return self.local_error(wr_id, WcOpcode::Read, "READ destination outside its region or not LOCAL_WRITE");
        };
        self.post(OP_READ_REQ, wr_id, Payload::None, remote_addr, rkey, 0, true, Some((mr.clone(), map_off)), len)
    }

    fn post_compare_swap(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: u64,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Result<()> {
        let mut ops = [0u8; 16];
        ops[..8].copy_from_slice(&compare.to_le_bytes());
        ops[8..].copy_from_slice(&swap.to_le_bytes());
        self.post_atomic(OP_CAS_REQ, wr_id, mr, off, remote_addr, rkey, &ops)
    }

    fn post_fetch_add(&self, wr_id: u64, mr: &Mr, off: u64, remote_addr: u64, rkey: u32, add: u64) -> Result<()> {
        self.post_atomic(OP_FAA_REQ, wr_id, mr, off, remote_addr, rkey, &add.to_le_bytes())
    }

    fn post_flush(&self, wr_id: u64, remote_addr: u64, rkey: u32, len: u32) -> Result<()> {
        self.check_open()?;
        self.conn.stats.flushes.fetch_add(1, Ordering::Relaxed);
        self.post(OP_FLUSH_REQ, wr_id, Payload::None, remote_addr, rkey, 0, true, None, len)
    }

    fn is_error(&self) -> bool {
        self.conn.is_error()
    }

    fn error_reason(&self) -> Option<String> {
        lock(&self.conn.reason).clone()
    }

    fn stats(&self) -> QpStats {
        self.conn.stats.snapshot()
    }

    fn close(&self) {
        // Acknowledge what we executed first, so the peer's requests that reached us
        // complete successfully rather than flushed.
        if !self.conn.is_error() {
            self.conn.progress();
            let _ = self.conn.send_ack();
        }
        self.conn.fail_with("closed locally".into(), false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::conformance;
    use std::io::Read;

    fn make() -> TcpTransport {
        TcpTransport::with_config(conformance::test_config()).unwrap()
    }

    fn ep() -> Endpoint {
        Endpoint::parse("tcp://127.0.0.1:0").unwrap()
    }

    crate::conformance_suite!(make, ep);

    /// Connects a raw socket through the handshake, returning the socket and the
    /// listener-side queue pair (accepted on a thread).
    fn raw_client(t: &TcpTransport, l: &TcpListenerHandle, cq: &TcpCq) -> (TcpStream, TcpQp) {
        let Endpoint::Tcp(hp) = l.endpoint() else { unreachable!() };
        let mut s = TcpStream::connect(hp).unwrap();
        s.write_all(&encode_hello(PROTOCOL_VERSION, KIND_HELLO, 99, b"raw")).unwrap();
        let qp = l.accept(cq, cq, Duration::from_secs(5), |p| {
            assert_eq!(p, b"raw");
            Ok(b"ok".to_vec())
        });
        let qp = qp.unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let h = read_hello(&mut s, Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(h.kind, KIND_ACCEPT);
        assert_eq!(h.private, b"ok");
        let _ = t;
        (s, qp)
    }

    fn wait_error(qp: &TcpQp) -> String {
        let end = Instant::now() + Duration::from_secs(5);
        while !qp.is_error() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(qp.is_error(), "connection should have been closed");
        qp.error_reason().unwrap_or_default()
    }

    fn frame(h: Hdr, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        Hdr { len: payload.len() as u32, ..h }.encode(&mut v);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn malformed_frames_close_only_that_connection() {
        let t = make();
        let l = t.listen(&ep()).unwrap();
        let cq = t.create_cq().unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (frame(Hdr { op: 42, ..Hdr::default() }, b""), "unknown opcode 42"),
            (frame(Hdr { op: OP_SEND, reserved: 1, ..Hdr::default() }, b""), "malformed frame header"),
            (
                {
                    let mut v = Vec::new();
                    Hdr { op: OP_WRITE, len: MAX_MESSAGE + 1, ..Hdr::default() }.encode(&mut v);
                    v
                },
                "over the",
            ),
            (frame(Hdr { op: OP_ACK, ..Hdr::default() }, b"xx"), "ACK frame with a 2-byte payload"),
            (frame(Hdr { op: OP_WRITE, psn: 5, ..Hdr::default() }, b""), "out-of-sequence"),
            (frame(Hdr { op: OP_ACK, ack: 3, ..Hdr::default() }, b""), "acknowledged request 3"),
            (frame(Hdr { op: OP_READ_RESP, psn: 0, ..Hdr::default() }, b"x"), "no READ outstanding"),
            (frame(Hdr { op: OP_SEND, ..Hdr::default() }, b"abc")[..=HDR].to_vec(), "inside a frame"),
            (vec![1, 2, 3], "inside a frame"),
        ];
        for (bytes, want) in cases {
            let (mut s, qp) = raw_client(&t, &l, &cq);
            s.write_all(&bytes).unwrap();
            if want == "inside a frame" {
                s.shutdown(Shutdown::Write).unwrap();
            }
            let why = wait_error(&qp);
            assert!(why.contains(want), "reason {why:?} should mention {want:?}");
        }
        // The listener still serves a real client.
        let (ct, ccq) = (make(), make().create_cq().unwrap());
        let lp = l.endpoint();
        let h = std::thread::spawn(move || ct.connect(&lp, &ccq, &ccq, b"good", Duration::from_secs(5)));
        let qp = l.accept(&cq, &cq, Duration::from_secs(5), |_| Ok(b"welcome".to_vec())).unwrap();
        let (cqp, reply) = h.join().unwrap().unwrap();
        assert_eq!(reply, b"welcome");
        assert!(!qp.is_error() && !cqp.is_error());
    }

    #[test]
    fn forged_atomics_and_flushes_close_only_that_connection() {
        let t = make();
        let l = t.listen(&ep()).unwrap();
        let cq = t.create_cq().unwrap();
        let mr = t.alloc_mr(4096, Access::ALL).unwrap();
        mr.write(64, &41u64.to_le_bytes()).unwrap();
        let r = mr.remote();
        let cas = |raddr: u64, rkey: u32, payload: &[u8]| {
            frame(Hdr { op: OP_CAS_REQ, raddr, rkey, ..Hdr::default() }, payload)
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (cas(r.at(64), r.rkey, &[0u8; 8]), "malformed request 8 with a 8-byte payload"),
            (cas(r.at(68), r.rkey, &[0u8; 16]), "not an aligned 8-byte word"),
            (cas(r.at(64), r.rkey ^ 0x5a5a, &[0u8; 16]), "remote access error"),
            (cas(r.at(4096), r.rkey, &[0u8; 16]), "remote access error"),
            (
                frame(Hdr { op: OP_FAA_REQ, raddr: r.at(64), rkey: r.rkey, ..Hdr::default() }, b""),
                "malformed request 9",
            ),
            (
                frame(Hdr { op: OP_FLUSH_REQ, raddr: r.at(0), rkey: r.rkey, imm: 8192, ..Hdr::default() }, b""),
                "FLUSH of 8192 bytes",
            ),
            (
                frame(Hdr { op: OP_FLUSH_REQ, raddr: r.at(0), rkey: r.rkey, ..Hdr::default() }, b"x"),
                "malformed request 10",
            ),
        ];
        for (bytes, want) in cases {
            let (mut s, qp) = raw_client(&t, &l, &cq);
            s.write_all(&bytes).unwrap();
            let why = wait_error(&qp);
            assert!(why.contains(want), "reason {why:?} should mention {want:?}");
        }
        let mut b = [0u8; 8];
        mr.read(64, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 41, "no forged atomic changed the word");
        // A well-formed one from a raw peer works, and its answer is the old value.
        let (mut s, qp) = raw_client(&t, &l, &cq);
        let mut ops = 41u64.to_le_bytes().to_vec();
        ops.extend_from_slice(&42u64.to_le_bytes());
        s.write_all(&cas(r.at(64), r.rkey, &ops)).unwrap();
        let mut resp = vec![0u8; HDR + 8];
        s.read_exact(&mut resp).unwrap();
        assert_eq!(resp[0], OP_READ_RESP);
        assert_eq!(&resp[HDR..], &41u64.to_le_bytes());
        mr.read(64, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 42);
        assert!(!qp.is_error());
    }

    #[test]
    fn bad_handshakes_are_refused_and_listener_keeps_serving() {
        let t = make();
        let l = t.listen(&ep()).unwrap();
        let cq = t.create_cq().unwrap();
        let Endpoint::Tcp(hp) = l.endpoint() else { unreachable!() };
        // Wrong version: refused with a reason the client can read.
        let mut s = TcpStream::connect(&hp).unwrap();
        s.write_all(&encode_hello(PROTOCOL_VERSION + 1, KIND_HELLO, 1, b"")).unwrap();
        // Garbage, and an oversized private-data length.
        let mut g = TcpStream::connect(&hp).unwrap();
        g.write_all(&[0xffu8; HELLO_LEN]).unwrap();
        let mut big = TcpStream::connect(&hp).unwrap();
        let mut hello = encode_hello(PROTOCOL_VERSION, KIND_HELLO, 1, b"");
        hello[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        big.write_all(&hello).unwrap();
        let ct = make();
        let ccq = ct.create_cq().unwrap();
        let lp = l.endpoint();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ct.connect(&lp, &ccq, &ccq, b"", Duration::from_secs(5))
        });
        let qp = l.accept(&cq, &cq, Duration::from_secs(10), |_| Ok(vec![])).unwrap();
        let (cqp, _) = h.join().unwrap().unwrap();
        assert!(!qp.is_error() && !cqp.is_error());
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let r = read_hello(&mut s, Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(r.kind, KIND_REJECT);
        assert!(String::from_utf8_lossy(&r.private).contains("not supported"));
    }

    #[test]
    fn a_peer_that_does_not_read_cannot_grow_our_buffers_without_bound() {
        let t = make();
        let l = t.listen(&ep()).unwrap();
        let cq = t.create_cq().unwrap();
        // Our posts: refused once 64 MiB wait for the socket.
        let (_s, qp) = raw_client(&t, &l, &cq);
        let big = vec![0u8; 4 << 20];
        let mut refused = None;
        for i in 0..64 {
            if let Err(e) = qp.post_send_bytes(i, &big) {
                refused = Some((i, e.to_string()));
                break;
            }
        }
        let (i, why) = refused.expect("posting must stop when the peer does not read");
        assert!(i <= 20 && why.contains("not reading"), "{i}: {why}");
        // The peer's READs: the connection is closed once their responses pile up.
        let region = t.alloc_mr(MAX_MESSAGE as usize, Access::ALL).unwrap();
        let r = region.remote();
        let (mut s2, qp2) = raw_client(&t, &l, &cq);
        let mut frames = Vec::new();
        for psn in 0..8 {
            Hdr { op: OP_READ_REQ, psn, raddr: r.addr, rkey: r.rkey, imm: MAX_MESSAGE, ..Hdr::default() }
                .encode(&mut frames);
        }
        s2.write_all(&frames).unwrap();
        let why = wait_error(&qp2);
        assert!(why.contains("does not read the responses"), "{why}");
    }

    #[test]
    fn a_send_announced_before_any_receive_is_not_buffered() {
        let t = make();
        let l = t.listen(&ep()).unwrap();
        let cq = t.create_cq().unwrap();
        // The attack: a 16 MiB SEND announced while no receive is posted (the window
        // between the handshake and the server's first post_recv). There is nothing to
        // check its length against, so it waits for a receive as a whole SEND without
        // one does (RNR) and then fails the connection; what it announces is never
        // buffered.
        let (mut s, qp) = raw_client(&t, &l, &cq);
        let mut v = Vec::new();
        Hdr { op: OP_SEND, len: MAX_MESSAGE, psn: 0, ..Hdr::default() }.encode(&mut v);
        s.write_all(&v).unwrap();
        let why = wait_error(&qp);
        assert!(why.contains("RNR"), "{why}");
        assert!(lock(&qp.conn.rx).buf.len() <= RX_BUF, "the announced 16 MiB were allocated");
        // The honest case: a SEND larger than the buffer whose receive is posted after
        // its header arrived lands whole.
        let (mut s, qp) = raw_client(&t, &l, &cq);
        let n = 2 * RX_BUF;
        let mut v = Vec::new();
        Hdr { op: OP_SEND, len: n as u32, psn: 0, ..Hdr::default() }.encode(&mut v);
        s.write_all(&v).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let mr = t.alloc_mr(n, Access::ALL).unwrap();
        qp.post_recv(1, &mr, 0, n as u32).unwrap();
        let payload: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        s.write_all(&payload).unwrap();
        let c = cq.wait(Duration::from_secs(5)).unwrap();
        assert_eq!((c.wr_id, c.status, c.byte_len), (1, WcStatus::Success, n as u32));
        assert!(!qp.is_error(), "{:?}", qp.error_reason());
        let mut got = vec![0u8; n];
        mr.read(0, &mut got).unwrap();
        assert!(got == payload);
    }

    #[test]
    fn frame_header_roundtrip() {
        let h = Hdr {
            op: 3,
            flags: 1,
            status: 0,
            reserved: 0,
            len: 7,
            psn: 1 << 40,
            ack: 9,
            raddr: 0xabc,
            rkey: 5,
            imm: 6,
        };
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(v.len(), HDR);
        assert_eq!(Hdr::decode(v[..].try_into().unwrap()), h);
    }
}

/// A server facing a client written against the frame format, that sends requests and
/// never reads what comes back.
#[cfg(test)]
mod hostile_tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::client::{Client, ClientOptions};
    use crate::log::{Pool, PoolOptions};
    use crate::server::{Server, ServerConfig, MAX_GETS_IN_FLIGHT};
    use crate::transport::RemoteRegion;
    use crate::wire::{Hello as WireHello, Msg, Protocol};

    fn server(dir: &std::path::Path) -> Server<TcpTransport> {
        let mut o = PoolOptions { segment_size: 1 << 20, ..Default::default() };
        o.media.create_size = Some(16 << 20);
        let pool = Arc::new(Pool::open(dir, &o).unwrap().0);
        let cfg = ServerConfig { log_clients: false, cleaner: false, ..Default::default() };
        let ep = Endpoint::parse("tcp://127.0.0.1:0").unwrap();
        Server::start(TcpTransport::new().unwrap(), pool, &[ep], cfg).unwrap()
    }

    /// Connects by hand: the transport handshake with a BOOM hello, nothing else.
    fn raw(s: &Server<TcpTransport>) -> TcpStream {
        let Endpoint::Tcp(hp) = s.endpoints()[0].clone() else { unreachable!() };
        let mut sock = TcpStream::connect(hp).unwrap();
        let response = RemoteRegion { addr: 0x10_0000, len: 1 << 20, rkey: 5 };
        let hello = WireHello { protocol: Protocol::Boom, recv_size: 4096, response };
        sock.write_all(&encode_hello(PROTOCOL_VERSION, KIND_HELLO, 1, &hello.encode())).unwrap();
        let h = read_hello(&mut sock, Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(h.kind, KIND_ACCEPT);
        sock
    }

    fn send_frame(psn: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        Hdr { op: OP_SEND, len: payload.len() as u32, psn, ..Hdr::default() }.encode(&mut v);
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn a_client_that_never_reads_its_get_replies_is_cut_off_at_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let o = ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
        let mut honest = Client::connect(&TcpTransport::new().unwrap(), &s.endpoints()[0], o.clone()).unwrap();
        honest.put(b"big", &vec![7u8; 64 << 10]).unwrap();
        let mut sock = raw(&s);
        // Many more GETs than the bound, in one go; never a byte read, never an ACK.
        let buf = RemoteRegion { addr: 0x10_0000, len: 1 << 20, rkey: 5 };
        let mut out = Vec::new();
        let n = (MAX_GETS_IN_FLIGHT * 4) as u64;
        for psn in 0..n {
            out.extend_from_slice(&send_frame(psn, &Msg::Get { key: b"big".to_vec(), buf }.encode(psn as u32)));
        }
        sock.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let _ = sock.write_all(&out);
        let end = Instant::now() + Duration::from_secs(10);
        while s.stats().over_limit == 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        let st = s.stats();
        assert_eq!(st.over_limit, 1, "the reader that does not read is disconnected");
        assert!(st.gets <= MAX_GETS_IN_FLIGHT as u64 + 1, "{} GETs served before the cut", st.gets);
        // Its socket is closed; everyone else is served.
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut sink = vec![0u8; 1 << 20];
        let closed = (0..64).any(|_| matches!(sock.read(&mut sink), Ok(0) | Err(_)));
        assert!(closed, "the server closed the connection");
        assert_eq!(honest.get(b"big").unwrap().unwrap().len(), 64 << 10);
    }

    #[test]
    fn an_announced_frame_that_cannot_land_is_refused_before_it_is_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(dir.path());
        let at_start = s.stats().clients_total;
        // A 16 MiB WRITE to a region nobody granted: refused on the header alone.
        let mut sock = raw(&s);
        let mut v = Vec::new();
        Hdr { op: OP_WRITE, len: MAX_MESSAGE, psn: 0, raddr: 0x1000, rkey: 0x1234_5678, ..Hdr::default() }
            .encode(&mut v);
        sock.write_all(&v).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; HDR];
        sock.read_exact(&mut b).unwrap();
        let h = Hdr::decode(&b);
        assert_eq!((h.op, h.status), (OP_NAK, WcStatus::RemoteAccessError.code()));
        // A 16 MiB SEND to a 4 KiB-or-so receive: refused on the header alone too, once
        // the server has posted its receives (it counts the client after that). Both
        // clients must be counted: the first one's count may come after its NAK (the
        // acceptor was still setting it up), and taken for the second one's it let the
        // SEND in before the receives (1 run in 30 under load).
        let mut sock = raw(&s);
        let end = Instant::now() + Duration::from_secs(5);
        while s.stats().clients_total < at_start + 2 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut v = Vec::new();
        Hdr { op: OP_SEND, len: MAX_MESSAGE, psn: 0, ..Hdr::default() }.encode(&mut v);
        sock.write_all(&v).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        sock.read_exact(&mut b).unwrap();
        let h = Hdr::decode(&b);
        assert_eq!((h.op, h.status), (OP_NAK, WcStatus::RemoteInvalidRequest.code()));
        assert!(s.stats().access_violations >= 1);
    }
}
