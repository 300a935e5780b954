//! The server's threads: accepts clients, runs worker threads that poll completion
//! queues and hand each request to its client's protocol half ([`crate::proto`]).
//!
//! Threads: one acceptor per listen address; `workers` polling workers (on the CPUs of
//! `worker_cpus` when set), each owning its clients' queue pairs and one send and one
//! receive completion queue; one cleaner (started by the [`ServerCore`]). A client is handed to a worker round robin at
//! connect time and stays there, so one client's appends are committed (and counted)
//! in order. Idle workers steal write-back ranges from busy ones ([`coop`]).
//!
//! What servers share, and the context a protocol's server half runs in, are in
//! [`crate::service`] (re-exported here); this module knows no protocol.
//!
//! May import: `error`, `cpus`, `log`, `proto`, `service`, `transport`, `wire`.

pub use crate::service::context::MAX_GETS_IN_FLIGHT;
pub use crate::service::{
    coop, default_workers, inflight, phases, ServerConfig, ServerCore, ServerCounters, ServerStats, DEFAULT_MAX_VALUE,
    MAX_VALUE_LIMIT,
};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::log::format as fmt;
use crate::log::Pool;
use crate::proto::ServerSide;
use crate::service::{Conn, ConnMap, Ctx, Shared, WorkerState};
use crate::transport::{Completion, CompletionQueue, Endpoint, Listener, MemoryRegion, QueuePair, Transport, WcOpcode};
use crate::wire::{Hello, Protocol, Welcome};

/// A client on a worker: its connection and its protocol's server half.
struct Peer<T: Transport> {
    conn: Conn<T>,
    side: Box<dyn ServerSide<T>>,
}

impl<T: Transport> Peer<T> {
    fn new(sh: &Shared<T>, qp: T::Qp, protocol: Protocol, id: u64) -> Result<Peer<T>> {
        let rb = crate::proto::receive_buffers(protocol);
        let conn = Conn::new(&sh.t, qp, protocol, id, rb.server, rb.server_depth)?;
        let side = crate::proto::server_side(protocol, &sh.t)?;
        Ok(Peer { conn, side })
    }
}

/// A running server. Dropping it (or [`Server::shutdown`]) stops every thread.
pub struct Server<T: Transport> {
    shared: Arc<Shared<T>>,
    endpoints: Vec<Endpoint>,
    threads: Vec<JoinHandle<()>>,
}

struct Inbox<T: Transport> {
    send_cq: Arc<T::Cq>,
    recv_cq: Arc<T::Cq>,
    new: Mutex<Vec<Peer<T>>>,
    /// Connections pushed to `new` since the worker last looked (checked without the lock).
    pending: AtomicUsize,
}

impl<T: Transport> Server<T> {
    /// Starts serving `pool` on every endpoint of `listen` over transport `t`, with a
    /// core of its own.
    pub fn start(t: T, pool: Arc<Pool>, listen: &[Endpoint], cfg: ServerConfig) -> Result<Server<T>> {
        Self::start_on(t, ServerCore::new(pool, cfg)?, listen)
    }

    /// Starts serving `core`'s pool over transport `t` (several transports can share a core).
    pub fn start_on(t: T, core: Arc<ServerCore>, listen: &[Endpoint]) -> Result<Server<T>> {
        if listen.is_empty() {
            return Err(Error::invalid("no address to listen on"));
        }
        let workers = core.cfg.workers;
        if workers > usize::from(u16::MAX) + 1 {
            // The handshake names each connection's worker in 16 bits.
            return Err(Error::invalid(format!("{workers} workers: at most {} are supported", u16::MAX as usize + 1)));
        }
        let shared = Arc::new(Shared::new(t, core));
        let mut inboxes = Vec::new();
        for _ in 0..workers {
            inboxes.push(Arc::new(Inbox::<T> {
                send_cq: Arc::new(shared.t.create_cq()?),
                recv_cq: Arc::new(shared.t.create_cq()?),
                new: Mutex::new(Vec::new()),
                pending: AtomicUsize::new(0),
            }));
        }
        let mut listeners = Vec::new();
        for ep in listen {
            // Each backend names the address in its errors.
            let l = shared.t.listen(ep)?;
            listeners.push(l);
        }
        let endpoints: Vec<Endpoint> = listeners.iter().map(Listener::endpoint).collect();
        let cpus = shared.core.cfg.worker_cpus.clone();
        if let Some(c) = &cpus {
            c.check_allowed("the server's workers (--cpus)")?;
        }
        let colocated = shared.core.cfg.colocated;
        let mut threads = Vec::new();
        let mut pinned = Vec::new();
        for (i, ib) in inboxes.iter().enumerate() {
            // Colocated, each worker on one CPU (the one its clients' threads
            // are placed on by the worker number the handshake tells them).
            let cpus = match &cpus {
                Some(c) if colocated => Some(c.pick(i)),
                c => c.clone(),
            };
            let (sh, ib) = (shared.clone(), ib.clone());
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("boomkv-worker-{i}"))
                    .spawn(move || {
                        // Pinned before it serves anything; a worker that cannot be
                        // pinned does not run (the caller asked for a placement).
                        let r = cpus.as_ref().map_or(Ok(()), crate::cpus::CpuList::pin_current_thread);
                        let ok = r.is_ok();
                        let _ = tx.send(r);
                        if ok {
                            Worker::new(i, sh, ib).run();
                        }
                    })
                    .map_err(|e| Error::io("spawn worker", e))?,
            );
            pinned.push(rx);
        }
        for rx in pinned {
            let r = rx.recv().map_err(|_| Error::Transport("a worker thread ended before it started".into()));
            if let Err(e) = r.and_then(|r| r) {
                // The workers already running stop (and with them any other server on
                // this core: all were asked for the same placement).
                shared.core.request_shutdown();
                for h in threads {
                    let _ = h.join();
                }
                return Err(e);
            }
        }
        let rr = Arc::new(AtomicUsize::new(0));
        for l in listeners {
            let (sh, ibs, rr) = (shared.clone(), inboxes.clone(), rr.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("boomkv-accept".into())
                    .spawn(move || accept_loop(sh, l, ibs, rr))
                    .map_err(|e| Error::io("spawn acceptor", e))?,
            );
        }
        Ok(Server { shared, endpoints, threads })
    }

    /// The addresses clients can connect to (real ports when bound to port 0).
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The pool being served.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.shared.pool
    }

    /// The shared core.
    pub fn core(&self) -> &Arc<ServerCore> {
        &self.shared.core
    }

    /// Statistics now.
    pub fn stats(&self) -> ServerStats {
        self.shared.stats()
    }

    /// Stops accepting, lets workers finish the requests they hold, and joins this
    /// server's threads (other servers on the same core stop too).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.core.request_shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl<T: Transport> Drop for Server<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Longest an acceptor at the client limit waits for a place to free up.
const PLACE_WAIT: Duration = Duration::from_millis(100);

/// Whether `clients` is below `max`, now or within [`PLACE_WAIT`]: a connection that
/// closed holds its place until its worker next polls it (a parked worker sleeps up to
/// 5 ms at a time), so a client connecting right after another left was refused "too
/// many clients" (23 of 100 one after the other over shm with one place). The wait
/// holds only this acceptor, only at the limit.
fn place_frees_up(clients: &AtomicUsize, max: usize) -> bool {
    let until = Instant::now() + PLACE_WAIT;
    while clients.load(Ordering::Acquire) >= max {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn accept_loop<T: Transport>(sh: Arc<Shared<T>>, l: T::Listener, ibs: Vec<Arc<Inbox<T>>>, rr: Arc<AtomicUsize>) {
    while !sh.shutdown.load(Ordering::Acquire) {
        let w = rr.load(Ordering::Relaxed) % ibs.len();
        let ib = &ibs[w];
        let mut accepted: Option<(Hello, u64)> = None;
        let r = l.accept(&ib.send_cq, &ib.recv_cq, Duration::from_millis(10), |private| {
            let hello = Hello::decode(private)?;
            let refuse = |reason: String| Welcome::Refused { reason }.encode();
            if !sh.cfg.protocols.is_empty() && !sh.cfg.protocols.contains(&hello.protocol) {
                sh.counters.part(0).clients_refused.fetch_add(1, Ordering::Relaxed);
                let list: Vec<&str> = sh.cfg.protocols.iter().map(|p| p.name()).collect();
                return Ok(refuse(format!(
                    "this server speaks only {} (started with --protocol); the client asked for {}",
                    list.join(", "),
                    hello.protocol
                )));
            }
            if !place_frees_up(&sh.clients, sh.cfg.max_clients) {
                sh.counters.part(0).clients_refused.fetch_add(1, Ordering::Relaxed);
                return Ok(refuse(format!("too many clients (the server allows {})", sh.cfg.max_clients)));
            }
            let id = sh.pool.new_client_id();
            let recv_size = crate::proto::receive_buffers(hello.protocol).server;
            accepted = Some((hello.clone(), id));
            Ok(Welcome::Accepted {
                protocol: hello.protocol,
                client_id: id,
                segment_size: sh.pool.segment_size(),
                max_key: fmt::MAX_KEY_LEN,
                max_value: sh.cfg.max_value.min(crate::proto::value_limit(hello.protocol)),
                recv_size,
                // At most 65536 workers (`start_on`).
                worker: u16::try_from(w).unwrap_or(u16::MAX),
            }
            .encode())
        });
        match r {
            Ok(qp) => {
                let Some((hello, id)) = accepted else {
                    // Refused in the handshake: the client was told why.
                    continue;
                };
                match Peer::<T>::new(&sh, qp, hello.protocol, id) {
                    Ok(c) => {
                        sh.clients.fetch_add(1, Ordering::AcqRel);
                        sh.counters.part(0).clients_total.fetch_add(1, Ordering::Relaxed);
                        sh.log(&format!("client {id} connected ({}, worker {w})", c.conn.protocol));
                        ib.new.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(c);
                        ib.pending.fetch_add(1, Ordering::AcqRel);
                        rr.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => sh.log(&format!("client {id}: setup failed: {e}")),
                }
            }
            Err(Error::Timeout(..)) => {}
            Err(e) => {
                if !sh.shutdown.load(Ordering::Acquire) {
                    sh.log(&format!("refused a connection: {e}"));
                }
            }
        }
    }
}

/// One polling worker: its clients, their completion queues, its own state.
struct Worker<T: Transport> {
    sh: Arc<Shared<T>>,
    ib: Arc<Inbox<T>>,
    conns: ConnMap<u32, Peer<T>>,
    /// Clients whose requests arrive by WRITEs into memory this worker polls (HERD, RFP).
    polled: Vec<u32>,
    /// What requests use of the worker (id, scratch buffer, clock, sampling).
    st: WorkerState,
    /// Completions of connections the acceptor has not handed over yet: a client's
    /// first request can complete between its receives being posted and the hand-over.
    early: Vec<(bool, Completion, Instant)>,
    /// Queue pairs dropped lately: their flushed completions are dropped too, not
    /// mistaken for a connection not yet adopted.
    gone: ConnMap<u32, Instant>,
}

impl<T: Transport> Worker<T> {
    fn new(id: usize, sh: Arc<Shared<T>>, ib: Arc<Inbox<T>>) -> Worker<T> {
        Worker {
            sh,
            ib,
            conns: ConnMap::default(),
            polled: Vec::new(),
            st: WorkerState::new(id),
            early: Vec::new(),
            gone: ConnMap::default(),
        }
    }

    /// Serves until shutdown.
    fn run(mut self) {
        // Colocated, the worker shares its CPU with client threads: an idle round, and
        // a parked wait, yield it to them instead of spinning.
        let colocated = self.sh.cfg.colocated;
        crate::transport::set_colocated_wait(colocated);
        let mut comps: Vec<Completion> = Vec::with_capacity(64);
        // The clock is read once every CLOCK_EVERY rounds, not per completion: a PUT's
        // latency is a few hundred ns, of which a clock read would be a noticeable part.
        const CLOCK_EVERY: u32 = 64;
        let mut idle_since = self.st.now;
        let mut last_sweep = self.st.now;
        let mut idle_rounds = 0u32;
        // Cooperative write-back seen lately: the ranges queued so far, and when that
        // count last moved.
        let (mut coop_ranges, mut coop_seen) = (0u64, self.st.now);
        let mut rounds = 0u32;
        loop {
            rounds = rounds.wrapping_add(1);
            if rounds % CLOCK_EVERY == 0 {
                self.st.now = Instant::now();
                if self.st.now.duration_since(last_sweep) > Duration::from_millis(100) {
                    last_sweep = self.st.now;
                    self.sweep();
                }
            }
            let stopping = self.sh.shutdown.load(Ordering::Acquire);
            self.adopt_new();
            comps.clear();
            let n = self.ib.recv_cq.poll(&mut comps, 32);
            for c in comps.drain(..) {
                self.on_recv(c);
            }
            let m = self.ib.send_cq.poll(&mut comps, 64);
            for c in comps.drain(..) {
                self.on_send(c);
            }
            let k = if self.polled.is_empty() { 0 } else { self.poll_memory() };
            if n + m + k > 0 {
                idle_rounds = 0;
                continue;
            }
            if stopping {
                break;
            }
            if self.sh.coop.help(self.st.id, self.sh.pool.media()) {
                idle_rounds = 0;
                continue;
            }
            idle_rounds = idle_rounds.wrapping_add(1);
            if idle_rounds == 1 {
                idle_since = self.st.now;
            }
            if idle_rounds % CLOCK_EVERY != 0 {
                if colocated {
                    // Its clients are on this CPU: while it spins, none of them can
                    // post the request it waits for.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            self.st.now = Instant::now();
            let idle = self.st.now.duration_since(idle_since);
            // With cooperative write-back an idle worker keeps looking for ranges to
            // help with; once neither it had a request nor any worker queued a range
            // for IDLE_PARK it parks like any other, or every idle worker would wake
            // 5000 times a second for nothing (on a 2-core VM, 16 idle workers took
            // 1.2 cores). A parked worker looks at the count of ranges after each park
            // (5 ms at most), so it helps again soon after write-backs resume.
            const IDLE_PARK: Duration = Duration::from_secs(1);
            let ranges = self.sh.coop.ranges_queued();
            if ranges != coop_ranges {
                (coop_ranges, coop_seen) = (ranges, self.st.now);
            }
            let coop_quiet = idle > IDLE_PARK && self.st.now.duration_since(coop_seen) > IDLE_PARK;
            if idle > Duration::from_millis(2) && (!self.sh.coop.enabled() || coop_quiet) {
                // Park on the receive queue instead of burning a core. A request
                // WRITTEN into polled memory raises no completion: with such clients
                // the park is short (a request after 2 ms of quiet waits up to 50 us).
                let park = if self.polled.is_empty() { Duration::from_millis(5) } else { Duration::from_micros(50) };
                if let Ok(c) = self.ib.recv_cq.wait(park) {
                    self.st.now = Instant::now();
                    self.on_recv(c);
                    idle_rounds = 0;
                }
            } else if idle > Duration::from_millis(50) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let ids: Vec<u32> = self.conns.keys().copied().collect();
        for q in ids {
            self.drop_conn(q, "server shutting down");
        }
    }

    fn adopt_new(&mut self) {
        if self.ib.pending.load(Ordering::Acquire) > 0 {
            self.ib.pending.store(0, Ordering::Release);
            let mut new = self.ib.new.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for c in new.drain(..) {
                self.conns.insert(c.conn.qp.qp_num(), c);
            }
        }
        if !self.early.is_empty() {
            let early = std::mem::take(&mut self.early);
            for (is_recv, c, since) in early {
                if self.conns.contains_key(&c.qp_num) {
                    if is_recv {
                        self.on_recv(c);
                    } else {
                        self.on_send(c);
                    }
                } else if self.st.now.duration_since(since) < Duration::from_secs(5) {
                    self.early.push((is_recv, c, since));
                }
            }
        }
    }

    fn sweep(&mut self) {
        let mut dead: Vec<(u32, String)> = Vec::new();
        for (q, p) in &self.conns {
            let c = &p.conn;
            if let Some(why) = &c.dead {
                dead.push((*q, why.clone()));
            } else if c.qp.is_error() {
                dead.push((*q, c.qp.error_reason().unwrap_or_else(|| "connection error".into())));
            } else if let Some(why) = c.stalled_reply(self.st.now) {
                dead.push((*q, why));
            } else if let Some(t) = self.sh.cfg.idle_timeout {
                if self.st.now.duration_since(c.last_active) > t {
                    dead.push((*q, format!("idle for more than {t:?}")));
                }
            }
        }
        for (q, why) in dead {
            self.drop_conn(q, &why);
        }
        let now = self.st.now;
        self.gone.retain(|_, t| now.duration_since(*t) < Duration::from_secs(10));
    }

    /// Polls the memory of the clients in `polled` once each; returns the requests served.
    fn poll_memory(&mut self) -> usize {
        let mut served = 0;
        let mut dead = Vec::new();
        for &q in &self.polled {
            let Some(Peer { conn, side }) = self.conns.get_mut(&q) else { continue };
            let mut cx = Ctx { sh: &self.sh, conn, w: &mut self.st };
            match side.poll(&mut cx) {
                Ok(true) => {
                    served += 1;
                    cx.conn.last_active = cx.w.now;
                }
                Ok(false) => {}
                Err(e) => {
                    self.sh.counters.part(self.st.id).errors.fetch_add(1, Ordering::Relaxed);
                    conn.close(format!("protocol error: {e}"));
                }
            }
            if let Some(why) = &conn.dead {
                dead.push((q, why.clone()));
            }
        }
        for (q, why) in dead {
            self.drop_conn(q, &why);
        }
        served
    }

    fn drop_conn(&mut self, q: u32, why: &str) {
        self.polled.retain(|&p| p != q);
        if let Some(Peer { conn: mut c, mut side }) = self.conns.remove(&q) {
            // The protocol settles what it holds in the client's segment while the
            // segment is still its active one.
            side.before_close(&mut Ctx { sh: &self.sh, conn: &mut c, w: &mut self.st });
            if let Some(mr) = c.seg_mr.take() {
                mr.deregister();
            }
            if let Some(s) = c.seg.take() {
                let _ = self.sh.pool.seal_segment(s.id);
            }
            side.on_close();
            c.qp.close();
            // Closed first: a GET's data write still waiting in the queue pair (for a
            // receive, or an rkey look-up) is flushed, not copied after its version is
            // released.
            for (_, (_, r)) in c.gets.drain() {
                self.sh.end_read(r);
            }
            self.gone.insert(q, self.st.now);
            self.sh.clients.fetch_sub(1, Ordering::AcqRel);
            self.sh.log(&format!("client {} disconnected: {why}", c.id));
        }
    }

    fn on_send(&mut self, c: Completion) {
        let Some(Peer { conn, .. }) = self.conns.get_mut(&c.qp_num) else {
            if !self.gone.contains_key(&c.qp_num) {
                self.early.push((false, c, self.st.now));
            }
            return;
        };
        if let Some((_, r)) = conn.gets.remove(&c.wr_id) {
            self.sh.end_read(r);
            conn.get_bytes = conn.get_bytes.saturating_sub(c.byte_len as u64);
        }
        if !c.status.is_ok() && conn.dead.is_none() {
            conn.dead = Some(format!("{:?} completed with {}", c.opcode, c.status));
        }
        if let Some(why) = conn.dead.clone() {
            // Drop it now, not at the next sweep: a closed connection must not hold a
            // --max-clients place.
            self.drop_conn(c.qp_num, &why);
        }
    }

    fn on_recv(&mut self, c: Completion) {
        // The peer is used where it is in the map (no move out and back per request).
        let Some(Peer { conn, side }) = self.conns.get_mut(&c.qp_num) else {
            if !self.gone.contains_key(&c.qp_num) {
                self.early.push((true, c, self.st.now));
            }
            return;
        };
        conn.last_active = self.st.now;
        if !c.status.is_ok() {
            let why = match conn.qp.error_reason() {
                Some(r) => r,
                None if c.status == crate::transport::WcStatus::WrFlushError => "closed by the client".to_string(),
                None => format!("receive completed with {}", c.status),
            };
            conn.close(why.clone());
            self.drop_conn(c.qp_num, &why);
            return;
        }
        let slot = c.wr_id;
        let rmr = conn.recv_mr.clone();
        let mut cx = Ctx { sh: &self.sh, conn, w: &mut self.st };
        let r = match (c.opcode, c.imm) {
            (WcOpcode::RecvWithImm, Some(imm)) => side.on_write_imm(&mut cx, imm),
            (WcOpcode::Recv, _) => {
                // Read the request where it landed (DRAM receive buffer): no copy.
                let (map, base) = rmr.mapping();
                match map.view(base + slot * cx.conn.recv_size as u64, c.byte_len as usize) {
                    Ok(raw) => side.on_receive(&mut cx, raw),
                    Err(e) => Err(e),
                }
            }
            _ => Err(Error::Protocol(format!("unexpected completion {:?}", c.opcode))),
        };
        if let Err(e) = r {
            self.sh.counters.part(self.st.id).errors.fetch_add(1, Ordering::Relaxed);
            conn.close(format!("protocol error: {e}"));
        } else if let Err(e) = conn.qp.post_recv(slot, &conn.recv_mr, slot * conn.recv_size as u64, conn.recv_size) {
            let why = match conn.qp.error_reason() {
                Some(r) => r,
                None => format!("cannot repost receive: {e}"),
            };
            conn.close(why);
        }
        let dead = conn.dead.clone();
        if side.polls() && !self.polled.contains(&c.qp_num) {
            self.polled.push(c.qp_num);
        }
        if let Some(why) = dead {
            self.drop_conn(c.qp_num, &why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Client, ClientOptions};
    use crate::log::PoolOptions;
    use crate::transport::{Access, QueuePair, ShmTransport, TransportConfig};
    use crate::wire::{Hello, Msg, Protocol, Welcome};

    /// A server with one worker over shm, whose look-ups of its clients' regions wait
    /// `lookup_timeout` for an answer, on a small pool in a temporary directory.
    fn one_worker(lookup_timeout: Duration) -> (tempfile::TempDir, Server<ShmTransport>) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = PoolOptions { segment_size: 256 << 10, ..Default::default() };
        o.media.create_size = Some(16 << 20);
        let pool = Arc::new(Pool::open(dir.path(), &o).unwrap().0);
        let slow = TransportConfig { lookup_timeout, ..Default::default() };
        let ep = Endpoint::Shm(dir.path().join("s.sock"));
        let cfg = ServerConfig { workers: 1, log_clients: false, cleaner: false, ..Default::default() };
        let s = Server::start(ShmTransport::with_config(slow).unwrap(), pool, &[ep], cfg).unwrap();
        (dir, s)
    }

    /// A GET left in flight by a client with several requests on one thread
    /// (`Client::get_start`) whose answer never comes fails with the client's timeout,
    /// as a waiting one does; it is not polled for ever (a PUT's poll counts the same). Here the
    /// answers never come because the client's own transport holds its look-up answers,
    /// so the server's replies never reach it.
    #[test]
    fn a_split_request_whose_answer_never_comes_times_out() {
        let (_dir, s) = one_worker(Duration::from_secs(60));
        let ep = &s.endpoints()[0];
        let deaf = ShmTransport::new().unwrap();
        deaf.hold_lookups(true);
        let timeout = Duration::from_millis(300);
        let mut c = Client::connect(&deaf, ep, ClientOptions { timeout, ..Default::default() }).unwrap();
        let mut out = Vec::new();
        let t0 = Instant::now();
        assert_eq!(c.get_start(b"k", &mut out).unwrap(), None, "a BOOM GET stays in flight");
        let e = loop {
            match c.get_poll(b"k", &mut out) {
                Ok(None) => std::hint::spin_loop(),
                Ok(Some(found)) => panic!("an answer came: {found}"),
                Err(e) => break e,
            }
        };
        assert!(matches!(e, Error::Timeout(d, "GET") if d == timeout), "{e}");
        assert!(t0.elapsed() >= timeout, "{:?}", t0.elapsed());
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    /// A BOOM client over shm that never answers the server's look-up of its response
    /// buffer, so no GET reply it asks for is ever written (or acknowledged).
    struct SilentClient {
        qp: <ShmTransport as Transport>::Qp,
        response: <ShmTransport as Transport>::Mr,
        _cq: <ShmTransport as Transport>::Cq,
        _transport: ShmTransport,
    }

    impl SilentClient {
        fn connect(ep: &Endpoint) -> SilentClient {
            let silent = ShmTransport::new().unwrap();
            silent.hold_lookups(true);
            let cq = silent.create_cq().unwrap();
            let response = silent.alloc_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
            let hello = Hello { protocol: Protocol::Boom, recv_size: 4096, response: response.remote() };
            let (qp, w) = silent.connect(ep, &cq, &cq, &hello.encode(), Duration::from_secs(5)).unwrap();
            assert!(matches!(Welcome::decode(&w).unwrap(), Welcome::Accepted { .. }));
            SilentClient { qp, response, _cq: cq, _transport: silent }
        }
    }

    /// A client that asks for a GET and never answers the server's look-up of its
    /// response buffer (a stopped or hostile process) costs the honest client beside it,
    /// on the server's only worker, nothing: the reply waits in the silent client's send
    /// queue, not in the worker. The look-up timeout is far longer than the honest
    /// client's: a worker that waited for the answer would make every honest request
    /// time out.
    #[test]
    fn a_client_that_never_answers_a_lookup_costs_the_others_nothing() {
        let (_dir, s) = one_worker(Duration::from_secs(60));
        let ep = &s.endpoints()[0];
        let opts = ClientOptions { timeout: Duration::from_secs(5), ..Default::default() };
        let mut honest = Client::connect(&ShmTransport::new().unwrap(), ep, opts).unwrap();
        honest.put(b"before", b"acknowledged").unwrap();

        let silent = SilentClient::connect(ep);
        let (qp, response) = (&silent.qp, &silent.response);
        for i in 0..4u32 {
            let get = Msg::Get { key: b"before".to_vec(), buf: response.remote() };
            qp.post_send_bytes(u64::from(i), &get.encode(i + 1)).unwrap();
        }
        // The worker has taken the silent client's GETs (each is counted before its reply
        // is posted, which needs the look-up).
        let until = Instant::now() + Duration::from_secs(10);
        while s.stats().gets < 1 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(s.stats().gets >= 1, "the worker never took the silent client's GET");
        let t0 = Instant::now();
        for i in 0..50 {
            let k = format!("k{i}");
            honest.put(k.as_bytes(), b"v").unwrap();
            assert_eq!(honest.get(k.as_bytes()).unwrap().unwrap(), b"v");
        }
        assert_eq!(honest.get(b"before").unwrap().unwrap(), b"acknowledged");
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(20), "50 PUT+GET beside a client that answers no look-up: {took:?}");
        assert!(!qp.is_error(), "the silent client is still connected: its look-up has not timed out");
    }

    /// A client whose GET replies stay unacknowledged (stopped, or holding the server's
    /// look-up, with its connection open) would keep the segments of the entries they
    /// read from being freed for good ([`crate::service::ServerRead`]): it is dropped
    /// after [`crate::service::context::GET_REPLY_DEADLINE`], and nothing stays held.
    #[test]
    fn a_client_that_leaves_its_replies_unacknowledged_is_dropped_and_holds_nothing() {
        use crate::service::context::GET_REPLY_DEADLINE;
        let (_dir, s) = one_worker(Duration::from_secs(600));
        let ep = &s.endpoints()[0];
        let mut honest = Client::connect(&ShmTransport::new().unwrap(), ep, ClientOptions::default()).unwrap();
        honest.put(b"read", b"value").unwrap();
        let silent = SilentClient::connect(ep);
        let (qp, response) = (&silent.qp, &silent.response);
        let get = Msg::Get { key: b"read".to_vec(), buf: response.remote() };
        qp.post_send_bytes(0, &get.encode(1)).unwrap();
        let pool = s.pool();
        let held = || (0..pool.segment_count()).filter(|&g| pool.segment_held(g)).count();
        let t0 = Instant::now();
        while held() == 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "the GET never held its segment");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(s.stats().clients, 2);
        let until = t0 + GET_REPLY_DEADLINE + Duration::from_secs(20);
        while s.stats().clients > 1 || held() > 0 {
            assert!(Instant::now() < until, "{} clients, {} segment(s) held", s.stats().clients, held());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(t0.elapsed() >= GET_REPLY_DEADLINE - Duration::from_millis(100), "{:?}", t0.elapsed());
        assert_eq!(honest.get(b"read").unwrap().as_deref(), Some(&b"value"[..]));
    }
}
