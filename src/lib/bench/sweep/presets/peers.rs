//! The **peers** preset (no figure of the paper): boomkv against Redis in the same
//! harness. YCSB A, B and C at 2 KiB with 1, 2, 4, 8 and 16 client threads against
//! boomkv over tcp and over shm (embedded servers, protocol `boom` unless `--protocols`
//! names another) and against a `redis-server` this preset starts itself, with no
//! persistence and with an append-only file written back every second.
//!
//! At every (mix, threads) the targets run one after another (boom-tcp, boom-shm,
//! redis, redis-aof), so drift on the machine hits them alike, and the largest thread
//! count runs between the next two largest (1, 2, 4, 16, 8: see `run_order`); each point starts a
//! fresh server (a new pool, a new Redis) and loads `R` records before it measures
//! for the run time `T`, or `N` operations if they end first. `T` is the same for every
//! peer and `N` is past what the fastest does in it on a 2-core machine, so the fastest
//! is measured as long as the slowest: with a fixed count of 200,000 operations boomkv
//! over shm ran for 0.4 s at 16 threads and Redis for 1.9 s, and one disturbance in the
//! short run moved the shm point by 10%. An embedded pool holds the records and the
//! writes the mix makes among `N` operations, up to as many as the records; past that
//! the cleaner reclaims what updates supersede, as in a long `boomctl ycsb` run. Redis
//! is skipped, and the summary says so, where `redis-server` is not installed.

use std::path::Path;
use std::time::Duration;

use super::super::context::{f3, file_name, ms3, pick, Stat};
use super::super::plot::{points_across, range_note, repeats, rows_with, series, LineFigure, XAxis, YAxis, PALETTE};
use super::super::summary::{below_with_handoff, interval_note, us, Paired, TextTable, Verdict};
use super::prelude::*;
use crate::bench::embedded::{pool_size_reclaiming, Embedded};
use crate::bench::redis::{Persistence, RedisDb, RedisServer};
use crate::bench::runner::{self, Phases, PhasesResult};
use crate::client::ClientOptions;
use crate::transport::{Backend, Transport};
use crate::wire::Protocol;
use crate::workload::{names, CoreWorkload, OpKind, WorkloadSpec};

/// This preset.
pub const PRESET: Preset = Preset::new(&Peers);

/// The embedded servers' log segment size.
const SEGMENT: u64 = 64 << 20;

/// The preset's CSV columns, in order.
pub const COLUMNS: &[&str] = cols!(
    "mix",
    "threads",
    "peer",
    "protocol",
    "size",
    "records",
    "ops",
    "runtime_ms",
    "ops_per_sec",
    "all_avg_us",
    "all_p50_us",
    "all_p99_us",
    "read_p99_us",
    "update_p99_us",
    "errors",
    "cores",
    "hlog",
    "client_threads",
);

/// What a point runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// boomkv, embedded server, tcp transport.
    BoomTcp,
    /// boomkv, embedded server, shm transport.
    BoomShm,
    /// redis-server without persistence.
    Redis,
    /// redis-server with `appendonly yes`, `appendfsync everysec`.
    RedisAof,
}

impl Peer {
    const ALL: [Peer; 4] = [Peer::BoomTcp, Peer::BoomShm, Peer::Redis, Peer::RedisAof];

    fn name(self) -> &'static str {
        match self {
            Peer::BoomTcp => "boom-tcp",
            Peer::BoomShm => "boom-shm",
            Peer::Redis => "redis",
            Peer::RedisAof => "redis-aof",
        }
    }

    fn legend(self) -> &'static str {
        match self {
            Peer::BoomTcp => "boomkv over tcp",
            Peer::BoomShm => "boomkv over shm",
            Peer::Redis => "Redis (no persistence)",
            Peer::RedisAof => "Redis (AOF everysec)",
        }
    }
}

/// A point: one mix with this many client threads against one peer.
#[derive(Clone, Copy, Debug)]
struct At {
    mix: char,
    threads: usize,
    peer: Peer,
}

struct Peers;

impl PresetDef for Peers {
    fn meta(&self) -> &'static Meta {
        &Meta {
            name: "peers",
            about: "YCSB A, B, C vs client threads 1..16: boomkv over tcp and shm against Redis",
            reproduces: "no figure of the paper",
            method: "peers: YCSB A, B, C (--mixes) at 2 KiB (--sizes) with 1, 2, 4, 8, 16 client threads (--threads; \
                     with --client-threads K, that many clients on up to K threads) \
                     against boomkv (protocol boom) over tcp and shm, embedded, and against redis-server started here \
                     (no persistence; AOF everysec), interleaved at each point; a fresh server per point, R records \
                     loaded, then the run time T for every peer alike, or N operations if they end first \
                     (quick: R = 10000, T = 1 s, N = 200000; full: R = 100000, T = 3 s, N = 2000000).",
            columns: COLUMNS,
            needs_embedded: true,
            axes: &["threads", "client_threads", "keys", "mixes", "protocols", "sizes", "ops", "workers"],
        }
    }

    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>> {
        let mixes = o.axes.mixes.clone().unwrap_or_else(|| vec!['a', 'b', 'c']);
        let threads = run_order(o.axes.threads.clone().unwrap_or_else(|| vec![1, 2, 4, 8, 16]));
        let redis = RedisServer::installed();
        let mut pts = Vec::new();
        for &mix in &mixes {
            for &t in &threads {
                for peer in Peer::ALL {
                    if matches!(peer, Peer::Redis | Peer::RedisAof) && !redis {
                        continue;
                    }
                    let id = format!("{mix}/{t}/{}", peer.name());
                    pts.push(Point::new(PRESET, id, At { mix, threads: t, peer }));
                }
            }
        }
        Ok(pts)
    }

    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()> {
        let at = *pt.params::<At>()?;
        run_point(cx, pt, at, row)
    }

    fn plots(&self, t: &Table, _dir: &Path) -> Result<Vec<Figure>> {
        figures(t)
    }

    fn summarize(&self, t: &Table, b: &mut Builder, _dir: &Path) -> Result<()> {
        summary(t, b)
    }
}

/// The order in which a repeat runs the thread counts: ascending, except that the
/// largest runs between the next two largest (1, 2, 4, 16, 8). The no-collapse target
/// pairs the largest count with the best smaller one repeat by repeat, and the best is
/// one of the larger counts; on a drifting machine runs close in time agree better
/// (three 10-repeat sweeps on a 2-CPU VM: tcp at 16 threads against a run 2 runs away
/// correlated 0.5, against one 8 runs away not at all), so the pair spans 4 runs, not 8.
/// Reports and plots sort by the count, not by this order.
fn run_order(mut counts: Vec<usize>) -> Vec<usize> {
    counts.sort_unstable();
    counts.dedup();
    if counts.len() >= 3 {
        if let Some(last) = counts.pop() {
            counts.insert(counts.len() - 1, last);
        }
    }
    counts
}

fn run_point(cx: &mut Context<'_>, pt: &Point, at: At, row: &mut Row) -> Result<()> {
    let size = cx.o.axes.sizes.as_ref().and_then(|v| v.first().copied()).unwrap_or(2048);
    let records = cx.o.axes.keys.unwrap_or(pick(cx.o.quick, 10_000, 100_000));
    let n = cx.ops(200_000, 2_000_000);
    let protocol = cx.o.axes.protocols.as_ref().and_then(|v| v.first().copied()).unwrap_or(Protocol::Boom);
    let mut s = WorkloadSpec::from_mix(at.mix)?;
    s.set(names::RECORD_COUNT, &records.to_string())?;
    s.set(names::OPERATION_COUNT, &n.to_string())?;
    s.set(names::VALUE_SIZE, &size.to_string())?;
    s.set(names::SEED, &cx.o.seed.to_string())?;
    let w = CoreWorkload::new(&s)?;
    let hlog = cx.hlog(pt, "");
    // With --client-threads the count is of clients, carried by that many threads (or
    // fewer), for every peer alike.
    let (threads, clients) = match cx.o.axes.client_threads {
        Some(k) => (k.min(at.threads), Some(at.threads)),
        None => (at.threads, None),
    };
    let mut ro =
        cx.run_opts(format!("{} {} x{}", at.mix, at.peer.name(), at.threads), threads, n, 0, Some(hlog.clone()));
    ro.clients = clients;
    ro.duration = Some(Duration::from_secs(pick(cx.o.quick, 1, 3)));
    let phases = Phases { load: true, run: true };
    let r: PhasesResult = match at.peer {
        Peer::BoomTcp | Peer::BoomShm => {
            let backend = if at.peer == Peer::BoomTcp { Backend::Tcp } else { Backend::Shm };
            let writes = writes_of(&w, n);
            let copts = ClientOptions { protocol, ..Default::default() }.size_passive(records, writes, size);
            let pool = pool_for(protocol, records, writes, size, at.threads as u64);
            let mut cfg = cx.server_cfg();
            let mut ro = ro.clone();
            ro.place(cx.place(threads, backend, &mut cfg).as_ref());
            crate::bench::embedded::allow_run_clients(&mut cfg, at.threads);
            let eo = cx.embedded(pool, SEGMENT, None, cfg);
            crate::with_transport!(backend, t => boom(t, backend, &eo, &copts, &w, &ro, phases))?
        }
        Peer::Redis | Peer::RedisAof => {
            let persistence = if at.peer == Peer::Redis { Persistence::None } else { Persistence::AofEverySec };
            let server = RedisServer::start(persistence, cx.o.pmem_dir.as_deref())?;
            let url = server.url();
            let timeout = ClientOptions::default().timeout;
            // Redis runs where the scheduler puts it, and so do its clients: pinning
            // its server and clients apart, measured, did not make it faster (README,
            // "Thread placement").
            let ro = runner::RunOptions { client_cpus: None, colocated: false, ..ro.clone() };
            let r = runner::load_and_run_db(|| RedisDb::connect(&url, timeout), &w, &ro, phases)?;
            drop(server);
            r
        }
    };
    let m = &r.result.measurements;
    row.insert("mix", at.mix.to_string());
    row.insert("threads", at.threads.to_string());
    row.insert("peer", at.peer.name().to_string());
    // Each peer's own (the sweep's --transport is not what these rows ran over).
    row.insert("transport", if at.peer == Peer::BoomShm { "shm" } else { "tcp" }.to_string());
    row.insert(
        "protocol",
        if matches!(at.peer, Peer::Redis | Peer::RedisAof) { "redis".into() } else { protocol.to_string() },
    );
    row.insert("size", size.to_string());
    row.insert("records", records.to_string());
    row.insert("ops", r.result.run.operations.to_string());
    row.insert("runtime_ms", ms3(r.result.run.runtime));
    row.insert("ops_per_sec", format!("{:.1}", r.result.run.ops_per_sec()));
    let all = Stat::series(m, &["READ", "UPDATE", "INSERT", "READ-MODIFY-WRITE"])?;
    row.insert("all_avg_us", f3(all.avg));
    row.insert("all_p50_us", f3(all.p50));
    row.insert("all_p99_us", f3(all.p99));
    for (series, col) in [("READ", "read_p99_us"), ("UPDATE", "update_p99_us")] {
        let st = Stat::series(m, &[series])?;
        if st.ops > 0 {
            row.insert(col, f3(st.p99));
        }
    }
    row.insert("errors", r.result.errors.to_string());
    row.insert("cores", crate::cpus::count().to_string());
    row.insert("hlog", file_name(&hlog));
    if clients.is_some() {
        row.insert("client_threads", threads.to_string());
    }
    Ok(())
}

/// Loads and runs `w` against a fresh embedded boomkv server over `backend`.
fn boom<T: Transport>(
    t: T,
    backend: Backend,
    eo: &crate::bench::embedded::EmbeddedOptions,
    copts: &ClientOptions,
    w: &CoreWorkload,
    ro: &runner::RunOptions,
    phases: Phases,
) -> Result<PhasesResult> {
    let emb = Embedded::start(t.clone(), backend, eo)?;
    let ep = emb.endpoint().clone();
    let r = runner::load_and_run(&t, &ep, copts, w, ro, phases);
    // Join the server's housekeeping thread from here (see `on_target!`).
    if let Some(s) = emb.server() {
        s.core().shutdown();
    }
    drop(emb);
    Ok(r?)
}

/// The threads that carried a table's clients (the largest `client_threads` of its
/// rows: `--client-threads`), or `None`: its counts are of client threads.
fn carried(t: &Table) -> Option<u64> {
    (0..t.rows.len()).filter_map(|r| t.num(r, "client_threads").ok().flatten()).map(|v| v as u64).max()
}

/// Throughput and p99 against client threads (or clients), per mix, one line per peer.
fn figures(t: &Table) -> Result<Vec<Figure>> {
    let mut figs = Vec::new();
    let (counts, x_label) = match carried(t) {
        Some(k) => ("clients", format!("clients, on up to {k} threads (log scale)")),
        None => ("client threads", "client threads (log scale)".to_string()),
    };
    let cores = t.rows.first().map(|_| t.str(0, "cores")).transpose()?.unwrap_or("?").to_string();
    for mix in t.distinct("mix")? {
        for (col, what, y, stem) in [
            ("ops_per_sec", "throughput", YAxis::Kops, "throughput"),
            ("all_p99_us", "p99 latency", YAxis::Plain, "p99"),
        ] {
            let mut s = Vec::new();
            for (k, peer) in Peer::ALL.into_iter().enumerate() {
                let rows = rows_with(t, &[("mix", &mix), ("peer", peer.name())])?;
                if !rows.is_empty() {
                    s.push(series(peer.legend().into(), PALETTE[k], points_across(t, &rows, "threads", col)?));
                }
            }
            figs.push(Figure::Line(LineFigure {
                stem: format!("peers-{mix}-{stem}"),
                title: format!("YCSB {} {what} vs {counts}, boomkv and Redis", mix.to_uppercase()),
                x: XAxis::Log2,
                y,
                x_label: x_label.clone(),
                y_label: if y == YAxis::Kops {
                    format!("throughput (kops/s), {}", range_note(t)?)
                } else {
                    format!("p99 latency of every operation (µs), {}", range_note(t)?)
                },
                series: s,
                note: Some(format!("This machine: {cores} cores; servers and clients share them.")),
                y_log_auto: y != YAxis::Kops,
            }));
        }
    }
    Ok(figs)
}

/// Per mix: throughput of every peer at every thread count, boomkv's ratios to Redis
/// (paired by repeat: median [interval]), and the targets (tcp >= 1.0x Redis at
/// every count, no collapse at the largest count, shm >= 5x Redis), judged only where
/// the whole interval agrees.
fn summary(t: &Table, b: &mut Builder) -> Result<()> {
    if t.rows_where("peer", Peer::Redis.name())?.is_empty() {
        b.line("redis-server was not installed: boomkv only (Debian: apt install redis-server).");
    }
    let ratio = |a: f64, r: f64| (r > 0.0).then(|| a / r);
    let x = |v: f64| format!("{v:.2}x");
    let carried = carried(t);
    let (unit, count) = if carried.is_some() { ("clients", "client count") } else { ("threads", "thread count") };
    for mix in t.distinct("mix")? {
        let m = mix.to_uppercase();
        let mut tab = TextTable::new(&[
            "mix",
            unit,
            "tcp kops/s",
            "shm kops/s",
            "redis kops/s",
            "redis-aof kops/s",
            "tcp/redis",
            "shm/redis",
            "tcp p99 us",
            "redis p99 us",
        ]);
        let mut counts: Vec<u64> = t.distinct("threads")?.iter().filter_map(|s| s.parse().ok()).collect();
        counts.sort_unstable();
        let mut tcp_vs: Vec<(u64, Paired)> = Vec::new();
        let mut shm_vs: Vec<(u64, Paired)> = Vec::new();
        // (count, shm row, Redis row): to name the CPUs' round trip of shm repeats below 5x.
        let mut shm_rows: Vec<(String, usize, usize)> = Vec::new();
        let mut tcp_rows: Vec<(u64, usize)> = Vec::new();
        for &n in &counts {
            let row = |peer: Peer| -> Result<Option<usize>> {
                Ok(rows_with(t, &[("mix", &mix), ("threads", &n.to_string()), ("peer", peer.name())])?.last().copied())
            };
            let rows: Vec<Option<usize>> = Peer::ALL.iter().map(|&p| row(p)).collect::<Result<Vec<_>>>()?;
            let tp = |k: usize| -> Result<Option<f64>> { rows[k].map(|r| t.req(r, "ops_per_sec")).transpose() };
            let vs = |k: usize| -> Result<Option<Paired>> {
                Ok(match (rows[k], rows[2]) {
                    (Some(a), Some(r)) => Paired::of(&t.across(a, "ops_per_sec")?, &t.across(r, "ops_per_sec")?, ratio),
                    _ => None,
                })
            };
            let (tcp_r, shm_r) = (vs(0)?, vs(1)?);
            if let Some(p) = tcp_r {
                tcp_vs.push((n, p));
            }
            if let Some(p) = shm_r {
                shm_vs.push((n, p));
            }
            if let (Some(a), Some(r)) = (rows[1], rows[2]) {
                shm_rows.push((format!("{n} {unit}"), a, r));
            }
            if let Some(r) = rows[0] {
                tcp_rows.push((n, r));
            }
            let k = |v: Option<f64>| v.map(|v| format!("{:.1}", v / 1000.0)).unwrap_or_else(|| "-".into());
            let p99 = |k: usize| -> Result<String> {
                Ok(rows[k].map(|r| t.num(r, "all_p99_us")).transpose()?.flatten().map(us).unwrap_or_else(|| "-".into()))
            };
            tab.push(vec![
                m.clone(),
                n.to_string(),
                k(tp(0)?),
                k(tp(1)?),
                k(tp(2)?),
                k(tp(3)?),
                tcp_r.map(|p| p.text(x)).unwrap_or_else(|| "-".into()),
                shm_r.map(|p| p.text(x)).unwrap_or_else(|| "-".into()),
                p99(0)?,
                p99(2)?,
            ]);
        }
        b.table(&tab);
        let judge = |v: &[(u64, Paired)], want: f64| -> String {
            let each: Vec<String> =
                v.iter().map(|(n, p)| format!("{n}: {} {}", p.text(x), short(p.at_least(want)))).collect();
            let all = v.iter().map(|(_, p)| p.at_least(want)).collect::<Vec<_>>();
            let overall = if all.iter().all(|v| *v == Verdict::Met) {
                Verdict::Met
            } else if all.contains(&Verdict::Missed) {
                Verdict::Missed
            } else if all.contains(&Verdict::OneRun) {
                Verdict::OneRun
            } else {
                Verdict::Noisy
            };
            format!("{} ({})", overall.word(), each.join("; "))
        };
        if !tcp_vs.is_empty() {
            b.line(&format!("target {m}: boomkv over tcp >= 1.0x Redis at every {count}: {}", judge(&tcp_vs, 1.0)));
        }
        if !shm_vs.is_empty() {
            b.line(&format!("target {m}: boomkv over shm >= 5x Redis at every {count}: {}", judge(&shm_vs, 5.0)));
            if let Some(why) = below_with_handoff(t, &shm_rows, 5.0, ratio)? {
                b.line(&format!("shm against Redis, {m}: {why}"));
            }
        }
        // No collapse: the largest count against the best of the smaller ones (by
        // median), paired by repeat.
        if let Some((&(last, lr), smaller)) = tcp_rows.split_last() {
            let tput = |r: usize| t.num(r, "ops_per_sec").ok().flatten().unwrap_or(0.0);
            let best = smaller.iter().max_by(|a, b| tput(a.1).total_cmp(&tput(b.1)));
            if let Some(&(bn, br)) = best {
                if let Some(p) = Paired::of(&t.across(lr, "ops_per_sec")?, &t.across(br, "ops_per_sec")?, ratio) {
                    b.line(&format!(
                        "target {m}: no collapse, boomkv over tcp at {last} {unit} >= 0.9x its best at a smaller \
                         count ({bn}): {}: {}",
                        p.text(x),
                        p.at_least(0.9).word()
                    ));
                }
            }
        }
    }
    let shape = match carried {
        Some(k) => format!(
            "Each count is of clients (one connection each) on up to {k} thread{} (--client-threads): a thread \
             sends a request for each of its clients and collects the replies as they come, for boomkv and Redis \
             alike",
            if k == 1 { "" } else { "s" }
        ),
        None => "Redis requests wait for their reply (one connection per thread), as boomkv's do".to_string(),
    };
    b.para(&format!(
        "Throughput of every operation, the median of the repeats; ratios: {}. {shape}.",
        interval_note(repeats(t)?)
    ));
    Ok(())
}

/// The embedded pool of a point ([`SEGMENT`]s) for `records` records and `writes`
/// writes of values up to `size` bytes by `clients` clients. The log holds the records
/// and the writes up to as many again: past that the cleaner reclaims what updates
/// supersede, as in a long `boomctl ycsb` run, so the pool need not grow with the run.
fn pool_for(p: Protocol, records: u64, writes: u64, size: u64, clients: u64) -> u64 {
    pool_size_reclaiming(p, records, writes, writes.min(records), size, clients, SEGMENT)
}

/// The writes (updates, inserts, read-modify-writes) among `n` operations of `w`'s mix,
/// rounded up: the expected count (a pool's margin covers the spread).
fn writes_of(w: &CoreWorkload, n: u64) -> u64 {
    let share: f64 = w
        .config()
        .op_mix()
        .iter()
        .filter(|(_, k)| matches!(k, OpKind::Update | OpKind::Insert | OpKind::ReadModifyWrite))
        .map(|(p, _)| p)
        .sum();
    ((n as f64 * share).ceil() as u64).min(n)
}

/// A verdict in a list: `met`, `MISSED` or `?`.
fn short(v: Verdict) -> &'static str {
    match v {
        Verdict::Met => "met",
        Verdict::Missed => "MISSED",
        Verdict::Noisy | Verdict::OneRun => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::{pool_for, run_order, writes_of};
    use crate::wire::Protocol;
    use crate::workload::{CoreWorkload, WorkloadSpec};

    #[test]
    fn a_log_pool_stops_growing_at_the_records_and_clover_keeps_every_version() {
        let boom = |w, clients| pool_for(Protocol::Boom, 100_000, w, 2048, clients);
        assert_eq!(boom(1_000_000, 16), boom(100_000, 16), "the cleaner reclaims past the records again");
        assert_eq!(boom(1_000_000, 1), boom(100_000, 1));
        assert!(boom(0, 1) < boom(100_000, 1), "room for the writes up to there");
        let clover = |w| pool_for(Protocol::Clover, 100_000, w, 2048, 16);
        assert!(clover(1_000_000) > clover(100_000), "Clover's arena holds every version");
    }

    #[test]
    fn a_pool_holds_the_writes_of_the_mix() {
        let w = |mix: char| CoreWorkload::new(&WorkloadSpec::from_mix(mix).unwrap()).unwrap();
        assert_eq!(writes_of(&w('a'), 1000), 500);
        assert_eq!(writes_of(&w('b'), 1000), 50);
        assert_eq!(writes_of(&w('c'), 1000), 0);
        // F: half read-modify-writes; D: 5% inserts.
        assert_eq!(writes_of(&w('f'), 1000), 500);
        assert_eq!(writes_of(&w('d'), 1000), 50);
        // Rounded up, never past the operations.
        assert_eq!(writes_of(&w('b'), 1), 1);
    }

    #[test]
    fn the_largest_count_runs_between_the_next_two() {
        assert_eq!(run_order(vec![1, 2, 4, 8, 16]), vec![1, 2, 4, 16, 8]);
        assert_eq!(run_order(vec![16, 4, 8, 4]), vec![4, 16, 8]);
        assert_eq!(run_order(vec![8, 2]), vec![2, 8]);
        assert_eq!(run_order(vec![3]), vec![3]);
    }
}
