//! The transport floor benchmark: what each backend costs before any protocol runs.
//!
//! For every backend and message size it measures, between a client thread and a server
//! thread (pinned to different cores unless told otherwise):
//!
//! - `write`: WRITE latency, from post to the local completion (signaled).
//! - `write_imm_reply`: WRITE_WITH_IMM of `#bytes` plus a 16-byte SEND reply from the
//!   server, round trip (the shape of a BOOM PUT).
//! - `send_recv`: SEND of `#bytes` answered by a SEND of `#bytes`, round trip.
//! - `read`: READ latency, from post to the local completion.
//! - `msg_rate`: back-to-back WRITEs, one in 64 signaled: message rate and bandwidth
//!   (the median of five rounds of `#iterations` messages).
//!
//! Next to them, in the same run, the hardware floors they are judged against: a raw
//! cross-core cache-line ping-pong (two threads bouncing one atomic), and a plain TCP
//! request/reply ping-pong of 64 bytes over loopback (blocking `read`/`write`,
//! `TCP_NODELAY`). The run ends with the two checks of issue 3: the shm 64 B
//! WRITE_WITH_IMM + reply median at most 3x the cache-line ping-pong median, and the tcp
//! 64 B round-trip medians at most 1.5x the plain TCP median.
//!
//! Over verbs (feature `rdma`) the baselines are perftest's own `ib_write_lat`,
//! `ib_send_lat` and `ib_read_lat` on the same device in the same run (when perftest is
//! installed), and with [`FloorOptions::verbs_tuning_off`] the verbs backend is measured
//! again with each of the design guidelines' optimizations off
//! (`transport::verbs::VerbsTuning`, feature `rdma`), rows `verbs-no-<switch>`. The
//! message-rate test posts its WRITEs in groups of [`RATE_BATCH`] through
//! [`QueuePair::post_write_batch`], and the server refills its receives in groups of
//! [`RECV_REFILL`] through [`QueuePair::post_recv_batch`], after its reply.
//!
//! Latencies are printed like perftest (`#bytes #iterations t_min t_max t_typical t_avg
//! t_stdev 99% 99.9%`, microseconds, `t_typical` the median) and can be written as CSV.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::LatencySummary;
use crate::error::{Error, Result};
use crate::transport::{
    Access, Backend, Completion, CompletionQueue, Endpoint, Listener, MemoryRegion, QueuePair, RemoteRegion,
    ShmTransport, TcpTransport, Transport, WcOpcode, WriteWr,
};

/// Size of the server's reply to a WRITE_WITH_IMM.
pub const REPLY_BYTES: u32 = 16;
/// Default message sizes: 32 B .. 16 KiB.
pub const DEFAULT_SIZES: [usize; 10] = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];
/// Limit of the shm check: WRITE_WITH_IMM + reply p50 over cache-line ping-pong p50.
pub const SHM_LIMIT: f64 = 3.0;
/// Limit of the tcp check: round trip p50 over plain TCP ping-pong p50.
pub const TCP_LIMIT: f64 = 1.5;

/// WRITEs posted together by the message-rate test.
pub const RATE_BATCH: usize = 16;
/// Receives the benchmark server refills together.
pub const RECV_REFILL: usize = 16;

const STOP: u32 = u32::MAX;
const RATE_ROUNDS: usize = 5;
const RECV_SLOTS: u64 = 64;
const WAIT: Duration = Duration::from_secs(30);

/// The next completion of `cq`, polled without pause (up to [`WAIT`]): both ends of the
/// floor poll, as perftest does. A transport's own wait parks when its recent spins ran
/// out, and the floor's two ends, each waiting for the other, then settled into
/// parking in every round trip (29 us against 0.34 us, after a sweep's earlier runs
/// had left the process's counts of busy threads high for a moment). On one CPU the
/// poller yields between polls, or the other end would wait for its time slice.
fn next<C: CompletionQueue>(cq: &C) -> Result<Completion> {
    let end = Instant::now() + WAIT;
    let one_cpu = allowed_cpus().len() < 2;
    let mut out = Vec::with_capacity(1);
    loop {
        for _ in 0..256 {
            if cq.poll(&mut out, 1) == 1 {
                if let Some(c) = out.pop() {
                    return Ok(c);
                }
            }
            std::hint::spin_loop();
        }
        if one_cpu {
            std::thread::yield_now();
        }
        if Instant::now() >= end {
            return Err(Error::Timeout(WAIT, "a completion"));
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct FloorOptions {
    /// Backends to measure.
    pub backends: Vec<Backend>,
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// Timed iterations per test and size.
    pub iters: usize,
    /// Untimed iterations before each timed series.
    pub warmup: usize,
    /// Pin the client and server threads to CPUs 0 and 1.
    pub pin: bool,
    /// Directory for the shm backend's Unix socket.
    pub socket_dir: PathBuf,
    /// Verbs: run perftest's latency tools on the same device as baselines.
    pub perftest: bool,
    /// Verbs: also measure with each guideline optimization off, in the same run.
    pub verbs_tuning_off: bool,
}

impl Default for FloorOptions {
    fn default() -> Self {
        FloorOptions {
            backends: vec![Backend::Shm, Backend::Tcp],
            sizes: DEFAULT_SIZES.to_vec(),
            iters: 20_000,
            warmup: 1_000,
            pin: true,
            socket_dir: std::env::temp_dir(),
            perftest: true,
            verbs_tuning_off: false,
        }
    }
}

/// The measurements of the floor benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FloorTest {
    /// WRITE, post to completion.
    Write,
    /// WRITE_WITH_IMM plus a 16-byte SEND reply, round trip.
    WriteImmReply,
    /// SEND answered by SEND, round trip.
    SendRecv,
    /// READ, post to completion.
    Read,
    /// Back-to-back WRITEs.
    MsgRate,
    /// Two threads bouncing one cache line, round trip.
    CacheLinePingPong,
    /// Plain TCP request/reply over loopback, round trip.
    TcpPingPong,
    /// TCP request/reply over loopback with both sides busy-polling non-blocking sockets.
    TcpBusyPingPong,
    /// perftest `ib_write_lat` on the same RDMA device.
    IbWriteLat,
    /// perftest `ib_send_lat` on the same RDMA device.
    IbSendLat,
    /// perftest `ib_read_lat` on the same RDMA device.
    IbReadLat,
}

impl FloorTest {
    /// Short name (CSV).
    pub fn name(self) -> &'static str {
        match self {
            FloorTest::Write => "write",
            FloorTest::WriteImmReply => "write_imm_reply",
            FloorTest::SendRecv => "send_recv",
            FloorTest::Read => "read",
            FloorTest::MsgRate => "msg_rate",
            FloorTest::CacheLinePingPong => "cacheline_pingpong",
            FloorTest::TcpPingPong => "tcp_pingpong",
            FloorTest::TcpBusyPingPong => "tcp_busy_pingpong",
            FloorTest::IbWriteLat => "ib_write_lat",
            FloorTest::IbSendLat => "ib_send_lat",
            FloorTest::IbReadLat => "ib_read_lat",
        }
    }

    fn title(self) -> &'static str {
        match self {
            FloorTest::Write => "WRITE latency (post to local completion)",
            FloorTest::WriteImmReply => "WRITE_WITH_IMM + 16 B SEND reply, round trip",
            FloorTest::SendRecv => "SEND/RECV ping-pong, round trip",
            FloorTest::Read => "READ latency (post to local completion)",
            FloorTest::MsgRate => "WRITE message rate (1 in 64 signaled)",
            FloorTest::CacheLinePingPong => "raw cross-core cache-line ping-pong, round trip",
            FloorTest::TcpPingPong => {
                "plain TCP request/reply over loopback (blocking read/write, TCP_NODELAY), round trip"
            }
            FloorTest::TcpBusyPingPong => {
                "TCP request/reply over loopback, both sides busy-polling non-blocking sockets (informational), round trip"
            }
            FloorTest::IbWriteLat => "perftest ib_write_lat, same device (WRITE ping-pong; perftest reports half the round trip)",
            FloorTest::IbSendLat => "perftest ib_send_lat, same device (SEND ping-pong; perftest reports half the round trip)",
            FloorTest::IbReadLat => "perftest ib_read_lat, same device (READ, post to completion)",
        }
    }
}

/// One latency series.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LatencyRow {
    /// `shm`, `tcp`, `verbs` (`verbs-no-<switch>` with an optimization off), or
    /// `baseline`.
    pub backend: String,
    /// What was measured.
    pub test: FloorTest,
    /// Message size.
    pub bytes: usize,
    /// The statistics.
    pub summary: LatencySummary,
}

/// One message-rate series.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RateRow {
    /// `shm` or `tcp`.
    pub backend: String,
    /// Message size.
    pub bytes: usize,
    /// Messages sent.
    pub iters: usize,
    /// Payload bandwidth in MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Messages per second, in millions.
    pub mpps: f64,
}

/// A pass/fail comparison against a baseline.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Check {
    /// What is compared.
    pub what: String,
    /// The measured median, microseconds.
    pub measured_us: f64,
    /// The baseline median, microseconds.
    pub baseline_us: f64,
    /// `measured / baseline`.
    pub ratio: f64,
    /// The allowed ratio.
    pub limit: f64,
}

impl Check {
    /// True when within the limit.
    pub fn passed(&self) -> bool {
        self.ratio <= self.limit
    }
}

/// Everything one run measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FloorReport {
    /// Latency series, baselines included.
    pub latency: Vec<LatencyRow>,
    /// Message-rate series.
    pub rates: Vec<RateRow>,
    /// The checks.
    pub checks: Vec<Check>,
}

impl FloorReport {
    fn median(&self, backend: &str, test: FloorTest, bytes: usize) -> Option<f64> {
        self.latency
            .iter()
            .find(|r| r.backend == backend && r.test == test && r.bytes == bytes)
            .map(|r| r.summary.median)
    }

    /// Writes every series as CSV (one header line, then one line per series).
    pub fn write_csv(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            w,
            "backend,test,bytes,iterations,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,p99_us,p99_9_us,bw_mb_per_s,msg_rate_mpps"
        )?;
        for r in &self.latency {
            let s = &r.summary;
            writeln!(
                w,
                "{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},,",
                r.backend,
                r.test.name(),
                r.bytes,
                s.count,
                s.min,
                s.max,
                s.median,
                s.avg,
                s.stdev,
                s.p99,
                s.p999
            )?;
        }
        for r in &self.rates {
            writeln!(w, "{},msg_rate,{},{},,,,,,,,{:.2},{:.4}", r.backend, r.bytes, r.iters, r.mb_per_s, r.mpps)?;
        }
        Ok(())
    }
}

/// The CPUs the process may run on, read once.
fn allowed_cpus() -> &'static [usize] {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    // The process's CPUs (`CpuList::allowed`), whichever thread asks first.
    CPUS.get_or_init(|| crate::cpus::CpuList::allowed().map(|l| l.cpus().to_vec()).unwrap_or_default())
}

/// Pins the calling thread to the `idx`-th allowed CPU (0: client, 1: server).
fn pin(enabled: bool, idx: usize) {
    let cpus = allowed_cpus();
    if !enabled || cpus.len() < 2 {
        return;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpus[idx % cpus.len()]);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Restores the calling thread's CPU affinity when dropped.
struct AffinityGuard(Option<rustix::thread::CpuSet>);

impl AffinityGuard {
    fn save() -> AffinityGuard {
        allowed_cpus();
        AffinityGuard(rustix::thread::sched_getaffinity(None).ok())
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            let _ = rustix::thread::sched_setaffinity(None, s);
        }
    }
}

fn print_header(out: &mut dyn Write, backend: &str, test: FloorTest) -> Result<()> {
    let io = |e| Error::io("writing the report", e);
    writeln!(out, "{}", "-".repeat(120)).map_err(io)?;
    writeln!(out, " [{backend}] {}", test.title()).map_err(io)?;
    if test == FloorTest::MsgRate {
        writeln!(out, " {:<10} {:<12} {:>20} {:>16}", "#bytes", "#iterations", "BW average[MB/sec]", "MsgRate[Mpps]")
            .map_err(io)?;
    } else {
        writeln!(
            out,
            " {:<10} {:<12} {:>12} {:>12} {:>16} {:>12} {:>14} {:>22} {:>24}",
            "#bytes",
            "#iterations",
            "t_min[usec]",
            "t_max[usec]",
            "t_typical[usec]",
            "t_avg[usec]",
            "t_stdev[usec]",
            "99% percentile[usec]",
            "99.9% percentile[usec]"
        )
        .map_err(io)?;
    }
    Ok(())
}

fn print_row(out: &mut dyn Write, bytes: usize, s: &LatencySummary) -> Result<()> {
    writeln!(
        out,
        " {:<10} {:<12} {:>12.2} {:>12.2} {:>16.2} {:>12.2} {:>14.2} {:>22.2} {:>24.2}",
        bytes, s.count, s.min, s.max, s.median, s.avg, s.stdev, s.p99, s.p999
    )
    .map_err(|e| Error::io("writing the report", e))?;
    out.flush().map_err(|e| Error::io("writing the report", e))
}

/// Round trips of two threads bouncing one cache line (the hardware floor of any
/// shared-memory message). Nanosecond samples.
pub fn cacheline_pingpong(iters: usize, warmup: usize, pin_threads: bool) -> Vec<u64> {
    let _restore = AffinityGuard::save();
    let line = Arc::new(super::wake::Line::default());
    let l2 = line.clone();
    let total = (iters + warmup) as u64;
    let echo = std::thread::spawn(move || {
        pin(pin_threads, 1);
        let mut expect = 1u64;
        let deadline = Instant::now() + Duration::from_secs(120);
        while expect < 2 * total {
            let mut spins = 0u32;
            while l2.0.load(Ordering::Acquire) != expect {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                if spins == 0 && Instant::now() > deadline {
                    return;
                }
            }
            l2.0.store(expect + 1, Ordering::Release);
            expect += 2;
        }
    });
    pin(pin_threads, 0);
    let mut samples = Vec::with_capacity(iters);
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0..total {
        let t0 = Instant::now();
        line.0.store(2 * i + 1, Ordering::Release);
        let mut spins = 0u32;
        while line.0.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins == 0 && Instant::now() > deadline {
                return samples;
            }
        }
        let dt = t0.elapsed().as_nanos() as u64;
        if i >= warmup as u64 {
            samples.push(dt);
        }
    }
    let _ = echo.join();
    samples
}

/// Reads exactly `buf.len()` bytes, spinning on a non-blocking socket when `busy`.
fn read_full(s: &mut TcpStream, buf: &mut [u8], busy: bool) -> std::io::Result<()> {
    if !busy {
        return s.read_exact(buf);
    }
    let deadline = Instant::now() + WAIT;
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` (spinning on a full socket buffer when `busy`).
fn write_full(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut sent = 0;
    while sent < buf.len() {
        match s.write(&buf[sent..]) {
            Ok(n) => sent += n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Round trips of a TCP request/reply of `bytes` over loopback, `TCP_NODELAY`, one echo
/// thread: with blocking `read`/`write` (the plain ping-pong), or with both sides
/// busy-polling non-blocking sockets (`busy`). Nanosecond samples.
pub fn tcp_pingpong(bytes: usize, iters: usize, warmup: usize, pin_threads: bool, busy: bool) -> Result<Vec<u64>> {
    let _restore = AffinityGuard::save();
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("baseline listen", e))?;
    let addr = l.local_addr().map_err(|e| Error::io("baseline listen", e))?;
    let total = iters + warmup;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        pin(pin_threads, 1);
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(WAIT))?;
        s.set_nonblocking(busy)?;
        let mut buf = vec![0u8; bytes];
        for _ in 0..total {
            read_full(&mut s, &mut buf, busy)?;
            write_full(&mut s, &buf)?;
        }
        Ok(())
    });
    pin(pin_threads, 0);
    let mut s = TcpStream::connect(addr).map_err(|e| Error::io("baseline connect", e))?;
    s.set_nodelay(true).map_err(|e| Error::io("TCP_NODELAY", e))?;
    s.set_read_timeout(Some(WAIT)).map_err(|e| Error::io("baseline", e))?;
    s.set_nonblocking(busy).map_err(|e| Error::io("baseline", e))?;
    let mut buf = vec![7u8; bytes];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..total {
        let t0 = Instant::now();
        write_full(&mut s, &buf).map_err(|e| Error::io("baseline write", e))?;
        read_full(&mut s, &mut buf, busy).map_err(|e| Error::io("baseline read", e))?;
        if i >= warmup {
            samples.push(t0.elapsed().as_nanos() as u64);
        }
    }
    echo.join()
        .map_err(|_| Error::Transport("baseline echo thread panicked".into()))?
        .map_err(|e| Error::io("echo", e))?;
    Ok(samples)
}

/// The most timed (and, separately, warm-up) iterations per series: 10 million, whose
/// samples take 80 MB and whose series takes minutes even at the fastest backend.
pub const MAX_ITERS: usize = 10_000_000;

/// The largest message a series sends: 16 MiB.
pub const MAX_SIZE: usize = 16 << 20;

/// Runs the floor benchmark, printing tables to `out` as it goes.
pub fn run(opts: &FloorOptions, out: &mut dyn Write) -> Result<FloorReport> {
    // Before this thread is pinned: the process's CPUs are read once (`cpus`).
    let _ = crate::cpus::CpuList::allowed();
    if opts.iters == 0 || opts.sizes.is_empty() {
        return Err(Error::invalid("need at least one iteration and one size"));
    }
    // Every timed iteration keeps its sample (8 bytes), and warm-up and timed runs add up.
    if opts.iters > MAX_ITERS || opts.warmup > MAX_ITERS {
        return Err(Error::invalid(format!(
            "{} iterations and {} warm-up iterations: each may be at most {MAX_ITERS}",
            opts.iters, opts.warmup
        )));
    }
    if let Some(&s) = opts.sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
        return Err(Error::invalid(format!("message size {s} is outside 1..=16 MiB")));
    }
    let mut sizes = opts.sizes.clone();
    if !sizes.contains(&64) {
        // The checks compare 64-byte round trips.
        sizes.push(64);
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut report = FloorReport::default();
    let io = |e| Error::io("writing the report", e);
    for &b in &opts.backends {
        match b {
            Backend::Shm => {
                let mut v = cacheline_pingpong(opts.iters, opts.warmup, opts.pin);
                let s = LatencySummary::from_ns(&mut v);
                print_header(out, "baseline", FloorTest::CacheLinePingPong)?;
                print_row(out, 64, &s)?;
                report.latency.push(LatencyRow {
                    backend: "baseline".into(),
                    test: FloorTest::CacheLinePingPong,
                    bytes: 64,
                    summary: s,
                });
                // Named like the process's other temporary files, so that an interrupted
                // run's signal handler removes it (`embedded::remove_own_temp_dirs`).
                let path = opts.socket_dir.join(format!("{}floor.sock", crate::log::temp_prefix()));
                let ep = Endpoint::Shm(path);
                run_backend(ShmTransport::new()?, ShmTransport::new()?, &ep, opts, &sizes, out, &mut report)?;
            }
            Backend::Tcp => {
                for (test, busy) in [(FloorTest::TcpPingPong, false), (FloorTest::TcpBusyPingPong, true)] {
                    let mut v = tcp_pingpong(64, opts.iters, opts.warmup, opts.pin, busy)?;
                    let s = LatencySummary::from_ns(&mut v);
                    print_header(out, "baseline", test)?;
                    print_row(out, 64, &s)?;
                    report.latency.push(LatencyRow { backend: "baseline".into(), test, bytes: 64, summary: s });
                }
                let ep = Endpoint::parse("tcp://127.0.0.1:0")?;
                run_backend(TcpTransport::new()?, TcpTransport::new()?, &ep, opts, &sizes, out, &mut report)?;
            }
            Backend::Verbs => run_verbs(opts, &sizes, out, &mut report)?,
        }
    }
    // The checks.
    let base_cl = report.median("baseline", FloorTest::CacheLinePingPong, 64);
    let base_tcp = report.median("baseline", FloorTest::TcpPingPong, 64);
    if let (Some(b), Some(m)) = (base_cl, report.median("shm", FloorTest::WriteImmReply, 64)) {
        report.checks.push(Check {
            what: "shm 64 B WRITE_WITH_IMM + reply p50 vs cache-line ping-pong p50".into(),
            measured_us: m,
            baseline_us: b,
            ratio: m / b,
            limit: SHM_LIMIT,
        });
    }
    if let Some(b) = base_tcp {
        for (test, what) in [
            (FloorTest::WriteImmReply, "tcp 64 B WRITE_WITH_IMM + reply p50 vs plain TCP ping-pong p50"),
            (FloorTest::SendRecv, "tcp 64 B SEND/RECV round trip p50 vs plain TCP ping-pong p50"),
        ] {
            if let Some(m) = report.median("tcp", test, 64) {
                report.checks.push(Check {
                    what: what.into(),
                    measured_us: m,
                    baseline_us: b,
                    ratio: m / b,
                    limit: TCP_LIMIT,
                });
            }
        }
    }
    writeln!(out, "{}", "-".repeat(120)).map_err(io)?;
    // On one CPU both ends of every round trip take turns on it: the figures are thread
    // switches, and a ratio of two of them says nothing about the transport.
    if allowed_cpus().len() < 2 {
        report.checks.clear();
        writeln!(
            out,
            " note: this process may run on one CPU only, so each round trip's two threads share it: the figures \
             measure thread switches, and the checks are not judged"
        )
        .map_err(io)?;
    }
    if let (Some(b), Some(m)) =
        (report.median("baseline", FloorTest::TcpBusyPingPong, 64), report.median("tcp", FloorTest::SendRecv, 64))
    {
        writeln!(
            out,
            " note: tcp 64 B SEND/RECV p50 {m:.2} us is {:.2}x a busy-polling TCP ping-pong ({b:.2} us); both ends poll without pause",
            m / b
        )
        .map_err(io)?;
    }
    for c in &report.checks {
        writeln!(
            out,
            " check: {}: {:.2} us / {:.2} us = {:.2}x (limit {:.1}x): {}",
            c.what,
            c.measured_us,
            c.baseline_us,
            c.ratio,
            c.limit,
            if c.passed() { "PASS" } else { "FAIL" }
        )
        .map_err(io)?;
    }
    Ok(report)
}

/// The verbs rows: perftest on the same device, the backend with every optimization on,
/// and (when asked) with each one off.
#[cfg(feature = "rdma")]
fn run_verbs(opts: &FloorOptions, sizes: &[usize], out: &mut dyn Write, report: &mut FloorReport) -> Result<()> {
    use crate::transport::{VerbsConfig, VerbsTransport, VerbsTuning};
    let mut base = VerbsConfig::from_env()?;
    // perftest polls its completion queue without pause; so do both ends here, or the
    // rows would measure how fast a parked thread wakes up (milliseconds under an
    // emulator), not the transport.
    base.transport.spin = WAIT;
    let probe = VerbsTransport::new(base.clone())?;
    if opts.perftest {
        let (dev, gid) = (probe.device_name().to_string(), probe.gid_index());
        for (test, tool) in [
            (FloorTest::IbWriteLat, "ib_write_lat"),
            (FloorTest::IbSendLat, "ib_send_lat"),
            (FloorTest::IbReadLat, "ib_read_lat"),
        ] {
            print_header(out, "baseline", test)?;
            for &bytes in sizes {
                match perftest_latency(tool, &dev, gid, bytes, opts.iters) {
                    Ok(s) => {
                        print_row(out, bytes, &s)?;
                        report.latency.push(LatencyRow { backend: "baseline".into(), test, bytes, summary: s });
                    }
                    Err(e) => {
                        writeln!(out, " {bytes:<10} not measured: {e}")
                            .map_err(|e| Error::io("writing the report", e))?;
                    }
                }
            }
        }
    }
    drop(probe);
    let mut variants = vec![("verbs".to_string(), VerbsTuning::default())];
    if opts.verbs_tuning_off {
        let all = VerbsTuning::default();
        variants.push(("verbs-no-inline".into(), VerbsTuning { inline: false, ..all }));
        variants.push(("verbs-no-selective-signaling".into(), VerbsTuning { selective_signaling: false, ..all }));
        variants.push(("verbs-no-doorbell-batching".into(), VerbsTuning { doorbell_batching: false, ..all }));
        variants.push(("verbs-no-batched-recv".into(), VerbsTuning { batched_recv: false, ..all }));
        variants.push(("verbs-none".into(), VerbsTuning::NONE));
    }
    for (name, tuning) in variants {
        let cfg = VerbsConfig { tuning, ..base.clone() };
        let ep = Endpoint::Verbs("127.0.0.1:0".into());
        run_backend_as(
            &name,
            VerbsTransport::new(cfg.clone())?,
            VerbsTransport::new(cfg)?,
            &ep,
            opts,
            sizes,
            out,
            report,
        )?;
    }
    Ok(())
}

#[cfg(not(feature = "rdma"))]
fn run_verbs(_: &FloorOptions, _: &[usize], _: &mut dyn Write, _: &mut FloorReport) -> Result<()> {
    Err(Error::invalid("this build has no verbs backend (build with --features rdma)"))
}

/// One perftest latency run (`tool` is `ib_write_lat`, `ib_send_lat` or `ib_read_lat`)
/// of `bytes` on `device`: its server and client as child processes on this host,
/// talking over loopback TCP for their own handshake, bounded in time.
pub fn perftest_latency(
    tool: &str,
    device: &str,
    gid_index: Option<u8>,
    bytes: usize,
    iters: usize,
) -> Result<LatencySummary> {
    use std::process::{Command, Stdio};
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::io("choosing a port for perftest", e))?
        .port();
    let args = |cmd: &mut Command| {
        cmd.args(["-d", device, "-s", &bytes.to_string(), "-n", &iters.max(5).to_string(), "-F"])
            .args(["-p", &port.to_string()]);
        if let Some(g) = gid_index {
            cmd.args(["-x", &g.to_string()]);
        }
    };
    let mut server = Command::new(tool);
    args(&mut server);
    let mut server = server
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io(format!("{tool} (is perftest installed?)"), e))?;
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_millis(iters as u64);
    let result = (|| {
        loop {
            let mut client = Command::new(tool);
            args(&mut client);
            let outp = client
                .arg("127.0.0.1")
                .stderr(Stdio::piped())
                .output()
                .map_err(|e| Error::io(format!("running {tool}"), e))?;
            let text = String::from_utf8_lossy(&outp.stdout);
            if outp.status.success() {
                return parse_perftest(&text, iters)
                    .ok_or_else(|| Error::Transport(format!("{tool}: no finite result in its output")));
            }
            // The server may not listen yet: try again while it runs.
            let server_gone = server.try_wait().ok().flatten().is_some();
            if server_gone || Instant::now() > deadline {
                let err = String::from_utf8_lossy(&outp.stderr);
                let why = err.lines().chain(text.lines()).rfind(|l| !l.trim().is_empty()).unwrap_or("failed");
                return Err(Error::Transport(format!("{tool}: {}", why.trim())));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    })();
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// The result row of a perftest latency tool (`#bytes #iterations t_min t_max
/// t_typical t_avg t_stdev 99% 99.9%`, microseconds).
fn parse_perftest(text: &str, iters: usize) -> Option<LatencySummary> {
    let mut lines = text.lines().skip_while(|l| !l.contains("t_typical"));
    lines.next()?;
    let row = lines.find(|l| !l.trim().is_empty())?;
    let v: Vec<f64> = row.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // perftest prints "inf" when its cycle counter misbehaved (seen under an emulator).
    (v.len() >= 9 && v[..9].iter().all(|x| x.is_finite())).then(|| LatencySummary {
        count: (v[1] as usize).min(iters.max(5)),
        min: v[2],
        max: v[3],
        median: v[4],
        avg: v[5],
        stdev: v[6],
        p99: v[7],
        p999: v[8],
    })
}

/// The server half: answers WRITE_WITH_IMM with a `imm`-byte SEND and a SEND with a
/// SEND of the same length, until the client sends the stop immediate or leaves.
fn serve<T: Transport>(t: T, listener: T::Listener, max: usize, pin_thread: bool) -> Result<()> {
    pin(pin_thread, 1);
    let (scq, rcq) = (t.create_cq()?, t.create_cq()?);
    let region = t.alloc_mr(max, Access::ALL)?;
    let recv = t.alloc_mr(RECV_SLOTS as usize * max, Access::LOCAL_WRITE)?;
    let send = t.alloc_mr(max, Access::NONE)?;
    let qp = listener.accept(&scq, &rcq, WAIT, |_| Ok(region.remote().to_bytes().to_vec()))?;
    for i in 0..RECV_SLOTS {
        qp.post_recv(i, &recv, i * max as u64, max as u32)?;
    }
    let mut sent = 0u64;
    let mut done = Vec::new();
    let mut refill = Vec::with_capacity(RECV_REFILL);
    loop {
        let c = next(&rcq)?;
        if !c.status.is_ok() {
            // The client went away.
            return Ok(());
        }
        let reply = match c.opcode {
            WcOpcode::RecvWithImm if c.imm == Some(STOP) => return Ok(()),
            WcOpcode::RecvWithImm => c.imm.unwrap_or(0),
            _ => c.byte_len,
        };
        qp.post_send(sent, &send, 0, reply.min(max as u32))?;
        sent += 1;
        // Receives come back in groups, after the reply (RECV_SLOTS leaves room).
        refill.push((c.wr_id, c.wr_id * max as u64, max as u32));
        if refill.len() >= RECV_REFILL {
            qp.post_recv_batch(&recv, &refill)?;
            refill.clear();
        }
        done.clear();
        scq.poll(&mut done, 64);
        if let Some(bad) = done.iter().find(|c| !c.status.is_ok()) {
            return Err(Error::Transport(format!("benchmark server: reply failed: {}", bad.status)));
        }
    }
}

struct FloorClient<'a, T: Transport> {
    qp: T::Qp,
    scq: T::Cq,
    rcq: T::Cq,
    local: T::Mr,
    remote: RemoteRegion,
    max: usize,
    /// Signaled WRITEs in flight at most in the message-rate test.
    window: usize,
    scratch: &'a mut Vec<Completion>,
}

impl<T: Transport> FloorClient<'_, T> {
    fn drain_send(&mut self) -> Result<()> {
        self.scratch.clear();
        self.scq.poll(self.scratch, 256);
        match self.scratch.iter().find(|c| !c.status.is_ok()) {
            Some(c) => Err(Error::Transport(format!("benchmark client: {:?} failed: {}", c.opcode, c.status))),
            None => Ok(()),
        }
    }

    /// One timed operation of `test` with `bytes`; returns nanoseconds.
    fn once(&mut self, test: FloorTest, bytes: u32, i: u64) -> Result<u64> {
        let r = self.remote;
        let reply_at = self.max as u64;
        Ok(match test {
            FloorTest::Write => {
                let t0 = Instant::now();
                self.qp.post_write(i, &self.local, 0, bytes, r.addr, r.rkey, true)?;
                next(&self.scq)?.ok("WRITE")?;
                t0.elapsed().as_nanos() as u64
            }
            FloorTest::Read => {
                let t0 = Instant::now();
                self.qp.post_read(i, &self.local, reply_at, bytes, r.addr, r.rkey)?;
                next(&self.scq)?.ok("READ")?;
                t0.elapsed().as_nanos() as u64
            }
            FloorTest::WriteImmReply => {
                self.qp.post_recv(i, &self.local, reply_at, self.max as u32)?;
                let t0 = Instant::now();
                self.qp.post_write_imm(i, &self.local, 0, bytes, r.addr, r.rkey, REPLY_BYTES)?;
                next(&self.rcq)?.ok("reply")?;
                let dt = t0.elapsed().as_nanos() as u64;
                self.drain_send()?;
                dt
            }
            FloorTest::SendRecv => {
                self.qp.post_recv(i, &self.local, reply_at, self.max as u32)?;
                let t0 = Instant::now();
                self.qp.post_send(i, &self.local, 0, bytes)?;
                next(&self.rcq)?.ok("reply")?;
                let dt = t0.elapsed().as_nanos() as u64;
                self.drain_send()?;
                dt
            }
            _ => 0,
        })
    }

    fn rate(&mut self, bytes: u32, n: usize) -> Result<Duration> {
        let r = self.remote;
        let t0 = Instant::now();
        let mut outstanding = 0usize;
        let mut batch = Vec::with_capacity(RATE_BATCH);
        let mut i = 0;
        while i < n {
            batch.clear();
            while batch.len() < RATE_BATCH && i < n {
                let signaled = i % 64 == 63 || i + 1 == n;
                batch.push(WriteWr {
                    wr_id: i as u64,
                    off: 0,
                    len: bytes,
                    remote_addr: r.addr,
                    rkey: r.rkey,
                    signaled,
                });
                outstanding += signaled as usize;
                i += 1;
            }
            self.qp.post_write_batch(&self.local, &batch)?;
            while outstanding > self.window {
                next(&self.scq)?.ok("WRITE")?;
                outstanding -= 1;
            }
        }
        while outstanding > 0 {
            next(&self.scq)?.ok("WRITE")?;
            outstanding -= 1;
        }
        Ok(t0.elapsed())
    }
}

fn run_backend<T: Transport>(
    server_t: T,
    client_t: T,
    ep: &Endpoint,
    opts: &FloorOptions,
    sizes: &[usize],
    out: &mut dyn Write,
    report: &mut FloorReport,
) -> Result<()> {
    let name = server_t.backend().to_string();
    run_backend_as(&name, server_t, client_t, ep, opts, sizes, out, report)
}

#[allow(clippy::too_many_arguments)]
fn run_backend_as<T: Transport>(
    name: &str,
    server_t: T,
    client_t: T,
    ep: &Endpoint,
    opts: &FloorOptions,
    sizes: &[usize],
    out: &mut dyn Write,
    report: &mut FloorReport,
) -> Result<()> {
    let _restore = AffinityGuard::save();
    let name = name.to_string();
    // Signaled WRITEs the message-rate test keeps in flight: each stands for 64
    // requests in the send queue (one in 64 is signaled).
    let window = (client_t.config().sq_depth.min(256) as usize / 64).saturating_sub(1).clamp(1, 16);
    let max = sizes.iter().copied().max().unwrap_or(64).max(REPLY_BYTES as usize);
    let listener = server_t.listen(ep)?;
    let lep = listener.endpoint();
    let pin_threads = opts.pin;
    let server = std::thread::Builder::new()
        .name("floor-server".into())
        .spawn(move || serve(server_t, listener, max, pin_threads))
        .map_err(|e| Error::io("spawning the benchmark server", e))?;
    pin(opts.pin, 0);
    let (scq, rcq) = (client_t.create_cq()?, client_t.create_cq()?);
    let local = client_t.alloc_mr(2 * max, Access::ALL)?;
    local.write(0, &vec![0x5a; max])?;
    let (qp, private) = client_t.connect(&lep, &scq, &rcq, b"floor", WAIT)?;
    let remote = RemoteRegion::from_bytes(&private)?;
    let mut scratch = Vec::with_capacity(256);
    let mut c = FloorClient::<T> { qp, scq, rcq, local, remote, max, window, scratch: &mut scratch };
    let result = (|| -> Result<()> {
        for test in [FloorTest::Write, FloorTest::WriteImmReply, FloorTest::SendRecv, FloorTest::Read] {
            print_header(out, &name, test)?;
            for &bytes in sizes {
                for i in 0..opts.warmup {
                    c.once(test, bytes as u32, i as u64)?;
                }
                let mut v = Vec::with_capacity(opts.iters);
                for i in 0..opts.iters {
                    v.push(c.once(test, bytes as u32, i as u64)?);
                }
                let s = LatencySummary::from_ns(&mut v);
                print_row(out, bytes, &s)?;
                report.latency.push(LatencyRow { backend: name.clone(), test, bytes, summary: s });
            }
        }
        print_header(out, &name, FloorTest::MsgRate)?;
        for &bytes in sizes {
            c.rate(bytes as u32, opts.warmup.max(64))?;
            // The median of five rounds: one round of a fast backend is over in a
            // millisecond, so a single preemption would decide it.
            let mut rounds = Vec::with_capacity(RATE_ROUNDS);
            for _ in 0..RATE_ROUNDS {
                rounds.push(c.rate(bytes as u32, opts.iters)?.as_secs_f64().max(1e-9));
            }
            rounds.sort_by(f64::total_cmp);
            let d = rounds[RATE_ROUNDS / 2];
            let row = RateRow {
                backend: name.clone(),
                bytes,
                iters: opts.iters,
                mb_per_s: (bytes * opts.iters) as f64 / d / 1e6,
                mpps: opts.iters as f64 / d / 1e6,
            };
            writeln!(out, " {:<10} {:<12} {:>20.2} {:>16.4}", bytes, opts.iters, row.mb_per_s, row.mpps)
                .map_err(|e| Error::io("writing the report", e))?;
            report.rates.push(row);
        }
        // Stop the server: it needs a posted receive, which it always has.
        c.qp.post_write_imm(u64::MAX, &c.local, 0, 0, remote.addr, remote.rkey, STOP)?;
        next(&c.scq)?.ok("stop")?;
        Ok(())
    })();
    drop(c);
    let served = server.join().map_err(|_| Error::Transport("benchmark server panicked".into()))?;
    result?;
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_runs_small_and_reports_everything() {
        let opts = FloorOptions {
            sizes: vec![32, 4096],
            iters: 50,
            warmup: 5,
            pin: false,
            socket_dir: std::env::temp_dir(),
            ..FloorOptions::default()
        };
        let mut out = Vec::new();
        let r = run(&opts, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("t_typical[usec]") && text.contains("check: shm 64 B"), "{text}");
        // 2 backends x 4 tests x 3 sizes (64 added for the checks) + 3 baselines.
        assert_eq!(r.latency.len(), 2 * 4 * 3 + 3);
        assert_eq!(r.rates.len(), 2 * 3);
        assert_eq!(r.checks.len(), 3);
        assert!(r.latency.iter().all(|l| l.summary.count == 50 && l.summary.min > 0.0));
        let mut csv = Vec::new();
        r.write_csv(&mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        assert_eq!(csv.lines().count(), 1 + r.latency.len() + r.rates.len());
        assert!(csv.lines().all(|l| l.split(',').count() == 13), "{csv}");
    }

    #[test]
    fn perftest_output_is_parsed() {
        let text = "\n---------------------------------------------------------------------------------------\n \
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n \
 2       1000          10.53          118.32       16.04               17.21          5.01            38.70                  118.32     \n\
---------------------------------------------------------------------------------------\n";
        let s = parse_perftest(text, 1000).unwrap();
        assert_eq!((s.count, s.min, s.median, s.avg, s.p999), (1000, 10.53, 16.04, 17.21, 118.32));
        assert!(parse_perftest("Couldn't connect to 127.0.0.1:18515\n", 10).is_none());
        assert!(parse_perftest(" #bytes #iterations t_min t_typical\n 2 1000 abc\n", 10).is_none());
        let inf = " #bytes #iterations t_min t_max t_typical\n 64 2000 inf inf inf inf NaN inf inf\n";
        assert!(parse_perftest(inf, 2000).is_none(), "perftest's inf row is no measurement");
    }

    #[test]
    fn baselines_measure_something() {
        let v = cacheline_pingpong(100, 10, false);
        assert_eq!(v.len(), 100);
        let v = tcp_pingpong(64, 20, 2, false, false).unwrap();
        assert_eq!(v.len(), 20);
        let v = tcp_pingpong(100, 20, 2, false, true).unwrap();
        assert_eq!(v.len(), 20);
    }
}
