//! `boomctl`: the BOOM-KV command-line toolkit and benchmark suite.
//!
//! Each subcommand parses its arguments here and calls into the `boomkv` library;
//! errors come back typed, get context, and are printed as one line on stderr.

#[path = "boomctl/bench_transport.rs"]
mod bench_transport;
#[path = "boomctl/common.rs"]
mod common;
#[path = "boomctl/crash_cmd.rs"]
mod crash_cmd;
#[path = "boomctl/kv_cmds.rs"]
mod kv_cmds;
#[path = "boomctl/pool_cmds.rs"]
mod pool_cmds;
#[path = "boomctl/sweep_cmd.rs"]
mod sweep_cmd;
#[path = "boomctl/ycsb_cmd.rs"]
mod ycsb_cmd;

use std::process::ExitCode;

use clap::Parser;

/// BOOM-KV: a persistent key-value store whose clients write straight into the
/// server's persistent memory with one-sided RDMA operations, and the benchmarks
/// that compare it with the protocols it claims to beat.
#[derive(Parser, Debug)]
#[command(
    name = "boomctl",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("BOOMKV_COMMIT"), ")"),
    about,
    long_about = None,
    propagate_version = true,
    after_help = "Examples:
  boomctl ycsb --mix b --size 2k                   # YCSB B, 2 KiB values, embedded server (nothing to set up)
  boomctl ycsb -P workloads/workloada -threads 2 -target 1000 -s -p recordcount=1000   # a YCSB command line
  boomctl serve --pmem /mnt/pmem0 --listen 0.0.0.0:7470
  boomctl put --server 10.0.0.5:7470 user42 hello && boomctl get --server 10.0.0.5:7470 user42
  boomctl sweep latency --quick                    # the paper's figures 13 and 14 on this machine
  boomctl recover --pmem /mnt/pmem0 --keys         # what survived, offline

Each command has its own --help with more examples."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Run a server on a pool (recovers it first).
    Serve(kv_cmds::ServeArgs),
    /// Store a value under a key.
    Put(kv_cmds::PutArgs),
    /// Print a key's value.
    Get(kv_cmds::GetArgs),
    /// Delete a key.
    Del(kv_cmds::DelArgs),
    /// Show a running server's statistics.
    Stats(kv_cmds::StatsArgs),
    /// Load a YCSB workload's records into a running server.
    Load(ycsb_cmd::LoadArgs),
    /// Run a YCSB workload (embedded server unless --server) and print YCSB's report.
    Ycsb(Box<ycsb_cmd::YcsbArgs>),
    /// Simulate power failures at random points and check the crash promise.
    Crashtest(crash_cmd::CrashArgs),
    /// Recover a pool offline and print a summary (keys, space, segments, damage).
    Recover(pool_cmds::RecoverArgs),
    /// Show a pool's header, segments and entries (read-only; works on crashed pools).
    InspectLog(pool_cmds::InspectArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Example:\n  boomctl completions bash > /etc/bash_completion.d/boomctl")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Measure the transport floor: latency and message rate of each transport backend
    /// next to a cache-line ping-pong and a plain TCP ping-pong.
    BenchTransport(bench_transport::BenchTransportArgs),
    /// Run a grid of benchmarks that reproduces the paper's figures; write CSV, plots,
    /// SETUP.md and a summary against the paper.
    Sweep(sweep_cmd::SweepArgs),
}

/// YCSB's own single-dash flags after `ycsb` (`-threads 2`, `-target 1000`, `-load`,
/// `-t`, `-l LABEL`, `-db X`), rewritten to boomctl's, so a YCSB command line works unchanged
/// after `boomctl ycsb`. (`-P`, `-p` and `-s` are boomctl flags as they are.)
fn ycsb_compat_args(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let Some(pos) = args.iter().position(|a| a == "ycsb") else { return args };
    if args[1..pos].iter().any(|a| !a.to_string_lossy().starts_with('-')) {
        return args; // "ycsb" is a value of another subcommand
    }
    let mut out: Vec<std::ffi::OsString> = args[..=pos].to_vec();
    let mut it = args[pos + 1..].iter().cloned();
    let mut t_given = false;
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-threads") => out.push("--threads".into()),
            Some("-target") => out.push("--target".into()),
            Some("-l") => {
                out.push("-p".into());
                let mut label = std::ffi::OsString::from("label=");
                label.push(it.next().unwrap_or_default());
                out.push(label);
            }
            Some("-load") => out.extend(["-p".into(), "dotransactions=false".into()]),
            // As in YCSB, the last of -load and -t wins; `--ycsb-t` says -t was given
            // (then, against a loaded store, the transactions run alone).
            Some("-t") => {
                out.extend(["-p".into(), "dotransactions=true".into()]);
                if !t_given {
                    out.push("--ycsb-t".into());
                    t_given = true;
                }
            }
            Some("-db") => {
                let db = it.next().unwrap_or_default();
                eprintln!("boomctl: warning: -db {} ignored: the database is boomkv", db.to_string_lossy());
            }
            Some("--") => {
                out.push(a);
                out.extend(it.by_ref());
            }
            _ => out.push(a),
        }
    }
    out
}

/// The command line's grammar: `Cli`'s, where every option that takes a value also
/// takes a negative number. clap would otherwise read `--pool-size -1` as an unknown
/// flag `-1`, where the option's own check says what is wrong with the number (no
/// boomctl flag is a digit, so nothing is shadowed; `-5M` is still read as flags).
fn command() -> clap::Command {
    fn negatives(c: clap::Command) -> clap::Command {
        c.mut_args(|a| if a.get_action().takes_values() { a.allow_negative_numbers(true) } else { a })
            .mut_subcommands(negatives)
    }
    negatives(<Cli as clap::CommandFactory>::command())
}

fn main() -> ExitCode {
    let matches = command().get_matches_from(ycsb_compat_args(std::env::args_os().collect()));
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // A pool truncated under us ends the process with one line saying so, not a bare
    // "Bus error".
    if let Err(e) = boomkv::pmem::fault::report_bus_errors("boomctl") {
        eprintln!("boomctl: warning: {e}");
    }
    // A bad setting is refused before anything runs, not ignored half-way through.
    if let Err(e) = boomkv::transport::spin_limit_setting().and(boomkv::transport::crowd::setting().map(|_| ())) {
        eprintln!("boomctl: error: {e}");
        return ExitCode::FAILURE;
    }
    // A one-shot client's error line says what became of its connection: the
    // transport's own line about it would come first and say it again.
    // So does a run against a running server (`load`, `ycsb --server`); an embedded
    // server's own lines stay, as `serve`'s do.
    let remote = match &cli.command {
        Command::Ycsb(a) => a.drives_a_server(),
        Command::Put(_) | Command::Get(_) | Command::Del(_) | Command::Stats(_) | Command::Load(_) => true,
        _ => false,
    };
    if remote {
        boomkv::transport::quiet_events();
    }
    let r = match cli.command {
        Command::Serve(a) => kv_cmds::serve(a),
        Command::Put(a) => kv_cmds::put(a),
        Command::Get(a) => kv_cmds::get(a),
        Command::Del(a) => kv_cmds::del(a),
        Command::Stats(a) => kv_cmds::stats(a),
        Command::Load(a) => ycsb_cmd::load(a),
        Command::Ycsb(a) => ycsb_cmd::ycsb(*a),
        Command::Crashtest(a) => crash_cmd::run(a),
        Command::Recover(a) => pool_cmds::recover(a),
        Command::InspectLog(a) => pool_cmds::inspect_log(a),
        Command::BenchTransport(a) => bench_transport::run(a),
        Command::Completions { shell } => {
            use std::io::Write as _;
            // Into memory first: clap_complete panics on a write error (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command(), "boomctl", &mut script);
            common::stdout().write_all(&script).map_err(anyhow::Error::from)
        }
        Command::Sweep(a) => sweep_cmd::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`| head`) is a normal end, not a failure.
        Err(e) if common::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => match e.downcast::<common::Finding>() {
            Ok(f) => {
                eprintln!("boomctl: {f}");
                ExitCode::from(f.code)
            }
            Err(e) => {
                eprintln!("boomctl: error: {}", common::one_line(&e));
                ExitCode::FAILURE
            }
        },
    }
}
