//! `boomctl bench-transport`: the transport floor benchmark (later `boomctl sweep transport`).

use std::path::PathBuf;

use anyhow::{bail, Context};
use boomkv::bench::floor::{self, FloorOptions};
use boomkv::transport::Backend;

/// Measure the transport floor: WRITE, WRITE_WITH_IMM + reply, SEND/RECV and READ
/// latency and WRITE message rate of each backend, next to a cross-core cache-line
/// ping-pong (shm), a plain TCP ping-pong (tcp) or perftest on the same device (verbs)
/// measured in the same run.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  boomctl bench-transport                       # shm and tcp, every size\n  \
boomctl bench-transport --transport shm --sizes 64,4k --iters 100000\n  \
boomctl bench-transport --transport verbs --csv floor.csv   # needs --features rdma and a device")]
pub struct BenchTransportArgs {
    /// Backend to measure: shm, tcp, verbs, or all (shm and tcp). verbs uses the device
    /// of $BOOMKV_RDMA_DEVICE (else the first), with perftest's ib_write_lat,
    /// ib_send_lat and ib_read_lat on the same device as its baselines.
    #[arg(long, default_value = "all", ignore_case = true, value_parser = crate::common::one_of::<String>(&["shm", "tcp", "verbs|rdma|ib", "all"]))]
    pub transport: String,
    /// verbs: also measure with each of the RDMA design guidelines' optimizations off
    /// (inline, selective signaling, doorbell batching, batched receive refill), in the
    /// same run.
    #[arg(long)]
    pub tuning_off: bool,
    /// verbs: skip the perftest baselines.
    #[arg(long)]
    pub no_perftest: bool,
    /// Message sizes, comma separated, 1 byte to 16 MiB (suffixes k, M: KiB, MiB);
    /// 64 B is always measured too: the checks compare 64-byte round trips.
    #[arg(long, value_delimiter = ',', default_value = "32,64,128,256,512,1k,2k,4k,8k,16k", value_parser = crate::common::size_arg)]
    pub sizes: Vec<u64>,
    /// Timed iterations per test and size (1 to 10,000,000).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=floor::MAX_ITERS as u64))]
    pub iters: u64,
    /// Untimed warm-up iterations before each series (0 to 10,000,000).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=floor::MAX_ITERS as u64))]
    pub warmup: u64,
    /// Also write every series to this CSV file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Do not pin the client and server threads to the first two CPUs the process may use.
    #[arg(long)]
    pub no_pin: bool,
    /// Exit with an error when a check against the baselines fails.
    #[arg(long)]
    pub strict: bool,
}

/// Runs the benchmark and prints the tables (and the CSV file when asked).
pub fn run(args: BenchTransportArgs) -> anyhow::Result<()> {
    // Its shm socket is in the temporary directory: an interrupted run removes it.
    crate::common::clean_up_on_signal(None)?;
    // clap took one of the names (in lower case): only "all" is not a backend.
    let backends = match args.transport.as_str() {
        "all" => vec![Backend::Shm, Backend::Tcp],
        other => match other.parse::<Backend>()? {
            Backend::Verbs if !cfg!(feature = "rdma") => {
                bail!("--transport verbs: this boomctl was built without RDMA support (--features rdma)")
            }
            b => vec![b],
        },
    };
    let sizes: Vec<usize> = args.sizes.iter().map(|&s| usize::try_from(s).unwrap_or(usize::MAX)).collect();
    // The library checks too; here the message names the option.
    if let Some(s) = sizes.iter().find(|&&s| s == 0 || s > floor::MAX_SIZE) {
        bail!("--sizes: {s} bytes is outside 1 byte to 16 MiB");
    }
    let opts = FloorOptions {
        backends,
        sizes,
        iters: args.iters as usize,
        warmup: args.warmup as usize,
        pin: !args.no_pin,
        socket_dir: std::env::temp_dir(),
        perftest: !args.no_perftest,
        verbs_tuning_off: args.tuning_off,
    };
    if let Some(path) = &args.csv {
        crate::common::check_writable("--csv", path)?;
    }
    let mut out = crate::common::stdout();
    let report = floor::run(&opts, &mut out).context("transport floor benchmark")?;
    if let Some(path) = &args.csv {
        let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        report.write_csv(&mut f).with_context(|| format!("writing {}", path.display()))?;
        crate::outln!(" csv: {}", path.display())?;
    }
    if args.strict {
        let failed: Vec<_> = report.checks.iter().filter(|c| !c.passed()).map(|c| c.what.clone()).collect();
        if !failed.is_empty() {
            bail!("checks failed: {}", failed.join("; "));
        }
    }
    Ok(())
}
