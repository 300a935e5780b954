//! `serve`, `put`, `get`, `del`, `stats`: the server and its command-line clients.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use boomkv::client::hybrid::UpdateMode;
use boomkv::client::{Client, ClientOptions};
use boomkv::log::inspect::printable_upto;
use boomkv::log::Pool;
use boomkv::server::{Server, ServerConfig, ServerCore};
use boomkv::transport::{Backend, Endpoint, ShmTransport, TcpTransport, Transport};
use boomkv::units::{count, human_bytes, short_bytes};
use boomkv::wire::Protocol;

use crate::common::{size_arg, MediaArgs, PmemArgs, VerbsArgs};

/// The address served, and asked, when none is given (TCP on loopback; shm only when
/// asked for, see `serve --help`).
pub const DEFAULT_TCP: &str = "127.0.0.1:7470";

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// Run a BOOM-KV server on a pool.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  boomctl serve --pmem /mnt/pmem0 --create\n  \
boomctl serve --pmem /tmp/pool --pool-size 4G --listen tcp://0.0.0.0:7470 --workers 4\n\n\
Clients choose the protocol (boom, rdmp, rpc, rdmp-cc, herd, rfp, pdpm-direct or clover) when they connect; --protocol limits it.\n\
SIGINT or SIGTERM stops the server cleanly: requests in hand finish, then it exits 0.")]
pub struct ServeArgs {
    #[command(flatten)]
    pmem: PmemArgs,
    #[command(flatten)]
    media: MediaArgs,
    /// Address to listen on (repeatable): host:port or tcp://host:port for TCP,
    /// verbs://host:port for RDMA (builds with --features rdma; the TCP port carries the
    /// connection handshake), shm:/path for trusted clients of the same user on this host
    /// (they map the pool file itself; the socket is made mode 0600). Binding a
    /// non-loopback address is your explicit choice.
    /// [default: 127.0.0.1:7470]
    #[arg(long, value_name = "ADDR")]
    listen: Vec<String>,
    #[command(flatten)]
    verbs: VerbsArgs,
    /// Polling worker threads per transport [default: 1 on machines with up to 4 cores].
    #[arg(long, value_parser = crate::common::at_least_one)]
    workers: Option<usize>,
    /// Run the polling workers on these CPUs only, e.g. 2-3 (as `taskset -c` writes
    /// them): keep clients of the same host, and other work, off them.
    #[arg(long, value_name = "LIST")]
    cpus: Option<boomkv::cpus::CpuList>,
    /// Cooperative write-back: idle workers help write back large entries.
    #[arg(long, value_enum, default_value = "on")]
    coop_writeback: OnOff,
    /// Clients connected at once; more are refused with a clear error.
    #[arg(long, default_value_t = 256, value_parser = crate::common::at_least_one)]
    max_clients: usize,
    /// Disconnect a client idle for this many seconds (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    idle_timeout: u64,
    /// Largest value accepted [default: 1M, or what a segment holds if that is less].
    /// At most what a segment holds, and at most 16M less 1076 bytes (one transfer
    /// carries the value with the longest key).
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    max_value: Option<u64>,
    /// Segments one client may hold at once (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    segment_quota: u64,
    /// Accept only this protocol (repeatable) [default: all].
    #[arg(long, value_name = "PROTOCOL", value_parser = crate::common::protocol_parser())]
    protocol: Vec<Protocol>,
    /// Do not run the cleaner (garbage then only grows).
    #[arg(long)]
    no_cleaner: bool,
    /// Print a stats line every this many seconds (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    stats_interval: u64,
    /// Do not log client connects and disconnects.
    #[arg(long)]
    quiet: bool,
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let given = a.pmem.pmem.clone();
    // The pool file itself (DIR/boomkv.pool for a directory), and whether it was there.
    let file = boomkv::pmem::resolve_pool_path(&given).ok();
    let was_there = file.as_ref().is_some_and(|f| f.exists());
    // A command that is refused changes nothing: a pool file's segment size is read
    // before the open recovers (and repairs) it; a device is checked after the open.
    if let (Some(want), Some(have)) = (a.media.segment_size, file.as_deref().and_then(segment_size_of)) {
        check_segment_size(want, have, &given)?;
    }
    let limit = boomkv::server::MAX_VALUE_LIMIT;
    if let Some(v) = a.max_value.filter(|&v| v > u64::from(limit)) {
        bail!(
            "--max-value {}: one transfer carries values of at most {limit} bytes (16M less the longest key and the headers)",
            human_bytes(v)
        );
    }
    let (pool, rep) = Pool::open(&given, &a.media.pool_options())?;
    // A pool this command made and never served holds nothing: a bad option found
    // after creating it (an address in use, a wrong --cpus) must not leave it behind.
    let made = file.filter(|f| rep.created && !was_there && pool.media().path() == f.as_path());
    // A pool keeps the segment size it was formatted with; a different one asked for
    // would be ignored, and every figure after it read against the wrong size.
    if let Some(want) = a.media.segment_size.filter(|_| !rep.created) {
        check_segment_size(want, pool.segment_size(), pool.media().path())?;
    }
    match start(a, pool, rep) {
        Ok(s) => s.run(),
        Err(e) => {
            // Said, since its creation was: a user looking for it would not find it.
            if let Some(p) = made.filter(|p| std::fs::remove_file(p).is_ok()) {
                eprintln!("boomctl serve: removed the new pool {} (the server did not start)", p.display());
            }
            Err(e)
        }
    }
}

/// The segment size in the header of the pool file `f`, if it reads as one.
fn segment_size_of(f: &std::path::Path) -> Option<u64> {
    use boomkv::log::format::{PoolHeader, POOL_HEADER_LEN};
    let mut b = [0u8; POOL_HEADER_LEN];
    let mut file = std::fs::File::open(f).ok()?;
    let len = file.metadata().ok()?.len();
    file.read_exact(&mut b).ok()?;
    PoolHeader::decode(&b, len).ok().map(|h| h.segment_size)
}

/// A pool keeps the segment size it was formatted with.
fn check_segment_size(want: u64, have: u64, pool: &std::path::Path) -> anyhow::Result<()> {
    if want != have {
        bail!(
            "--segment-size {}: the pool at {} was made with {} segments, which it keeps \
             (drop --segment-size, or make a new pool elsewhere)",
            short_bytes(want),
            pool.display(),
            short_bytes(have)
        );
    }
    Ok(())
}

/// A server that is listening.
struct Serving {
    core: Arc<ServerCore>,
    stop: Arc<AtomicBool>,
    // Held to keep listening; dropped (in this order) to stop.
    _shm: Option<Server<ShmTransport>>,
    _tcp: Option<Server<TcpTransport>>,
    #[cfg(feature = "rdma")]
    _verbs: Option<Server<boomkv::transport::VerbsTransport>>,
}

/// Opens the server on `pool`: everything up to listening.
fn start(a: ServeArgs, pool: Pool, rep: boomkv::log::RecoveryReport) -> anyhow::Result<Serving> {
    let seg = pool.segment_size();
    // Room for the segment header, the entry header and the longest key.
    let fits = seg
        - boomkv::log::format::SEGMENT_HEADER_SIZE
        - boomkv::log::format::ENTRY_HEADER_SIZE
        - boomkv::log::format::MAX_KEY_LEN as u64;
    let max_value = match a.max_value {
        Some(0) => bail!(
            "--max-value 0: a server must take values of at least 1 byte (omit it for the largest the segment takes)"
        ),
        Some(v) if v > fits => {
            bail!("--max-value {} does not fit a {} segment (at most {fits} bytes)", human_bytes(v), human_bytes(seg))
        }
        Some(v) => v,
        None => fits.min(boomkv::server::DEFAULT_MAX_VALUE as u64),
    };
    let max_value = u32::try_from(max_value).context("--max-value is over 4 GiB")?;
    let media = pool.media();
    if rep.created {
        eprintln!(
            "boomctl serve: created a new pool {} ({}, {} of {})",
            media.path().display(),
            human_bytes(media.len()),
            count(pool.segment_count(), "segment"),
            human_bytes(seg)
        );
    } else {
        eprintln!(
            "boomctl serve: opened pool {} ({}, {} of {}) with {} keys ({} deleted), recovered in {:.1} ms",
            media.path().display(),
            // The pool's own size (the header's), as `recover` says: a file grown
            // beyond it (`truncate -s`) holds nothing more.
            human_bytes(pool.header().pool_size),
            count(pool.segment_count(), "segment"),
            human_bytes(seg),
            rep.keys,
            rep.tombstones,
            rep.elapsed_ms
        );
    }
    if pool.segment_count() < 4 {
        eprintln!(
            "boomctl serve: warning: a pool of {} keeps no free segment back: once clients fill it, DELETEs are \
             refused too and the cleaner cannot compact it (4 segments or more keep one for each; a larger \
             --pool-size or a smaller --segment-size)",
            count(pool.segment_count(), "segment")
        );
    }
    eprintln!("boomctl serve: durability: {}", media.durability_statement());
    for p in &rep.problems {
        eprintln!("boomctl serve: recovery: {p}");
    }
    let cpus = boomkv::cpus::count();
    if let Some(w) = a.workers.filter(|&w| w > cpus) {
        eprintln!(
            "boomctl serve: warning: --workers {w} is more than the {cpus} CPUs this process may use: workers poll, \
             so under load the extra ones take CPU time from the others"
        );
    }
    let cfg = ServerConfig {
        workers: a.workers.unwrap_or_else(boomkv::server::default_workers),
        coop_writeback: matches!(a.coop_writeback, OnOff::On),
        max_clients: a.max_clients,
        idle_timeout: (a.idle_timeout > 0).then(|| Duration::from_secs(a.idle_timeout)),
        max_value,
        segment_quota: a.segment_quota,
        protocols: a.protocol.clone(),
        cleaner: !a.no_cleaner,
        stats_interval: (a.stats_interval > 0).then(|| Duration::from_secs(a.stats_interval)),
        log_clients: !a.quiet,
        worker_cpus: a.cpus.clone(),
        ..Default::default()
    };
    // shm only when asked for: a same-host shm peer maps the pool file itself, so it is
    // for trusted local clients (README, "Trust and isolation").
    let listen = if a.listen.is_empty() { vec![DEFAULT_TCP.to_string()] } else { a.listen.clone() };
    let mut shm = Vec::new();
    let mut tcp = Vec::new();
    let mut verbs = Vec::new();
    let mut seen: Vec<(Endpoint, &str)> = Vec::new();
    for l in &listen {
        let ep = Endpoint::parse(l).with_context(|| format!("--listen {l}"))?;
        if let Some((_, first)) = seen.iter().find(|(e, _)| *e == ep) {
            bail!("--listen {l}: the same address as --listen {first} (give each address once)");
        }
        seen.push((ep.clone(), l));
        match ep.backend() {
            Backend::Shm => shm.push(ep),
            Backend::Tcp => tcp.push(ep),
            Backend::Verbs if cfg!(feature = "rdma") => verbs.push(ep),
            Backend::Verbs => bail!("--listen {l}: this boomctl was built without RDMA support (--features rdma)"),
        }
    }
    if verbs.is_empty() && a.verbs.given() {
        eprintln!("boomctl serve: --device, --port and --gid-index apply only to verbs:// listen addresses");
    }
    let core = ServerCore::new(Arc::new(pool), cfg)?;
    listen_on(&a, core.clone(), [shm, tcp, verbs]).inspect_err(|_| core.shutdown())
}

/// Starts the listeners of `core` on its shm, tcp and verbs addresses.
fn listen_on(a: &ServeArgs, core: Arc<ServerCore>, [shm, tcp, verbs]: [Vec<Endpoint>; 3]) -> anyhow::Result<Serving> {
    #[cfg(not(feature = "rdma"))]
    let _ = (&verbs, a);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("cannot install signal handlers")?;
    }
    let mut eps = Vec::new();
    let shm = if shm.is_empty() {
        None
    } else {
        let s = Server::start_on(ShmTransport::new()?, core.clone(), &shm)?;
        eps.extend(s.endpoints().iter().map(ToString::to_string));
        Some(s)
    };
    let tcp = if tcp.is_empty() {
        None
    } else {
        let s = Server::start_on(TcpTransport::new()?, core.clone(), &tcp)?;
        eps.extend(s.endpoints().iter().map(ToString::to_string));
        Some(s)
    };
    #[cfg(feature = "rdma")]
    let verbs = start_verbs(&a.verbs, &core, &verbs, &mut eps)?;
    eprintln!(
        "boomctl serve: listening on {} ({} worker{} per transport{}, flush {})",
        eps.join(", "),
        core.config().workers,
        if core.config().workers == 1 { "" } else { "s" },
        core.config().worker_cpus.as_ref().map(|c| format!(" on CPU {c}")).unwrap_or_default(),
        media_flush(&core)
    );
    Ok(Serving {
        core,
        stop,
        _shm: shm,
        _tcp: tcp,
        #[cfg(feature = "rdma")]
        _verbs: verbs,
    })
}

impl Serving {
    /// Serves until a signal or a shutdown request, then stops.
    fn run(self) -> anyhow::Result<()> {
        let core = self.core.clone();
        while !self.stop.load(Ordering::Relaxed) && !core.is_stopping() {
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("boomctl serve: shutting down");
        core.request_shutdown();
        // The listeners first: they finish what they hold.
        drop(self);
        let st = core.stats();
        core.shutdown();
        // Counted as recovery counts them (live keys, not tombstones), so this line and
        // the next start's agree.
        eprintln!(
            "boomctl serve: stopped after {:.0} s: {} puts, {} dels, {} gets, {} keys",
            st.uptime_s,
            st.puts,
            st.dels,
            st.gets,
            core.pool().live_keys()
        );
        Ok(())
    }
}

/// Starts the server's verbs listeners, if any.
#[cfg(feature = "rdma")]
fn start_verbs(
    v: &VerbsArgs,
    core: &Arc<ServerCore>,
    listen: &[Endpoint],
    eps: &mut Vec<String>,
) -> anyhow::Result<Option<Server<boomkv::transport::VerbsTransport>>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let t = boomkv::transport::VerbsTransport::new(v.config()?).context("--listen verbs://")?;
    let route = t.gid_index().map_or("routing by LID".to_string(), |i| format!("GID index {i}"));
    let isolation = if t.binds_regions() {
        "clients isolated by type-2 memory windows"
    } else {
        "WARNING: the device has no type-2 memory windows, so clients are not isolated from \
         each other's regions: serve only trusted clients over it"
    };
    eprintln!("boomctl serve: RDMA device {} ({route}); {isolation}", t.device_name());
    let s = Server::start_on(t, core.clone(), listen)?;
    eps.extend(s.endpoints().iter().map(ToString::to_string));
    Ok(Some(s))
}

fn media_flush(core: &ServerCore) -> String {
    core.pool().media().flush_kind().to_string()
}

/// Where the server is and how to talk to it.
#[derive(clap::Args, Debug, Clone)]
pub struct ClientArgs {
    /// Server address: shm:/path, host:port, tcp://host:port, or verbs://host:port for RDMA
    /// (device from $BOOMKV_RDMA_DEVICE, port $BOOMKV_RDMA_PORT, GID $BOOMKV_RDMA_GID_INDEX).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_TCP)]
    pub server: String,
    /// Transport, if the address does not say (shm, tcp or verbs).
    #[arg(long, ignore_case = true, value_name = "shm|tcp|verbs", value_parser = crate::common::one_of::<Backend>(&["shm", "tcp", "verbs|rdma|ib"]))]
    pub transport: Option<Backend>,
    /// Protocol: boom (one round trip, the default) or one of the baselines of the papers
    /// (README, "Protocols").
    #[arg(long, value_name = "PROTOCOL", default_value = "boom", value_parser = crate::common::protocol_parser())]
    pub protocol: Protocol,
    /// Seconds to wait for the server before giving up (at least 1).
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// RFP: bytes of the first READ of a result, or auto (profiled at connect).
    #[arg(long, value_name = "auto|BYTES", default_value = "auto")]
    pub fetch_size: boomkv::proto::rfp::FetchSize,
    /// RFP: how results come back: hybrid (fetched, by the server's reply after repeated
    /// vain fetches, as the paper's client does), fetch (always), or reply (always).
    #[arg(long, ignore_case = true, value_name = "hybrid|fetch|reply", default_value = "hybrid", value_parser = crate::common::one_of::<boomkv::proto::rfp::ResultMode>(&["hybrid", "fetch", "reply"]))]
    pub rfp_mode: boomkv::proto::rfp::ResultMode,
    /// pDPM-Direct: cells of the table, if the server's pool has none yet.
    #[arg(long, value_name = "N", default_value_t = boomkv::proto::pdpm_direct::DEFAULT_CELLS, value_parser = clap::value_parser!(u64).range(1..))]
    pub cells: u64,
    /// pDPM-Direct: the value a cell holds under the longest cell key (a shorter key
    /// leaves room for more), if the server's pool has no table yet (Clover: chunks are
    /// sized for four versions of such a value, and 64 KiB at least).
    #[arg(long, value_name = "SIZE", value_parser = cell_value_arg, default_value_t = boomkv::proto::pdpm_direct::DEFAULT_CELL_VALUE)]
    pub cell_value: u32,
    /// Clover: bytes of chunks of the arena, if the server's pool has none yet (its head
    /// records: --cells).
    #[arg(long, value_name = "SIZE", value_parser = size_arg, default_value = "8M")]
    pub clover_data: u64,
}

impl ClientArgs {
    pub fn endpoint(&self) -> anyhow::Result<Endpoint> {
        Endpoint::parse_for(&self.server, self.transport).with_context(|| format!("--server {}", self.server))
    }

    pub fn options(&self) -> ClientOptions {
        ClientOptions {
            protocol: self.protocol,
            update_mode: UpdateMode::Hybrid,
            timeout: Duration::from_secs(self.timeout),
            fetch_size: self.fetch_size,
            rfp_mode: self.rfp_mode,
            cells: self.cells,
            cell_value: self.cell_value,
            clover_data: self.clover_data,
            ..Default::default()
        }
    }
}

fn connect<T: Transport>(t: &T, c: &ClientArgs) -> anyhow::Result<Client<T>> {
    let ep = c.endpoint()?;
    Client::connect(t, &ep, c.options()).map_err(|e| crate::common::with_server(e, &ep))
}

/// Store a value.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  boomctl put user42 hello\n  boomctl put --server 10.0.0.5:7470 user42 --value-file photo.jpg\n  \
echo hi | boomctl put user42 -"
)]
pub struct PutArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The key (1 to 1024 bytes, any bytes the shell passes; pDPM-Direct: at most 128).
    key: OsString,
    /// The value (any bytes the shell passes); `-` reads it from standard input.
    #[arg(conflicts_with = "value_file")]
    value: Option<OsString>,
    /// Read the value from this file.
    #[arg(long, value_name = "FILE")]
    value_file: Option<PathBuf>,
}

/// `--cell-value`: a size as everywhere else (`4k`), at most 4 GiB - 1.
fn cell_value_arg(s: &str) -> Result<u32, String> {
    let v = size_arg(s)?;
    u32::try_from(v).map_err(|_| format!("{v} bytes: at most 4 GiB - 1"))
}

/// Reads a value from `r` (`what` names it), at most `limit` bytes: a longer one is
/// an error as soon as it is known, not after reading an endless input (/dev/zero).
fn read_value(r: impl Read, limit: u32, what: &str) -> anyhow::Result<Vec<u8>> {
    let mut b = Vec::new();
    r.take(u64::from(limit) + 1).read_to_end(&mut b).with_context(|| format!("reading {what}"))?;
    if b.len() > limit as usize {
        bail!("{what} is over the limit of {limit} bytes (the server's largest value)");
    }
    Ok(b)
}

pub fn put(a: PutArgs) -> anyhow::Result<()> {
    let key = a.key.as_bytes();
    check_key(key)?;
    let inline = match (&a.value, &a.value_file) {
        (Some(v), _) if v == "-" => None,
        (Some(v), _) => Some(v.as_bytes().to_vec()),
        (None, Some(_)) => None,
        (None, None) => bail!("give a VALUE, `-` for standard input, or --value-file FILE"),
    };
    let b = a.client.endpoint()?.backend();
    boomkv::with_transport!(b, t => {
        let mut c = connect(&t, &a.client)?;
        // Read once the server's limit is known.
        let limit = c.max_value();
        let value = match (inline, &a.value_file) {
            (Some(v), _) => v,
            (None, Some(f)) => {
                let file = std::fs::File::open(f).with_context(|| format!("reading {}", f.display()))?;
                read_value(file, limit, &format!("--value-file {}", f.display()))?
            }
            (None, None) => read_value(std::io::stdin().lock(), limit, "the value on standard input")?,
        };
        let info = c.put(key, &value).with_context(|| format!("PUT {}", shown(key)))?;
        eprintln!("stored {} ({} bytes, version {})", shown(key), value.len(), info.version);
        Ok(())
    })
}

/// Refuses a key no server takes before connecting (and before reading a value).
fn check_key(key: &[u8]) -> anyhow::Result<()> {
    let max = boomkv::log::format::MAX_KEY_LEN as usize;
    if key.is_empty() {
        bail!("the key is empty; a key is 1 to {max} bytes");
    }
    if key.len() > max {
        bail!("the key is {} bytes; a key is at most {max} bytes (it begins `{}`)", key.len(), printable_upto(key, 40));
    }
    Ok(())
}

/// Fetch a value (raw bytes to standard output).
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  boomctl get user42\n  boomctl get --server 10.0.0.5:7470 user42 > photo.jpg\n  \
boomctl get --json user42\n\nExit status: 0 found; 1 not found (\"key not found: KEY\" on standard error) or an \
error (its own line); 2 a command line that does not parse.")]
pub struct GetArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The key (any bytes the shell passes).
    key: OsString,
    /// Print the value as hex.
    #[arg(long, conflicts_with = "json")]
    hex: bool,
    /// Print {"key" (UTF-8 or null), "key_hex", "value" (UTF-8 or null), "value_hex",
    /// "len"} as JSON.
    #[arg(long)]
    json: bool,
}

pub fn get(a: GetArgs) -> anyhow::Result<()> {
    let key = a.key.as_bytes();
    check_key(key)?;
    let b = a.client.endpoint()?.backend();
    let v = boomkv::with_transport!(b, t => {
        let mut c = connect(&t, &a.client)?;
        c.get(key).with_context(|| format!("GET {}", shown(key)))?
    });
    let Some(v) = v else { bail!("key not found: {}", shown(key)) };
    let hex = |b: &[u8]| -> String { b.iter().map(|b| format!("{b:02x}")).collect() };
    let mut out = crate::common::stdout();
    if a.json {
        let j = serde_json::json!({
            "key": std::str::from_utf8(key).ok(), "key_hex": hex(key),
            "len": v.len(), "value": std::str::from_utf8(&v).ok(), "value_hex": hex(&v),
        });
        writeln!(out, "{j}")?;
    } else if a.hex {
        writeln!(out, "{}", hex(&v))?;
    } else {
        out.write_all(&v)?;
        // On a terminal, end the line so the prompt does not run into the value; in a
        // pipe or file the bytes stay exactly the value.
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) && !v.ends_with(b"\n") {
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// Delete a key (a durable tombstone).
///
/// The key is looked up first (a GET, which the server's `stats` counts): the
/// protocols' DELETE does not say whether the key existed, and a missing key exits 1
/// without writing a tombstone.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  boomctl del user42\n  boomctl del --server 10.0.0.5:7470 user42")]
pub struct DelArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The key (any bytes the shell passes).
    key: OsString,
}

pub fn del(a: DelArgs) -> anyhow::Result<()> {
    let key = a.key.as_bytes();
    check_key(key)?;
    let b = a.client.endpoint()?.backend();
    boomkv::with_transport!(b, t => {
        let mut c = connect(&t, &a.client)?;
        // The protocol's DELETE does not say whether the key existed; ask first, so a
        // missing key is reported (exit 1, like `get`) and no tombstone is written.
        if c.get(key).with_context(|| format!("DEL {}: looking it up", shown(key)))?.is_none() {
            bail!("key not found: {}", shown(key));
        }
        let info = c.delete(key).with_context(|| format!("DEL {}", shown(key)))?;
        eprintln!("deleted {} (version {})", shown(key), info.version);
        Ok(())
    })
}

/// Show a running server's statistics.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  boomctl stats --server 10.0.0.5:7470\n  boomctl stats --server shm:/tmp/boomkv.sock --json"
)]
pub struct StatsArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// Print the raw JSON.
    #[arg(long)]
    json: bool,
}

pub fn stats(a: StatsArgs) -> anyhow::Result<()> {
    let b = a.client.endpoint()?.backend();
    let s = boomkv::with_transport!(b, t => {
        let mut c = connect(&t, &a.client)?;
        c.stats()?
    });
    if a.json {
        crate::outln!("{}", serde_json::to_string_pretty(&s)?)?;
        return Ok(());
    }
    let sp = &s.space;
    let index = serde_json::to_value(s.index)?;
    crate::outln!(
        "uptime        {:.0} s, {} workers, flush {}, index {}",
        s.uptime_s,
        s.workers,
        s.flush_kind,
        index.as_str().unwrap_or("?")
    )?;
    crate::outln!(
        "clients       {} connected, {} since start, {} refused",
        s.clients,
        s.clients_total,
        s.clients_refused
    )?;
    crate::outln!(
        "operations    {} puts, {} dels, {} gets, {} not found, {} scans, {} errors, {} refused for a full pool",
        s.puts,
        s.dels,
        s.gets,
        s.not_found,
        s.scans,
        s.errors,
        s.pool_full
    )?;
    // The server counts what it serves; the passive protocols' clients read and write the
    // pool with one-sided operations it never sees.
    crate::outln!("              (served by the server; pDPM-Direct and Clover clients bypass it: not counted)")?;
    crate::outln!(
        "keys          {} live, {} deleted",
        s.index_entries.saturating_sub(s.index_tombstones),
        s.index_tombstones
    )?;
    crate::outln!(
        "space         {} appended, {} updated in place, {} live, {} garbage",
        human_bytes(sp.bytes_appended),
        human_bytes(sp.bytes_in_place),
        human_bytes(sp.live_bytes),
        human_bytes(sp.garbage_bytes)
    )?;
    crate::outln!("segments      {} in use, {} free, {} granted", sp.segments_in_use, s.free_segments, s.grants)?;
    crate::outln!(
        "isolation     {} regions exposed to clients, {} one-sided operations refused, {} clients over a bound",
        s.exposed_regions,
        s.access_violations,
        s.over_limit
    )?;
    crate::outln!("write-back    {} lines, {} fences", s.flush.lines, s.flush.fences)?;
    crate::outln!("cooperative   {} ranges, {} stolen", s.coop.ranges, s.coop.steals)?;
    crate::outln!(
        "cleaner       {} segments freed, {} entries moved",
        s.cleaner.segments_freed,
        s.cleaner.entries_moved
    )?;
    let ph = &s.phases;
    if ph.put_samples > 0 {
        crate::outln!(
            "PUT steps     validate {:.2}, version+seal {:.2}, write-back {:.2}, 2nd persist {:.2}, index {:.2}, \
             reply {:.2}; total {:.2} us (medians of {} sampled)",
            ph.put_validate_us,
            ph.put_seal_us,
            ph.put_writeback_us,
            ph.put_second_persist_us,
            ph.put_index_us,
            ph.put_reply_us,
            ph.put_total_us,
            ph.put_samples
        )?;
    }
    if ph.get_samples > 0 {
        crate::outln!(
            "GET steps     lookup {:.2}, post {:.2}; total {:.2} us (medians of {} sampled)",
            ph.get_lookup_us,
            ph.get_write_us,
            ph.get_total_us,
            ph.get_samples
        )?;
    }
    Ok(())
}

/// A key as messages show it ([`printable_upto`]), cut after 128 bytes.
fn shown(key: &[u8]) -> String {
    printable_upto(key, 128)
}
