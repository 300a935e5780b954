//! Writes a sample HdrHistogram interval log the way a benchmark run does, and prints
//! what HdrHistogram's Java tools should find in it.
//!
//! `cargo run --example hlog_sample -- out.hlog` writes `out.hlog` (5 one-second
//! intervals; tags READ, READ-FAILED, UPDATE, Intended-READ, Intended-READ-FAILED,
//! Intended-UPDATE) and prints one line per tag:
//! `tag=<TAG> count=<N> max_ns=<MAX> p50_ns=<P50> p99_ns=<P99>` (first `tag=UNTAGGED`, the
//! all-operations line the Java tools read without `-tag`), computed from the same
//! histograms with the Rust crate. `ci/check-hdr-java.sh` compares these with the
//! output of `org.HdrHistogram.HistogramLogProcessor`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use boomkv::bench::hlog::HlogWriter;
use boomkv::bench::measure::{MeasurementInterval, Measurements, Status};
use boomkv::bench::report::RunInfo;
use boomkv::workload::WorkloadRng;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: hlog_sample <output.hlog>");
        return ExitCode::from(2);
    };
    match run(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hlog_sample: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &std::path::Path) -> boomkv::Result<()> {
    let start = SystemTime::now();
    let mut log = HlogWriter::create(path, start)?;
    let mut rng = WorkloadRng::new(2024, 0);
    let mut totals = Measurements::new(MeasurementInterval::Both);
    let mut interval = Measurements::new(MeasurementInterval::Both);
    let mut operations = 0;
    for second in 0..5u64 {
        for _ in 0..20_000 {
            // Service times of 2..~200 us with a long tail; intended adds queueing.
            let service = Duration::from_nanos(2_000 + rng.below(20_000) + (rng.below(100) / 99) * rng.below(200_000));
            let queued = service + Duration::from_nanos(rng.below(50_000));
            let (op, status) = match rng.below(20) {
                0 => ("UPDATE", Status::Ok),
                1 => ("READ", Status::NotFound),
                _ => ("READ", Status::Ok),
            };
            interval.record_intended(op, service, queued, status);
            operations += 1;
        }
        let done = interval.take();
        log.write_interval(&done, start + Duration::from_secs(second), Duration::from_secs(1))?;
        totals.merge(&done)?;
    }
    log.write_summary(&totals, &RunInfo { runtime: Duration::from_secs(5), operations })?;
    log.finish()?;
    // The untagged line of each interval: what the Java tools read without -tag.
    let mut all = boomkv::bench::measure::new_histogram();
    for (name, series) in totals.series() {
        if boomkv::bench::hlog::counts_in_total(name) {
            all.add(series.histogram()).map_err(|e| boomkv::Error::invalid(format!("{e:?}")))?;
        }
    }
    println!(
        "tag={} count={} max_ns={} p50_ns={} p99_ns={}",
        boomkv::bench::hlog::UNTAGGED,
        all.len(),
        all.max(),
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.99)
    );
    for (name, series) in totals.series() {
        let h = series.histogram();
        println!(
            "tag={name} count={} max_ns={} p50_ns={} p99_ns={}",
            h.len(),
            h.max(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99)
        );
    }
    Ok(())
}
