//! `ycsb` and `load`: YCSB workloads against a server, or against an embedded one.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use boomkv::bench::embedded::{Embedded, EmbeddedOptions};
use boomkv::bench::hlog::merge_hlog_files;
use boomkv::bench::report::{append_csv, json_report, parse_percentiles, write_ycsb_text, CsvSchema, RunInfo};
use boomkv::bench::runner::{self, Progress, RunOptions, RunResult};
use boomkv::client::hybrid::UpdateMode;
use boomkv::client::{Client, ClientOptions};
use boomkv::index::IndexKind;
use boomkv::transport::{Backend, Endpoint, Transport};
use boomkv::units::short_bytes;
use boomkv::wire::Protocol;
use boomkv::workload::{names, CoreWorkload, WorkloadSpec};

use crate::common::size_arg;

/// Which workload, shared by `ycsb` and `load`.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// A built-in YCSB workload: a (50/50 read/update), b (95/5), c (read only),
    /// d (read latest), e (scans), f (read-modify-write).
    #[arg(long, value_name = "a..f", conflicts_with = "workload")]
    pub mix: Option<char>,
    /// A YCSB workload property file (any of YCSB's, or your own).
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// Override a property like YCSB's -p (repeatable), e.g. -p recordcount=100000.
    #[arg(short = 'p', value_name = "KEY=VALUE")]
    pub props: Vec<String>,
    /// Value size: a constant (2k) or a uniform range (32..16k).
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// Zipfian skew for any theta: a true Zipf over the real key space (YCSB's own
    /// generator supports only 0.99).
    #[arg(long)]
    pub theta: Option<f64>,
    /// Seed of the operation streams (same seed, same operations).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Records to load (recordcount).
    #[arg(long)]
    pub records: Option<u64>,
}

impl WorkloadArgs {
    pub fn spec(&self) -> anyhow::Result<WorkloadSpec> {
        let mut spec = match (&self.workload, self.mix) {
            (Some(f), _) => WorkloadSpec::from_file(f)?,
            (None, Some(m)) => WorkloadSpec::from_mix(m)?,
            (None, None) => WorkloadSpec::from_mix('a')?,
        };
        for p in &self.props {
            spec.set_override(p).with_context(|| format!("-p {p}"))?;
        }
        if let Some(s) = &self.size {
            spec.set(names::VALUE_SIZE, s)?;
        }
        if let Some(t) = self.theta {
            spec.set(names::THETA, &t.to_string())?;
        }
        if let Some(s) = self.seed {
            spec.set(names::SEED, &s.to_string())?;
        }
        if let Some(r) = self.records {
            spec.set(names::RECORD_COUNT, &r.to_string())?;
        }
        for w in spec.warnings() {
            eprintln!("boomctl: warning: {w}");
        }
        Ok(spec)
    }

    pub fn label(&self) -> String {
        match (&self.workload, self.mix) {
            (Some(f), _) => f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            (None, Some(m)) => format!("workload{m}"),
            (None, None) => "workloada".into(),
        }
    }
}

/// Where to run: a server, or an embedded one on a temporary pool.
#[derive(clap::Args, Debug, Clone)]
pub struct TargetArgs {
    /// A running server (shm:/path, host:port, tcp://host:port). Without it an embedded
    /// server runs on a temporary pool that is removed afterwards.
    #[arg(long, value_name = "ADDR")]
    pub server: Option<String>,
    /// Transport: with --server, if the address does not say; embedded: which one to use.
    #[arg(long, value_name = "shm|tcp|verbs")]
    pub transport: Option<Backend>,
    /// Protocol: boom, rdmp (two-phase baseline) or rpc (RDMA-KV baseline).
    #[arg(long, default_value = "boom")]
    pub protocol: Protocol,
    /// BOOM updates: hybrid (append + in place) or append (append only).
    #[arg(long, value_name = "hybrid|append", default_value = "hybrid")]
    pub update_mode: UpdateMode,
    /// Embedded: directory in which the temporary pool directory is made
    /// [default: /dev/shm, else the temp dir].
    #[arg(long, value_name = "DIR")]
    pub pmem: Option<PathBuf>,
    /// Embedded: pool size [default: enough for the workload].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub pool_size: Option<u64>,
    /// Embedded: segment size.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, default_value = "64M")]
    pub segment_size: u64,
    /// Embedded: server worker threads [default: 1 on small machines].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Embedded: index (ordered is chosen automatically for workloads with scans).
    #[arg(long, value_name = "hash|ordered")]
    pub index: Option<IndexKind>,
}

/// Run a YCSB workload and print YCSB's report.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  boomctl ycsb --mix b --size 2k                    # embedded server, shm transport\n  \
boomctl ycsb --mix a --protocol rdmp --threads 2 --ops 100000\n  \
boomctl ycsb --server 10.0.0.5:7470 --workload workloads/workloadc -p recordcount=100000\n  \
boomctl ycsb --mix b --dry-run --print-ops 20\n  boomctl ycsb --merge a.hlog b.hlog            # one report from several clients"
)]
pub struct YcsbArgs {
    #[command(flatten)]
    w: WorkloadArgs,
    #[command(flatten)]
    target_args: TargetArgs,
    /// Client threads, one connection each (threadcount).
    #[arg(long)]
    threads: Option<u64>,
    /// Operations to run (operationcount).
    #[arg(long)]
    ops: Option<u64>,
    /// Stop after this many seconds (maxexecutiontime).
    #[arg(long, value_name = "SECS")]
    duration: Option<u64>,
    /// Target throughput in ops/s; latencies are then also recorded from each
    /// operation's intended start (coordinated-omission correction, Intended-* rows).
    #[arg(long, value_name = "OPS")]
    target: Option<f64>,
    /// Unmeasured operations per thread before the measured run.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Skip the load phase (the server already holds the records).
    #[arg(long)]
    no_load: bool,
    /// Percentiles to report (hdrhistogram.percentiles).
    #[arg(long, value_name = "LIST")]
    percentiles: Option<String>,
    /// Append one CSV row for this run (stable column names).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write an HdrHistogram interval log (readable by HdrHistogram's own tools).
    #[arg(long, value_name = "FILE")]
    hdr_log: Option<PathBuf>,
    /// Write the report as JSON (with full percentile spectra).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
    /// Print operations instead of running them.
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: how many operations to print.
    #[arg(long, value_name = "N", default_value_t = 20)]
    print_ops: usize,
    /// Merge these interval logs (from several client processes) into one report; runs nothing.
    #[arg(long, value_name = "HLOG", num_args = 1.., conflicts_with = "dry_run")]
    merge: Vec<PathBuf>,
}

/// Load a workload's records into a running server.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  boomctl load --server 10.0.0.5:7470 --mix a --records 1000000 --size 1k --threads 4"
)]
pub struct LoadArgs {
    #[command(flatten)]
    w: WorkloadArgs,
    /// The server (shm:/path, host:port, tcp://host:port).
    #[arg(long, value_name = "ADDR")]
    server: String,
    /// Transport, if the address does not say.
    #[arg(long, value_name = "shm|tcp|verbs")]
    transport: Option<Backend>,
    /// Protocol.
    #[arg(long, default_value = "boom")]
    protocol: Protocol,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
}

fn client_options(p: Protocol, mode: UpdateMode) -> ClientOptions {
    ClientOptions { protocol: p, update_mode: mode, ..Default::default() }
}

pub fn load(a: LoadArgs) -> anyhow::Result<()> {
    let spec = a.w.spec()?;
    let w = CoreWorkload::new(&spec)?;
    let ep = Endpoint::parse_for(&a.server, a.transport)?;
    let opts = RunOptions {
        threads: a.threads.max(1),
        seed: spec.seed()?.unwrap_or(1),
        progress: Progress::auto(a.quiet),
        label: "load".into(),
        ..Default::default()
    };
    let copts = client_options(a.protocol, UpdateMode::Hybrid);
    let r = crate::with_transport!(ep.backend(), t => runner::load(&t, &ep, &copts, &w, &opts)?);
    print_report(&r, &spec.percentiles()?)?;
    if r.errors > 0 {
        bail!("{} inserts failed", r.errors);
    }
    Ok(())
}

fn print_report(r: &RunResult, pcts: &[f64]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    write_ycsb_text(&mut out, &r.measurements, &r.run, pcts)?;
    out.flush()?;
    Ok(())
}

pub fn ycsb(a: YcsbArgs) -> anyhow::Result<()> {
    let pcts = match &a.percentiles {
        Some(p) => parse_percentiles(p)?,
        None => Vec::new(),
    };
    if !a.merge.is_empty() {
        let m = merge_hlog_files(&a.merge)?;
        let pcts = if pcts.is_empty() { vec![95.0, 99.0] } else { pcts };
        let mut out = std::io::stdout().lock();
        write_ycsb_text(&mut out, &m.measurements, &m.run, &pcts)?;
        return Ok(());
    }
    let mut spec = a.w.spec()?;
    if let Some(t) = a.threads {
        spec.set(names::THREAD_COUNT, &t.to_string())?;
    }
    if let Some(o) = a.ops {
        spec.set(names::OPERATION_COUNT, &o.to_string())?;
    }
    if let Some(d) = a.duration {
        spec.set(names::MAX_EXECUTION_TIME, &d.to_string())?;
    }
    if let Some(t) = a.target {
        spec.set(names::TARGET, &t.to_string())?;
        if spec.get(names::MEASUREMENT_INTERVAL).is_none() {
            spec.set(names::MEASUREMENT_INTERVAL, "both")?;
        }
    }
    let w = CoreWorkload::new(&spec)?;
    let pcts = if pcts.is_empty() { spec.percentiles()? } else { pcts };
    if a.dry_run {
        let mut s = w.stream(spec.seed()?.unwrap_or(1), 0);
        let mut out = std::io::stdout().lock();
        for op in s.dry_run(a.print_ops)? {
            writeln!(out, "{op}")?;
        }
        return Ok(());
    }
    let cfg = w.config().clone();
    let has_scans = cfg.scan_proportion > 0.0;
    if has_scans && a.target_args.protocol != Protocol::Boom {
        bail!("workload {} has scans, which boomkv implements for --protocol boom only", a.w.label());
    }
    let threads = spec.thread_count()?.max(1) as usize;
    let seed = spec.seed()?.unwrap_or(1);
    let run_opts = RunOptions {
        threads,
        ops: cfg.operation_count,
        duration: spec.max_execution_time()?,
        target: spec.target()?,
        warmup_ops: a.warmup,
        seed,
        progress: Progress::auto(a.quiet),
        hlog: a.hdr_log.clone(),
        interval: Duration::from_secs(1),
        measurement: spec.measurement_interval()?,
        label: a.target_args.protocol.to_string(),
        bars: None,
    };
    let copts = client_options(a.target_args.protocol, a.target_args.update_mode);
    let ta = &a.target_args;
    let (result, space) = match &ta.server {
        Some(addr) => {
            let ep = Endpoint::parse_for(addr, ta.transport)?;
            crate::with_transport!(ep.backend(), t => run_phases(&t, &ep, &copts, &w, &run_opts, a.no_load)?)
        }
        None => {
            let backend = ta.transport.unwrap_or(Backend::Shm);
            let slot = cfg.value_size.max() + 64 + 32;
            let keys = cfg.record_count + (cfg.operation_count as f64 * cfg.insert_proportion) as u64 + 1;
            let logical = slot * (keys + cfg.operation_count);
            let need = logical + (threads as u64 + 4) * ta.segment_size;
            let pool_size = ta.pool_size.unwrap_or_else(|| need.max(256 << 20).next_power_of_two());
            let mut server = boomkv::server::ServerConfig { log_clients: false, ..Default::default() };
            if let Some(n) = ta.workers {
                server.workers = n;
            }
            let eo = EmbeddedOptions {
                parent: ta.pmem.clone(),
                pool_size,
                segment_size: ta.segment_size,
                index: ta.index.unwrap_or(if has_scans { IndexKind::Ordered } else { IndexKind::Hash }),
                flush: None,
                server,
            };
            crate::with_transport!(backend, t => {
                let emb = Embedded::start(t.clone(), backend, &eo)?;
                let ep = emb.endpoint().clone();
                run_phases(&t, &ep, &copts, &w, &run_opts, a.no_load)?
            })
        }
    };
    let mut out = std::io::stdout().lock();
    write_ycsb_text(&mut out, &result.measurements, &result.run, &pcts)?;
    if let Some(sp) = &space {
        for (k, name) in [
            ("logical_bytes", "LogicalBytesWritten"),
            ("pm_bytes_used", "PMBytesUsed"),
            ("bytes_in_place", "BytesSavedInPlace"),
            ("live_bytes", "LiveBytes"),
            ("garbage_bytes", "GarbageBytes"),
            ("segments_in_use", "SegmentsInUse"),
        ] {
            writeln!(out, "[SPACE], {name}, {}", sp[k].as_u64().unwrap_or(0))?;
        }
    }
    out.flush()?;
    drop(out);
    let size_label = a.w.size.clone().unwrap_or_else(|| short_bytes(cfg.value_size.max()));
    if let Some(csv) = &a.csv {
        let schema = CsvSchema::new(&["protocol", "transport", "workload", "value_size", "threads", "update_mode"])
            .with_percentiles(&if pcts.is_empty() { vec![50.0, 95.0, 99.0, 99.9] } else { pcts.clone() });
        let transport = ta.transport.map(|b| b.to_string()).unwrap_or_else(|| match &ta.server {
            Some(s) => Endpoint::parse(s).map(|e| e.backend().to_string()).unwrap_or_default(),
            None => "shm".into(),
        });
        let mode = format!("{:?}", ta.update_mode).to_lowercase();
        append_csv(
            csv,
            &schema,
            &[ta.protocol.name(), &transport, &a.w.label(), &size_label, &threads.to_string(), &mode],
            &result.measurements,
            &result.run,
        )?;
    }
    if let Some(j) = &a.json {
        let mut v = json_report(&result.measurements, &result.run, &pcts, true);
        if let Some(sp) = space {
            v["space"] = sp;
        }
        std::fs::write(j, serde_json::to_vec_pretty(&v)?).with_context(|| format!("writing {}", j.display()))?;
    }
    if result.errors > 0 {
        eprintln!("boomctl: {} operations failed (see Return= rows)", result.errors);
    }
    Ok(())
}

fn run_phases<T: Transport>(
    t: &T,
    ep: &Endpoint,
    copts: &ClientOptions,
    w: &CoreWorkload,
    o: &RunOptions,
    no_load: bool,
) -> anyhow::Result<(RunResult, Option<serde_json::Value>)> {
    if !no_load {
        let lo = RunOptions { label: "load".into(), hlog: None, target: None, warmup_ops: 0, ..o.clone() };
        let r = runner::load(t, ep, copts, w, &lo).context("load phase")?;
        if r.errors > 0 {
            bail!("load phase: {} of {} inserts failed", r.errors, r.run.operations);
        }
        if o.progress != Progress::Quiet {
            eprintln!(
                "load: {} records in {} ms ({:.0} ops/s)",
                r.run.operations,
                r.run.runtime_ms(),
                RunInfo { ..r.run }.throughput()
            );
        }
    }
    let r = runner::run(t, ep, copts, w, o).context("run phase")?;
    let space = Client::connect(t, ep, copts.clone()).and_then(|mut c| c.stats()).ok().map(|s| s["space"].clone());
    Ok((r, space))
}
