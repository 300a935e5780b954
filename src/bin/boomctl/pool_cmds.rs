//! `recover` and `inspect-log`: offline tools for a pool a server left behind.

use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use boomkv::index::IndexKind;
use boomkv::log::inspect::{inspect, InspectFilter, Inspection};
use boomkv::log::{LocalWriter, Pool, PoolOptions, RecoveryReport};
use boomkv::pmem::{resolve_pool_path, FlushKind, MediaOptions};
use boomkv::units::{human_bytes, short_bytes};

use crate::common::{print_json, read_only_options, size_arg, PmemArgs};

/// Recover a pool offline and print what it holds.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  boomctl recover --pmem /mnt/pmem0\n  boomctl recover --pmem /mnt/pmem0 --json\n  \
boomctl recover --bench --bench-size 1G --value-size 2k   # recovery time vs a sequential read\n\n\
Exit status: 0 the pool recovered with no damage (an interrupted last write is not damage); 1 an error \
(the pool could not be opened); 2 a command line that does not parse; 3 the pool recovered but holds damage: \
rejected entries, entries repaired from one flipped bit, damaged count words, segments or pool header \
words, pDPM-Direct cells or Clover heads (the report's `damage` line and `problem` lines say which)."
)]
pub struct RecoverArgs {
    #[command(flatten)]
    pmem: Option<PmemArgsOpt>,
    /// Apply repairs (missing segment links, sealing writerless active segments);
    /// without it the pool is opened copy-on-write and never changed.
    #[arg(long)]
    repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// List the keys that survived (live, in key order, whole, one per line: UTF-8 as
    /// typed, `\` doubled, other bytes as \xNN), after the summary.
    #[arg(long)]
    keys: bool,
    /// Benchmark: build a pool of --bench-size filled with --value-size entries in
    /// --bench-dir, then time recovery against one sequential read of the same file.
    #[arg(long, conflicts_with_all = ["pmem", "repair", "json", "keys"])]
    bench: bool,
    /// Pool size for --bench [default: 1G].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    bench_size: Option<u64>,
    /// Value size for --bench (entries are this plus a 40-byte header and the key)
    /// [default: 2k].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    value_size: Option<u64>,
    /// Directory for the --bench pool (deleted afterwards) [default: the temp dir].
    #[arg(long, value_name = "DIR")]
    bench_dir: Option<PathBuf>,
    /// Timed repetitions for --bench (the best of each is reported) [default: 3].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: Option<u32>,
}

/// `--pmem`, optional so that `--bench` can run without it.
#[derive(clap::Args, Debug)]
pub struct PmemArgsOpt {
    /// Pool location: a directory (the pool is DIR/boomkv.pool), a pool file, or a
    /// device-DAX node. Required unless --bench.
    #[arg(long, value_name = "PATH", required_unless_present = "bench")]
    pmem: Option<PathBuf>,
}

pub fn recover(a: RecoverArgs) -> anyhow::Result<()> {
    if a.bench {
        return recover_bench(&a);
    }
    // Checked here, not by clap's `requires = "bench"`: that did not refuse them
    // (tests/pool_cli.rs), so they are options without defaults.
    let given: Vec<&str> = [
        (a.bench_size.is_some(), "--bench-size"),
        (a.value_size.is_some(), "--value-size"),
        (a.bench_dir.is_some(), "--bench-dir"),
        (a.repeat.is_some(), "--repeat"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    if !given.is_empty() {
        return Err(crate::common::Finding {
            code: 2,
            message: match given.as_slice() {
                [one] => format!("error: {one} sets up --bench; without --bench it would do nothing"),
                many => format!("error: {} set up --bench; without --bench they would do nothing", many.join(" and ")),
            },
        }
        .into());
    }
    let arg = a.pmem.and_then(|p| p.pmem).context("--pmem is required")?;
    // --keys lists them in order: the ordered index has them sorted.
    let index = if a.keys { IndexKind::Ordered } else { IndexKind::Hash };
    let opts = if a.repair {
        PoolOptions { media: MediaOptions { create: false, ..Default::default() }, index, ..Default::default() }
    } else {
        read_only_options(index)
    };
    let (pool, rep) = Pool::open(&arg, &opts)?;
    warn_if_served(&pool);
    let printed = (|| -> anyhow::Result<()> {
        if a.json {
            print_json(&serde_json::json!({
                "path": pool.media().path(),
                "header": pool.header(),
                "uuid": pool.header().uuid_hex(),
                "served": pool.media().held_by_writer(),
                "recovery": rep,
                "keys": if a.keys { Some(live_keys(&pool)?) } else { None },
            }))
        } else {
            print_summary(&pool, &rep)?;
            if a.keys {
                crate::outln!()?;
                for k in live_keys(&pool)? {
                    crate::outln!("{k}")?;
                }
            }
            Ok(())
        }
    })();
    let said = if a.json { "report's `recovery` object says" } else { "report's `damage` and `problem` lines say" };
    damage_status(&pool, &rep, said, printed)
}

/// The end of `recover` and `inspect-log` once the report was `printed`: a failed
/// report, else exit status 3 when the pool holds damage (the report `said` where). A health check reads the
/// status: damage is not a clean pool, whatever part of it the report showed. An
/// interrupted write (a slot no version was stored in) is not damage: every crash
/// leaves one.
fn damage_status(pool: &Pool, rep: &RecoveryReport, said: &str, printed: anyhow::Result<()>) -> anyhow::Result<()> {
    // A reader that stopped reading (`recover --keys | head`) ends the report, not the
    // check: damage still decides the status.
    if let Err(e) = printed {
        if !crate::common::is_broken_pipe(&e) || rep.damaged() == 0 {
            return Err(e);
        }
    }
    match rep.damaged() {
        0 => Ok(()),
        n => Err(crate::common::Finding {
            code: DAMAGE_FOUND,
            message: format!("{} holds damage ({n} found; the {said} what and where)", pool.media().path().display()),
        }
        .into()),
    }
}

/// `recover`'s exit status when the pool holds damage (see its --help).
const DAMAGE_FOUND: u8 = 3;

/// The live keys of a pool opened with the ordered index, printable, in key order.
fn live_keys(pool: &Pool) -> anyhow::Result<Vec<String>> {
    Ok(pool.index().scan(b"", usize::MAX)?.into_iter().map(|(k, _)| boomkv::log::inspect::printable_key(&k)).collect())
}

fn print_summary(pool: &Pool, r: &RecoveryReport) -> anyhow::Result<()> {
    let h = pool.header();
    crate::outln!(
        "pool        {}: {}, {} of {}, uuid {}",
        pool.media().path().display(),
        human_bytes(h.pool_size),
        boomkv::units::count(h.segment_count, "segment"),
        human_bytes(h.segment_size),
        h.uuid_hex()
    )?;
    crate::outln!("recovered   in {:.1} ms ({} threads)", r.elapsed_ms, r.threads)?;
    crate::outln!("keys        {} live, {} deleted (tombstones)", r.keys, r.tombstones)?;
    let rej: Vec<String> = r.entries_rejected.iter().map(|(k, v)| format!("{v} {k}")).collect();
    crate::outln!(
        "entries     {} valid ({} superseded), {} rejected{}",
        r.entries_valid,
        r.entries_superseded,
        r.rejected(),
        if rej.is_empty() { String::new() } else { format!(": {}", rej.join(", ")) }
    )?;
    crate::outln!(
        "space       {} used: {} live, {} garbage",
        human_bytes(r.used_bytes),
        human_bytes(r.live_bytes),
        human_bytes(r.garbage_bytes)
    )?;
    crate::outln!(
        "segments    {} in use, {} free, {} damaged",
        r.segments_in_use,
        r.segments_free,
        r.segments_damaged
    )?;
    if let Some(t) = r.cells.table {
        crate::outln!("cells       {}", cells_line(&r.cells, &t))?;
    }
    if let Some(a) = r.clover.arena {
        crate::outln!("clover      {}", clover_line(&r.clover, &a))?;
    }
    crate::outln!("damage      {}", damage_line(r))?;
    if !r.segments_per_client.is_empty() {
        let per: Vec<String> =
            r.segments_per_client.iter().take(20).map(|(c, n)| format!("{}: {n}", owner_label(Some(*c)))).collect();
        let more = r.segments_per_client.len().saturating_sub(20);
        crate::outln!(
            "clients     {} (segments per client: {}{})",
            r.segments_per_client.len(),
            per.join(", "),
            if more > 0 { format!(", {more} more") } else { String::new() }
        )?;
    }
    crate::outln!("next        version {} (high-water mark {})", r.next_version, r.version_hwm)?;
    for p in &r.problems {
        crate::outln!("problem     {p}")?;
    }
    for p in &r.repairs {
        crate::outln!("repaired    {p}")?;
    }
    Ok(())
}

/// What `damaged()` counts, the kinds found named.
fn damage_line(r: &RecoveryReport) -> String {
    let mut kinds = vec![
        format!("{} entries repaired (one flipped bit)", r.entries_repaired),
        format!("{} count words failed their check", r.counts_damaged),
    ];
    for (n, what) in [
        (r.rejected() - r.interrupted(), "entries rejected (not interrupted writes)"),
        (r.segments_damaged, "segments damaged"),
        (r.header_problems, "pool header words failed their check"),
        (r.cells.cells_damaged, "cells damaged"),
        (r.clover.heads_damaged, "Clover heads damaged"),
    ] {
        if n > 0 {
            kinds.push(format!("{n} {what}"));
        }
    }
    format!("{} found: {}", r.damaged(), kinds.join(", "))
}

fn recover_bench(a: &RecoverArgs) -> anyhow::Result<()> {
    let base = a.bench_dir.clone().unwrap_or_else(std::env::temp_dir);
    let (bench_size, value_size, repeat) =
        (a.bench_size.unwrap_or(1 << 30), a.value_size.unwrap_or(2048), a.repeat.unwrap_or(3));
    let dir = tempfile::Builder::new()
        .prefix("boomkv-recover-bench")
        .tempdir_in(&base)
        .with_context(|| format!("cannot create a directory in {}", base.display()))?;
    let path = dir.path().join("boomkv.pool");
    if bench_size < 4 << 20 {
        bail!(
            "--bench-size {}: at least 4M (the benchmark's pool holds segments of at least 1M)",
            short_bytes(bench_size)
        );
    }
    let seg = (64u64 << 20).min(bench_size / 4).max(1 << 20) / 4096 * 4096;
    // Before the value is made: --value-size 1T allocated it in full first.
    let key = |n: u64| format!("user{n:012}");
    let key_len = key(0).len() as u64;
    let fits = seg - boomkv::log::format::SEGMENT_HEADER_SIZE - boomkv::log::format::ENTRY_HEADER_SIZE - key_len;
    if value_size == 0 || value_size > fits {
        bail!(
            "--value-size {}: the {} segments of a {} benchmark pool hold values of 1 byte to {}",
            short_bytes(value_size),
            short_bytes(seg),
            short_bytes(bench_size),
            short_bytes(fits)
        );
    }
    let opts = PoolOptions {
        media: MediaOptions { create_size: Some(bench_size), flush: Some(FlushKind::None), ..Default::default() },
        segment_size: seg,
        index: IndexKind::Hash,
    };
    eprintln!(
        "filling a {} pool with {} values in {} ...",
        human_bytes(bench_size),
        short_bytes(value_size),
        dir.path().display()
    );
    let value = vec![0x5au8; value_size as usize];
    let mut n = 0u64;
    {
        let (pool, _) = Pool::open(&path, &opts)?;
        let mut w = LocalWriter::new(&pool);
        loop {
            match w.append(key(n).as_bytes(), &value, false) {
                Ok(_) => n += 1,
                Err(boomkv::Error::PoolFull { .. }) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    let file_len = std::fs::metadata(&path)?.len();
    let ro = read_only_options(IndexKind::Hash);
    let mut best_read = f64::MAX;
    let mut best_rec = f64::MAX;
    let mut buf = vec![0u8; 1 << 20];
    // one untimed pass of each to warm the page cache
    for i in 0..=repeat {
        let t = Instant::now();
        let mut f = std::fs::File::open(&path)?;
        let mut sum = 0u64;
        loop {
            let k = f.read(&mut buf)?;
            if k == 0 {
                break;
            }
            sum = sum.wrapping_add(buf[k - 1] as u64);
        }
        std::hint::black_box(sum);
        let read_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (pool, rep) = Pool::open(&resolve_pool_path(&path)?, &ro)?;
        let rec_s = t.elapsed().as_secs_f64();
        anyhow::ensure!(rep.keys == n, "recovered {} keys, wrote {n}", rep.keys);
        drop(pool);
        if i > 0 {
            best_read = best_read.min(read_s);
            best_rec = best_rec.min(rec_s);
        }
    }
    crate::outln!(
        "pool                 {} ({} entries of {} values)",
        human_bytes(file_len),
        n,
        short_bytes(value_size)
    )?;
    crate::outln!(
        "sequential read      {:8.1} ms  ({:.2} GB/s, best of {})",
        best_read * 1e3,
        file_len as f64 / best_read / 1e9,
        repeat
    )?;
    crate::outln!(
        "recovery (open+scan) {:8.1} ms  ({:.2} GB/s, best of {})",
        best_rec * 1e3,
        file_len as f64 / best_rec / 1e9,
        repeat
    )?;
    crate::outln!("ratio                {:8.2}x  (target: at most 2x)", best_rec / best_read)?;
    Ok(())
}

/// Show a pool's header, segments and entries without changing it.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  boomctl inspect-log --pmem /mnt/pmem0\n  \
boomctl inspect-log --pmem /mnt/pmem0 --entries --key user42\n  boomctl inspect-log --pmem pool.file --json | python3 -m json.tool\n\n\
Exit status: as recover's: 0 no damage; 1 an error; 2 a command line that does not parse; 3 the pool holds \
damage, wherever it is (--segment, --client and --key choose what is shown, not what is checked).")]
pub struct InspectArgs {
    #[command(flatten)]
    pmem: PmemArgs,
    /// List every entry (offset, version, key, value length, flags, checksum, status).
    #[arg(long)]
    entries: bool,
    /// Only this segment.
    #[arg(long, value_name = "ID")]
    segment: Option<u64>,
    /// Only entries of this key (implies --entries; any bytes the shell passes).
    #[arg(long, value_name = "KEY")]
    key: Option<std::ffi::OsString>,
    /// Only segments of this client.
    #[arg(long, value_name = "ID")]
    client: Option<u64>,
    /// Also list free segments.
    #[arg(long)]
    free: bool,
    /// Also show each entry's value (printable: other bytes as \xNN; implies --entries).
    #[arg(long)]
    values: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// The cell table's line of `recover` and `inspect-log` (pDPM-Direct).
fn cells_line(c: &boomkv::log::table::CellsReport, t: &boomkv::log::cells::CellTable) -> String {
    format!(
        "cell table (pdpm-direct): {} cells of {} in {}: {} hold a key (live or deleted), {} restored from the uncommitted slot, {} damaged, {} locks held ({} released)",
        t.cells,
        human_bytes(t.cell_size()),
        boomkv::units::segment_span(t.first_segment, t.segments),
        c.cells_in_use,
        c.cells_restored,
        c.cells_damaged,
        c.locks_held,
        c.locks_released
    )
}

/// The Clover arena's line of `recover` and `inspect-log`.
fn clover_line(c: &boomkv::log::arena::CloverReport, a: &boomkv::log::clover::Arena) -> String {
    format!(
        "Clover arena: {} heads, {} chunks of {} in {}: {} keys ({} versions walked, {} chains compacted, {} shortcuts reset, {} dangling links cut), {} heads damaged, {} chunks free",
        a.heads,
        a.chunks,
        human_bytes(a.chunk_size),
        boomkv::units::segment_span(a.first_segment, a.segments),
        c.keys,
        c.versions,
        c.chains_compacted,
        c.shortcuts_reset,
        c.links_cut,
        c.heads_damaged,
        c.chunks_free
    )
}

/// Says so when a read-only open found the pool held by a writer (`served` in JSON).
fn warn_if_served(pool: &Pool) {
    if pool.media().held_by_writer() {
        eprintln!(
            "boomctl: warning: {}: another process has this pool open for writing (a running server?); what it \
             writes meanwhile may show as torn or damaged entries (stop it for a consistent view)",
            pool.media().path().display()
        );
    }
}

pub fn inspect_log(a: InspectArgs) -> anyhow::Result<()> {
    let (pool, rep) = Pool::open(&a.pmem.pmem, &read_only_options(IndexKind::Hash))?;
    warn_if_served(&pool);
    let segments = pool.segment_count();
    if let Some(s) = a.segment.filter(|&s| s >= segments) {
        // An empty table would read as "nothing in it", not "no such segment".
        anyhow::bail!("--segment {s}: the pool has segments 0 to {}", segments.saturating_sub(1));
    }
    let f = InspectFilter {
        segment: a.segment,
        key: a.key.as_ref().map(|k| std::os::unix::ffi::OsStrExt::as_bytes(k.as_os_str()).to_vec()),
        client: a.client,
        entries: a.entries || a.values,
        free: a.free,
        values: a.values,
    };
    let ins = inspect(&pool, &rep, &f);
    let (said, printed) = if a.json {
        ("report's `recovery` object says", print_json(&ins))
    } else {
        ("`problem` lines and the `damaged` count say", print_inspection(&a, &f, &rep, &ins))
    };
    damage_status(&pool, &rep, said, printed)
}

/// `inspect-log`'s tables.
fn print_inspection(a: &InspectArgs, f: &InspectFilter, rep: &RecoveryReport, ins: &Inspection) -> anyhow::Result<()> {
    let h = &ins.header;
    crate::outln!("pool {}  uuid {}", ins.path, ins.uuid)?;
    crate::outln!(
        "  size {}  segments {} x {}  format v{}  next version {}",
        human_bytes(h.pool_size),
        h.segment_count,
        human_bytes(h.segment_size),
        h.format_version,
        rep.next_version
    )?;
    crate::outln!(
        "  keys {} live, {} deleted; {} valid entries, {} superseded, {} rejected; {} damaged ({} repaired)",
        rep.keys,
        rep.tombstones,
        rep.entries_valid,
        rep.entries_superseded,
        rep.rejected(),
        rep.damaged(),
        rep.entries_repaired
    )?;
    if let Some(t) = rep.cells.table {
        crate::outln!("  {}", cells_line(&rep.cells, &t))?;
    }
    if let Some(a) = rep.clover.arena {
        crate::outln!("  {}", clover_line(&rep.clover, &a))?;
    }
    for p in &rep.problems {
        crate::outln!("  problem: {p}")?;
    }
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
    // A client with no segment: said in words, not as an empty table (which would
    // read as a pool that holds nothing).
    if let (Some(c), true) = (f.client, ins.segments.is_empty()) {
        crate::outln!()?;
        crate::outln!("no segment belongs to client {c} ({} segments in the pool)", h.segment_count)?;
        return Ok(());
    }
    // With --key the entries are the answer; the segment table would bury them.
    if f.key.is_none() {
        crate::outln!()?;
        crate::outln!(
            "{:>7} {:<8} {:>6} {:>5} {:>7} {:>7} {:>9} {:>6} {:>10} {:>10}  problem",
            "segment",
            "state",
            "client",
            "seq",
            "prev",
            "next",
            "count",
            "fill%",
            "live",
            "garbage"
        )?;
        for s in &ins.segments {
            crate::outln!(
                "{:>7} {:<8} {:>6} {:>5} {:>7} {:>7} {:>9} {:>6.1} {:>10} {:>10}  {}",
                s.id,
                s.state,
                owner_label(s.owner),
                opt(s.log_seq),
                opt(s.prev),
                opt(s.next),
                s.count,
                s.fill_percent,
                human_bytes(s.live_bytes),
                human_bytes(s.garbage_bytes),
                s.problem.as_deref().unwrap_or("")
            )?;
        }
    }
    // A key with no entry: said in words, not as an empty table.
    if let (Some(k), true) = (&f.key, ins.entries.is_empty()) {
        let within = match (a.segment, a.client) {
            (Some(s), _) => format!("segment {s}"),
            (None, Some(c)) => format!("client {c}'s segments"),
            (None, None) => "the pool's segments".to_string(),
        };
        crate::outln!()?;
        crate::outln!("no log entry of key `{}` in {within}", boomkv::log::inspect::printable_key(k))?;
    } else if !ins.entries.is_empty() || f.entries || f.key.is_some() {
        crate::outln!()?;
        crate::outln!(
            "{:>7} {:>7} {:>10} {:>12} {:>9} {:<5} {:<10} {:<15} key",
            "segment",
            "slot",
            "offset",
            "version",
            "value",
            "flags",
            "checksum",
            "status"
        )?;
        for e in &ins.entries {
            crate::outln!(
                "{:>7} {:>7} {:>10} {:>12} {:>9} {:<5} {:<10} {:<15} {}",
                e.segment,
                e.slot,
                e.offset,
                e.version,
                e.value_len,
                if e.tombstone { "T" } else { "-" },
                if e.checksum_ok { "ok".to_string() } else { "bad".to_string() },
                match (&e.fault, e.repaired) {
                    (Some(f), _) if e.status == "damaged" => format!("damaged ({f})"),
                    (Some(f), _) => format!("rejected ({f})"),
                    (None, true) => format!("{} (repaired)", e.status),
                    (None, false) => e.status.to_string(),
                },
                e.key
            )?;
            if let Some(v) = &e.value {
                crate::outln!("{:>7} {:>7} value: {v}", "", "")?;
            }
        }
        crate::outln!()?;
        crate::outln!("flags: T = tombstone (a DELETE), - = a value")?;
        crate::outln!(
            "status: live = what a GET returns; deleted = the key's live tombstone; superseded = an older \
             version; rejected = failed a check (reason given)"
        )?;
    }
    if !ins.clover.is_empty() {
        crate::outln!()?;
        crate::outln!(
            "{:>9} {:>12} {:>12} {:>6} {:>9} {:<5} key",
            "head",
            "version",
            "offset",
            "chain",
            "value",
            "flags"
        )?;
        for c in &ins.clover {
            crate::outln!(
                "{:>9} {:>12} {:>12} {:>6} {:>9} {:<5} {}",
                c.head,
                c.version,
                c.offset,
                c.chain,
                c.value_len,
                if c.tombstone { "T" } else { "-" },
                c.key
            )?;
            if let Some(v) = &c.value {
                crate::outln!("{:>9} value: {v}", "")?;
            }
        }
        crate::outln!()?;
        crate::outln!(
            "clover: each key's newest version (chain = versions from the chain's start; recovery and the last \
             client's leaving move the start to the newest)"
        )?;
    }
    if !ins.cells.is_empty() {
        crate::outln!()?;
        crate::outln!(
            "{:>9} {:>12} {:>9} {:<5} {:>6} {:<12} {:<12} key",
            "cell",
            "version",
            "value",
            "flags",
            "lock",
            "committed",
            "uncommitted"
        )?;
        for c in &ins.cells {
            crate::outln!(
                "{:>9} {:>12} {:>9} {:<5} {:>6} {:<12} {:<12} {}",
                c.cell,
                c.version,
                c.value_len,
                if c.tombstone { "T" } else { "-" },
                if c.holder == 0 { "free".to_string() } else { format!("#{}", c.holder) },
                c.committed,
                c.uncommitted,
                c.key
            )?;
            if let Some(v) = &c.value {
                crate::outln!("{:>9} value: {v}", "")?;
            }
        }
        crate::outln!()?;
        crate::outln!(
            "cells (pdpm-direct): a GET reads the committed slot; recovery takes it if it verifies, else the \
             uncommitted one; lock #N = held by the client with that tag"
        )?;
    }
    Ok(())
}

/// A segment's owner for people: the client id, "cleaner" for the cleaner's own
/// segments, "tombstones" for the server's tombstone log, "-" for none.
fn owner_label(owner: Option<u64>) -> String {
    match owner {
        Some(boomkv::log::format::CLEANER_OWNER) => "cleaner".to_string(),
        Some(boomkv::log::format::TOMBSTONE_OWNER) => "tombstones".to_string(),
        Some(boomkv::log::format::CELLS_OWNER) => "cells".to_string(),
        Some(id) => id.to_string(),
        None => "-".to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cleaner_is_named() {
        assert_eq!(super::owner_label(Some(boomkv::log::format::CLEANER_OWNER)), "cleaner");
        assert_eq!(super::owner_label(Some(boomkv::log::format::TOMBSTONE_OWNER)), "tombstones");
        assert_eq!(super::owner_label(Some(3)), "3");
        assert_eq!(super::owner_label(None), "-");
    }
}
