//! `boomctl`: the BOOM-KV command-line toolkit and benchmark suite.

use std::process::ExitCode;

use clap::Parser;

/// BOOM-KV: a persistent key-value store over RDMA-style one-sided writes into
/// persistent memory, and the benchmarks that compare it with its baselines.
#[derive(Parser, Debug)]
#[command(name = "boomctl", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {}
}
