//! `boomctl`: the BOOM-KV command-line toolkit and benchmark suite.

use std::process::ExitCode;

use clap::Parser;

#[path = "boomctl/bench_transport.rs"]
mod bench_transport;

/// BOOM-KV: a persistent key-value store over RDMA-style one-sided writes into
/// persistent memory, and the benchmarks that compare it with its baselines.
#[derive(Parser, Debug)]
#[command(name = "boomctl", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Measure the transport floor: latency and message rate of each transport backend
    /// next to a cache-line ping-pong and a plain TCP ping-pong.
    BenchTransport(bench_transport::BenchTransportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::BenchTransport(args) => bench_transport::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("boomctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}
