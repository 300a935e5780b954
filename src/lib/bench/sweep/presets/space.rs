//! What the **segment-size** and **skew** presets share: their columns and their run,
//! 100% PUT of 1 KiB values over `K` keys (true Zipf over the key space with the
//! point's theta, or uniform), `N` PUTs, one client, cleaner off. PM bytes used and
//! logical bytes come from the server's space accounting (before/after differences),
//! so the saving is what in-place updates really saved in the pool.

use super::super::context::{file_name, mix_spec, on_target, pick, Counters, Stat};
use super::super::Skew;
use super::prelude::*;
use crate::bench::runner;
use crate::client::hybrid::UpdateMode;
use crate::client::ClientOptions;
use crate::units::short_bytes;
use crate::wire::Protocol;

/// The CSV columns of both presets, in order.
pub const COLUMNS: &[&str] = cols!(
    "segment_size",
    "theta",
    "mode",
    "keys",
    "value_size",
    "ops",
    "put_ops_per_sec",
    "put_avg_us",
    "put_p50_us",
    "put_p99_us",
    "logical_bytes",
    "pm_bytes_used",
    "bytes_in_place",
    "entries_in_place",
    "space_change_pct",
    "grants",
    "errors",
    "hlog",
);

/// What both presets' methods say.
pub const METHOD: &str = "segment-size, skew: 100% PUT of 1 KiB values over K keys (true Zipf over the key space \
with the point's theta, or uniform), N PUTs, one client, cleaner off; PM bytes used and logical bytes from the \
server's space accounting (quick: K = N = 2^14, 1 MiB segments for skew, 256 KiB..4 MiB for segment-size; full: \
K = N = 2^20 = 1 GiB logical, 64 MiB segments for skew, 16/64/256 MiB for segment-size).";

pub(super) fn run_point(
    cx: &mut Context<'_>,
    pt: &Point,
    segment: u64,
    skew: Skew,
    hybrid: bool,
    row: &mut Row,
) -> Result<()> {
    let keys = cx.o.axes.keys.unwrap_or(pick(cx.o.quick, 1 << 14, 1 << 20));
    let n = cx.ops(1 << 14, 1 << 20);
    let size = 1024;
    let w = mix_spec(0.0, 1.0, keys, n, size, skew, cx.o.seed)?;
    let mode = if hybrid { UpdateMode::Hybrid } else { UpdateMode::Append };
    let copts = ClientOptions { protocol: Protocol::Boom, update_mode: mode, ..Default::default() };
    let mut cfg = cx.server_cfg();
    // The cleaner would reclaim garbage and blur what the log itself spends.
    cfg.cleaner = false;
    let eo = cx.embedded(crate::bench::embedded::pool_size_for(n, size, 1, segment), segment, None, cfg);
    let hlog = cx.hlog(pt, "");
    let ro = cx.run_opts(
        format!("{} {} {}", skew.label(), if hybrid { "hybrid" } else { "append" }, short_bytes(segment)),
        1,
        n,
        0,
        Some(hlog.clone()),
    );
    let (r, d) = on_target!(cx.o, eo, |t, ep| {
        let before = Counters::read(&t, &ep)?;
        let r = runner::run(&t, &ep, &copts, &w, &ro)?;
        let after = Counters::read(&t, &ep)?;
        Ok::<_, SweepError>((r, after.since(&before)))
    })?;
    let st = Stat::series(&r.measurements, &["UPDATE"])?;
    // A remote server has its own segment size.
    let segment = if cx.o.server.is_some() && d.segment_size > 0 { d.segment_size } else { segment };
    row.insert("segment_size", segment.to_string());
    row.insert("theta", skew.label());
    row.insert("mode", if hybrid { "hybrid" } else { "append" }.to_string());
    row.insert("keys", keys.to_string());
    row.insert("value_size", size.to_string());
    row.insert("ops", n.to_string());
    row.insert("put_ops_per_sec", format!("{:.1}", r.run.ops_per_sec()));
    st.put(row, "put_", &["put_avg_us", "put_p50_us", "put_p99_us"]);
    row.insert("logical_bytes", d.logical.to_string());
    row.insert("pm_bytes_used", d.pm_used.to_string());
    row.insert("bytes_in_place", d.in_place_bytes.to_string());
    row.insert("entries_in_place", d.in_place_entries.to_string());
    if d.logical > 0 {
        row.insert("space_change_pct", format!("{:.2}", (d.pm_used as f64 / d.logical as f64 - 1.0) * 100.0));
    }
    row.insert("grants", d.grants.to_string());
    row.insert("errors", r.errors.to_string());
    row.insert("hlog", file_name(&hlog));
    Ok(())
}
