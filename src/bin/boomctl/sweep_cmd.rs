//! `boomctl sweep`: run a preset grid of benchmarks, write every raw result, render
//! the paper's figures and a summary against the paper.

use std::path::PathBuf;

use anyhow::{bail, Context};
use boomkv::bench::runner::Progress;
use boomkv::bench::sweep::{self, Axes, GridFile, SweepOptions};
use boomkv::transport::{Backend, Endpoint};

/// The end of `boomctl sweep --help`, after the presets.
const SWEEP_HELP: &str =
    "Output (default plots/<date>-<host>/): <preset>.csv (one row per grid point and repeat), .hlog
latency logs, PNG + SVG per figure, SETUP.md (machine, settings, command), SUMMARY.md.

Examples:
  boomctl sweep latency --quick                 # under 2 minutes
  boomctl sweep latency --sizes 32,1k,16k --protocols boom,rdmp --transport tcp
  boomctl sweep all --out /data/sweep-1 --resume  # continue an interrupted sweep
  boomctl sweep --grid workloads/sweep-quick.grid
  boomctl sweep --plot-only plots/2026-01-01-host # re-render from the CSV files";

/// What `--plot-only` refuses: every option of a run (it draws what the CSV files
/// hold, into their directory), not only the ones that contradict it.
const PLOT_ONLY_CONFLICTS: [&str; 24] = [
    "preset",
    "resume",
    "overwrite",
    "quick",
    "grid",
    "out",
    "sizes",
    "protocols",
    "threads",
    "thetas",
    "segment_sizes",
    "mixes",
    "flushes",
    "ops",
    "keys",
    "workers",
    "client_threads",
    "transport",
    "server",
    "pmem",
    "pin",
    "seed",
    "repeats",
    "quiet",
];

/// Run a grid of benchmarks that reproduces the paper's figures, then plot it.
#[derive(clap::Args, Debug)]
#[command(
    after_help = format!("{}\n{}", sweep::presets::help(), SWEEP_HELP),
    // clap's own line reads `boomctl sweep <PRESET>...` after a conflict, even when the
    // preset was the conflict (`sweep latency --plot-only DIR`): the three ways, named.
    override_usage = "boomctl sweep [OPTIONS] <PRESET>...\n       \
                      boomctl sweep --grid <FILE> [OPTIONS] [PRESET]...\n       \
                      boomctl sweep --plot-only <DIR>"
)]
pub struct SweepArgs {
    /// Preset (see the list below), or all; several: comma separated.
    #[arg(
        value_name = "PRESET",
        required_unless_present_any = ["plot_only", "grid"],
        value_parser = clap::builder::PossibleValuesParser::new(
            sweep::Preset::ALL.map(sweep::Preset::name).into_iter().chain(["all"])
        ),
        value_delimiter = ',',
        num_args = 1,
        ignore_case = true
    )]
    preset: Vec<String>,
    /// Small op counts and fewer points (latency --quick takes under 2 minutes).
    #[arg(long)]
    quick: bool,
    /// Output directory [default: plots/DATE-HOST].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Skip grid points whose results are already in the CSV files.
    #[arg(long)]
    resume: bool,
    /// Start again when the directory already has results: each chosen preset's CSV
    /// is emptied and its HdrHistogram logs removed (other files stay).
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// Only re-render plots and the summary from the CSV files in DIR (into DIR).
    #[arg(long, value_name = "DIR", conflicts_with_all = PLOT_ONLY_CONFLICTS)]
    plot_only: Option<PathBuf>,
    /// A grid file (key = value lines: preset, transport, quick, sizes, protocols, ...);
    /// options given here override it.
    #[arg(long, value_name = "FILE")]
    grid: Option<PathBuf>,
    /// Value (or message) sizes, e.g. 32,1k,16k (threads: the first one).
    #[arg(long, value_name = "LIST")]
    sizes: Option<String>,
    /// Protocols, comma-separated (the names `--protocol` takes), or all [default: all].
    #[arg(long, value_name = "LIST")]
    protocols: Option<String>,
    /// Client thread counts (threads preset).
    #[arg(long, value_name = "LIST")]
    threads: Option<String>,
    /// Request skews: uniform or Zipf thetas, e.g. uniform,0.99,1.1 (skew, segment-size).
    #[arg(long, value_name = "LIST")]
    thetas: Option<String>,
    /// Segment sizes, e.g. 16M,64M,256M (segment-size; the first one for skew).
    #[arg(long, value_name = "LIST")]
    segment_sizes: Option<String>,
    /// YCSB mixes: a, b, c, d, f.
    #[arg(long, value_name = "LIST")]
    mixes: Option<String>,
    /// Flush instructions (writeback): clflush, clwb, clflushopt, none (no write-back: the store alone).
    #[arg(long, value_name = "LIST")]
    flushes: Option<String>,
    /// Measured operations per run; where a run also has a time (threads, writeback: 5 s;
    /// peers: 3 s; 1 s with --quick), the most it makes (transport: iterations per size).
    #[arg(long, value_name = "N")]
    ops: Option<String>,
    /// Keys of the space experiments (skew, segment-size).
    #[arg(long, value_name = "N")]
    keys: Option<String>,
    /// Worker threads of the embedded servers.
    #[arg(long, value_name = "N")]
    workers: Option<String>,
    /// peers: run each count of --threads as that many clients on N threads (fewer
    /// for a smaller count), each thread keeping its clients' requests in flight
    /// together (`ycsb --clients`), for boomkv and Redis alike [default: one thread
    /// per client, as YCSB has].
    #[arg(long, value_name = "N")]
    client_threads: Option<String>,
    /// Transport of the embedded servers: shm (default), tcp, or verbs (feature `rdma`;
    /// device from $BOOMKV_RDMA_DEVICE).
    #[arg(long, ignore_case = true, value_name = "shm|tcp|verbs", value_parser = crate::common::one_of::<Backend>(&["shm", "tcp", "verbs|rdma|ib"]))]
    transport: Option<Backend>,
    /// Drive a running server (shm:/path, host:port) instead of embedded ones.
    #[arg(long, value_name = "ADDR")]
    server: Option<String>,
    /// Where embedded servers' workers and the client threads run, as `ycsb --pin`
    /// places them: split (the workers on CPUs of their own, the clients on the
    /// others), colocate (a worker on each CPU with the client threads it serves), auto
    /// (split while each client thread has a CPU of its own, colocate past that over
    /// shm or tcp without --workers) or off. Redis is not pinned. SETUP.md says which.
    #[arg(long, value_name = "auto|split|colocate|off", value_enum, default_value = "auto")]
    pin: crate::common::PinMode,
    /// Directory for the embedded servers' temporary pools [default: /dev/shm].
    #[arg(long, value_name = "DIR")]
    pmem: Option<PathBuf>,
    /// Seed of the operation streams.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs of every point, interleaved (every point once, then again, ...): medians
    /// across repeats, intervals and verdicts come from them [default: 3 with --quick,
    /// 5 otherwise].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=100))]
    repeats: Option<u16>,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Runs `boomctl sweep`.
pub fn run(a: SweepArgs) -> anyhow::Result<()> {
    crate::common::clean_up_on_signal(a.pmem.clone())?;
    let mut stdout = crate::common::stdout();
    if let Some(dir) = &a.plot_only {
        if !dir.is_dir() {
            bail!("--plot-only {}: not a directory", dir.display());
        }
        sweep::render(dir, &mut stdout).with_context(|| format!("rendering {}", dir.display()))?;
        return Ok(());
    }
    let file = match &a.grid {
        Some(p) => GridFile::read(p)?,
        None => GridFile::default(),
    };
    let presets = match (a.preset.is_empty(), &file.presets) {
        (false, _) => sweep::parse_presets(&a.preset.join(","))?,
        (true, Some(p)) => p.clone(),
        (true, None) => bail!("name a preset (or a grid file with `preset = ...`)"),
    };
    let mut axes = file.axes.clone();
    let mut cli = Axes::default();
    for (name, v) in [
        ("sizes", &a.sizes),
        ("protocols", &a.protocols),
        ("threads", &a.threads),
        ("thetas", &a.thetas),
        ("segment-sizes", &a.segment_sizes),
        ("mixes", &a.mixes),
        ("flushes", &a.flushes),
        ("ops", &a.ops),
        ("keys", &a.keys),
        ("workers", &a.workers),
        ("client-threads", &a.client_threads),
    ] {
        if let Some(v) = v {
            cli.set(name, v)?;
        }
    }
    sweep::check_axes_used(&presets, &cli)?;
    axes.override_with(&cli);
    let server = match &a.server {
        Some(s) => Some(Endpoint::parse_for(s, a.transport).with_context(|| format!("--server {s}"))?),
        None => None,
    };
    let backend = a.transport.or(file.transport).unwrap_or(Backend::Shm);
    if backend == Backend::Verbs && !cfg!(feature = "rdma") {
        bail!("--transport verbs: this boomctl was built without RDMA support (--features rdma)");
    }
    let mut o = SweepOptions::new(presets, a.out.clone().unwrap_or_else(sweep::default_out_dir));
    o.quick = a.quick || file.quick.unwrap_or(false);
    o.backend = backend;
    o.server = server;
    o.axes = axes;
    o.resume = a.resume;
    o.overwrite = a.overwrite;
    o.progress = Progress::auto(a.quiet);
    o.pmem_dir.clone_from(&a.pmem);
    o.seed = a.seed;
    o.pin = a.pin.into();
    o.repeats = a.repeats.map(usize::from).or(file.repeats).unwrap_or(if o.quick { 3 } else { 5 });
    o.command = std::env::args().map(|s| shell_quote(&s)).collect::<Vec<_>>().join(" ");
    let outcome = sweep::run(&o, &mut stdout)?;
    if !outcome.failed.is_empty() {
        bail!(
            "{} of {} runs failed (see above); `--resume` runs them again",
            outcome.failed.len(),
            outcome.failed.len() + outcome.ran
        );
    }
    Ok(())
}
