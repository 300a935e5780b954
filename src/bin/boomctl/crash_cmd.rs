//! `crashtest`: simulated power failures at random points, checked against a model.

use anyhow::bail;
use boomkv::crashtest::{self, CrashTestOptions};
use boomkv::transport::Backend;
use boomkv::wire::Protocol;

use crate::common::size_arg;

/// Crash the server at random points on simulated persistent memory and check that
/// every acknowledged write survives and nothing unwritten appears.
#[derive(clap::Args, Debug)]
#[command(after_help = "Each iteration runs clients against a fresh pool on the crash-simulating media, fails at a\n\
random write-back, fence or protocol step, recovers the image (durable lines plus a random subset\n\
of dirty lines, torn at 8-byte granularity) and checks it. A failure prints the seed and the\n\
command that replays it.\n\nExamples:\n  boomctl crashtest --iterations 10000\n  boomctl crashtest --protocol rdmp --threads 4 --seed 42")]
pub struct CrashArgs {
    /// Crashes to simulate (at least 1).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: u64,
    /// Seed of the first iteration (iteration i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Protocol the clients speak.
    #[arg(long, default_value = "boom", value_parser = crate::common::protocol_parser())]
    protocol: Protocol,
    /// Client threads (1 to 256).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=boomkv::crashtest::MAX_THREADS as u64))]
    threads: u64,
    /// Operations per client per iteration (at least 1).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    ops: u64,
    /// Distinct keys (at least 1).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Largest value.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, default_value = "6000")]
    max_value: u64,
    /// Transport between the clients and the server.
    #[arg(long, ignore_case = true, value_name = "shm|tcp|verbs", default_value = "shm", value_parser = crate::common::one_of::<Backend>(&["shm", "tcp", "verbs|rdma|ib"]))]
    transport: Backend,
    /// Probability that a line not yet written back survives the crash (0 to 1).
    #[arg(long, default_value_t = 0.5, value_parser = probability, allow_negative_numbers = true)]
    keep: f64,
    /// Keep whole lines instead of tearing them at 8-byte granularity.
    #[arg(long)]
    no_tear: bool,
    /// Do not run the cleaner.
    #[arg(long)]
    no_cleaner: bool,
    /// Plant a known bug (builds with --features planted-bugs only):
    /// skip-writeback, count-first, late-lease, cc-skip-flush (rdmp-cc), herd-early-reply
    /// (herd), rfp-early-result (rfp), pdpm-early-commit (pdpm-direct) or clover-skip-flush
    /// (clover).
    #[arg(long, value_name = "BUG")]
    plant: Option<String>,
    /// Keep the crash image (and write history) of every failing iteration in DIR,
    /// for `boomctl inspect-log --pmem DIR/crash-SEED.pool`.
    #[arg(long, value_name = "DIR")]
    save_failures: Option<std::path::PathBuf>,
    /// Stop at the first failing iteration.
    #[arg(long)]
    stop_on_failure: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: CrashArgs) -> anyhow::Result<()> {
    crate::common::clean_up_on_signal(None)?;
    if let Some(p) = &a.plant {
        #[cfg(feature = "planted-bugs")]
        boomkv::log::planted::set(p.parse().map_err(anyhow::Error::msg)?);
        #[cfg(not(feature = "planted-bugs"))]
        bail!("--plant {p} needs a build with --features planted-bugs");
    }
    let o = CrashTestOptions {
        iterations: a.iterations,
        seed: a.seed,
        protocol: a.protocol,
        threads: a.threads as usize,
        ops: a.ops,
        keys: a.keys,
        max_value: usize::try_from(a.max_value).unwrap_or(usize::MAX),
        keep_probability: a.keep,
        tear: !a.no_tear,
        cleaner: !a.no_cleaner,
        save_failures: a.save_failures.clone(),
        stop_on_failure: a.stop_on_failure,
        ..Default::default()
    };
    if let Some(d) = &a.save_failures {
        std::fs::create_dir_all(d).map_err(|e| anyhow::anyhow!("--save-failures {}: {e}", d.display()))?;
    }
    let quiet = a.quiet || a.json;
    let show = |done: u64, r: &crashtest::CrashTestReport| {
        if !quiet && (done % 50 == 0 || done == a.iterations) {
            eprintln!(
                "crashtest: {done}/{} crashes, {} acknowledged writes checked, {} lost, {} corrupted",
                a.iterations, r.acked_checked, r.lost, r.corrupted
            );
        }
    };
    let rep = boomkv::with_transport!(a.transport, t => crashtest::run(&t, a.transport, &o, show)?);
    if a.json {
        crate::outln!("{}", serde_json::to_string_pretty(&rep)?)?;
    } else {
        crate::outln!("crashes simulated          {}", rep.crashes)?;
        crate::outln!("acknowledged writes checked {}", rep.acked_checked)?;
        crate::outln!("lost                       {}", rep.lost)?;
        crate::outln!("corrupted                  {}", rep.corrupted)?;
        crate::outln!("time                       {:.1} s", rep.elapsed_s)?;
        for f in &rep.failures {
            crate::outln!("FAILED at seed {} (crash point {}):", f.seed, f.crash_point)?;
            for v in f.violations.iter().take(5) {
                crate::outln!("  {}: {}", v.kind, v.detail)?;
            }
            crate::outln!(
                "  replay: boomctl crashtest --iterations 1 --seed {} --protocol {} --threads {} --ops {} --keys {} --max-value {} --transport {} --keep {}{}{}{}",
                f.seed, a.protocol, o.threads, o.ops, o.keys, o.max_value, a.transport, a.keep,
                if a.no_tear { " --no-tear" } else { "" },
                if a.no_cleaner { " --no-cleaner" } else { "" },
                a.plant.as_ref().map(|p| format!(" --plant {p}")).unwrap_or_default(),
            )?;
        }
    }
    if rep.lost + rep.corrupted > 0 {
        bail!("the crash promise was broken: {} lost, {} corrupted", rep.lost, rep.corrupted);
    }
    // A run whose crashes all came before any write was acknowledged checked nothing:
    // it is no pass (`--ops 2` with boom did that in every one of 40 seeds).
    if rep.acked_checked == 0 && rep.crashes > 0 {
        bail!(
            "no acknowledged write was checked in {} crash{}: with --ops {} no write was acknowledged before its \
             crash, so the run proves nothing; give more --ops (or --threads)",
            rep.crashes,
            if rep.crashes == 1 { "" } else { "es" },
            a.ops
        );
    }
    Ok(())
}

/// `--keep`: a probability, 0 to 1.
fn probability(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        Ok(_) => Err("a probability is between 0 and 1".into()),
        Err(e) => Err(format!("{e} (a probability: 0 to 1, e.g. 0.5)")),
    }
}
