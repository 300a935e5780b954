//! `ycsb` and `load`: YCSB workloads against a server, or against an embedded one.

use std::io::Write;

use boomkv::proto::rfp::FetchSize;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use boomkv::bench::embedded::{Embedded, EmbeddedOptions};
use boomkv::bench::hlog::merge_hlog_files;
use boomkv::bench::report::{
    append_csv, json_report, parse_percentiles, write_ycsb_text, write_ycsb_text_in, CsvSchema, LatencyUnit,
};
use boomkv::bench::runner::{self, Progress, RunOptions, RunResult};
use boomkv::client::hybrid::UpdateMode;
use boomkv::client::ClientOptions;
use boomkv::index::IndexKind;
use boomkv::transport::{Backend, Endpoint};
use boomkv::units::short_bytes;
use boomkv::wire::Protocol;
use boomkv::workload::{names, CoreWorkload, WorkloadSpec};

use crate::common::size_arg;

/// A built-in workload (`--mix b`; YCSB's file names `workloadb` are accepted too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mix {
    /// 50% reads, 50% updates.
    #[value(alias = "workloada")]
    A,
    /// 95% reads, 5% updates.
    #[value(alias = "workloadb")]
    B,
    /// Reads only.
    #[value(alias = "workloadc")]
    C,
    /// 95% reads of the latest keys, 5% inserts.
    #[value(alias = "workloadd")]
    D,
    /// 95% short scans, 5% inserts (--protocol boom only).
    #[value(alias = "workloade")]
    E,
    /// 50% reads, 50% read-modify-writes.
    #[value(alias = "workloadf")]
    F,
}

impl Mix {
    /// `a`..`f`.
    pub fn letter(self) -> char {
        match self {
            Mix::A => 'a',
            Mix::B => 'b',
            Mix::C => 'c',
            Mix::D => 'd',
            Mix::E => 'e',
            Mix::F => 'f',
        }
    }
}

/// Which workload, shared by `ycsb` and `load`.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// A built-in YCSB workload: a (50/50 read/update), b (95/5), c (read only),
    /// d (read latest), e (scans), f (read-modify-write) [default: a, unless -P FILE or
    /// -p workload=site.ycsb.workloads.CoreWorkload, which starts from YCSB's defaults].
    #[arg(long, value_name = "a..f", conflicts_with = "workload", ignore_case = true)]
    pub mix: Option<Mix>,
    /// A YCSB workload property file (any of YCSB's, or your own); YCSB's -P.
    /// Repeatable: later files override earlier ones.
    #[arg(long, short = 'P', value_name = "FILE")]
    pub workload: Vec<PathBuf>,
    /// Override a property like YCSB's -p (repeatable), e.g. -p recordcount=100000.
    #[arg(short = 'p', value_name = "KEY=VALUE")]
    pub props: Vec<String>,
    /// Value size: a constant (2k) or a uniform range (32..16k).
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// Zipf exponent (any theta >= 0, including 1): a true Zipf law over the real key
    /// space for zipfian and latest. Without it YCSB's own generator runs (Gray et al.'s
    /// approximation, theta 0.99 only), bit for bit.
    #[arg(long)]
    pub theta: Option<f64>,
    /// Seed of the operation streams (same seed, same operations) [default: 1; YCSB's
    /// differ on every run, so give several client processes each its own].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Records to load (recordcount; at least 1: YCSB reads recordcount=0 as 2^31 - 1
    /// records).
    #[arg(long, value_parser = at_least_one_record)]
    pub records: Option<u64>,
}

impl WorkloadArgs {
    pub fn spec(&self) -> anyhow::Result<WorkloadSpec> {
        let mut spec = match (self.workload.split_first(), self.mix) {
            (Some((first, rest)), _) => {
                let mut spec = WorkloadSpec::from_file(first)?;
                for f in rest {
                    spec.load_file(f)?;
                }
                spec
            }
            (None, Some(m)) => WorkloadSpec::from_mix(m.letter())?,
            (None, None) if self.core_defaults() => WorkloadSpec::new("CoreWorkload"),
            (None, None) => {
                // The -p's change workloada's mix, where YCSB would start from its
                // CoreWorkload defaults (95/5, uniform): say which.
                const MIX: [&str; 6] = [
                    "readproportion",
                    "updateproportion",
                    "insertproportion",
                    "scanproportion",
                    "readmodifywriteproportion",
                    "requestdistribution",
                ];
                if self.prop_keys().any(|k| MIX.contains(&k)) {
                    eprintln!(
                        "boomctl: note: no -P or --mix: the -p properties change workloada (50/50, zipfian); \
                         -p workload=site.ycsb.workloads.CoreWorkload starts from YCSB's defaults instead"
                    );
                }
                WorkloadSpec::from_mix('a')?
            }
        };
        for p in &self.props {
            spec.set_override(p).with_context(|| format!("-p {p}"))?;
        }
        if let Some(s) = &self.size {
            spec.set_from_option("--size", names::VALUE_SIZE, s);
        }
        if let Some(t) = self.theta {
            spec.set_from_option("--theta", names::THETA, &t.to_string());
        }
        if let Some(s) = self.seed {
            spec.set_from_option("--seed", names::SEED, &s.to_string());
        }
        if let Some(r) = self.records {
            spec.set_from_option("--records", names::RECORD_COUNT, &r.to_string());
        }
        for w in spec.warnings() {
            eprintln!("boomctl: warning: {w}");
        }
        Ok(spec)
    }

    pub fn label(&self) -> String {
        match (self.workload.last(), self.mix) {
            (Some(f), _) => f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            (None, Some(m)) => format!("workload{}", m.letter()),
            (None, None) if self.core_defaults() => "CoreWorkload".into(),
            (None, None) => "workloada".into(),
        }
    }

    /// The keys the -p options set.
    fn prop_keys(&self) -> impl Iterator<Item = &str> {
        self.props.iter().filter_map(|p| p.split_once('=').map(|(k, _)| k.trim()))
    }

    /// No workload file and no mix, but `-p workload=...` (YCSB's way of naming the
    /// workload class): the run starts from CoreWorkload's defaults, as YCSB's would.
    fn core_defaults(&self) -> bool {
        self.workload.is_empty() && self.mix.is_none() && self.prop_keys().any(|k| k == "workload")
    }
}

/// Where to run: a server, or an embedded one on a temporary pool.
#[derive(clap::Args, Debug, Clone)]
pub struct TargetArgs {
    /// A running server (shm:/path, host:port, tcp://host:port). Without it an embedded
    /// server runs on a temporary pool that is removed afterwards.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["pmem", "pool_size", "segment_size", "workers", "index", "pin"])]
    pub server: Option<String>,
    /// Another store instead of boomkv, driven by the same generators, threads, target
    /// rate and reports: redis://HOST:PORT (a running Redis server; one string per
    /// record, no scans).
    #[arg(long, value_name = "URL", conflicts_with_all = [
        "server", "transport", "pmem", "pool_size", "workers", "index", "pin", "protocol", "segment_size",
        "update_mode", "fetch_size", "rfp_mode", "cells", "cell_value", "clover_data",
    ])]
    pub db: Option<String>,
    /// Transport: with --server, if the address does not say; embedded: which one to use.
    #[arg(long, ignore_case = true, value_name = "shm|tcp|verbs", value_parser = crate::common::one_of::<Backend>(&["shm", "tcp", "verbs|rdma|ib"]))]
    pub transport: Option<Backend>,
    /// Protocol: boom (the default) or one of the baselines of the papers (README,
    /// "Protocols").
    #[arg(long, value_name = "PROTOCOL", default_value = "boom", value_parser = crate::common::protocol_parser())]
    pub protocol: Protocol,
    /// BOOM updates: hybrid (append + in place) or append (append only).
    #[arg(long, ignore_case = true, value_name = "hybrid|append", default_value = "hybrid", value_parser = crate::common::one_of::<UpdateMode>(&["hybrid", "append"]))]
    pub update_mode: UpdateMode,
    /// RFP: bytes of the first READ of a result, or auto (profiled at connect: the knee
    /// of READ latency over 64 B..4 KiB).
    #[arg(long, value_name = "auto|BYTES", default_value = "auto")]
    pub fetch_size: FetchSize,
    /// RFP: how results come back: hybrid (fetched, by the server's reply after 2
    /// requests in a row fetched in vain 5 times or more, as the paper's client does;
    /// back after 2 quick replies), fetch (always), or reply (always).
    #[arg(long, ignore_case = true, value_name = "hybrid|fetch|reply", default_value = "hybrid", value_parser = crate::common::one_of::<boomkv::proto::rfp::ResultMode>(&["hybrid", "fetch", "reply"]))]
    pub rfp_mode: boomkv::proto::rfp::ResultMode,
    /// pDPM-Direct: cells of the table, if the pool has none yet [default: twice the
    /// keys the workload can write, at least 64].
    #[arg(long, value_name = "N")]
    pub cells: Option<u64>,
    /// pDPM-Direct: the value a cell holds under the longest cell key (a shorter key
    /// leaves room for more), if the pool has no table yet (Clover: chunks are sized for
    /// four versions of such a value, and 64 KiB at least) [default: the workload's
    /// largest value].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub cell_value: Option<u64>,
    /// Clover: bytes of chunks of the arena, if the pool has none yet [default: a
    /// version per key and per write of the run, and a quarter more].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub clover_data: Option<u64>,
    /// Embedded: directory in which the temporary pool directory is made
    /// [default: /dev/shm, else the temp dir].
    #[arg(long, value_name = "DIR")]
    pub pmem: Option<PathBuf>,
    /// Embedded: pool size [default: enough for the workload].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub pool_size: Option<u64>,
    /// Embedded: segment size.
    #[arg(long, value_name = "SIZE", value_parser = crate::common::segment_size_arg, default_value = "64M")]
    pub segment_size: u64,
    /// Embedded: server worker threads [default: 1 on small machines].
    #[arg(long, value_parser = crate::common::at_least_one)]
    pub workers: Option<usize>,
    /// Embedded: where threads run (with two or more CPUs; see `taskset`). split: the
    /// server's workers on CPUs of their own (the last ones this process may use), the
    /// client threads on the others, so a woken client never preempts a polling worker.
    /// colocate: a worker on each CPU (with --workers k, the first k CPUs), sharing it
    /// with the client threads it serves, so no request or reply crosses between CPUs
    /// and no CPU idles while clients queue for another. auto: split while each client thread has a CPU beside the
    /// workers', colocate past that over shm or tcp when --workers is not given. off: wherever
    /// the scheduler puts them. `[CONFIG], pin` says which.
    #[arg(long, value_name = "auto|split|colocate|off", value_enum, default_value = "auto")]
    pub pin: crate::common::PinMode,
    /// Embedded: index (ordered is chosen automatically for workloads with scans).
    #[arg(long, ignore_case = true, value_name = "hash|ordered", value_parser = crate::common::one_of::<IndexKind>(&["hash", "ordered|btree"]))]
    pub index: Option<IndexKind>,
}

/// Run a YCSB workload and print YCSB's report.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  boomctl ycsb --mix b --size 2k                    # embedded server, shm transport\n  \
boomctl ycsb --mix a --protocol rdmp --threads 2 --ops 100000\n  \
boomctl ycsb --server 10.0.0.5:7470 --workload workloads/workloadc -p recordcount=100000\n  \
boomctl ycsb --mix b --threads 1 --clients 16        # 16 clients on one thread\n  \
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
    /// Clients in all, one connection each, spread over the threads [default: one per
    /// thread]. A thread with several clients starts a read or write for each and
    /// collects the answers as they come (BOOM, RDMA-KV, HERD, RFP, RDMP-KV, RDMP-CC's
    /// GETs and Redis; pDPM-Direct and Clover, read-modify-writes and scans run whole),
    /// as memtier's clients per thread do:
    /// clients that outnumber the CPUs then cost no switch between threads per
    /// operation. Each client is closed-loop, as a YCSB thread is.
    #[arg(long, value_name = "N")]
    clients: Option<u64>,
    /// Operations to run (operationcount); 0: no limit, as YCSB's (with --duration).
    #[arg(long)]
    ops: Option<u64>,
    /// Stop after this many seconds (maxexecutiontime); without --ops the run goes on
    /// until then. 0: no time limit, as YCSB's.
    #[arg(long, value_name = "SECS")]
    duration: Option<u64>,
    /// Target throughput in ops/s; latencies are then also recorded from each
    /// operation's intended start (coordinated-omission correction, Intended-* rows).
    #[arg(long, value_name = "OPS")]
    target: Option<f64>,
    /// Unmeasured operations per client before the measured run (at most --duration of
    /// them too, when given).
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Skip the load phase (the server already holds the records).
    #[arg(long)]
    no_load: bool,
    /// YCSB's `-t` was given (it is rewritten to this and `-p dotransactions=true`):
    /// against a running store (--server, --db) the transactions run alone, as in
    /// YCSB, where `-load` and `-t` are two invocations.
    #[arg(long = "ycsb-t", hide = true)]
    ycsb_t: bool,
    /// Percentiles to report (hdrhistogram.percentiles).
    #[arg(long, value_name = "LIST")]
    percentiles: Option<String>,
    /// Latency unit of the text report: us (YCSB's whole microseconds, truncated) or ns
    /// (sub-microsecond figures; CSV and JSON always keep them).
    #[arg(long, ignore_case = true, value_name = "us|ns", default_value = "us", value_parser = crate::common::one_of::<LatencyUnit>(&["us", "ns"]))]
    latency_unit: LatencyUnit,
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
    /// YCSB's -s: status lines on standard error every status.interval seconds
    /// (default 10), also on a terminal.
    #[arg(short = 's')]
    status: bool,
    /// Print operations instead of running them (nothing connects, nothing is
    /// measured, so no --csv, --json or --hdr-log).
    #[arg(long, conflicts_with_all = ["csv", "json", "hdr_log"])]
    dry_run: bool,
    /// With --dry-run: how many operations to print (at most the run's operation count).
    #[arg(long, value_name = "N", default_value_t = 20, requires = "dry_run")]
    print_ops: usize,
    /// Merge these interval logs (from several client processes) into one report on
    /// standard output (with --percentiles and --latency-unit); runs nothing, so takes
    /// no workload, run or output option.
    #[arg(long, value_name = "HLOG", num_args = 1.., conflicts_with_all = [
        "dry_run", "csv", "json", "hdr_log", "threads", "clients", "ops", "duration", "target", "warmup", "no_load",
        "server", "db", "mix", "workload", "props", "size", "theta", "seed", "records",
    ])]
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
    #[arg(long, ignore_case = true, value_name = "shm|tcp|verbs", value_parser = crate::common::one_of::<Backend>(&["shm", "tcp", "verbs|rdma|ib"]))]
    transport: Option<Backend>,
    /// Protocol.
    #[arg(long, default_value = "boom", value_parser = crate::common::protocol_parser())]
    protocol: Protocol,
    /// Client threads.
    #[arg(long, default_value_t = 1, value_parser = crate::common::at_least_one)]
    threads: usize,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
}

impl YcsbArgs {
    /// Whether the run drives a running server (`--server`): its clients' error says
    /// what became of their connections, as a one-shot client's does.
    pub fn drives_a_server(&self) -> bool {
        self.target_args.server.is_some()
    }
}

fn client_options(p: Protocol, mode: UpdateMode) -> ClientOptions {
    ClientOptions { protocol: p, update_mode: mode, ..Default::default() }
}

/// The client options of a `ycsb` run.
fn target_options(ta: &TargetArgs) -> ClientOptions {
    ClientOptions { fetch_size: ta.fetch_size, rfp_mode: ta.rfp_mode, ..client_options(ta.protocol, ta.update_mode) }
}

pub fn load(a: LoadArgs) -> anyhow::Result<()> {
    let spec = a.w.spec()?;
    // `load` takes the workload's records, --threads and the report's percentiles,
    // nothing else of the runner's.
    for (k, origin) in spec.runner_properties().into_iter().filter(|(k, _)| *k != "hdrhistogram.percentiles") {
        eprintln!(
            "boomctl: warning: load: property `{k}` ({origin}) has no effect here; `boomctl ycsb -load --server ADDR` \
             takes it"
        );
    }
    let w = CoreWorkload::new(&spec)?;
    let ep = Endpoint::parse_for(&a.server, a.transport)?;
    let opts = RunOptions {
        threads: a.threads,
        seed: spec.seed()?.unwrap_or(1),
        progress: Progress::auto(a.quiet),
        label: "load".into(),
        ..Default::default()
    };
    let cfg = w.config();
    let copts =
        client_options(a.protocol, UpdateMode::Hybrid).size_passive(workload_keys(cfg, 0), 0, cfg.value_size.max());
    let r = boomkv::with_transport!(ep.backend(), t => runner::load(&t, &ep, &copts, &w, &opts)
        .map_err(|e| crate::common::with_server(e, &ep))?);
    print_report(&r, &spec.percentiles()?)?;
    if r.errors > 0 {
        bail!("{} inserts failed (first: {})", r.errors, r.first_error.as_deref().unwrap_or("unknown"));
    }
    Ok(())
}

fn print_report(r: &RunResult, pcts: &[f64]) -> anyhow::Result<()> {
    let mut out = crate::common::stdout();
    write_ycsb_text(&mut out, &r.measurements, &r.run, pcts)?;
    out.flush()?;
    Ok(())
}

pub fn ycsb(a: YcsbArgs) -> anyhow::Result<()> {
    crate::common::clean_up_on_signal(a.target_args.pmem.clone())?;
    let pcts = match &a.percentiles {
        Some(p) => parse_percentiles(p)?,
        None => Vec::new(),
    };
    if !a.merge.is_empty() {
        // One client's log twice would count its operations twice.
        for (i, x) in a.merge.iter().enumerate() {
            if let Some(y) = a.merge[..i].iter().find(|y| crate::common::same_file(x, y)) {
                bail!(
                    "--merge: {} and {} are the same file: its operations would count twice",
                    y.display(),
                    x.display()
                );
            }
        }
        let m = merge_hlog_files(&a.merge)?;
        for w in &m.warnings {
            eprintln!("boomctl: warning: --merge: {w}");
        }
        let pcts = if pcts.is_empty() { vec![95.0, 99.0] } else { pcts };
        let mut out = crate::common::stdout();
        write_ycsb_text_in(&mut out, &m.measurements, &m.run, &pcts, a.latency_unit)?;
        return Ok(());
    }
    let spec = workload_spec(&a)?;
    let w = CoreWorkload::new(&spec)?;
    let pcts = if pcts.is_empty() { spec.percentiles()? } else { pcts };
    if a.dry_run {
        // No more than the run would do.
        return dry_run(
            &w,
            &spec,
            (a.print_ops as u64).min(run_ops(&a, w.config(), spec.max_execution_time()?).unwrap_or(u64::MAX)),
        );
    }
    // Before the run, not after it: a typo in a path must not cost the run.
    let export = spec.export_file();
    let hdr_files = spec.hdr_file_prefix()?;
    // hdrhistogram.fileoutput's tagged log, unless --hdr-log takes its place.
    let hdr_file_log = if a.hdr_log.is_none() { spec.hdr_file_output()? } else { None };
    let outputs = [
        ("--csv", &a.csv),
        ("--json", &a.json),
        ("--hdr-log", &a.hdr_log),
        ("exportfile", &export),
        ("hdrhistogram.output.path", &hdr_file_log),
    ];
    for (i, (what, p)) in outputs.iter().enumerate() {
        if let Some(p) = p {
            // Two reports into one file: the last written would replace the other.
            if let Some((other, _)) =
                outputs[i + 1..].iter().find(|(_, q)| q.as_ref().is_some_and(|q| crate::common::same_file(p, q)))
            {
                bail!("{what} and {other} name the same file {}: one would overwrite the other", p.display());
            }
            // Or one of YCSB's per-measurement files, made during the run.
            if let Some(m) = hdr_files.as_ref().and_then(|prefix| hdr_file_at(prefix, p)) {
                bail!(
                    "{what} {} is the file hdrhistogram.fileoutput writes {m}'s latencies to: one would overwrite \
                     the other",
                    p.display()
                );
            }
            crate::common::check_writable(what, p)?;
        }
    }
    // A CSV this run could not append to: its columns are the configuration's names
    // (not their values) and the percentiles.
    if let Some(csv) = &a.csv {
        let config = full_config(&a, w.config(), &RunOptions::default(), (1, 1, 0), None);
        let existing = boomkv::bench::report::csv_header(csv).context("--csv")?;
        let (schema, _) = csv_schema(&config, &pcts, existing.as_deref());
        boomkv::bench::report::check_csv_header(csv, &schema).context("--csv")?;
    }
    if let Some(prefix) = &hdr_files {
        // YCSB's files are made as their measurements appear: ask of their place now,
        // not after a run. READ.hdr may be there already, and writable, in a directory
        // that takes no new file: a name that is not there asks that too.
        let p = boomkv::bench::hlog::YcsbHdrFiles::path(prefix, "READ");
        crate::common::check_writable("hdrhistogram.output.path", &p)?;
        let probe = boomkv::bench::hlog::YcsbHdrFiles::path(prefix, &format!(".boomctl-{}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
            }
            // Something of that name is there (a file left behind, a dangling link): the
            // directory took it, and it is not ours to remove.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("hdrhistogram.output.path {prefix}: no new file can be made there"))
            }
        }
    }
    let cfg = w.config().clone();
    let has_scans = cfg.scan_proportion > 0.0;
    if has_scans && a.target_args.db.is_some() {
        bail!("workload {} has scans, which the --db redis binding does not implement", a.w.label());
    }
    if has_scans && a.target_args.protocol != Protocol::Boom {
        bail!("workload {} has scans, which boomkv implements for --protocol boom only", a.w.label());
    }
    if has_scans && a.target_args.server.is_none() && a.target_args.index == Some(IndexKind::Hash) {
        bail!(
            "workload {} has scans, which the hash index cannot serve: omit --index hash (the embedded server then \
             uses the ordered index)",
            a.w.label()
        );
    }
    let seed = spec.seed()?.unwrap_or(1);
    let transactions = spec.do_transactions()?;
    if !transactions && a.no_load {
        bail!("dotransactions=false (-load) runs only the load phase, and --no-load skips it: nothing to run");
    }
    let duration = spec.max_execution_time()?;
    let ops = run_ops(&a, w.config(), duration)?;
    let mut threads = spec.thread_count()?.max(1) as usize;
    // As YCSB's Client: a thread is given one operation at least, so more threads than
    // the measured phase's operations are cut to their count (a thread with none would
    // only connect and clean up, and count in [CLEANUP]).
    let measured = if transactions { ops } else { w.config().insert_count };
    if a.clients.is_none() && measured > 0 && measured < threads as u64 {
        eprintln!("boomctl: warning: {threads} threads for {measured} operations: running {measured} threads");
        threads = measured as usize;
    }
    let remote = a.target_args.server.is_some() || a.target_args.db.is_some();
    // YCSB's `-t` against a loaded store is the transactions alone: loading again would
    // rewrite every record (and a partitioned multi-client load's ranges) before the run.
    let transactions_alone = a.ycsb_t && transactions && remote;
    let do_load = !a.no_load && !transactions_alone;
    if !remote && !a.quiet && transactions {
        if a.no_load {
            eprintln!(
                "boomctl: warning: --no-load on the embedded server: its new pool holds no record, so reads and \
                 updates find nothing (give --server to run against a loaded store)"
            );
        } else if a.ycsb_t {
            eprintln!(
                "boomctl: note: -t on the embedded server loads first, as its new pool is empty (with --server or \
                 --db, -t runs the transactions alone, as in YCSB)"
            );
        }
    }
    if !a.quiet {
        // YCSB's Client prints its command line and the phases on standard error.
        let args: Vec<String> = std::env::args().skip(1).collect();
        eprintln!("Command line: {}", args.join(" "));
        eprintln!("boomctl {} (BOOM-KV, YCSB-compatible client)", env!("CARGO_PKG_VERSION"));
        eprintln!();
        eprintln!("Loading workload...");
        eprintln!("Starting test.");
    }
    let progress = if a.status || spec.status()? { Progress::Lines } else { Progress::auto(a.quiet) };
    let hlog = match &a.hdr_log {
        Some(p) => Some(p.clone()),
        None => spec.hdr_file_output()?,
    };
    let clients = match a.clients {
        Some(0) => bail!("--clients 0: a run needs a client at least"),
        Some(c) if (c as usize) < threads => {
            bail!("--clients {c} is fewer than the {threads} threads: each thread needs a client at least")
        }
        c => c.map(|c| c as usize),
    };
    let run_opts = RunOptions {
        threads,
        clients,
        ops,
        duration,
        target: spec.target()?,
        warmup_ops: a.warmup,
        seed,
        progress,
        hlog,
        hdr_files,
        interval: Duration::from_secs(1),
        status_interval: spec.status_interval()?,
        measurement: spec.measurement_interval()?,
        label: if a.target_args.db.is_some() { "redis".into() } else { a.target_args.protocol.to_string() },
        status_label: spec.label(),
        bars: None,
        client_cpus: None,
        colocated: false,
        // A full disk under --hdr-log or the .hdr files costs the log, not the report.
        logs_may_stop: true,
    };
    let ta = &a.target_args;
    let layout = if ta.server.is_none() && ta.db.is_none() {
        crate::common::pin_layout(ta.pin, ta.workers, threads, ta.transport.unwrap_or(Backend::Shm))
    } else {
        None
    };
    let mut run_opts = run_opts;
    run_opts.place(layout.as_ref());
    // The machine around the run: taken while no server of ours is up (its workers would
    // share the probe's CPUs).
    let load = boomkv::bench::busy::LoadProbe::start();
    let handoff_before_ns = boomkv::bench::wake::handoff_ns();
    let runner::PhasesResult { result, space } =
        run_phases(&a, &w, &run_opts, runner::Phases { load: do_load, run: transactions }, has_scans, layout.as_ref())?;
    let machine = boomkv::bench::busy::RunMachine {
        handoff_after_ns: boomkv::bench::wake::handoff_ns(),
        load: load.finish(),
        handoff_before_ns,
    };
    let config = full_config(&a, &cfg, &run_opts, (threads, seed, result.run.operations), layout.as_ref());
    write_reports(&a, &spec, &config, &result, space, &machine, &pcts)?;
    for w in machine.warnings() {
        eprintln!("boomctl: warning: {w}: these figures may measure the machine, not the store");
    }
    if result.errors > 0 {
        eprintln!(
            "boomctl: {} operations failed (see Return= rows); first: {}",
            result.errors,
            result.first_error.as_deref().unwrap_or("unknown")
        );
    }
    if let Some(t) = run_opts.target {
        let achieved = result.run.throughput();
        if achieved < 0.95 * t {
            eprintln!(
                "boomctl: warning: fell behind --target {t} ops/s (achieved {achieved:.0} ops/s); \
                 latencies from the intended start times (Intended-* rows) include the backlog"
            );
        }
    }
    if let Some(e) = &result.log_error {
        bail!("{e}: the log stops there (the report above is whole)");
    }
    Ok(())
}

/// The workload of the command line: the workload file or mix with `-p` overrides,
/// then the options that map to YCSB properties (threads, ops, duration, target).
fn workload_spec(a: &YcsbArgs) -> anyhow::Result<WorkloadSpec> {
    let mut spec = a.w.spec()?;
    if let Some(t) = a.threads {
        spec.set_from_option("--threads", names::THREAD_COUNT, &t.to_string());
    }
    if let Some(o) = a.ops {
        spec.set_from_option("--ops", names::OPERATION_COUNT, &o.to_string());
    }
    if let Some(d) = a.duration {
        spec.set_from_option("--duration", names::MAX_EXECUTION_TIME, &d.to_string());
    }
    if let Some(t) = a.target {
        spec.set_from_option("--target", names::TARGET, &t.to_string());
    }
    // A throttled run also measures from each operation's intended start (Intended-*
    // rows), however the target was given (`--target`, `-target`, `-p target=`, a
    // workload file), unless `measurement.interval` says otherwise; 0 is no target
    // (YCSB's): no intended start times to measure from. (YCSB's own default is `op`.)
    if spec.target().ok().flatten().is_some() && spec.get(names::MEASUREMENT_INTERVAL).is_none() {
        spec.set_from_option("a target", names::MEASUREMENT_INTERVAL, "both");
    }
    Ok(spec)
}

/// The operations the run does at most: `--duration` alone bounds the run by time, so
/// it runs until the clock stops it (0 is YCSB's "no time limit": the operation count
/// still bounds the run). An operation count of 0, from `--ops` or `operationcount`,
/// is YCSB's "no operation limit" (`--ops 0` ran nothing while `-p operationcount=0`
/// ran to the clock); a run with neither limit would not end, and is refused.
fn run_ops(a: &YcsbArgs, cfg: &boomkv::workload::CoreConfig, duration: Option<Duration>) -> anyhow::Result<u64> {
    if a.duration.is_some_and(|d| d > 0) && a.ops.is_none() {
        return Ok(u64::MAX);
    }
    match (cfg.operation_count, duration) {
        (0, Some(_)) => Ok(u64::MAX),
        (0, None) => bail!(
            "an operation count of 0 (--ops or operationcount) is no limit, as in YCSB: give --duration \
             (maxexecutiontime) too, or the run would not end"
        ),
        (n, _) => Ok(n),
    }
}

/// `--dry-run`: prints the first `n` operations of the stream instead of running them.
fn dry_run(w: &CoreWorkload, spec: &WorkloadSpec, n: u64) -> anyhow::Result<()> {
    // One operation at a time: nothing is held, and a reader that stops early
    // (`| head`) ends the run at once (a closed pipe is a normal exit, see main).
    let mut s = w.stream(spec.seed()?.unwrap_or(1), 0);
    let mut out = std::io::BufWriter::new(crate::common::stdout());
    for _ in 0..n {
        let op = s.next_op();
        s.complete(&op)?;
        writeln!(out, "{op}")?;
    }
    out.flush()?;
    Ok(())
}

/// Loads and runs the workload against the target of the command line: a Redis
/// server (`--db`), a running boomkv server (`--server`), or an embedded one.
fn run_phases(
    a: &YcsbArgs,
    w: &CoreWorkload,
    run_opts: &RunOptions,
    phases: runner::Phases,
    has_scans: bool,
    layout: Option<&boomkv::cpus::Layout>,
) -> anyhow::Result<runner::PhasesResult> {
    let cfg = w.config();
    let threads = run_opts.threads;
    let ta = &a.target_args;
    let keys = workload_keys(cfg, run_opts.ops);
    let mut copts = target_options(ta).size_passive(keys, run_writes(run_opts.ops, keys), cfg.value_size.max());
    if let Some(c) = ta.cells {
        copts.cells = c;
    }
    if let Some(v) = ta.cell_value {
        copts.cell_value = u32::try_from(v).map_err(|_| anyhow::anyhow!("--cell-value {v} is over 4 GiB"))?;
    }
    if let Some(d) = ta.clover_data {
        copts.clover_data = d;
    }
    let r = match (&ta.db, &ta.server) {
        (Some(url), _) => {
            if !url.starts_with("redis://") {
                bail!("--db {url}: the binding that exists is redis://HOST:PORT");
            }
            let timeout = copts.timeout;
            let connect = || boomkv::bench::redis::RedisDb::connect(url, timeout);
            runner::load_and_run_db(connect, w, run_opts, phases)?
        }
        (None, Some(addr)) => {
            let ep = Endpoint::parse_for(addr, ta.transport)?;
            boomkv::with_transport!(ep.backend(), t => runner::load_and_run(&t, &ep, &copts, w, run_opts, phases)
                .map_err(|e| crate::common::with_server(e, &ep))?)
        }
        (None, None) => {
            let backend = ta.transport.unwrap_or(Backend::Shm);
            // The embedded server takes the workload's values, as large as a segment and
            // a transfer allow: refused here, before a pool is sized for them.
            let value = cfg.value_size.max();
            let fits = ta.segment_size
                - boomkv::log::format::SEGMENT_HEADER_SIZE
                - boomkv::log::format::ENTRY_HEADER_SIZE
                - u64::from(boomkv::log::format::MAX_KEY_LEN);
            let carried = u64::from(boomkv::proto::value_limit(ta.protocol));
            let limit = fits.min(carried);
            if value > limit {
                let why = if fits < carried {
                    format!(
                        "a --segment-size {} segment holds values up to {limit} bytes",
                        short_bytes(ta.segment_size)
                    )
                } else if carried < u64::from(boomkv::server::MAX_VALUE_LIMIT) {
                    format!("{} carries values up to {limit} bytes (in one message)", ta.protocol)
                } else {
                    format!("one transfer carries values up to {limit} bytes")
                };
                bail!("the workload's values are up to {value} bytes (--size, fieldlength): {why}");
            }
            let pool_size = match ta.pool_size {
                Some(p) => p,
                None => embedded_pool_size(
                    cfg,
                    run_opts.ops,
                    (run_opts.clients.unwrap_or(threads), a.clients.is_some()),
                    ta,
                )?,
            };
            let mut server = boomkv::server::ServerConfig { log_clients: false, ..Default::default() };
            server.max_value = server.max_value.max(value as u32);
            if let Some(n) = ta.workers {
                server.workers = n;
            }
            boomkv::bench::embedded::allow_run_clients(&mut server, run_opts.clients.unwrap_or(threads));
            server.place(layout);
            let eo = EmbeddedOptions {
                parent: ta.pmem.clone(),
                pool_size,
                segment_size: ta.segment_size,
                index: ta.index.unwrap_or(if has_scans { IndexKind::Ordered } else { IndexKind::Hash }),
                flush: None,
                server,
            };
            // A full pool is the size this command chose, or the one given: say which.
            let full = |e: boomkv::Error| -> anyhow::Error {
                if !e.is_pool_full() {
                    return e.into();
                }
                let size = boomkv::units::human_bytes(pool_size);
                let hint = match ta.pool_size {
                    Some(_) => format!("the --pool-size {size} pool filled; give a larger one"),
                    None if run_opts.ops == u64::MAX && cfg.insert_proportion > 0.0 => format!(
                        "the embedded pool ({size}) filled: a run bounded by time only is sized for its inserts to \
                         double --records; give --pool-size (a sparse file) or bound the run with --ops"
                    ),
                    None => format!("the embedded pool ({size}) filled; give --pool-size"),
                };
                anyhow::anyhow!("{e}: {hint}")
            };
            boomkv::with_transport!(backend, t => {
                let emb = Embedded::start(t.clone(), backend, &eo)?;
                let ep = emb.endpoint().clone();
                runner::load_and_run(&t, &ep, &copts, w, run_opts, phases).map_err(full)?
            })
        }
    };
    Ok(r)
}

/// Writes the YCSB text report (stdout or `exportfile`), then `--csv` and `--json`.
/// A text value as one field of a report row: YCSB's rows are `[SERIES], name, value`,
/// read by splitting at commas, so a comma in a value (`zipfian (YCSB scrambled, ...)`)
/// would make a fourth field.
fn report_value(v: &str) -> std::borrow::Cow<'_, str> {
    if v.contains(',') {
        v.replace(',', ";").into()
    } else {
        v.into()
    }
}

fn write_reports(
    a: &YcsbArgs,
    spec: &WorkloadSpec,
    config: &[(&'static str, String)],
    result: &RunResult,
    space: Option<boomkv::log::SpaceReport>,
    machine: &boomkv::bench::busy::RunMachine,
    pcts: &[f64],
) -> anyhow::Result<()> {
    // The text report is made whole first.
    let mut out = Vec::new();
    for (k, v) in config {
        writeln!(out, "[CONFIG], {k}, {}", report_value(v))?;
    }
    write_ycsb_text_in(&mut out, &result.measurements, &result.run, pcts, a.latency_unit)?;
    if let Some(sp) = &space {
        for (v, name) in [
            (sp.logical_bytes, "LogicalBytesWritten"),
            (sp.pm_bytes_used, "PMBytesUsed"),
            (sp.bytes_in_place, "BytesSavedInPlace"),
            (sp.live_bytes, "LiveBytes"),
            (sp.garbage_bytes, "GarbageBytes"),
            (sp.segments_in_use, "SegmentsInUse"),
        ] {
            writeln!(out, "[SPACE], {name}, {v}")?;
        }
    }
    if let Some(c) = &result.client {
        for (name, v) in c.named() {
            writeln!(out, "[CLIENT], {name}, {v}")?;
        }
    }
    // How client threads that shared a CPU waited: the cycles whose trials found
    // spinning or yielding faster, and those that decided nothing (README, "Thread
    // placement"); none when no client was crowded or BOOMKV_CROWD_WAIT chose. The load
    // phase's cycles are counted too: the choice is the process's.
    let cy = boomkv::transport::crowd::cycles();
    if !cy.is_empty() {
        writeln!(out, "[CLIENT], CrowdedWaitSpinCycles, {}", cy.spin)?;
        writeln!(out, "[CLIENT], CrowdedWaitYieldCycles, {}", cy.yielded)?;
        writeln!(out, "[CLIENT], CrowdedWaitUndecidedCycles, {}", cy.undecided)?;
    }
    for (name, v) in machine.rows() {
        writeln!(out, "[MACHINE], {name}, {v}")?;
    }
    // The text report goes out first, and the files are written whatever became of it:
    // a reader that stops early (`| head`) costs none of them, and a file that cannot
    // be written costs not the report. The first error is the command's.
    let printed = match spec.export_file() {
        Some(p) => {
            crate::common::write_replacing(&p, &out).with_context(|| format!("exportfile: writing {}", p.display()))
        }
        None => {
            let mut o = crate::common::stdout();
            o.write_all(&out).and_then(|()| o.flush()).map_err(anyhow::Error::from)
        }
    };
    let files = (|| -> anyhow::Result<()> {
        if let Some(csv) = &a.csv {
            let existing = boomkv::bench::report::csv_header(csv).context("--csv")?;
            let (schema, values) = csv_schema(config, pcts, existing.as_deref());
            let torn = append_csv(csv, &schema, &values, &result.measurements, &result.run).context("--csv")?;
            if torn > 0 {
                eprintln!(
                    "boomctl: warning: --csv {}: cut a torn last row ({torn} bytes without a line end: a write cut \
                     short, as by a full disk) before appending",
                    csv.display()
                );
            }
        }
        if let Some(j) = &a.json {
            let mut v = json_report(&result.measurements, &result.run, pcts, true);
            v["config"] = config.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(v.as_str()))).collect();
            if let Some(sp) = space {
                v["space"] = serde_json::to_value(sp)?;
            }
            if let Some(c) = &result.client {
                v["client"] = serde_json::to_value(c)?;
            }
            v["machine"] = serde_json::to_value(machine)?;
            crate::common::write_replacing(j, &serde_json::to_vec_pretty(&v)?)
                .with_context(|| format!("--json: writing {}", j.display()))?;
        }
        Ok(())
    })();
    printed.and(files)
}

/// The `--csv` schema of a run with `config` and the percentiles `pcts` (none: the
/// default four), and the row's context values. The configured operation count is
/// left out: the run's own `operations` column has it. Each operation's series has an
/// `Intended-` one beside it (empty cells without a target). A file whose header
/// (`existing`) is that of earlier versions (without the intended series and
/// `max_execution_time`; before that, with the configured count too) is appended to
/// in its own layout.
fn csv_schema<'c>(
    config: &'c [(&'static str, String)],
    pcts: &[f64],
    existing: Option<&[String]>,
) -> (CsvSchema, Vec<&'c str>) {
    let pcts = if pcts.is_empty() { vec![50.0, 95.0, 99.0, 99.9] } else { pcts.to_vec() };
    fn schema<'c>(context: &[&'c (&'static str, String)], pcts: &[f64]) -> (CsvSchema, Vec<&'c str>) {
        let names: Vec<&str> = context.iter().map(|(k, _)| *k).collect();
        (CsvSchema::new(&names).with_percentiles(pcts), context.iter().map(|(_, v)| v.as_str()).collect())
    }
    let without = |names: &[&str]| -> Vec<&'c (&'static str, String)> {
        config.iter().filter(|(k, _)| !names.contains(k)).collect()
    };
    let (current, values) = schema(&without(&["operations"]), &pcts);
    let current = (current.with_intended(), values);
    let Some(existing) = existing else { return current };
    let earlier = [
        schema(&without(&["max_execution_time"]), &pcts),
        schema(&without(&["operations", "max_execution_time"]), &pcts),
    ];
    earlier.into_iter().find(|s| s.0.header() == existing).unwrap_or(current)
}

/// The run's `[CONFIG]` rows, with the thread placement `pin`.
fn full_config(
    a: &YcsbArgs,
    cfg: &boomkv::workload::CoreConfig,
    o: &RunOptions,
    (threads, seed, operations): (usize, u64, u64),
    layout: Option<&boomkv::cpus::Layout>,
) -> Vec<(&'static str, String)> {
    let mut config = run_config(a, cfg, o, threads, seed, operations);
    // A CPU list's commas read as `+` (any other comma in a value: see `report_value`).
    config.push(("pin", layout.map_or_else(|| "off".to_string(), |l| l.to_string().replace(',', "+"))));
    config
}

/// The run's configuration, as `[CONFIG]` rows, CSV context columns and the JSON
/// `config` object (same names everywhere).
fn run_config(
    a: &YcsbArgs,
    cfg: &boomkv::workload::CoreConfig,
    o: &RunOptions,
    threads: usize,
    seed: u64,
    operations: u64,
) -> Vec<(&'static str, String)> {
    use boomkv::workload::RequestDistribution as D;
    let ta = &a.target_args;
    let transport = ta.transport.map(|b| b.to_string()).unwrap_or_else(|| match &ta.server {
        Some(s) => Endpoint::parse(s).map(|e| e.backend().to_string()).unwrap_or_default(),
        None => "shm".into(),
    });
    let (lo, hi) = (cfg.value_size.min(), cfg.value_size.max());
    let value_bytes = if lo == hi { lo.to_string() } else { format!("{lo}..{hi}") };
    let distribution = match (&cfg.request_distribution, cfg.theta) {
        (D::Zipfian, None) => "zipfian (YCSB scrambled; Gray et al. theta 0.99)".to_string(),
        (D::Zipfian, Some(t)) => format!("zipfian (true Zipf; theta {t})"),
        (D::Latest, None) => "latest (YCSB; Gray et al. theta 0.99)".to_string(),
        (D::Latest, Some(t)) => format!("latest (true Zipf; theta {t})"),
        (D::Uniform, _) => "uniform".into(),
        (D::Hotspot { data_fraction, opn_fraction }, _) => {
            format!("hotspot ({data_fraction} of keys get {opn_fraction} of ops)")
        }
        (D::Sequential, _) => "sequential".into(),
        (D::Exponential { percentile, frac }, _) => format!("exponential (percentile {percentile} frac {frac})"),
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let (durability, flush) = match (&ta.server, &ta.db) {
        (Some(_), _) | (_, Some(_)) => ("server's".to_string(), "server's".to_string()),
        (None, None) => ("flush".to_string(), "best available".to_string()),
    };
    let boomkv_only = |v: String| if ta.db.is_some() { "-".to_string() } else { v };
    // Another store: its name as the protocol, its address as the transport.
    let (protocol, transport) = match &ta.db {
        Some(url) => ("redis".to_string(), url.clone()),
        None => (ta.protocol.name().to_string(), transport),
    };
    vec![
        ("protocol", protocol),
        ("transport", transport),
        ("workload", a.w.label()),
        ("records", cfg.record_count.to_string()),
        ("operations", operations.to_string()),
        // The run's bound in time (maxexecutiontime, --duration), beside its count.
        ("max_execution_time", o.duration.map_or_else(|| "none".to_string(), |d| format!("{}", d.as_secs_f64()))),
        ("threads", threads.to_string()),
        ("clients", o.clients.unwrap_or(threads).to_string()),
        ("value_size", value_bytes),
        ("distribution", distribution),
        ("seed", seed.to_string()),
        ("target", o.target.map(|t| t.to_string()).unwrap_or_else(|| "none".into())),
        // boomkv's client settings; another store has none ("-").
        ("update_mode", boomkv_only(format!("{:?}", ta.update_mode).to_lowercase())),
        (
            "fetch_size",
            boomkv_only(match ta.fetch_size {
                FetchSize::Auto => "auto".to_string(),
                FetchSize::Bytes(n) => n.to_string(),
            }),
        ),
        ("rfp_mode", boomkv_only(ta.rfp_mode.name().to_string())),
        ("durability", durability),
        ("flush", flush),
        ("host", host),
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("commit", env!("BOOMKV_COMMIT").to_string()),
    ]
}

/// Writes a run of `ops` operations may make beyond one per key (Clover keeps every
/// version while its clients run): every operation, or a run bounded by time only
/// (`ops` unbounded), four per key.
fn run_writes(ops: u64, keys: u64) -> u64 {
    if ops == u64::MAX {
        keys.saturating_mul(4)
    } else {
        ops
    }
}

/// Keys a run of `ops` operations of `cfg` can write: the records and the inserts,
/// and one more for the inserts' rounding.
fn workload_keys(cfg: &boomkv::workload::CoreConfig, ops: u64) -> u64 {
    cfg.record_count.saturating_add(workload_inserts(cfg, ops)).saturating_add(1)
}

/// The inserts a run of `ops` operations of `cfg` makes (one bounded by time only,
/// `ops` unbounded: as many as the records).
fn workload_inserts(cfg: &boomkv::workload::CoreConfig, ops: u64) -> u64 {
    match (ops, cfg.insert_proportion > 0.0) {
        (_, false) => 0,
        (u64::MAX, true) => cfg.record_count,
        (_, true) => (ops as f64 * cfg.insert_proportion) as u64,
    }
}

/// The measurement whose `hdrhistogram.fileoutput` file (`<prefix><NAME>.hdr`) `p` is:
/// by the name given, or by the one a link given resolves to (read, for a link to a
/// file not made yet).
fn hdr_file_at(prefix: &str, p: &std::path::Path) -> Option<String> {
    let resolved = std::fs::canonicalize(p)
        .ok()
        .or_else(|| std::fs::read_link(p).ok().map(|t| p.parent().unwrap_or(std::path::Path::new("")).join(t)));
    [Some(p.to_path_buf()), resolved].into_iter().flatten().find_map(|q| {
        let m = boomkv::bench::hlog::YcsbHdrFiles::measurement_of(prefix, q.file_name()?.to_str()?)?;
        crate::common::same_file(&q, &boomkv::bench::hlog::YcsbHdrFiles::path(prefix, &m)).then_some(m)
    })
}

/// The embedded pool's size, from the key space (not the operation count: the cleaner
/// reclaims what updates supersede), by [`boomkv::bench::embedded::pool_size_for`]. A run
/// bounded only by time that inserts is sized for the record count to double. Fails
/// with a hint when the pool directory's file system cannot hold it.
fn embedded_pool_size(
    cfg: &boomkv::workload::CoreConfig,
    ops: u64,
    (clients, a_clients_given): (usize, bool),
    ta: &TargetArgs,
) -> anyhow::Result<u64> {
    let keys = workload_keys(cfg, ops);
    let (value, clients) = (cfg.value_size.max(), clients as u64);
    let writes = run_writes(ops, keys);
    let size =
        boomkv::bench::embedded::pool_size_for_protocol(ta.protocol, keys, writes, value, clients, ta.segment_size);
    let need = boomkv::bench::embedded::pool_need(keys, value, clients, ta.segment_size)
        + boomkv::bench::embedded::passive_need(ta.protocol, keys, writes, value, ta.segment_size);
    let dir = ta.pmem.clone().unwrap_or_else(boomkv::bench::embedded::default_parent);
    if let Ok(fs) = rustix::fs::statvfs(&dir) {
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        if need > free {
            // Each client is granted log segments of its own, and the pool keeps a few
            // spare: with many clients, or large segments, that is what the pool is made
            // of, and the message says so.
            let for_clients = boomkv::bench::embedded::clients_need(clients, ta.segment_size);
            let for_segments = 4 * ta.segment_size;
            let seg = short_bytes(ta.segment_size);
            let (what, fewer) = if for_clients >= for_segments && for_clients > need / 2 {
                let given = if a_clients_given { "--clients" } else { "--threads (or --clients)" };
                (format!("{clients} clients (two {seg} segments each)"), format!("fewer {given}"))
            } else if for_segments > need / 2 {
                (format!("{seg} segments (four spare, two per client)"), "a smaller --segment-size".to_string())
            } else {
                // The records and the inserts, as the user counts them.
                let what = match workload_inserts(cfg, ops) {
                    0 => boomkv::units::count(cfg.record_count, "record"),
                    n => format!("{} and {n} inserts", boomkv::units::count(cfg.record_count, "record")),
                };
                (
                    format!("{what} of up to {} each", short_bytes(cfg.value_size.max())),
                    "fewer --records, a smaller --size".to_string(),
                )
            };
            bail!(
                "the embedded pool needs {} for {what}, but {} has {} free; use {fewer}, \
                 --pmem DIR on a larger file system, or --pool-size",
                boomkv::units::human_bytes(need),
                dir.display(),
                boomkv::units::human_bytes(free)
            );
        }
        // Sparse, but leave the file system room if the power of two would not fit.
        return Ok(if size > free { need } else { size });
    }
    Ok(size)
}

/// `--records`: a count of at least 1. YCSB reads `recordcount=0` as 2^31 - 1 records,
/// which `-p recordcount=0` still asks for; the flag says what it means.
fn at_least_one_record(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => {
            Err("at least 1 (YCSB reads recordcount=0 as 2^31 - 1 records: -p recordcount=0 asks for that)".into())
        }
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
