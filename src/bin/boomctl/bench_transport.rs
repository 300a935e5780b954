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
pub struct BenchTransportArgs {
    /// Backend to measure: shm, tcp, verbs, or all (shm and tcp). verbs uses the device
    /// of $BOOMKV_RDMA_DEVICE (else the first), with perftest's ib_write_lat,
    /// ib_send_lat and ib_read_lat on the same device as its baselines.
    #[arg(long, default_value = "all")]
    pub transport: String,
    /// verbs: also measure with each of the RDMA design guidelines' optimizations off
    /// (inline, selective signaling, doorbell batching, batched receive refill), in the
    /// same run.
    #[arg(long)]
    pub tuning_off: bool,
    /// verbs: skip the perftest baselines.
    #[arg(long)]
    pub no_perftest: bool,
    /// Message sizes in bytes, comma separated; a k suffix means KiB.
    #[arg(long, value_delimiter = ',', default_value = "32,64,128,256,512,1k,2k,4k,8k,16k")]
    pub sizes: Vec<String>,
    /// Timed iterations per test and size.
    #[arg(long, default_value_t = 20_000)]
    pub iters: usize,
    /// Untimed warm-up iterations before each series.
    #[arg(long, default_value_t = 1_000)]
    pub warmup: usize,
    /// Also write every series to this CSV file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Do not pin the client and server threads to CPUs 0 and 1.
    #[arg(long)]
    pub no_pin: bool,
    /// Exit with an error when a check against the baselines fails.
    #[arg(long)]
    pub strict: bool,
}

fn parse_size(s: &str) -> anyhow::Result<usize> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.strip_suffix("kib").or_else(|| t.strip_suffix('k')) {
        Some(n) => (n, 1024),
        None => (t.strip_suffix('b').unwrap_or(&t), 1),
    };
    let n: usize = num.trim().parse().with_context(|| format!("bad size '{s}' (examples: 64, 4k)"))?;
    Ok(n * mul)
}

/// Runs the benchmark and prints the tables (and the CSV file when asked).
pub fn run(args: BenchTransportArgs) -> anyhow::Result<()> {
    let backends = match args.transport.to_ascii_lowercase().as_str() {
        "all" => vec![Backend::Shm, Backend::Tcp],
        other => match other.parse::<Backend>()? {
            Backend::Verbs if !cfg!(feature = "rdma") => {
                bail!("--transport verbs: this boomctl was built without RDMA support (--features rdma)")
            }
            b => vec![b],
        },
    };
    let sizes = args.sizes.iter().map(|s| parse_size(s)).collect::<anyhow::Result<Vec<_>>>()?;
    if args.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let opts = FloorOptions {
        backends,
        sizes,
        iters: args.iters,
        warmup: args.warmup,
        pin: !args.no_pin,
        socket_dir: std::env::temp_dir(),
        perftest: !args.no_perftest,
        verbs_tuning_off: args.tuning_off,
    };
    if let Some(path) = &args.csv {
        crate::common::check_writable("--csv", path)?;
    }
    let mut out = std::io::stdout().lock();
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

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64").unwrap(), 64);
        assert_eq!(parse_size("16k").unwrap(), 16384);
        assert_eq!(parse_size("2KiB").unwrap(), 2048);
        assert_eq!(parse_size("32B").unwrap(), 32);
        assert!(parse_size("x").is_err());
    }
}
