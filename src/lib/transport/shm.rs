//! The `shm` backend: verbs semantics between threads or processes of one host, through
//! shared memory. The fast path for benchmarks on one machine.
//!
//! Every queue and every region a peer touches is a shared-memory file (a sealed memfd,
//! or the pool file) handed over a `SOCK_SEQPACKET` Unix socket with `SCM_RIGHTS` and
//! mapped by the peer. A one-sided operation is a copy by the initiator's thread into or
//! out of its mapping of the peer's region; a SEND or WRITE_WITH_IMM then writes a
//! completion into the peer's ring and rings the peer's doorbell. Nothing runs on the
//! target side, and nothing crosses a thread on the data path.
//!
//! The one exception is RNR: a SEND or WRITE_WITH_IMM that finds no receive posted at
//! the peer does not wait in the posting thread (a server's worker would wait there for
//! the whole RNR timeout, with every other client it serves behind one client that
//! posts no receives). It waits in its queue pair's backlog, with every work request
//! posted behind it, and a process-wide RNR thread retries the backlog every 50 to
//! 100 us until the receive appears or the RNR timeout fails it, as a NIC retries.
//!
//! # Shared memory of one connection
//!
//! Each side creates a *queue-pair page* for the direction it receives, and the peer
//! maps it. All words are little-endian `u64`, updated atomically:
//!
//! | offset              | written by | field                                          |
//! |---------------------|------------|------------------------------------------------|
//! | 0                   | owner      | magic `"BOOMKVQP"`                              |
//! | 8                   | owner      | ring depth `D` (receive queue and completion ring) |
//! | 64                  | peer       | receives consumed so far                        |
//! | 128                 | owner      | ring completions polled so far                  |
//! | 192                 | owner      | one-sided copies into or out of the peer's regions the owner has started |
//! | 200                 | owner      | ... and finished (see [`super::region`])         |
//! | 256 + 64 i          | owner      | receive slot `i`: `seq`, `addr`, `len \| rkey << 32` |
//! | 256 + 64 (D + i)    | peer       | completion slot `i`: `seq`, `byte_len \| imm << 32`, `opcode \| status << 8 \| has_imm << 16` |
//!
//! A slot is valid when its `seq` equals its index plus one (indices count from 0 and
//! never wrap in practice); `seq` is stored last with release ordering. Each slot is a
//! cache line of its own. The k-th completion in the ring consumes the k-th posted
//! receive, so the ring carries no `wr_id`: the owner keeps those.
//!
//! A completion queue's *doorbell* is a page with a futex word at 0 and a waiter count
//! at 64. A producer that finds waiters bumps the word and wakes them, so a waiting
//! thread parks in `futex_wait` instead of spinning. The protection domain's region
//! table (see [`super::region`]) is handed over too, but only its owner can write it
//! (peers map it read-only): an initiator counts a copy as started in its own page
//! (offset 192), then checks the rkey in the owner's table, and counts it finished, which is what makes deregistration
//! immediate without letting a peer write anything of the owner's but its rings.
//!
//! # Control socket
//!
//! Besides the handshake (magic, [`PROTOCOL_VERSION`], queue-pair numbers, ring depth,
//! private data, and the page, doorbell and table files), the socket carries rkey
//! look-ups: the first time an initiator uses an rkey it asks the owner, whose control
//! thread answers with the region's bounds, access and file (or "no such region"). The
//! initiator maps the region and caches it. The poster never waits for the answer: the
//! work request waits in its queue pair's send queue (the backlog, with everything
//! posted behind it) and the RNR thread runs it once the answer is in, or fails it with
//! a remote access error after [`TransportConfig::lookup_timeout`], so a peer that is
//! stopped or hostile holds up only its own queue pair. When the socket reports end of file (the
//! peer closed the queue pair, hit an error, or died), the connection goes to the error
//! state and the posted receives are flushed once every completion the peer wrote has
//! been polled.
//!
//! # Cache lines
//!
//! One thread makes a process's connections one after another (the acceptor, or the
//! runner before its client threads start), and they are then served on different
//! CPUs: the parts of a connection written on every operation (its completion queue,
//! queue-pair state, receive side and connection) are aligned to two cache lines, or
//! neighbouring allocations would share lines across those CPUs.
//!
//! Peers on one host are trusted not to truncate the files they were given: the
//! transport's own files are sealed against shrinking and checked for that seal, and a
//! region's file is checked to be long enough before it is mapped.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use super::region::{peer_guard_enter, peer_guard_exit, CopyCounters, CopyWatch, Pd, TABLE_BYTES};
use super::{
    deadline, deadline_from, log_event, Access, Backend, Completion, CompletionQueue, Endpoint, Handshake, Listener,
    MemoryRegion, Mr, QpStats, QueuePair, StatCounters, Transport, TransportConfig, WcOpcode, WcStatus,
    MAX_PRIVATE_DATA, PROTOCOL_VERSION,
};
use crate::error::{Error, Result};
use crate::pmem::shared::{file_len, futex_wait, futex_wake, is_shrink_sealed, sealed_memfd, ReadOnlyWords};
use crate::pmem::Mapping;

const QP_MAGIC: u64 = u64::from_le_bytes(*b"BOOMKVQP");
const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"BOOMKVSH");
const OFF_DEPTH: u64 = 8;
const OFF_RQ_CONSUMED: u64 = 64;
const OFF_CQ_POLLED: u64 = 128;
const OFF_COPIES_STARTED: u64 = 192;
const OFF_COPIES_FINISHED: u64 = 200;
const OFF_RINGS: u64 = 256;
const SLOT: u64 = 64;
const MAX_DEPTH: u32 = 1 << 16;
const DOORBELL_BYTES: usize = 4096;
const DB_WAITERS: u64 = 64;

const MSG_HELLO: u8 = 1;
const MSG_ACCEPT: u8 = 2;
const MSG_REJECT: u8 = 3;
const MSG_RESOLVE: u8 = 4;
const MSG_RESOLVED: u8 = 5;
const MAX_CTL_MSG: usize = MAX_PRIVATE_DATA + 256;

/// Peer regions an initiator keeps mapped before it forgets them all.
const MAX_CACHED_REGIONS: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn ts(d: Duration) -> rustix::time::Timespec {
    rustix::time::Timespec { tv_sec: d.as_secs().min(i32::MAX as u64) as i64, tv_nsec: d.subsec_nanos() as _ }
}

fn page_bytes(depth: u32) -> usize {
    (OFF_RINGS + 2 * depth as u64 * SLOT) as usize
}

fn rq_slot(depth: u32, k: u64) -> u64 {
    OFF_RINGS + (k % depth as u64) * SLOT
}

fn cq_slot(depth: u32, k: u64) -> u64 {
    OFF_RINGS + (depth as u64 + k % depth as u64) * SLOT
}

/// Word `off` of a transport-made mapping. Offsets are constants inside mappings whose
/// size was checked at creation or hand-over, so this cannot fail; a zero word stands in
/// should it ever.
fn word(m: &Mapping, off: u64) -> &AtomicU64 {
    static ZERO: AtomicU64 = AtomicU64::new(0);
    m.atomic_u64(off).unwrap_or(&ZERO)
}

fn word32(m: &Mapping, off: u64) -> &AtomicU32 {
    static ZERO: AtomicU32 = AtomicU32::new(0);
    m.atomic_u32(off).unwrap_or(&ZERO)
}

fn ring_doorbell(db: &Mapping) {
    fence(Ordering::SeqCst);
    if word32(db, DB_WAITERS).load(Ordering::SeqCst) > 0 {
        let seq = word32(db, 0);
        seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(seq, u32::MAX);
    }
}

// ---------------------------------------------------------------------------------------
// Control socket messages

struct Msg {
    bytes: Vec<u8>,
    files: Vec<File>,
}

fn send_msg(sock: &OwnedFd, bytes: &[u8], files: &[&File]) -> std::io::Result<()> {
    send_msg_with(sock, bytes, files, SendFlags::NOSIGNAL)
}

fn send_msg_with(sock: &OwnedFd, bytes: &[u8], files: &[&File], flags: SendFlags) -> std::io::Result<()> {
    let fds: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("too many descriptors for one message"));
    }
    let n = rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut anc, flags)?;
    if n != bytes.len() {
        return Err(std::io::Error::other("short control message"));
    }
    Ok(())
}

/// Receives one message; `Ok(None)` at end of file.
fn recv_msg(sock: &OwnedFd) -> std::result::Result<Option<Msg>, String> {
    let mut buf = vec![0u8; MAX_CTL_MSG];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let r = loop {
        match rustix::net::recvmsg(sock, &mut [IoSliceMut::new(&mut buf)], &mut anc, RecvFlags::CMSG_CLOEXEC) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r,
        }
    };
    let r = r.map_err(|e| format!("control socket: {e}"))?;
    let mut files = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            files.extend(fds.map(File::from));
        }
    }
    if r.bytes == 0 {
        return Ok(None);
    }
    if r.flags.contains(rustix::net::ReturnFlags::TRUNC) || r.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        return Err("control message too large".into());
    }
    buf.truncate(r.bytes);
    Ok(Some(Msg { bytes: buf, files }))
}

fn wait_readable(sock: &OwnedFd, until: Instant) -> bool {
    loop {
        let now = Instant::now();
        if now >= until {
            return false;
        }
        let mut fds = [PollFd::new(sock, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&ts(until - now))) {
            Ok(n) if n > 0 => return true,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// A little-endian reader over a message that fails instead of panicking.
struct Rd<'a>(&'a [u8]);

impl Rd<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        if self.0.len() < n {
            return Err("truncated control message".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(self.u32()? as u64 | (self.u32()? as u64) << 32)
    }
}

/// HELLO / ACCEPT: type, magic, version, qp_num, depth, private.
fn encode_hello(kind: u8, version: u16, qp_num: u32, depth: u32, private: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&qp_num.to_le_bytes());
    v.extend_from_slice(&depth.to_le_bytes());
    v.extend_from_slice(&(private.len() as u32).to_le_bytes());
    v.extend_from_slice(private);
    v
}

struct Hello {
    version: u16,
    qp_num: u32,
    depth: u32,
    private: Vec<u8>,
}

fn decode_hello(b: &[u8]) -> std::result::Result<Hello, String> {
    let mut r = Rd(b);
    let _kind = r.u8()?;
    if r.u64()? != HELLO_MAGIC {
        return Err("not a boomkv shm transport peer (bad magic)".into());
    }
    let version = r.u16()?;
    let qp_num = r.u32()?;
    let depth = r.u32()?;
    let plen = r.u32()? as usize;
    if plen > MAX_PRIVATE_DATA {
        return Err(format!("private data of {plen} bytes is over the limit"));
    }
    let private = r.take(plen)?.to_vec();
    Ok(Hello { version, qp_num, depth, private })
}

// ---------------------------------------------------------------------------------------
// Transport

/// The shared-memory transport: a protection domain whose region table is shared
/// memory, plus configuration. Cheap to clone.
#[derive(Clone)]
pub struct ShmTransport {
    inner: Arc<Shared>,
}

struct Shared {
    pd: Arc<Pd>,
    cfg: TransportConfig,
    next_qp: AtomicU32,
    /// Tests: this side holds back its answers to rkey look-ups (a stopped or hostile peer).
    #[cfg(test)]
    hold_lookups: AtomicBool,
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTransport").field("pd", &self.inner.pd.id).finish()
    }
}

impl ShmTransport {
    /// A new transport (a new protection domain) with the default configuration.
    pub fn new() -> Result<ShmTransport> {
        Self::with_config(TransportConfig::default())
    }

    /// A new transport with `cfg`.
    pub fn with_config(cfg: TransportConfig) -> Result<ShmTransport> {
        // Fix the spin limit now, on the creating thread: a benchmark may pin the threads
        // that wait later, and a pinned thread sees a single CPU.
        let _ = super::spin_limit();
        if cfg.rq_depth == 0 || cfg.rq_depth > MAX_DEPTH {
            return Err(Error::invalid(format!("rq_depth must be in 1..={MAX_DEPTH}")));
        }
        if cfg.lookup_timeout.is_zero() {
            return Err(Error::invalid("lookup_timeout must be more than zero"));
        }
        Ok(ShmTransport {
            inner: Arc::new(Shared {
                pd: Arc::new(Pd::new(true)?),
                cfg,
                next_qp: AtomicU32::new(1),
                #[cfg(test)]
                hold_lookups: AtomicBool::new(false),
            }),
        })
    }

    /// Tests: while `hold` is set, this side answers no rkey look-up of its peers (each
    /// control thread waits with the one it got), as a peer that is stopped or hostile.
    #[cfg(test)]
    pub(crate) fn hold_lookups(&self, hold: bool) {
        self.inner.hold_lookups.store(hold, Ordering::Relaxed);
    }

    /// Tests: waits while look-ups are held (see [`Self::hold_lookups`]) and `c` is open.
    fn held_lookup(&self, _c: &Conn) {
        #[cfg(test)]
        while self.inner.hold_lookups.load(Ordering::Relaxed) && !_c.state.torn_down.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Registers a region (bound to local queue pair `bound`, if given). A peer reaches
    /// a region through the file behind it, so remote access needs one.
    fn register_for(
        &self,
        bound: Option<u32>,
        mapping: Arc<Mapping>,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Mr> {
        if file.is_none() && (access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_WRITE)) {
            return Err(Error::invalid("shm transport: a region with remote access needs the file behind its mapping"));
        }
        self.inner.pd.register_bound(mapping, file, offset, len, access, bound)
    }

    fn table_file(&self) -> Result<&File> {
        self.inner.pd.table_file.as_deref().ok_or_else(|| Error::Transport("shm region table has no file".into()))
    }

    /// The files this side hands to the peer: its queue-pair page, its receive
    /// completion queue's doorbell, its region table.
    fn own_files<'a>(&'a self, page: &'a File, recv_cq: &'a ShmCq) -> Result<[&'a File; 3]> {
        Ok([page, &recv_cq.inner.doorbell_file, self.table_file()?])
    }

    /// Maps and checks the files a peer sent in its handshake.
    fn map_peer_files(peer: &Hello, files: Vec<File>) -> std::result::Result<PeerFiles, String> {
        let [pf, dbf, tf]: [File; 3] = files
            .try_into()
            .map_err(|v: Vec<File>| format!("expected 3 shared-memory files in the handshake, got {}", v.len()))?;
        if peer.depth == 0 || peer.depth > MAX_DEPTH {
            return Err(format!("peer ring depth {} is out of range", peer.depth));
        }
        let page = map_peer(&pf, page_bytes(peer.depth), "queue-pair page")?;
        if word(&page, 0).load(Ordering::Acquire) != QP_MAGIC
            || word(&page, OFF_DEPTH).load(Ordering::Acquire) != peer.depth as u64
        {
            return Err("peer queue-pair page has a bad header".into());
        }
        let db = map_peer(&dbf, DOORBELL_BYTES, "doorbell")?;
        if !is_shrink_sealed(&tf) {
            return Err("peer's region table file is not sealed against shrinking".into());
        }
        if file_len(&tf).map_err(|e| e.to_string())? < TABLE_BYTES as u64 {
            return Err("peer's region table file is too short".into());
        }
        let table =
            ReadOnlyWords::map(&tf, TABLE_BYTES).map_err(|e| format!("mapping the peer's region table: {e}"))?;
        Ok(PeerFiles { page, db, table })
    }

    /// Builds the queue pair once both sides' files are known.
    #[allow(clippy::too_many_arguments)]
    fn build_qp(
        &self,
        sock: OwnedFd,
        qp_num: u32,
        own_page: Arc<Mapping>,
        peer: &Hello,
        pf: PeerFiles,
        send_cq: &ShmCq,
        recv_cq: &ShmCq,
        trust_peer_files: bool,
    ) -> std::result::Result<ShmQp, String> {
        let PeerFiles { page: peer_page, db: peer_db, table: peer_table } = pf;
        let peer_page = Arc::new(peer_page);
        let state = Arc::new(QpState {
            error: AtomicBool::new(false),
            reason: Mutex::new(None),
            quiesced: AtomicBool::new(false),
            torn_down: AtomicBool::new(false),
        });
        let depth = self.inner.cfg.rq_depth;
        let recv = Arc::new(RecvSide {
            qp_num,
            page: own_page,
            depth,
            polled_hint: AtomicU64::new(0),
            rq: Mutex::new(RqLocal { posted: 0, polled: 0, wrs: VecDeque::new() }),
            state: state.clone(),
            flushed: AtomicBool::new(false),
        });
        let conn = Arc::new(Conn {
            qp_num,
            peer_qp_num: peer.qp_num,
            trust_peer_files,
            t: self.clone(),
            sock,
            state,
            recv: recv.clone(),
            send_cq: send_cq.inner.clone(),
            recv_cq: recv_cq.inner.clone(),
            peer_copies: peer_page.clone(),
            send: Mutex::new(SendSide {
                peer_page,
                peer_depth: peer.depth,
                peer_db,
                peer_table: Arc::new(peer_table),
                rq_next: 0,
                cq_next: 0,
                cq_polled: 0,
                regions: HashMap::new(),
                asking: HashMap::new(),
            }),
            pending: Mutex::new(Pending { next: 1, answers: HashMap::new(), closed: false }),
            backlog: Mutex::new(Backlog { items: VecDeque::new(), active: false, head_out: false, bytes: 0 }),
            backlogged: AtomicBool::new(false),
            stats: StatCounters::default(),
        });
        recv_cq.inner.attach(recv);
        let watch: Arc<dyn CopyWatch> = conn.clone();
        self.inner.pd.watch(qp_num, Arc::downgrade(&watch));
        let c2 = conn.clone();
        std::thread::Builder::new()
            .name(format!("boomkv-shm-{qp_num}"))
            .spawn(move || control_thread(c2))
            .map_err(|e| format!("spawning the control thread: {e}"))?;
        Ok(ShmQp { conn, owner: true })
    }

    fn new_page(&self) -> Result<(File, Arc<Mapping>)> {
        let depth = self.inner.cfg.rq_depth;
        let (f, m) = sealed_memfd("boomkv-qp", page_bytes(depth))?;
        word(&m, 0).store(QP_MAGIC, Ordering::Release);
        word(&m, OFF_DEPTH).store(depth as u64, Ordering::Release);
        Ok((f, Arc::new(m)))
    }
}

struct PeerFiles {
    page: Mapping,
    db: Mapping,
    table: ReadOnlyWords,
}

fn map_peer(f: &File, need: usize, what: &str) -> std::result::Result<Mapping, String> {
    if !is_shrink_sealed(f) {
        return Err(format!("peer's {what} file is not sealed against shrinking"));
    }
    let len = file_len(f).map_err(|e| e.to_string())?;
    if len < need as u64 {
        return Err(format!("peer's {what} file has {len} bytes, need {need}"));
    }
    Mapping::map_file(f, 0, need, false).map_err(|e| format!("mapping the peer's {what}: {e}"))
}

impl Transport for ShmTransport {
    type Mr = Mr;
    type Cq = ShmCq;
    type Qp = ShmQp;
    type Listener = ShmListener;

    fn backend(&self) -> Backend {
        Backend::Shm
    }

    fn config(&self) -> &TransportConfig {
        &self.inner.cfg
    }

    fn alloc_mr(&self, len: usize, access: Access) -> Result<Mr> {
        let (f, m) = sealed_memfd("boomkv-mr", len.max(1))?;
        self.inner.pd.register(Arc::new(m), Some(Arc::new(f)), 0, len as u64, access)
    }

    fn register(
        &self,
        mapping: Arc<Mapping>,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Mr> {
        self.register_for(None, mapping, file, offset, len, access)
    }

    fn register_bound(
        &self,
        qp: &ShmQp,
        mapping: Arc<Mapping>,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Mr> {
        self.register_for(Some(qp.conn.qp_num), mapping, file, offset, len, access)
    }

    fn access_violations(&self) -> u64 {
        self.inner.pd.violations()
    }

    fn exposed_regions(&self) -> u64 {
        self.inner.pd.exposed()
    }

    fn create_cq(&self) -> Result<ShmCq> {
        ShmCq::new(self.inner.cfg.spin)
    }

    fn listen(&self, ep: &Endpoint) -> Result<ShmListener> {
        let Endpoint::Shm(path) = ep else {
            return Err(Error::invalid(format!("shm transport cannot listen on {ep}")));
        };
        let sock = seqpacket()?;
        let addr = SocketAddrUnix::new(path.as_path()).map_err(|e| Error::io(format!("{ep}"), e.into()))?;
        if let Ok(m) = std::fs::symlink_metadata(path) {
            // Only a socket is ever replaced: a path given by mistake (the pool file, a
            // document) is never deleted to make room.
            use std::os::unix::fs::FileTypeExt;
            if !m.file_type().is_socket() {
                return Err(Error::invalid(format!(
                    "cannot listen on {ep}: the file there is not a socket; it is left as it is (give a new path for \
                     the socket)"
                )));
            }
            // A socket file nobody answers on is left over from a dead server.
            let probe = seqpacket()?;
            if rustix::net::connect(&probe, &addr).is_ok() {
                return Err(Error::Transport(format!("{ep} is in use by a running server")));
            }
            let _ = std::fs::remove_file(path);
        }
        rustix::net::bind(&sock, &addr).map_err(|e| Error::io(format!("bind {ep}"), e.into()))?;
        // Only the server's own user may connect: an shm peer maps the pool itself (see
        // the module docs on what a same-host peer can do). Widen it by hand if needed.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| Error::io(format!("chmod 0600 {ep}"), e))?;
        }
        rustix::net::listen(&sock, 1024).map_err(|e| Error::io(format!("listen {ep}"), e.into()))?;
        rustix::fs::fcntl_setfl(&sock, rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| Error::io(format!("{ep}: O_NONBLOCK"), e.into()))?;
        ShmListener::start(self.clone(), sock, path.clone())
    }

    fn connect(
        &self,
        ep: &Endpoint,
        send_cq: &ShmCq,
        recv_cq: &ShmCq,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(ShmQp, Vec<u8>)> {
        let Endpoint::Shm(path) = ep else {
            return Err(Error::invalid(format!("shm transport cannot connect to {ep}")));
        };
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(Error::invalid(format!("private data over {MAX_PRIVATE_DATA} bytes")));
        }
        let until = deadline(timeout);
        let sock = seqpacket()?;
        let addr = SocketAddrUnix::new(path.as_path()).map_err(|e| Error::io(format!("{ep}"), e.into()))?;
        rustix::net::connect(&sock, &addr)
            .map_err(|e| Error::Unreachable { addr: ep.to_string(), why: e.to_string() })?;
        let qp_num = self.inner.next_qp.fetch_add(1, Ordering::Relaxed);
        let (pf, page) = self.new_page()?;
        let hello = encode_hello(MSG_HELLO, PROTOCOL_VERSION, qp_num, self.inner.cfg.rq_depth, private_data);
        send_msg(&sock, &hello, &self.own_files(&pf, recv_cq)?)
            .map_err(|e| Error::Transport(format!("{ep}: sending handshake: {e}")))?;
        if !wait_readable(&sock, until) {
            return Err(Error::Timeout(timeout, "the shm connection handshake"));
        }
        let msg = recv_msg(&sock)
            .map_err(|e| Error::Transport(format!("{ep}: {e}")))?
            .ok_or_else(|| Error::Transport(format!("{ep} closed the connection during the handshake")))?;
        match msg.bytes.first() {
            Some(&MSG_REJECT) => {
                return Err(Error::Transport(format!(
                    "{ep} refused the connection: {}",
                    String::from_utf8_lossy(&msg.bytes[1..])
                )))
            }
            Some(&MSG_ACCEPT) => {}
            _ => return Err(Error::Transport(format!("{ep}: unexpected handshake reply"))),
        }
        let h = decode_hello(&msg.bytes).map_err(|e| Error::Transport(format!("{ep}: {e}")))?;
        if h.version != PROTOCOL_VERSION {
            return Err(Error::Transport(format!(
                "{ep} speaks transport protocol version {}, we speak {PROTOCOL_VERSION}",
                h.version
            )));
        }
        let private = h.private.clone();
        let pf = Self::map_peer_files(&h, msg.files).map_err(|e| Error::Transport(format!("{ep}: {e}")))?;
        let qp = self
            .build_qp(sock, qp_num, page, &h, pf, send_cq, recv_cq, true)
            .map_err(|e| Error::Transport(format!("{ep}: {e}")))?;
        Ok((qp, private))
    }
}

fn seqpacket() -> Result<OwnedFd> {
    rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .map_err(|e| Error::io("socket(AF_UNIX, SOCK_SEQPACKET)", e.into()))
}

// ---------------------------------------------------------------------------------------
// Listener

/// A listener on a Unix socket path (mode 0600: only the server's user may connect).
/// Handshakes run off the accept path (a greeter thread, see the `transport` module). Removes the socket file
/// when dropped.
pub struct ShmListener {
    t: ShmTransport,
    path: PathBuf,
    greeter: super::Greeter<Greeted>,
}

/// A connection whose hello has arrived and whose files are mapped and checked.
struct Greeted {
    sock: OwnedFd,
    hello: Hello,
    files: PeerFiles,
}

impl Drop for ShmListener {
    fn drop(&mut self) {
        // Our socket, unless something else took its path meanwhile.
        use std::os::unix::fs::FileTypeExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The first half of an shm handshake: the client's hello and files, under `until`.
fn greet(sock: OwnedFd, until: Instant) -> std::result::Result<Greeted, String> {
    if !wait_readable(&sock, until) {
        return Err("handshake timed out".into());
    }
    let msg = match recv_msg(&sock) {
        Ok(Some(m)) => m,
        Ok(None) => return Err("client hung up during the handshake".into()),
        Err(e) => return Err(e),
    };
    let reject = |why: &str| {
        let mut v = vec![MSG_REJECT];
        v.extend_from_slice(why.as_bytes());
        let _ = send_msg(&sock, &v, &[]);
    };
    if msg.bytes.first() != Some(&MSG_HELLO) {
        reject("expected a hello");
        return Err("first message is not a hello".into());
    }
    let h = decode_hello(&msg.bytes)?;
    if h.version != PROTOCOL_VERSION {
        let why = format!(
            "transport protocol version {} is not supported; this server speaks version {PROTOCOL_VERSION}",
            h.version
        );
        reject(&why);
        return Err(why);
    }
    match ShmTransport::map_peer_files(&h, msg.files) {
        Ok(files) => Ok(Greeted { sock, hello: h, files }),
        Err(why) => {
            reject(&why);
            Err(why)
        }
    }
}

impl ShmListener {
    fn start(t: ShmTransport, sock: OwnedFd, path: PathBuf) -> Result<ShmListener> {
        let readable = sock.try_clone().map_err(|e| Error::io("dup the listening socket", e))?;
        let accept_one = move || match rustix::net::accept_with(&sock, SocketFlags::CLOEXEC) {
            Ok(s) => Ok(Some(s)),
            Err(rustix::io::Errno::AGAIN) => Ok(None),
            Err(e) => Err(std::io::Error::from(e)),
        };
        let first: Arc<super::FirstHalf<OwnedFd, Greeted>> = Arc::new(greet);
        let timeout = t.inner.cfg.handshake_timeout;
        let greeter = super::Greeter::start(Endpoint::Shm(path.clone()), readable, accept_one, first, timeout)?;
        Ok(ShmListener { t, path, greeter })
    }

    /// The second half: the application's answer, our files, the queue pair. Nothing
    /// here waits on the peer.
    fn finish<F>(&self, g: Greeted, send_cq: &ShmCq, recv_cq: &ShmCq, f: F) -> std::result::Result<ShmQp, Handshake>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let Greeted { sock, hello: h, files: peer_files } = g;
        let reject = |why: &str| {
            let mut v = vec![MSG_REJECT];
            v.extend_from_slice(why.as_bytes());
            let _ = send_msg(&sock, &v, &[]);
        };
        let qp_num = self.t.inner.next_qp.fetch_add(1, Ordering::Relaxed);
        let (pf, page) = self.t.new_page().map_err(|e| Handshake::Refused(e.to_string()))?;
        let reply = match f(&h.private) {
            Ok(r) if r.len() <= MAX_PRIVATE_DATA => r,
            Ok(r) => {
                let why = format!("server private data of {} bytes is over the limit", r.len());
                reject(&why);
                return Err(Handshake::Rejected(Error::invalid(why)));
            }
            Err(e) => {
                reject(&e.to_string());
                return Err(Handshake::Rejected(e));
            }
        };
        let accept = encode_hello(MSG_ACCEPT, PROTOCOL_VERSION, qp_num, self.t.inner.cfg.rq_depth, &reply);
        let files = self.t.own_files(&pf, recv_cq).map_err(|e| Handshake::Refused(e.to_string()))?;
        send_msg(&sock, &accept, &files)
            .map_err(|e| Handshake::Refused(format!("sending the handshake reply: {e}")))?;
        self.t.build_qp(sock, qp_num, page, &h, peer_files, send_cq, recv_cq, false).map_err(Handshake::Refused)
    }
}

impl Listener for ShmListener {
    type Qp = ShmQp;
    type Cq = ShmCq;

    fn endpoint(&self) -> Endpoint {
        Endpoint::Shm(self.path.clone())
    }

    fn accept<F>(&self, send_cq: &ShmCq, recv_cq: &ShmCq, timeout: Duration, on_connect: F) -> Result<ShmQp>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        let finish = |g, f: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>>| self.finish(g, send_cq, recv_cq, f);
        self.greeter.accept(&self.endpoint(), timeout, "an shm connection", on_connect, finish)
    }

    fn try_accept<F>(&self, send_cq: &ShmCq, recv_cq: &ShmCq, on_connect: F) -> Result<Option<ShmQp>>
    where
        F: FnOnce(&[u8]) -> Result<Vec<u8>>,
    {
        self.greeter.try_accept(&self.endpoint(), on_connect, |g, f| self.finish(g, send_cq, recv_cq, f))
    }
}

// ---------------------------------------------------------------------------------------
// Completion queue

/// A completion queue of the shm backend. Clones share the queue.
#[derive(Clone)]
pub struct ShmCq {
    inner: Arc<CqInner>,
}

impl std::fmt::Debug for ShmCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmCq").field("local", &self.inner.local_len.load(Ordering::Relaxed)).finish()
    }
}

// Two cache lines of its own: see "Cache lines" in the module docs.
#[repr(align(128))]
struct CqInner {
    doorbell: Mapping,
    doorbell_file: File,
    /// Completions produced in this process (send side, flushes, local errors).
    local: Mutex<VecDeque<Completion>>,
    local_len: AtomicUsize,
    /// Receive rings of the queue pairs attached to this queue.
    rings: Mutex<Vec<Arc<RecvSide>>>,
    rings_gen: AtomicU64,
    poller: Mutex<Poller>,
    spin: Duration,
}

struct Poller {
    snapshot: Vec<Arc<RecvSide>>,
    gen: u64,
    next: usize,
}

impl ShmCq {
    fn new(spin: Duration) -> Result<ShmCq> {
        let (f, m) = sealed_memfd("boomkv-cq", DOORBELL_BYTES)?;
        Ok(ShmCq {
            inner: Arc::new(CqInner {
                doorbell: m,
                doorbell_file: f,
                local: Mutex::new(VecDeque::new()),
                local_len: AtomicUsize::new(0),
                rings: Mutex::new(Vec::new()),
                rings_gen: AtomicU64::new(1),
                poller: Mutex::new(Poller { snapshot: Vec::new(), gen: 0, next: 0 }),
                spin,
            }),
        })
    }
}

impl CqInner {
    fn attach(&self, r: Arc<RecvSide>) {
        lock(&self.rings).push(r);
        self.rings_gen.fetch_add(1, Ordering::AcqRel);
    }

    fn push(&self, c: Completion) {
        {
            let mut q = lock(&self.local);
            q.push_back(c);
            self.local_len.store(q.len(), Ordering::Release);
        }
        ring_doorbell(&self.doorbell);
    }

    /// Wakes waiters so they look again (a connection changed state).
    fn kick(&self) {
        let seq = word32(&self.doorbell, 0);
        seq.fetch_add(1, Ordering::SeqCst);
        futex_wake(seq, u32::MAX);
    }

    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        let start = out.len();
        let mut p = lock(&self.poller);
        if self.local_len.load(Ordering::Acquire) > 0 {
            let mut q = lock(&self.local);
            let n = max.min(q.len());
            out.extend(q.drain(..n));
            self.local_len.store(q.len(), Ordering::Release);
        }
        let gen = self.rings_gen.load(Ordering::Acquire);
        if gen != p.gen {
            p.snapshot.clone_from(&lock(&self.rings));
            p.gen = gen;
        }
        let n = p.snapshot.len();
        let mut finished = false;
        for i in 0..n {
            if out.len() - start >= max {
                break;
            }
            let idx = (p.next + i) % n;
            let done = p.snapshot[idx].drain(out, max - (out.len() - start));
            finished |= done;
        }
        if n > 0 {
            p.next = (p.next + 1) % n;
        }
        if finished {
            let mut rings = lock(&self.rings);
            rings.retain(|r| !r.flushed.load(Ordering::Acquire));
            self.rings_gen.fetch_add(1, Ordering::AcqRel);
        }
        out.len() - start
    }
}

impl CompletionQueue for ShmCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> usize {
        super::participate();
        self.inner.poll(out, max)
    }

    fn wait(&self, timeout: Duration) -> Result<Completion> {
        let inner = &self.inner;
        // No allocation until a completion is there (one wait per request on the hot path).
        let mut out = Vec::new();
        let got = |out: &mut Vec<Completion>| out.pop().ok_or(Error::Timeout(timeout, "a completion"));
        if inner.poll(&mut out, 1) == 1 {
            return got(&mut out);
        }
        if super::colocated() {
            // What this thread waits for needs another thread on its CPU (a client's
            // reply, the worker; a parked worker's request, its clients), which runs
            // once this one yields: yield and look again before reading the clock,
            // which only a longer wait needs (its deadline, the yields' end). That is
            // one clock reading less per operation of a colocated client.
            super::participate();
            std::thread::yield_now();
            if inner.poll(&mut out, 1) == 1 {
                return got(&mut out);
            }
        }
        // One clock reading serves the deadline, the spin, the turn and the yields' end
        // (six clock readings per operation, with the runner's, were 6% of the client
        // CPU of a 16-thread run).
        let mut start = Instant::now();
        // A client on CPUs no server worker uses spins whatever the number of threads,
        // and yields them to the other clients when its turn is over (see
        // `client_cpu_spin`); any other thread spins only with a slot.
        let (slot, spins) = match super::begin_client_wait(&mut start, true, || inner.poll(&mut out, 1) == 1) {
            Some((_, true)) => return got(&mut out),
            Some((c, false)) => (None, c.spin),
            None => {
                let slot = super::spin_slot_at(start);
                let spins = slot.is_some();
                (slot, spins)
            }
        };
        let end = deadline_from(start, timeout);
        let spin_end = start + if spins { inner.spin.min(timeout) } else { Duration::ZERO };
        // Spin: the clock is read only every few rounds; polling is a handful of loads.
        if spins {
            'spin: loop {
                for _ in 0..64 {
                    if inner.poll(&mut out, 1) == 1 {
                        super::spin_outcome(true);
                        return got(&mut out);
                    }
                    std::hint::spin_loop();
                }
                if Instant::now() >= spin_end {
                    break 'spin;
                }
            }
            super::spin_outcome(false);
        }
        drop(slot);
        // The CPU goes to others from here on, so a client's next wait begins a turn.
        super::end_turn();
        // A thread allowed to poll with yields does so for a while before it sleeps
        // (see `transport::set_yield_wait`): the other threads' turns are what the
        // reply needs time for.
        let yield_from = if spins { Instant::now() } else { start };
        let yield_end = super::yield_wait_end(yield_from).min(end);
        if yield_end > yield_from && super::poll_with_yields(yield_end, || inner.poll(&mut out, 1) == 1) {
            return got(&mut out);
        }
        let seq = word32(&inner.doorbell, 0);
        let waiters = word32(&inner.doorbell, DB_WAITERS);
        loop {
            let now = Instant::now();
            if now >= end {
                return Err(Error::Timeout(timeout, "a completion"));
            }
            waiters.fetch_add(1, Ordering::SeqCst);
            let s = seq.load(Ordering::SeqCst);
            if inner.poll(&mut out, 1) == 1 {
                waiters.fetch_sub(1, Ordering::SeqCst);
                return got(&mut out);
            }
            futex_wait(seq, s, (end - now).min(Duration::from_millis(100)));
            waiters.fetch_sub(1, Ordering::SeqCst);
            if inner.poll(&mut out, 1) == 1 {
                return got(&mut out);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Queue pair

// Two cache lines of its own: see "Cache lines" in the module docs.
#[repr(align(128))]
struct QpState {
    error: AtomicBool,
    reason: Mutex<Option<String>>,
    /// The peer will write nothing more into our rings.
    quiesced: AtomicBool,
    torn_down: AtomicBool,
}

impl QpState {
    fn mark_error(&self, why: &str) {
        let mut r = lock(&self.reason);
        if r.is_none() {
            *r = Some(why.to_string());
        }
        self.error.store(true, Ordering::Release);
    }

    fn is_error(&self) -> bool {
        self.error.load(Ordering::Acquire)
    }
}

struct RqLocal {
    posted: u64,
    polled: u64,
    /// Posted receives, oldest first: the work request and the rkey of its buffer (not
    /// the region itself: a clone per receive wrote a reference count on every post,
    /// and a region deregistered under a posted receive fails the SEND that reaches it,
    /// as a NIC's protection check does).
    wrs: VecDeque<(u64, u32)>,
}

/// The receive direction of a queue pair: our page, our posted receives.
// Two cache lines of its own: see "Cache lines" in the module docs.
#[repr(align(128))]
struct RecvSide {
    qp_num: u32,
    page: Arc<Mapping>,
    depth: u32,
    /// Mirror of `rq.polled` so an empty ring is seen without taking the lock.
    polled_hint: AtomicU64,
    rq: Mutex<RqLocal>,
    state: Arc<QpState>,
    flushed: AtomicBool,
}

impl RecvSide {
    /// Moves completions from the ring into `out`. Returns true once the queue pair is
    /// finished (flushed) and can be detached.
    fn drain(&self, out: &mut Vec<Completion>, max: usize) -> bool {
        if self.flushed.load(Ordering::Acquire) {
            return true;
        }
        let quiesced = self.state.quiesced.load(Ordering::Acquire);
        let k = self.polled_hint.load(Ordering::Acquire);
        let ready = word(&self.page, cq_slot(self.depth, k)).load(Ordering::Acquire) == k + 1;
        if !ready && !quiesced {
            return false;
        }
        let mut rq = lock(&self.rq);
        let mut taken = 0;
        while taken < max {
            let k = rq.polled;
            let off = cq_slot(self.depth, k);
            if word(&self.page, off).load(Ordering::Acquire) != k + 1 {
                break;
            }
            let w1 = word(&self.page, off + 8).load(Ordering::Relaxed);
            let w2 = word(&self.page, off + 16).load(Ordering::Relaxed);
            rq.polled += 1;
            self.polled_hint.store(rq.polled, Ordering::Release);
            word(&self.page, OFF_CQ_POLLED).store(rq.polled, Ordering::Release);
            let Some((wr_id, _rkey)) = rq.wrs.pop_front() else {
                self.state.mark_error("peer completed a receive that was never posted");
                continue;
            };
            let opcode = WcOpcode::from_code(w2 as u8).filter(|o| matches!(o, WcOpcode::Recv | WcOpcode::RecvWithImm));
            let status = WcStatus::from_code((w2 >> 8) as u8);
            let (Some(opcode), Some(status)) = (opcode, status) else {
                self.state.mark_error("peer wrote a malformed completion");
                out.push(Completion {
                    wr_id,
                    status: WcStatus::WrFlushError,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm: None,
                    qp_num: self.qp_num,
                });
                taken += 1;
                continue;
            };
            let imm = ((w2 >> 16) & 1 == 1).then_some((w1 >> 32) as u32);
            out.push(Completion { wr_id, status, opcode, byte_len: w1 as u32, imm, qp_num: self.qp_num });
            taken += 1;
        }
        if taken < max && quiesced {
            // The peer is gone and its last completion has been taken: flush the rest.
            while taken < max {
                let Some((wr_id, _)) = rq.wrs.pop_front() else { break };
                out.push(Completion {
                    wr_id,
                    status: WcStatus::WrFlushError,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm: None,
                    qp_num: self.qp_num,
                });
                taken += 1;
            }
            if rq.wrs.is_empty() {
                self.flushed.store(true, Ordering::Release);
                return true;
            }
        }
        false
    }
}

/// A peer region mapped into this process.
struct PeerRegion {
    slot: u32,
    addr: u64,
    len: u64,
    access: Access,
    mapping: Mapping,
    /// Offset of the region's first byte in `mapping`.
    base: u64,
}

impl PeerRegion {
    fn translate(&self, raddr: u64, len: u64) -> Option<u64> {
        let off = raddr.checked_sub(self.addr)?;
        (off.checked_add(len)? <= self.len).then_some(self.base + off)
    }
}

/// The send direction: the peer's page, doorbell and region table.
struct SendSide {
    peer_page: Arc<Mapping>,
    peer_depth: u32,
    peer_db: Mapping,
    peer_table: Arc<ReadOnlyWords>,
    rq_next: u64,
    cq_next: u64,
    /// Last known count of ring completions the peer has polled.
    cq_polled: u64,
    regions: HashMap<u32, PeerRegion>,
    /// Look-ups asked of the peer and not yet answered: rkey -> (request id, asked at).
    asking: HashMap<u32, (u64, Instant)>,
}

/// What an access to a peer region came to.
enum Reach<R> {
    /// It ran, with this result.
    Done(R),
    /// A remote access error (unknown rkey, out of bounds, no access, revoked).
    Refused,
    /// The rkey is being looked up: nothing happened yet; try again later.
    Asked,
}

/// What came back for an rkey look-up.
enum Heard {
    NotYet,
    Refused,
    /// The peer closed the connection without answering.
    Closed,
    Found(Resolved, File),
}

/// What sending an rkey look-up came to.
enum Asking {
    Sent(u64),
    /// It could not be sent (the peer reads none of our look-ups, so its socket is
    /// full, or another error): a remote access error.
    Refused,
    /// The connection is closing.
    Closed,
}

/// Where a peer region stands for a work request that needs it.
enum Lookup {
    /// Mapped, in the send side's regions under the rkey: go on. (Not a clone of it:
    /// the reference count's locked increment on every GET reply held about 2% of a
    /// 16-thread run's samples; why that line was slow is not measured.)
    Ready,
    /// No such region for us (or the peer did not answer in time): a remote access error.
    Refused,
    /// Asked of the peer, not answered yet: the work request waits in the backlog, and
    /// the poster goes on.
    Asked,
}

struct Pending {
    next: u64,
    answers: HashMap<u64, Answer>,
    closed: bool,
}

enum Answer {
    Waiting,
    NotFound,
    Found(Resolved, File),
}

struct Resolved {
    rkey: u32,
    slot: u32,
    access: Access,
    addr: u64,
    len: u64,
    file_off: u64,
}

// Two cache lines of its own: see "Cache lines" in the module docs.
#[repr(align(128))]
struct Conn {
    qp_num: u32,
    peer_qp_num: u32,
    /// Whether regions the peer hands over may be plain files (the connecting side
    /// trusts its server's pool file); an accepting side takes only files sealed
    /// against shrinking.
    trust_peer_files: bool,
    t: ShmTransport,
    sock: OwnedFd,
    /// The peer's page, for its copy count (read without the `send` lock).
    peer_copies: Arc<Mapping>,
    state: Arc<QpState>,
    recv: Arc<RecvSide>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    send: Mutex<SendSide>,
    pending: Mutex<Pending>,
    /// Work requests behind a SEND or WRITE_WITH_IMM that found no receive (RNR).
    backlog: Mutex<Backlog>,
    /// `backlog.active`, readable without the lock (one load per post).
    backlogged: AtomicBool,
    stats: StatCounters,
}

/// A queue pair's send queue while its head waits for a receive of the peer, or for
/// the answer to the look-up of an rkey it uses. The poster does not wait: the head
/// and everything posted behind it wait here, in order, and the RNR thread
/// ([`retry_stalled`]) runs them as receives and answers appear, or fails the head at
/// the RNR (or look-up) timeout and flushes the rest, as a NIC does.
struct Backlog {
    items: VecDeque<Deferred>,
    /// Set while the queue pair's posts must go to `items` (from the first RNR until
    /// the RNR thread finds `items` empty).
    active: bool,
    /// Whether the RNR thread has the head out of `items`, running it.
    head_out: bool,
    /// Bytes of inline SENDs held in `items`.
    bytes: usize,
}

/// Bytes of inline SENDs one queue pair's backlog holds at most (as tcp's send
/// backlog): with `sq_depth` requests of up to 16 MiB each, a peer that posts no
/// receives could otherwise cost gigabytes.
const BACKLOG_BYTES: usize = 64 << 20;

impl Backlog {
    fn held(d: &Deferred) -> usize {
        match &d.work {
            Work::TwoSided { src: OwnedSrc::Bytes(b), .. } => b.len(),
            _ => 0,
        }
    }

    fn push_back(&mut self, d: Deferred) {
        self.bytes += Self::held(&d);
        self.items.push_back(d);
    }

    /// Puts the head back (it still finds no receive).
    fn put_back(&mut self, d: Deferred) {
        self.bytes += Self::held(&d);
        self.items.push_front(d);
        self.head_out = false;
    }

    /// Takes the head out to run it.
    fn take_head(&mut self) -> Option<Deferred> {
        let d = self.items.pop_front()?;
        self.bytes -= Self::held(&d);
        self.head_out = true;
        Some(d)
    }

    fn drain(&mut self) -> Vec<Deferred> {
        self.bytes = 0;
        self.items.drain(..).collect()
    }

    /// Starts or ends the backlog: posts go to `items` while it is active, and
    /// `mirror` (the queue pair's lock-free copy of the flag) says so.
    fn set_active(&mut self, on: bool, mirror: &AtomicBool) {
        self.active = on;
        if !on {
            self.head_out = false;
        }
        mirror.store(on, Ordering::Release);
    }
}

/// A posted work request that waits in a [`Backlog`].
struct Deferred {
    wr_id: u64,
    opcode: WcOpcode,
    work: Work,
    /// The rkey whose look-up it last waited for, if any.
    asked: Option<u32>,
}

enum Work {
    /// A SEND (`write: None`) or WRITE_WITH_IMM, waiting for a receive since `since`:
    /// since it first reached the head of the queue (`None` before), as a NIC counts
    /// RNR retries from the first time it sends the message. It completes when placed
    /// only if `signaled`; a failure or a flush completes it either way.
    TwoSided { src: OwnedSrc, write: Option<(u64, u32, u32)>, signaled: bool, since: Option<Instant> },
    /// Any other work request, run when its turn comes (its errors complete it), and
    /// again while an rkey it needs is being looked up.
    Other(Later),
}

/// A work request other than SEND or WRITE_WITH_IMM, as it runs when its turn comes.
type Later = Box<dyn FnMut(&ShmQp) -> Result<Step> + Send>;

/// What running a work request other than SEND or WRITE_WITH_IMM came to.
enum Step {
    /// Done, or failed with its error completion.
    Done,
    /// The rkey it needs is being looked up; nothing happened yet.
    Asked(u32),
}

/// What running a work request from the backlog came to.
enum Ran {
    /// Done, or failed with its error completion.
    Done,
    /// A SEND or WRITE_WITH_IMM still finds no receive: it goes back.
    NoReceive(Deferred),
    /// An rkey it needs is still being looked up: it goes back.
    Asked(Deferred),
}

/// The local part of a waiting SEND or WRITE_WITH_IMM: the region stays registered
/// while the handle is held; inline bytes are copied.
enum OwnedSrc {
    Mr(Mr, u64, u32),
    Bytes(Vec<u8>),
}

impl OwnedSrc {
    fn of(src: &Src<'_>) -> OwnedSrc {
        match src {
            Src::Mr(mr, off, len) => OwnedSrc::Mr((*mr).clone(), *off, *len),
            Src::Bytes(b) => OwnedSrc::Bytes(b.to_vec()),
        }
    }

    fn borrow(&self) -> Src<'_> {
        match self {
            OwnedSrc::Mr(mr, off, len) => Src::Mr(mr, *off, *len),
            OwnedSrc::Bytes(b) => Src::Bytes(b),
        }
    }
}

/// Queue pairs with a backlog, for the RNR thread; `running` while it runs (`thread`
/// is its handle once it has one).
struct Stalled {
    conns: Vec<std::sync::Weak<Conn>>,
    running: bool,
    thread: Option<std::thread::Thread>,
}

static STALLED: Mutex<Stalled> = Mutex::new(Stalled { conns: Vec::new(), running: false, thread: None });

/// How often the RNR thread looks again at the receive queues its SENDs wait for (a
/// NIC's RNR NAK timer is 10 us to 655 ms; a sleep here takes 50 to 100 us).
const RNR_RETRY_EVERY: Duration = Duration::from_micros(50);

/// How often the RNR thread looks again when its queue pairs wait only for look-ups
/// (their answers wake it; this is the resolution of the look-up timeout).
const LOOKUP_RETRY_EVERY: Duration = Duration::from_millis(5);

/// What a stalled queue pair's backlog waits for after a retry.
enum Waits {
    /// Nothing: the backlog is empty, or was failed or flushed.
    Nothing,
    /// A receive at the peer (RNR).
    Receive,
    /// The answer to an rkey look-up.
    Lookup,
}

/// Hands `c` to the RNR thread, starting it if none runs.
fn stall(c: &Arc<Conn>) {
    let mut st = lock(&STALLED);
    st.conns.push(Arc::downgrade(c));
    if st.running {
        // It may be parked for a look-up's long wait; this queue pair may need a quick one.
        if let Some(t) = &st.thread {
            t.unpark();
        }
        return;
    }
    st.running = true;
    let started = std::thread::Builder::new().name("boomkv-shm-rnr".into()).spawn(retry_stalled);
    match &started {
        Ok(h) => st.thread = Some(h.thread().clone()),
        Err(_) => st.thread = None,
    }
    if let Err(e) = started {
        st.running = false;
        st.conns.clear();
        drop(st);
        // Nothing would ever retry the backlog: fail it now rather than hang it.
        c.flush_backlog(Some(&format!("no thread to retry a SEND without a receive (RNR): {e}")));
    }
}

/// The RNR thread: retries every stalled queue pair's backlog until none is left.
fn retry_stalled() {
    loop {
        let conns = {
            let mut st = lock(&STALLED);
            if st.conns.is_empty() {
                st.running = false;
                st.thread = None;
                return;
            }
            std::mem::take(&mut st.conns)
        };
        let mut receive = false;
        let still: Vec<_> = conns
            .into_iter()
            .filter(|w| match w.upgrade().map(|c| c.retry_backlog()) {
                Some(Waits::Receive) => {
                    receive = true;
                    true
                }
                Some(Waits::Lookup) => true,
                Some(Waits::Nothing) | None => false,
            })
            .collect();
        lock(&STALLED).conns.extend(still);
        // Woken early by an rkey look-up's answer (`wake_rnr_thread`) and by a queue pair
        // newly stalled (`stall`): while only look-ups are out, nothing else needs a look
        // sooner than their timeouts' resolution.
        std::thread::park_timeout(if receive { RNR_RETRY_EVERY } else { LOOKUP_RETRY_EVERY });
    }
}

/// Wakes the RNR thread, if one runs: a look-up it waits for has been answered.
fn wake_rnr_thread() {
    if let Some(t) = &lock(&STALLED).thread {
        t.unpark();
    }
}

impl CopyWatch for Conn {
    fn copies_started(&self) -> u64 {
        word(&self.peer_copies, OFF_COPIES_STARTED).load(Ordering::SeqCst)
    }

    fn copies_finished(&self) -> u64 {
        word(&self.peer_copies, OFF_COPIES_FINISHED).load(Ordering::Acquire)
    }

    fn stuck(&self) {
        self.fail("the peer held a copy open past a region's revocation", true);
    }
}

impl Conn {
    fn completion(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32) -> Completion {
        Completion { wr_id, status, opcode, byte_len, imm: None, qp_num: self.qp_num }
    }

    /// Error state, then tell the peer by closing the socket. The control thread sees
    /// the end of file and finishes the teardown. Call without holding `send`.
    fn fail(&self, why: &str, log: bool) {
        self.state.mark_error(why);
        if self.state.torn_down.swap(true, Ordering::AcqRel) {
            return;
        }
        if log {
            log_event(&format!("qp {} (peer qp {}): closing connection: {why}", self.qp_num, self.peer_qp_num));
        }
        // Taking the send lock waits out a post in progress: nothing reaches the peer
        // after this point.
        drop(lock(&self.send));
        let _ = rustix::net::shutdown(&self.sock, rustix::net::Shutdown::Both);
    }

    /// Sends the peer a look-up of `rkey`, without waiting: a peer that lets its control
    /// socket fill up (it reads none of our look-ups) must not hold the poster either.
    fn ask(&self, rkey: u32) -> Asking {
        let id = {
            let mut p = lock(&self.pending);
            if p.closed {
                return Asking::Closed;
            }
            let id = p.next;
            p.next += 1;
            p.answers.insert(id, Answer::Waiting);
            id
        };
        let mut msg = vec![MSG_RESOLVE];
        msg.extend_from_slice(&id.to_le_bytes());
        msg.extend_from_slice(&rkey.to_le_bytes());
        match send_msg_with(&self.sock, &msg, &[], SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
            Ok(()) => Asking::Sent(id),
            Err(e) => {
                lock(&self.pending).answers.remove(&id);
                use std::io::ErrorKind::{BrokenPipe, ConnectionReset, NotConnected};
                if matches!(e.kind(), BrokenPipe | ConnectionReset | NotConnected) {
                    return Asking::Closed;
                }
                log_event(&format!(
                    "qp {} (peer qp {}): cannot send an rkey look-up ({e}; a full socket means the peer reads none)",
                    self.qp_num, self.peer_qp_num
                ));
                Asking::Refused
            }
        }
    }

    /// The answer to look-up `id`, if it came. Never waits.
    fn answer(&self, id: u64) -> Heard {
        let mut p = lock(&self.pending);
        match p.answers.get(&id) {
            Some(Answer::Waiting) if p.closed => Heard::Closed,
            Some(Answer::Waiting) => Heard::NotYet,
            _ => match p.answers.remove(&id) {
                Some(Answer::Found(r, f)) => Heard::Found(r, f),
                _ => Heard::Refused,
            },
        }
    }

    /// Whether the peer answered the look-up of `rkey` (the one a work request waited
    /// for) with "no such region" before it closed.
    fn refused_lookup(&self, rkey: Option<u32>) -> bool {
        let Some(rkey) = rkey else { return false };
        let s = lock(&self.send);
        let p = lock(&self.pending);
        s.asking.get(&rkey).is_some_and(|(id, _)| matches!(p.answers.get(id), Some(Answer::NotFound)))
    }

    /// Forgets look-up `id` (timed out): a late answer is dropped.
    fn forget(&self, id: u64) {
        lock(&self.pending).answers.remove(&id);
    }

    /// The region behind `rkey`, never waiting for the peer: from the cache; else the
    /// answer to an earlier look-up, mapped; else a look-up is sent and the caller
    /// waits in the backlog. A peer that does not answer within the look-up timeout
    /// gets a refusal, which fails the work request with a remote access error (a NIC
    /// checks an rkey without asking anyone; a peer that never answers must not hold
    /// the posting thread, a server's worker, with every client it serves).
    fn lookup(&self, s: &mut SendSide, rkey: u32) -> Lookup {
        if s.regions.contains_key(&rkey) {
            return Lookup::Ready;
        }
        let Some(&(id, asked)) = s.asking.get(&rkey) else {
            return match self.ask(rkey) {
                Asking::Sent(id) => {
                    s.asking.insert(rkey, (id, Instant::now()));
                    Lookup::Asked
                }
                Asking::Refused => Lookup::Refused,
                // The connection is going to the error state, which flushes the request.
                Asking::Closed => Lookup::Asked,
            };
        };
        let answer = match self.answer(id) {
            Heard::Found(r, file) => Some((r, file)),
            Heard::Refused => None,
            // As above: the error state follows and flushes the request.
            Heard::Closed => return Lookup::Asked,
            Heard::NotYet if asked.elapsed() < self.t.inner.cfg.lookup_timeout => return Lookup::Asked,
            Heard::NotYet => {
                self.forget(id);
                log_event(&format!(
                    "qp {} (peer qp {}): the peer did not answer the look-up of rkey {rkey:#x} within {:?}",
                    self.qp_num, self.peer_qp_num, self.t.inner.cfg.lookup_timeout
                ));
                None
            }
        };
        s.asking.remove(&rkey);
        match answer.and_then(|(r, file)| self.map_region(rkey, r, file)) {
            Some(r) => {
                if s.regions.len() >= MAX_CACHED_REGIONS {
                    // Regions come and go (segments are granted and sealed); forget the old ones.
                    s.regions.clear();
                }
                s.regions.insert(rkey, r);
                Lookup::Ready
            }
            None => Lookup::Refused,
        }
    }

    /// Maps the region the peer's answer for `rkey` describes, after checking it.
    fn map_region(&self, rkey: u32, r: Resolved, file: File) -> Option<PeerRegion> {
        if r.rkey != rkey || r.slot >= super::region::SLOTS {
            return None;
        }
        if !self.trust_peer_files && !is_shrink_sealed(&file) {
            // A file the peer could shrink under our mapping would kill this process
            // with SIGBUS on the next copy: refuse it, and the connection with it.
            log_event(&format!(
                "qp {} (peer qp {}): the peer's region file for rkey {rkey:#x} is not sealed against shrinking",
                self.qp_num, self.peer_qp_num
            ));
            return None;
        }
        let flen = file_len(&file).ok()?;
        if r.file_off.checked_add(r.len)? > flen {
            return None;
        }
        let page = crate::pmem::map::page_size() as u64;
        let start = r.file_off / page * page;
        let map_len = (r.file_off + r.len - start).max(1);
        let mapping = Mapping::map_file(&file, start, map_len as usize, false).ok()?;
        Some(PeerRegion { slot: r.slot, addr: r.addr, len: r.len, access: r.access, mapping, base: r.file_off - start })
    }

    /// Copies between our `local` and the peer's `[raddr, raddr + len)` under `rkey`,
    /// checking `need`.
    #[allow(clippy::too_many_arguments)]
    fn one_sided(
        &self,
        s: &mut SendSide,
        rkey: u32,
        raddr: u64,
        len: u32,
        need: Access,
        local: (&Mapping, u64),
        to_peer: bool,
    ) -> Reach<bool> {
        self.on_peer_region(s, rkey, raddr, len as u64, need, |m, off| {
            if to_peer {
                local.0.copy_to(local.1, m, off, len as usize).is_ok()
            } else {
                m.copy_to(off, local.0, local.1, len as usize).is_ok()
            }
        })
    }

    /// Runs `f` on the peer's mapping at the offset of `[raddr, raddr + len)` under
    /// `rkey`, after the rkey, bounds and `need` checks, inside the copy guard (so a
    /// revocation waits for it).
    fn on_peer_region<R>(
        &self,
        s: &mut SendSide,
        rkey: u32,
        raddr: u64,
        len: u64,
        need: Access,
        f: impl FnOnce(&Mapping, u64) -> R,
    ) -> Reach<R> {
        match self.lookup(s, rkey) {
            Lookup::Ready => self.within(s, rkey, raddr, len, need, f).map_or(Reach::Refused, Reach::Done),
            Lookup::Refused => Reach::Refused,
            Lookup::Asked => Reach::Asked,
        }
    }

    /// Runs `f` on the peer's region under `rkey` (looked up: [`Lookup::Ready`]) at the
    /// offset of `[raddr, raddr + len)`, after the bounds and `need` checks, inside the
    /// copy guard. `None` is a remote access error.
    fn within<R>(
        &self,
        s: &mut SendSide,
        rkey: u32,
        raddr: u64,
        len: u64,
        need: Access,
        f: impl FnOnce(&Mapping, u64) -> R,
    ) -> Option<R> {
        let r = s.regions.get(&rkey)?;
        let off = r.translate(raddr, len).filter(|_| r.access.contains(need))?;
        let copies = self.copy_counters();
        if !peer_guard_enter(&s.peer_table, &copies, r.slot, rkey) {
            // Revoked: forget the mapping.
            s.regions.remove(&rkey);
            return None;
        }
        let out = f(&r.mapping, off);
        peer_guard_exit(&copies);
        Some(out)
    }

    /// Writes back the peer's `[raddr, raddr + len)` under `rkey` (needs REMOTE_WRITE)
    /// and fences.
    fn one_sided_flush(
        &self,
        s: &mut SendSide,
        rkey: u32,
        raddr: u64,
        len: u32,
        kind: crate::pmem::FlushKind,
    ) -> Reach<bool> {
        self.on_peer_region(s, rkey, raddr, len as u64, Access::REMOTE_WRITE, |m, off| {
            crate::pmem::persist_remote(m, kind, off, len as usize).is_ok()
        })
    }

    /// This side's copy counters, in its own page.
    fn copy_counters(&self) -> CopyCounters<'_> {
        CopyCounters {
            started: word(&self.recv.page, OFF_COPIES_STARTED),
            finished: word(&self.recv.page, OFF_COPIES_FINISHED),
        }
    }

    /// The next posted receive of the peer, if there is one (the caller waits in the
    /// backlog, not here): `(addr, len, rkey)`. It stays posted until [`Self::consume_recv`].
    fn peek_recv(&self, s: &SendSide) -> Option<(u64, u32, u32)> {
        let off = rq_slot(s.peer_depth, s.rq_next);
        if word(&s.peer_page, off).load(Ordering::Acquire) != s.rq_next + 1 {
            return None;
        }
        let addr = word(&s.peer_page, off + 8).load(Ordering::Relaxed);
        let lk = word(&s.peer_page, off + 16).load(Ordering::Relaxed);
        Some((addr, lk as u32, (lk >> 32) as u32))
    }

    /// Takes the receive [`Self::peek_recv`] saw.
    fn consume_recv(&self, s: &mut SendSide) {
        s.rq_next += 1;
        word(&s.peer_page, OFF_RQ_CONSUMED).store(s.rq_next, Ordering::Release);
    }

    /// Runs the backlog from its head until a SEND still finds no receive or an rkey is
    /// still being looked up (call again later) or the backlog is empty. A head past the
    /// RNR timeout fails the connection (a look-up has its own timeout, see
    /// [`Conn::lookup`]); the connection in the error state flushes what is left.
    fn retry_backlog(self: &Arc<Conn>) -> Waits {
        let qp = ShmQp { conn: self.clone(), owner: false };
        loop {
            let item = {
                let mut b = lock(&self.backlog);
                match b.take_head() {
                    Some(i) => i,
                    None => {
                        b.set_active(false, &self.backlogged);
                        return Waits::Nothing;
                    }
                }
            };
            if self.state.is_error() {
                // The head first, then the rest, in order.
                qp.stopped(&item);
                lock(&self.backlog).head_out = false;
                self.flush_backlog(None);
                return Waits::Nothing;
            }
            let mut item = match qp.run(item) {
                Ran::Done => {
                    lock(&self.backlog).head_out = false;
                    continue;
                }
                Ran::Asked(item) => {
                    if self.wait_again(item) {
                        return Waits::Lookup;
                    }
                    continue;
                }
                Ran::NoReceive(item) => item,
            };
            let Work::TwoSided { since, .. } = &mut item.work else { unreachable!("only a two-sided request waits") };
            if since.get_or_insert_with(Instant::now).elapsed() >= self.t.inner.cfg.rnr_timeout {
                let why = format!("no receive posted at the peer within {:?} (RNR)", self.t.inner.cfg.rnr_timeout);
                let _ = qp.error(item.wr_id, item.opcode, WcStatus::RnrRetryExceeded, why);
                lock(&self.backlog).head_out = false;
                self.flush_backlog(None);
                return Waits::Nothing;
            }
            if self.wait_again(item) {
                return Waits::Receive;
            }
        }
    }

    /// Puts the head back to wait; false if the connection went to the error state
    /// while it ran (the next round fails or flushes it, the head first).
    fn wait_again(&self, item: Deferred) -> bool {
        lock(&self.backlog).put_back(item);
        !self.state.is_error()
    }

    /// Completes everything in the backlog with a flush error (the connection is in the
    /// error state, or is put there with `why`).
    fn flush_backlog(&self, why: Option<&str>) {
        if let Some(why) = why {
            self.state.mark_error(why);
        }
        let items: Vec<Deferred> = {
            let mut b = lock(&self.backlog);
            if b.head_out {
                // The RNR thread is running the head: it sees the error state when that
                // returns and flushes then, the head first (flushing the others now would
                // complete them before the head).
                Vec::new()
            } else {
                b.set_active(false, &self.backlogged);
                b.drain()
            }
        };
        for d in items {
            self.send_cq.push(self.completion(d.wr_id, WcStatus::WrFlushError, d.opcode, 0));
        }
        if let Some(why) = why {
            self.fail(why, true);
        }
    }

    /// Writes a completion into the peer's ring and rings its doorbell.
    fn produce(&self, s: &mut SendSide, byte_len: u32, imm: Option<u32>, status: WcStatus) -> bool {
        if s.cq_next - s.cq_polled >= s.peer_depth as u64 {
            s.cq_polled = word(&s.peer_page, OFF_CQ_POLLED).load(Ordering::Acquire);
            if s.cq_next - s.cq_polled >= s.peer_depth as u64 {
                return false;
            }
        }
        let off = cq_slot(s.peer_depth, s.cq_next);
        let opcode = if imm.is_some() { WcOpcode::RecvWithImm } else { WcOpcode::Recv };
        word(&s.peer_page, off + 8).store(byte_len as u64 | (imm.unwrap_or(0) as u64) << 32, Ordering::Relaxed);
        word(&s.peer_page, off + 16).store(
            opcode.code() as u64 | (status.code() as u64) << 8 | (imm.is_some() as u64) << 16,
            Ordering::Relaxed,
        );
        word(&s.peer_page, off).store(s.cq_next + 1, Ordering::Release);
        s.cq_next += 1;
        ring_doorbell(&s.peer_db);
        true
    }
}

/// Serves the control socket: answers rkey look-ups, delivers answers to ours, and on
/// end of file finishes the teardown.
fn control_thread(c: Arc<Conn>) {
    let why = loop {
        let msg = match recv_msg(&c.sock) {
            Ok(Some(m)) => m,
            Ok(None) => break None,
            Err(e) => break Some(e),
        };
        let mut r = Rd(&msg.bytes);
        let res = match r.u8() {
            Ok(MSG_RESOLVE) => {
                c.t.held_lookup(&c);
                answer_resolve(&c, &mut r)
            }
            Ok(MSG_RESOLVED) => take_resolved(&c, &mut r, msg.files),
            Ok(t) => Err(format!("unknown control message type {t}")),
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            break Some(e);
        }
    };
    lock(&c.pending).closed = true;
    let orderly = why.is_none();
    c.fail(
        why.as_deref().unwrap_or("peer closed the connection"),
        !orderly && !c.state.torn_down.load(Ordering::Acquire),
    );
    c.state.quiesced.store(true, Ordering::Release);
    c.recv_cq.kick();
    c.send_cq.kick();
}

fn answer_resolve(c: &Conn, r: &mut Rd<'_>) -> std::result::Result<(), String> {
    let id = r.u64()?;
    let rkey = r.u32()?;
    let mut reply = vec![MSG_RESOLVED];
    reply.extend_from_slice(&id.to_le_bytes());
    // Only regions a peer may touch at all, and only through the queue pair they are
    // bound to: never a local-only buffer (staging, someone else's receive queue), never
    // another client's grant.
    // A receive buffer posted on this queue pair is fair game too: the sender of a SEND
    // copies into it.
    let posted_here = || lock(&c.recv.rq).wrs.iter().any(|&(_, k)| k == rkey);
    let info = c.t.inner.pd.lookup(rkey).filter(|i| {
        i.file.is_some()
            && i.reachable_from(c.qp_num)
            && (i.access.contains(Access::REMOTE_READ) || i.access.contains(Access::REMOTE_WRITE) || posted_here())
    });
    let sent = match &info {
        Some(i) => {
            reply.push(0);
            reply.extend_from_slice(&i.rkey.to_le_bytes());
            reply.extend_from_slice(&i.slot.to_le_bytes());
            reply.extend_from_slice(&i.access.bits().to_le_bytes());
            reply.extend_from_slice(&i.addr.to_le_bytes());
            reply.extend_from_slice(&i.len.to_le_bytes());
            reply.extend_from_slice(&i.map_off.to_le_bytes());
            match &i.file {
                Some(f) => send_msg(&c.sock, &reply, &[f]),
                None => Ok(()),
            }
        }
        None => {
            // The buffer of a receive posted here whose region was deregistered under it
            // is this side's misuse, not the peer's. Counted before the answer goes.
            let own = posted_here();
            if !own {
                c.t.inner.pd.count_violation();
            }
            reply.push(1);
            let _ = send_msg(&c.sock, &reply, &[]);
            // The connection closes (logged by the caller).
            return Err(if own {
                format!(
                    "local protection error: rkey {rkey:#x} of a posted receive names a region deregistered under it"
                )
            } else {
                format!("remote access error: the peer asked for rkey {rkey:#x}, which names no region it may use")
            });
        }
    };
    sent.map_err(|e| format!("answering an rkey look-up: {e}"))
}

fn take_resolved(c: &Conn, r: &mut Rd<'_>, files: Vec<File>) -> std::result::Result<(), String> {
    let id = r.u64()?;
    let status = r.u8()?;
    let answer = if status == 0 {
        let rkey = r.u32()?;
        let slot = r.u32()?;
        let access = Access::from_bits(r.u32()?);
        let addr = r.u64()?;
        let len = r.u64()?;
        let file_off = r.u64()?;
        let file = files.into_iter().next().ok_or("rkey answer without its file")?;
        Answer::Found(Resolved { rkey, slot, access, addr, len, file_off }, file)
    } else {
        Answer::NotFound
    };
    let mut p = lock(&c.pending);
    if let Some(slot) = p.answers.get_mut(&id) {
        *slot = answer;
        drop(p);
        // The work request that asked waits in the backlog.
        wake_rnr_thread();
    }
    Ok(())
}

/// A queue pair of the shm backend. Dropping it closes the connection.
pub struct ShmQp {
    conn: Arc<Conn>,
    /// The application's handle (closes the connection when dropped), not the RNR
    /// thread's.
    owner: bool,
}

impl std::fmt::Debug for ShmQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmQp").field("qp_num", &self.conn.qp_num).field("peer", &self.conn.peer_qp_num).finish()
    }
}

impl Drop for ShmQp {
    fn drop(&mut self) {
        if self.owner {
            self.conn.fail("closed locally", false);
            // The RNR thread holds only a weak handle: what waits completes now.
            self.conn.flush_backlog(None);
        }
    }
}

/// What a SEND or WRITE_WITH_IMM came to.
enum Sent {
    /// Placed (and completed, if signaled).
    Placed,
    /// Failed with its error completion (or stopped by the connection's error state,
    /// whose flush completes it).
    Failed,
    /// No receive posted at the peer yet: nothing happened.
    NoReceive,
    /// The rkey it needs is being looked up: nothing happened.
    Asked(u32),
}

/// The local part of a send-side work request.
#[derive(Clone)]
enum Src<'a> {
    Mr(&'a Mr, u64, u32),
    Bytes(&'a [u8]),
}

impl ShmQp {
    /// A WRITE (`write`) or READ: checks the local region, copies to or from the peer's
    /// region after its rkey, bounds and access checks, and completes (READs always signaled).
    #[allow(clippy::too_many_arguments)]
    fn one_sided_op(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        write: bool,
        signaled: bool,
    ) -> Result<Step> {
        self.check_open()?;
        super::check_len(len)?;
        let c = &self.conn;
        let (op, name, local, remote) = if write {
            (WcOpcode::Write, "WRITE", Access::NONE, Access::REMOTE_WRITE)
        } else {
            (WcOpcode::Read, "READ", Access::LOCAL_WRITE, Access::REMOTE_READ)
        };
        let Ok(loff) = mr.check_local(c.t.inner.pd.id, off, len, local) else {
            let what = if write {
                "WRITE source outside its region or not ours"
            } else {
                "READ destination outside its region or not LOCAL_WRITE"
            };
            let why = format!("local protection error: {what}");
            return self.error(wr_id, op, WcStatus::LocalProtectionError, why).map(|()| Step::Done);
        };
        let r = self
            .on_send_side(|c, s| c.one_sided(s, rkey, remote_addr, len, remote, (&mr.info().mapping, loff), write))?;
        match r {
            Reach::Asked => return Ok(Step::Asked(rkey)),
            Reach::Done(true) => self.complete(signaled, wr_id, op, len),
            Reach::Done(false) | Reach::Refused => {
                let why = format!("remote access error: {name} of {len} bytes at {remote_addr:#x} with rkey {rkey:#x}");
                self.error(wr_id, op, WcStatus::RemoteAccessError, why)?;
            }
        }
        Ok(Step::Done)
    }

    /// An atomic on the peer's 8-byte word: `op` runs on it (real atomics on the shared
    /// mapping), and its previous value lands at `off` of `mr`.
    #[allow(clippy::too_many_arguments)]
    fn atomic_op(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: u64,
        remote_addr: u64,
        rkey: u32,
        opcode: WcOpcode,
        op: impl FnOnce(&AtomicU64) -> u64,
    ) -> Result<Step> {
        self.check_open()?;
        super::check_atomic_addr(remote_addr)?;
        let c = &self.conn;
        let Ok(loff) = mr.check_local(c.t.inner.pd.id, off, 8, Access::LOCAL_WRITE) else {
            let why = "local protection error: atomic result outside its region or not LOCAL_WRITE";
            return self.error(wr_id, opcode, WcStatus::LocalProtectionError, why.into()).map(|()| Step::Done);
        };
        let r = self.on_send_side(|c, s| {
            c.on_peer_region(s, rkey, remote_addr, 8, Access::REMOTE_ATOMIC, |m, roff| m.atomic_u64(roff).map(op))
        })?;
        let status = match r {
            Reach::Asked => return Ok(Step::Asked(rkey)),
            Reach::Done(Ok(old)) => {
                if mr.info().mapping.write(loff, &old.to_le_bytes()).is_err() {
                    WcStatus::LocalProtectionError
                } else {
                    self.complete(true, wr_id, opcode, 8);
                    return Ok(Step::Done);
                }
            }
            // In bounds and allowed, but not an aligned word.
            Reach::Done(Err(_)) => WcStatus::RemoteInvalidRequest,
            Reach::Refused => WcStatus::RemoteAccessError,
        };
        let why = format!("{status}: atomic on 8 bytes at {remote_addr:#x} with rkey {rkey:#x}");
        self.error(wr_id, opcode, status, why).map(|()| Step::Done)
    }

    /// Runs `f` with the send side locked (so nothing reaches the peer after a failure
    /// tears the connection down), unless the connection is in the error state.
    fn on_send_side<R>(&self, f: impl FnOnce(&Conn, &mut SendSide) -> R) -> Result<R> {
        let c = &self.conn;
        let mut s = lock(&c.send);
        if c.state.is_error() {
            drop(s);
            return Err(self.error_state());
        }
        Ok(f(c, &mut s))
    }

    fn check_open(&self) -> Result<()> {
        if self.conn.state.is_error() {
            return Err(self.error_state());
        }
        Ok(())
    }

    fn error_state(&self) -> Error {
        let why = lock(&self.conn.state.reason).clone().unwrap_or_default();
        Error::Transport(format!("qp {} is in the error state: {why}", self.conn.qp_num))
    }

    fn complete(&self, signaled: bool, wr_id: u64, opcode: WcOpcode, len: u32) {
        if signaled {
            self.conn.send_cq.push(self.conn.completion(wr_id, WcStatus::Success, opcode, len));
        }
    }

    /// Fails a request: error state first, then the error completion, then teardown.
    fn error(&self, wr_id: u64, opcode: WcOpcode, status: WcStatus, why: String) -> Result<()> {
        let c = &self.conn;
        c.state.mark_error(&why);
        c.send_cq.push(c.completion(wr_id, status, opcode, 0));
        c.fail(&why, true);
        Ok(())
    }

    /// SENDs `len` bytes of `src`, completing it locally only if `signaled` or it fails.
    fn send(&self, wr_id: u64, src: Src<'_>, len: usize, signaled: bool) -> Result<()> {
        self.check_open()?;
        super::check_len(u32::try_from(len).map_err(|_| Error::invalid("message too large"))?)?;
        self.conn.stats.sends.fetch_add(1, Ordering::Relaxed);
        self.post_two_sided(wr_id, src, None, signaled, false).map(drop)
    }

    /// WRITE_WITH_IMM of `src` (region, offset, length) to `(remote_addr, rkey, imm)`,
    /// signaled; with `eager`, true when it was done at the post (no completion follows).
    fn write_imm(&self, wr_id: u64, src: (&Mr, u64, u32), to: (u64, u32, u32), eager: bool) -> Result<bool> {
        self.check_open()?;
        super::check_len(src.2)?;
        self.conn.stats.writes_imm.fetch_add(1, Ordering::Relaxed);
        self.post_two_sided(wr_id, Src::Mr(src.0, src.1, src.2), Some(to), true, eager)
    }

    /// SEND and WRITE_WITH_IMM, unless a backlog holds earlier work requests: then it
    /// waits behind them. Without a receive at the peer it starts the backlog. With
    /// `eager`, a request placed before this returns completes nothing (the caller is
    /// told so by the `true` returned), and one that has to wait completes as
    /// `signaled` says.
    fn post_two_sided(
        &self,
        wr_id: u64,
        src: Src<'_>,
        write: Option<(u64, u32, u32)>,
        signaled: bool,
        eager: bool,
    ) -> Result<bool> {
        let opcode = if write.is_some() { WcOpcode::Write } else { WcOpcode::Send };
        let waiting = |since, asked| Deferred {
            wr_id,
            opcode,
            // One that waits is never done at the post: it completes even when eager.
            work: Work::TwoSided { src: OwnedSrc::of(&src), write, signaled: signaled || eager, since },
            asked,
        };
        if self.queued(|| waiting(None, None))? {
            return Ok(false);
        }
        match self.two_sided(wr_id, src.clone(), write, signaled && !eager)? {
            Sent::Placed => return Ok(eager),
            Sent::Failed => {}
            // An RNR wait counts from now; a look-up has a clock of its own.
            Sent::NoReceive => self.start_backlog(waiting(Some(Instant::now()), None)),
            Sent::Asked(k) => self.start_backlog(waiting(None, Some(k))),
        }
        Ok(false)
    }

    /// Queues the work request `make` builds behind a backlog if the queue pair has
    /// one (a full one refuses it); false when it has none and the request runs now.
    fn queued(&self, make: impl FnOnce() -> Deferred) -> Result<bool> {
        if !self.conn.backlogged.load(Ordering::Acquire) {
            return Ok(false);
        }
        let mut b = lock(&self.conn.backlog);
        if !b.active {
            return Ok(false);
        }
        let d = make();
        self.backlog_room(&b, Backlog::held(&d))?;
        b.push_back(d);
        Ok(true)
    }

    /// Any other work request: runs `now` unless a backlog holds earlier work requests;
    /// then `later` waits behind them.
    fn post_other(
        &self,
        wr_id: u64,
        opcode: WcOpcode,
        now: impl FnOnce(&ShmQp) -> Result<Step>,
        later: impl Fn() -> Later,
    ) -> Result<()> {
        if self.queued(|| Deferred { wr_id, opcode, work: Work::Other(later()), asked: None })? {
            return Ok(());
        }
        if let Step::Asked(k) = now(self)? {
            self.start_backlog(Deferred { wr_id, opcode, work: Work::Other(later()), asked: Some(k) });
        }
        Ok(())
    }

    /// Starts the backlog with `item`, which could not run now, and hands the queue
    /// pair to the RNR thread.
    fn start_backlog(&self, item: Deferred) {
        {
            let mut b = lock(&self.conn.backlog);
            b.push_back(item);
            b.set_active(true, &self.conn.backlogged);
        }
        stall(&self.conn);
    }

    /// A WRITE (`write`) or READ, in its turn (see [`Self::post_other`]).
    #[allow(clippy::too_many_arguments)]
    fn post_one_sided(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        write: bool,
        signaled: bool,
    ) -> Result<()> {
        self.check_open()?;
        super::check_len(len)?;
        let op = if write { WcOpcode::Write } else { WcOpcode::Read };
        self.post_other(
            wr_id,
            op,
            |qp| qp.one_sided_op(wr_id, mr, off, len, remote_addr, rkey, write, signaled),
            || {
                let mr = mr.clone();
                Box::new(move |qp| qp.one_sided_op(wr_id, &mr, off, len, remote_addr, rkey, write, signaled))
            },
        )
    }

    /// A full send queue refuses the post, as verbs does (`sq_depth` work requests wait
    /// at most), so a peer that never posts a receive costs this side bounded memory.
    fn backlog_room(&self, b: &Backlog, inline: usize) -> Result<()> {
        let depth = self.conn.t.inner.cfg.sq_depth as usize;
        if b.items.len() + usize::from(b.head_out) >= depth {
            return Err(Error::Transport(format!(
                "qp {}: send queue full ({depth} work requests wait for a receive at the peer)",
                self.conn.qp_num
            )));
        }
        if b.bytes + inline > BACKLOG_BYTES {
            return Err(Error::Transport(format!(
                "qp {}: {} bytes of SENDs wait for a receive at the peer already; try again later",
                self.conn.qp_num, b.bytes
            )));
        }
        Ok(())
    }

    /// Runs a work request from the backlog; gives it back if it still finds no receive.
    fn run(&self, mut d: Deferred) -> Ran {
        let done = match &mut d.work {
            Work::TwoSided { src, write, signaled, .. } => {
                match self.two_sided(d.wr_id, src.borrow(), *write, *signaled) {
                    Ok(Sent::NoReceive) => return Ran::NoReceive(d),
                    Ok(Sent::Asked(k)) => {
                        d.asked = Some(k);
                        return Ran::Asked(d);
                    }
                    Ok(Sent::Placed | Sent::Failed) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Work::Other(f) => match f(self) {
                Ok(Step::Asked(k)) => {
                    d.asked = Some(k);
                    return Ran::Asked(d);
                }
                Ok(Step::Done) => Ok(()),
                Err(e) => Err(e),
            },
        };
        if done.is_err() {
            // Every argument was checked before the request was queued: only a
            // connection in the error state refuses it now (seen here rather than by the
            // RNR thread's check when it came between the two).
            self.stopped(&d);
        }
        Ran::Done
    }

    /// Completes a queued request that the connection's error state stops. If the peer
    /// refused the rkey it waited for, then closed (as a peer does after a remote
    /// access error), it fails as it would have had the refusal come first: a remote
    /// access error (a SEND's, into a receive buffer the peer does not let it use, a
    /// remote invalid request), as [`Self::two_sided`] and [`Self::one_sided_op`] fail
    /// it. Any other is flushed.
    fn stopped(&self, d: &Deferred) {
        if !self.conn.refused_lookup(d.asked) {
            self.conn.send_cq.push(self.conn.completion(d.wr_id, WcStatus::WrFlushError, d.opcode, 0));
            return;
        }
        let (status, why) = match d.opcode {
            WcOpcode::Send => (WcStatus::RemoteInvalidRequest, "peer receive buffer unusable"),
            _ => (WcStatus::RemoteAccessError, "remote access error: the peer knows no region for the rkey"),
        };
        let _ = self.error(d.wr_id, d.opcode, status, why.to_string());
    }

    /// SEND and WRITE_WITH_IMM: consume a receive of the peer, place the data, complete
    /// (unless `signaled` is false: then only a failure completes).
    /// Without a receive posted it does nothing and says so.
    fn two_sided(&self, wr_id: u64, src: Src<'_>, write: Option<(u64, u32, u32)>, signaled: bool) -> Result<Sent> {
        let c = &self.conn;
        let opcode = if write.is_some() { WcOpcode::Write } else { WcOpcode::Send };
        let local = match &src {
            Src::Mr(mr, off, len) => match mr.check_local(c.t.inner.pd.id, *off, *len, Access::NONE) {
                Ok(o) => Some((&*mr.info().mapping, o, *len)),
                Err(()) => {
                    return self
                        .error(
                            wr_id,
                            opcode,
                            WcStatus::LocalProtectionError,
                            "local protection error: source buffer outside its region or not ours".into(),
                        )
                        .map(|()| Sent::Failed)
                }
            },
            _ => None,
        };
        let len = match (&src, &local) {
            (Src::Bytes(b), _) => b.len() as u32,
            (_, Some(l)) => l.2,
            _ => 0,
        };
        let mut s = lock(&c.send);
        if c.state.is_error() {
            drop(s);
            return self.check_open().map(|()| Sent::Failed);
        }
        let refused_write = |waddr: u64, wkey: u32| {
            let why = format!("remote access error: WRITE of {len} bytes at {waddr:#x} with rkey {wkey:#x}");
            self.error(wr_id, opcode, WcStatus::RemoteAccessError, why).map(|()| Sent::Failed)
        };
        // The region the data goes to is looked up before a receive is consumed: while
        // the look-up is out the request waits in the backlog and the receive stays
        // posted; a refused WRITE_WITH_IMM consumes none.
        if let Some((waddr, wkey, _)) = write {
            match c.lookup(&mut s, wkey) {
                Lookup::Asked => return Ok(Sent::Asked(wkey)),
                Lookup::Ready => {}
                Lookup::Refused => {
                    drop(s);
                    return refused_write(waddr, wkey);
                }
            }
        }
        let Some((raddr, rlen, rkey)) = c.peek_recv(&s) else {
            return Ok(Sent::NoReceive);
        };
        // A SEND's target is the receive buffer just peeked (a WRITE_WITH_IMM has its
        // own, looked up above). One the peer refused is not mapped: `place` fails it.
        if write.is_none() {
            if let Lookup::Asked = c.lookup(&mut s, rkey) {
                return Ok(Sent::Asked(rkey));
            }
        }
        c.consume_recv(&mut s);
        // The data into the target region (looked up above; `within` finds no region
        // for an rkey that was refused): a WRITE into the client's region, a SEND into
        // the peer's receive buffer.
        let place = |s: &mut SendSide, key: u32, addr: u64, need: Access| -> bool {
            c.within(s, key, addr, len as u64, need, |m, off| match (&src, &local) {
                (Src::Bytes(b), _) => m.write(off, b).is_ok(),
                (_, Some((lm, lo, _))) => lm.copy_to(*lo, m, off, len as usize).is_ok(),
                _ => false,
            })
            .unwrap_or(false)
        };
        if let Some((waddr, wkey, imm)) = write {
            if !place(&mut s, wkey, waddr, Access::REMOTE_WRITE) {
                // The receive is consumed but the message was refused; the peer flushes it.
                drop(s);
                return refused_write(waddr, wkey);
            }
            let ok = c.produce(&mut s, len, Some(imm), WcStatus::Success);
            drop(s);
            if !ok {
                return self
                    .error(wr_id, opcode, WcStatus::RemoteInvalidRequest, "peer completion ring overrun".into())
                    .map(|()| Sent::Failed);
            }
            self.complete(signaled, wr_id, opcode, len);
            return Ok(Sent::Placed);
        }
        // SEND: copy into the peer's receive buffer.
        if len > rlen {
            c.produce(&mut s, len, None, WcStatus::LocalLengthError);
            drop(s);
            return self
                .error(
                    wr_id,
                    opcode,
                    WcStatus::RemoteInvalidRequest,
                    format!("SEND of {len} bytes into a {rlen}-byte receive buffer"),
                )
                .map(|()| Sent::Failed);
        }
        let placed = place(&mut s, rkey, raddr, Access::LOCAL_WRITE);
        let status = if placed { WcStatus::Success } else { WcStatus::LocalProtectionError };
        let ok = c.produce(&mut s, len, None, status);
        drop(s);
        if !placed || !ok {
            return self
                .error(wr_id, opcode, WcStatus::RemoteInvalidRequest, "peer receive buffer unusable".into())
                .map(|()| Sent::Failed);
        }
        self.complete(signaled, wr_id, opcode, len);
        Ok(Sent::Placed)
    }

    fn flush_op(&self, wr_id: u64, remote_addr: u64, rkey: u32, len: u32) -> Result<Step> {
        let kind = crate::pmem::FlushKind::detect();
        match self.on_send_side(|c, s| c.one_sided_flush(s, rkey, remote_addr, len, kind))? {
            Reach::Asked => return Ok(Step::Asked(rkey)),
            Reach::Done(true) => self.complete(true, wr_id, WcOpcode::Flush, len),
            Reach::Done(false) | Reach::Refused => {
                let why = format!("remote access error: FLUSH of {len} bytes at {remote_addr:#x} with rkey {rkey:#x}");
                self.error(wr_id, WcOpcode::Flush, WcStatus::RemoteAccessError, why)?;
            }
        }
        Ok(Step::Done)
    }
}

impl QueuePair for ShmQp {
    type Mr = Mr;

    fn qp_num(&self) -> u32 {
        self.conn.qp_num
    }

    fn peer_qp_num(&self) -> u32 {
        self.conn.peer_qp_num
    }

    fn post_send(&self, wr_id: u64, mr: &Mr, off: u64, len: u32) -> Result<()> {
        self.send(wr_id, Src::Mr(mr, off, len), len as usize, true)
    }

    fn post_send_bytes(&self, wr_id: u64, data: &[u8]) -> Result<()> {
        self.send(wr_id, Src::Bytes(data), data.len(), true)
    }

    fn post_send_bytes_unsignaled(&self, wr_id: u64, data: &[u8]) -> Result<()> {
        self.send(wr_id, Src::Bytes(data), data.len(), false)
    }

    fn post_recv(&self, wr_id: u64, mr: &Mr, off: u64, len: u32) -> Result<()> {
        self.check_open()?;
        let c = &self.conn;
        let rs = &c.recv;
        if mr.check_local(c.t.inner.pd.id, off, len, Access::LOCAL_WRITE).is_err() {
            c.state.mark_error("local protection error: receive buffer");
            c.recv_cq.push(c.completion(wr_id, WcStatus::LocalProtectionError, WcOpcode::Recv, 0));
            c.fail("local protection error: receive buffer outside its region, not ours, or not LOCAL_WRITE", true);
            return Ok(());
        }
        if mr.info().file.is_none() {
            return Err(Error::invalid(
                "shm transport: a receive buffer must be file-backed (alloc_mr, or register with a file)",
            ));
        }
        let mut rq = lock(&rs.rq);
        if rq.posted - rq.polled >= rs.depth as u64 {
            let consumed = word(&rs.page, OFF_RQ_CONSUMED).load(Ordering::Acquire);
            if rq.posted.saturating_sub(consumed) >= rs.depth as u64 {
                return Err(Error::Transport(format!("qp {}: receive queue full ({})", c.qp_num, rs.depth)));
            }
        }
        let slot = rq_slot(rs.depth, rq.posted);
        let addr = mr.remote().addr + off;
        word(&rs.page, slot + 8).store(addr, Ordering::Relaxed);
        word(&rs.page, slot + 16).store(len as u64 | (mr.rkey() as u64) << 32, Ordering::Relaxed);
        word(&rs.page, slot).store(rq.posted + 1, Ordering::Release);
        rq.posted += 1;
        rq.wrs.push_back((wr_id, mr.rkey()));
        drop(rq);
        c.stats.recvs.fetch_add(1, Ordering::Relaxed);
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
        self.conn.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.post_one_sided(wr_id, mr, off, len, remote_addr, rkey, true, signaled)
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
        self.write_imm(wr_id, (mr, off, len), (remote_addr, rkey, imm), false).map(drop)
    }

    fn post_write_imm_eager(
        &self,
        wr_id: u64,
        mr: &Mr,
        off: u64,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<super::Finished> {
        let now = self.write_imm(wr_id, (mr, off, len), (remote_addr, rkey, imm), true)?;
        Ok(if now { super::Finished::Now } else { super::Finished::Later })
    }

    fn post_read(&self, wr_id: u64, mr: &Mr, off: u64, len: u32, remote_addr: u64, rkey: u32) -> Result<()> {
        self.conn.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.post_one_sided(wr_id, mr, off, len, remote_addr, rkey, false, true)
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
        self.conn.stats.atomics.fetch_add(1, Ordering::Relaxed);
        self.check_open()?;
        super::check_atomic_addr(remote_addr)?;
        let cas = move |w: &AtomicU64| match w.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        };
        self.post_other(
            wr_id,
            WcOpcode::CompareSwap,
            |qp| qp.atomic_op(wr_id, mr, off, remote_addr, rkey, WcOpcode::CompareSwap, cas),
            || {
                let mr = mr.clone();
                Box::new(move |qp| qp.atomic_op(wr_id, &mr, off, remote_addr, rkey, WcOpcode::CompareSwap, cas))
            },
        )
    }

    fn post_fetch_add(&self, wr_id: u64, mr: &Mr, off: u64, remote_addr: u64, rkey: u32, add: u64) -> Result<()> {
        self.conn.stats.atomics.fetch_add(1, Ordering::Relaxed);
        self.check_open()?;
        super::check_atomic_addr(remote_addr)?;
        let faa = move |w: &AtomicU64| w.fetch_add(add, Ordering::AcqRel);
        self.post_other(
            wr_id,
            WcOpcode::FetchAdd,
            |qp| qp.atomic_op(wr_id, mr, off, remote_addr, rkey, WcOpcode::FetchAdd, faa),
            || {
                let mr = mr.clone();
                Box::new(move |qp| qp.atomic_op(wr_id, &mr, off, remote_addr, rkey, WcOpcode::FetchAdd, faa))
            },
        )
    }

    /// The initiator has the target's region mapped: it writes the lines back itself,
    /// with the CPU's best write-back instruction and a fence (every WRITE before this
    /// FLUSH was a copy this thread finished already).
    fn post_flush(&self, wr_id: u64, remote_addr: u64, rkey: u32, len: u32) -> Result<()> {
        self.check_open()?;
        self.conn.stats.flushes.fetch_add(1, Ordering::Relaxed);
        self.post_other(
            wr_id,
            WcOpcode::Flush,
            |qp| qp.flush_op(wr_id, remote_addr, rkey, len),
            || Box::new(move |qp| qp.flush_op(wr_id, remote_addr, rkey, len)),
        )
    }

    fn is_error(&self) -> bool {
        self.conn.state.is_error()
    }

    fn error_reason(&self) -> Option<String> {
        lock(&self.conn.state.reason).clone()
    }

    fn stats(&self) -> QpStats {
        self.conn.stats.snapshot()
    }

    fn close(&self) {
        self.conn.fail("closed locally", false);
        self.conn.flush_backlog(None);
    }
}

/// True when `p` can be used as an shm endpoint path (for tests and tools).
pub fn socket_path_ok(p: &Path) -> bool {
    p.as_os_str().len() < 100
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::conformance;

    fn make() -> ShmTransport {
        ShmTransport::with_config(conformance::test_config()).unwrap()
    }

    fn ep() -> Endpoint {
        static N: AtomicU64 = AtomicU64::new(0);
        // Straight in the temp directory, not in a directory of their own: the listener
        // removes its socket, and a directory would outlive the test process.
        let n = N.fetch_add(1, Ordering::Relaxed);
        let name = format!("boomkv-shm-test-{}-{n}.sock", std::process::id());
        Endpoint::Shm(std::env::temp_dir().join(name))
    }

    crate::conformance_suite!(make, ep);

    /// Listening where a file that is not a socket is (the pool, given by mistake) is
    /// refused, and the file stays (a socket left by a dead server is replaced: see
    /// `stale_socket_file_is_replaced_and_live_one_is_refused`).
    #[test]
    fn listening_never_deletes_a_file_that_is_not_a_socket() {
        let dir = tempfile::tempdir().unwrap();
        let t = make();
        for (name, make_it) in [("pool", true), ("a-dir", false)] {
            let path = dir.path().join(name);
            if make_it {
                std::fs::write(&path, b"acknowledged data").unwrap();
            } else {
                std::fs::create_dir(&path).unwrap();
            }
            let e = t.listen(&Endpoint::Shm(path.clone())).err().expect("refused");
            assert!(e.to_string().contains("is not a socket"), "{e}");
            assert!(path.exists(), "{name} is still there");
        }
        assert_eq!(std::fs::read(dir.path().join("pool")).unwrap(), b"acknowledged data");
    }

    /// The next completion of `cq` is work request `wr` with `status`.
    fn expect(cq: &ShmCq, wr: u64, status: WcStatus) {
        let c = cq.wait(conformance::T).unwrap();
        assert_eq!((c.wr_id, c.status), (wr, status), "{c:?}");
    }

    /// A client on CPUs of its own spins in its waits, whatever the number of threads
    /// (`transport::client_cpu_spin`); a completion that comes long after its spin and
    /// its yields is still taken (it sleeps until the peer's doorbell), and a wait with
    /// none ends at its timeout, neither sooner nor much later.
    #[test]
    fn a_client_spinning_on_its_own_cpu_takes_late_completions_and_times_out() {
        let p = conformance::pair(make, ep);
        let conformance::Pair { sqp, cqp, cmr, c_recv, .. } = &p;
        let (waiting, waits) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(move || {
                crate::transport::set_yield_wait(true);
                let t = Instant::now();
                let e = c_recv.wait(Duration::from_millis(50)).expect_err("nothing came");
                assert!(matches!(e, Error::Timeout(..)), "{e}");
                assert!(t.elapsed() >= Duration::from_millis(50), "{:?}", t.elapsed());
                assert!(t.elapsed() < conformance::T, "{:?}", t.elapsed());
                cqp.post_recv(5, cmr, 0, 64).unwrap();
                let t = Instant::now();
                waiting.send(()).unwrap();
                let c = c_recv.wait(conformance::T).unwrap();
                assert_eq!((c.wr_id, c.status), (5, WcStatus::Success), "{c:?}");
                assert!(t.elapsed() >= Duration::from_millis(20), "{:?}", t.elapsed());
            });
            waits.recv().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            sqp.post_send_bytes(1, b"late").unwrap();
        });
    }

    /// A posted receive does not keep its region: one deregistered under it fails the
    /// SEND that reaches it (the receiver's completion and the sender's both say so, as
    /// with a NIC), and nothing lands in the memory it covered.
    #[test]
    fn a_region_deregistered_under_a_posted_receive_fails_the_send_that_reaches_it() {
        let p = conformance::pair(make, ep);
        let r = p.st.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let (map, base) = r.mapping();
        let map = map.clone();
        p.sqp.post_recv(9, &r, 0, 64).unwrap();
        drop(r);
        p.cqp.post_send_bytes(1, b"into a region that is gone").unwrap();
        // The region is refused at the sender's look-up (or, looked up before, by the
        // copy's check): either way the connection fails, and the receive with it.
        for (cq, wr) in [(&p.s_recv, 9), (&p.c_send, 1)] {
            let c = cq.wait(conformance::T).unwrap();
            assert_eq!(c.wr_id, wr);
            assert!(!c.status.is_ok(), "{c:?}");
        }
        let mut landed = [0u8; 64];
        map.read(base, &mut landed).unwrap();
        assert_eq!(landed, [0u8; 64], "nothing was written");
        // The misuse is the receiver's own: nothing is held against the sender.
        assert_eq!(p.st.access_violations(), 0);
    }

    /// shm copies a WRITE_WITH_IMM at the post when nothing waits ahead of it (its rkey
    /// is known, a receive is posted): the eager post says so, and the sender's queue
    /// stays empty (a server releases the entry it read there and then, with no
    /// completion to poll for).
    #[test]
    fn an_eager_write_imm_with_a_receive_posted_is_done_at_the_post() {
        let p = conformance::pair(make, ep);
        // The rkey's first use waits for its look-up, in the backlog, which the RNR
        // thread closes a moment after the request's completion.
        p.cqp.post_write(9, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, true).unwrap();
        assert_eq!(p.c_send.wait(conformance::T).unwrap().wr_id, 9);
        let until = Instant::now() + conformance::T;
        while p.cqp.conn.backlogged.load(Ordering::Acquire) {
            assert!(Instant::now() < until, "the backlog stayed open");
            std::thread::yield_now();
        }
        p.cmr.write(0, b"entry").unwrap();
        p.sqp.post_recv(100, &p.smr, 0, 64).unwrap();
        let f = p.cqp.post_write_imm_eager(1, &p.cmr, 0, 5, p.s_remote.at(1024), p.s_remote.rkey, 3).unwrap();
        assert_eq!(f, crate::transport::Finished::Now);
        let mut got = [0u8; 5];
        p.smr.read(1024, &mut got).unwrap();
        assert_eq!(&got, b"entry", "in place when the post returned");
        assert!(p.c_send.poll_one().is_none(), "no completion follows");
        assert_eq!(p.s_recv.wait(conformance::T).unwrap().imm, Some(3));
    }

    /// Requests that wait for a receive complete with a flush error when their queue
    /// pair is dropped: the RNR thread holds only a weak handle, and an accepted post
    /// is never dropped silently.
    #[test]
    fn dropping_a_queue_pair_flushes_what_waits_for_a_receive() {
        let p = conformance::pair(make, ep);
        p.cqp.post_send_bytes(1, b"nobody listens").unwrap();
        p.cqp.post_write(2, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, true).unwrap();
        let conformance::Pair { cqp, c_send, .. } = p;
        drop(cqp);
        for wr in [1, 2] {
            let c = c_send.wait(conformance::T).unwrap();
            assert_eq!((c.wr_id, c.status), (wr, WcStatus::WrFlushError));
        }
    }

    /// A peer that never answers the look-up of its rkey (stopped, or hostile) holds no
    /// poster: the WRITE and the SEND posted behind it wait in the send queue while the
    /// poster goes on; at the look-up timeout the WRITE fails with a remote access error,
    /// the SEND is flushed, and the connection is closed.
    #[test]
    fn a_peer_that_never_answers_a_lookup_holds_no_poster() {
        fn slow() -> ShmTransport {
            let cfg = TransportConfig { lookup_timeout: Duration::from_secs(1), ..conformance::test_config() };
            ShmTransport::with_config(cfg).unwrap()
        }
        let p = conformance::pair(slow, ep);
        p.st.hold_lookups(true);
        let t0 = Instant::now();
        p.cqp.post_write(1, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, true).unwrap();
        p.cqp.post_send_bytes(2, b"behind the WRITE").unwrap();
        assert!(t0.elapsed() < Duration::from_millis(500), "posting took {:?}", t0.elapsed());
        let mut out = Vec::new();
        assert_eq!(p.c_send.poll(&mut out, 4), 0, "completed before the look-up could time out: {out:?}");
        expect(&p.c_send, 1, WcStatus::RemoteAccessError);
        assert!(
            t0.elapsed() >= Duration::from_millis(500),
            "failed after {:?}, before the look-up timeout",
            t0.elapsed()
        );
        expect(&p.c_send, 2, WcStatus::WrFlushError);
        assert!(p.cqp.is_error());
    }

    /// A look-up answered late still lets the work request run, in order: the poster
    /// posts the WRITE (the first use of the rkey), then a READ of the same bytes behind
    /// it; nothing completes while the answer is held back, and once it is given both
    /// complete, the READ seeing the WRITE.
    #[test]
    fn work_behind_a_lookup_runs_in_order_once_it_is_answered() {
        let p = conformance::pair(make, ep);
        p.st.hold_lookups(true);
        p.cmr.write(0, b"written!").unwrap();
        p.cqp.post_write(1, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, true).unwrap();
        p.cqp.post_read(2, &p.cmr, 8, 8, p.s_remote.addr, p.s_remote.rkey).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut out = Vec::new();
        assert_eq!(p.c_send.poll(&mut out, 4), 0, "completed while the look-up was held: {out:?}");
        p.st.hold_lookups(false);
        expect(&p.c_send, 1, WcStatus::Success);
        expect(&p.c_send, 2, WcStatus::Success);
        let mut back = [0u8; 8];
        p.cmr.read(8, &mut back).unwrap();
        assert_eq!(&back, b"written!");
        let mut there = [0u8; 8];
        p.smr.read(0, &mut there).unwrap();
        assert_eq!(&there, b"written!");
    }

    /// An rkey the peer refuses fails the request that waited for its look-up with a
    /// remote access error, whether the RNR thread sees the refusal or the peer's close
    /// (which follows it) first; the request behind it is flushed.
    #[test]
    fn a_refused_lookup_fails_its_request_and_flushes_the_rest() {
        let p = conformance::pair(make, ep);
        p.st.hold_lookups(true);
        let forged = p.s_remote.rkey ^ 0x10000;
        p.cqp.post_write(1, &p.cmr, 0, 8, p.s_remote.addr, forged, true).unwrap();
        p.cqp.post_write(2, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, true).unwrap();
        p.st.hold_lookups(false);
        expect(&p.c_send, 1, WcStatus::RemoteAccessError);
        expect(&p.c_send, 2, WcStatus::WrFlushError);
        assert!(p.cqp.is_error());
    }

    /// The same when the close is seen between the RNR thread's check of the error state
    /// and its run of the request (CI saw a flush there, once): the request that waited
    /// for the refused look-up still fails with the refusal.
    #[test]
    fn a_refused_lookup_seen_after_the_close_still_fails_its_request_with_the_refusal() {
        let p = conformance::pair(make, ep);
        let c = &p.cqp.conn;
        let forged = p.s_remote.rkey ^ 0x10000;
        // The look-up went out and "no such region" came back...
        let id = {
            let mut pending = lock(&c.pending);
            let id = pending.next;
            pending.next += 1;
            pending.answers.insert(id, Answer::NotFound);
            id
        };
        lock(&c.send).asking.insert(forged, (id, Instant::now()));
        // ...then the peer's close put the connection in the error state, and only then
        // did the request run again.
        c.state.mark_error("peer closed the connection");
        let (mr, addr) = (p.cmr.clone(), p.s_remote.addr);
        let work: Later = Box::new(move |qp| qp.one_sided_op(1, &mr, 0, 8, addr, forged, true, true));
        let d = Deferred { wr_id: 1, opcode: WcOpcode::Write, work: Work::Other(work), asked: Some(forged) };
        assert!(matches!(p.cqp.run(d), Ran::Done));
        expect(&p.c_send, 1, WcStatus::RemoteAccessError);
        // A request that waited for no look-up is flushed, as before.
        let work: Later = Box::new(|qp| qp.check_open().map(|()| Step::Done));
        let d = Deferred { wr_id: 2, opcode: WcOpcode::Write, work: Work::Other(work), asked: None };
        assert!(matches!(p.cqp.run(d), Ran::Done));
        expect(&p.c_send, 2, WcStatus::WrFlushError);
    }

    /// Inline SENDs waiting for a receive hold at most `BACKLOG_BYTES` between them.
    #[test]
    fn the_bytes_waiting_for_a_receive_are_bounded() {
        let p = conformance::pair(make, ep);
        let msg = vec![7u8; 1 << 20];
        let taken = (0..100).take_while(|&i| p.cqp.post_send_bytes(i, &msg).is_ok()).count();
        assert!((64..=66).contains(&taken), "{taken} MiB of SENDs held for a peer without receives");
    }

    #[test]
    fn version_mismatch_and_garbage_are_refused() {
        let t = make();
        let l = t.listen(&ep()).unwrap();
        let cq = t.create_cq().unwrap();
        let Endpoint::Shm(path) = l.endpoint() else { unreachable!() };
        let addr = SocketAddrUnix::new(path.as_path()).unwrap();
        let bad = seqpacket().unwrap();
        rustix::net::connect(&bad, &addr).unwrap();
        send_msg(&bad, &encode_hello(MSG_HELLO, PROTOCOL_VERSION + 1, 1, 16, b""), &[]).unwrap();
        let junk = seqpacket().unwrap();
        rustix::net::connect(&junk, &addr).unwrap();
        send_msg(&junk, b"\x01garbage", &[]).unwrap();
        let nofiles = seqpacket().unwrap();
        rustix::net::connect(&nofiles, &addr).unwrap();
        send_msg(&nofiles, &encode_hello(MSG_HELLO, PROTOCOL_VERSION, 1, 16, b""), &[]).unwrap();
        let ct = make();
        let ccq = ct.create_cq().unwrap();
        let lep = l.endpoint();
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                ct.connect(&lep, &ccq, &ccq, b"", Duration::from_secs(5))
            });
            let qp = l.accept(&cq, &cq, Duration::from_secs(10), |_| Ok(vec![])).unwrap();
            let (cqp, _) = h.join().unwrap().unwrap();
            assert!(!qp.is_error() && !cqp.is_error());
        });
        assert!(wait_readable(&bad, deadline(Duration::from_secs(5))));
        let m = recv_msg(&bad).unwrap().unwrap();
        assert_eq!(m.bytes[0], MSG_REJECT);
        assert!(String::from_utf8_lossy(&m.bytes[1..]).contains("not supported"));
    }

    #[test]
    fn stale_socket_file_is_replaced_and_live_one_is_refused() {
        let e = ep();
        let Endpoint::Shm(path) = &e else { unreachable!() };
        // A dead server's socket: bound, and gone without unlinking it.
        let dead = seqpacket().unwrap();
        rustix::net::bind(&dead, &SocketAddrUnix::new(path.as_path()).unwrap()).unwrap();
        drop(dead);
        let t = make();
        let l = t.listen(&e).unwrap();
        assert!(t.listen(&e).is_err(), "a second listener on a live path must fail");
        drop(l);
        assert!(!path.exists());
    }
}
