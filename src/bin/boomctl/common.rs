//! Arguments shared by several subcommands, and output helpers.

use anyhow::Context as _;
use std::path::PathBuf;

use boomkv::index::IndexKind;
use boomkv::log::PoolOptions;
use boomkv::pmem::{Durability, FlushKind, MediaOptions};
use boomkv::units::parse_bytes;

/// `println!` that returns the write error instead of panicking, so a closed pipe
/// (`boomctl inspect-log | head`) ends the command normally (see `main`).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!($crate::common::stdout(), $($arg)*)
    }};
}

/// Standard output, locked, whose errors say what failed: a full disk under `> file`
/// used to end a command with a bare "No space left on device". The error's kind is
/// kept (a closed pipe is still a normal end, see [`is_broken_pipe`]).
pub struct Stdout(std::io::StdoutLock<'static>);

/// [`Stdout`].
pub fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

fn on_stdout(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("writing standard output: {e}"))
}

impl std::io::Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf).map_err(on_stdout)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_all(buf).map_err(on_stdout)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(on_stdout)
    }
}

/// Is this error, anywhere in its chain, a closed pipe on our output?
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// An outcome whose exit status is not 1: a command that ran to its end but found
/// something its status must show (a script cannot read the report), or a command
/// line clap could not check (2, as clap's own). `main` prints the message and exits
/// with `code`.
#[derive(Debug)]
pub struct Finding {
    /// The exit status: 2 for a command line that cannot run, 3 and up for findings.
    pub code: u8,
    /// One line for standard error.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Finding {}

/// A client command's error with the boomkv server it talked to: a server that could
/// not be reached gets a hint (the message names the address already); any other
/// error is prefixed with `server ADDR` (a handshake timeout, a refusal, a broken
/// connection), also inside a YCSB phase.
pub fn with_server(e: boomkv::Error, server: &dyn std::fmt::Display) -> anyhow::Error {
    // (Some transport messages name the address too; which ones is not typed, and the
    // prefix stays rather than being decided by the text.)
    if e.is_unreachable() {
        anyhow::anyhow!("{e} (is `boomctl serve` running there?)")
    } else {
        anyhow::Error::new(e).context(format!("server {server}"))
    }
}

/// The error and its causes on one line, outermost first, as `{e:#}` prints them but
/// with a cause left out when the message right before it (the error it is the source
/// of) already says it: an error type that prints its source in its own message (the
/// library's I/O errors, tempfile's) and also returns it as its source would otherwise
/// be printed twice ("... (os error 2): No such file or directory (os error 2)").
pub fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut prev = String::new();
    for c in e.chain() {
        let s = c.to_string();
        if !s.is_empty() && !prev.contains(&s) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&s);
        }
        prev = s;
    }
    out
}

use clap::builder::TypedValueParser as _;

/// `--protocol`: every protocol by name (from `Protocol::ALL`), for `--help` and shell
/// completion.
pub fn protocol_parser() -> impl clap::builder::TypedValueParser<Value = boomkv::wire::Protocol> {
    clap::builder::PossibleValuesParser::new(boomkv::wire::Protocol::ALL.map(boomkv::wire::Protocol::name))
        .try_map(|s| s.parse::<boomkv::wire::Protocol>())
}

/// A value that is one of `names`, parsed by its type: listed in `--help` and offered
/// by shell completion. A name may carry aliases the type also takes, unlisted:
/// `"verbs|rdma|ib"`. The argument takes `ignore_case = true` (the values were always
/// taken in any case), and the type gets the value in lower case.
pub fn one_of<T>(names: &'static [&'static str]) -> impl clap::builder::TypedValueParser<Value = T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Display,
{
    let values = names.iter().map(|n| {
        let mut parts = n.split('|');
        let v = clap::builder::PossibleValue::new(parts.next().unwrap_or(n));
        v.aliases(parts)
    });
    clap::builder::PossibleValuesParser::new(values)
        .try_map(|s| s.to_ascii_lowercase().parse::<T>().map_err(|e| e.to_string()))
}

/// `--flush`: the write-back instructions, named for shell completion.
pub fn flush_parser() -> impl clap::builder::TypedValueParser<Value = FlushKind> {
    clap::builder::PossibleValuesParser::new(["clwb", "clflushopt", "clflush", "none"])
        .try_map(|s| s.parse::<FlushKind>())
}

/// Parses a byte size for clap (`2k`, `64M`, `1G`).
pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_bytes(s).map_err(|e| e.to_string())
}

/// `--segment-size`: a size a pool's segments can have, refused on the command line
/// rather than when a pool is made with it.
pub fn segment_size_arg(s: &str) -> Result<u64, String> {
    let v = size_arg(s)?;
    boomkv::log::format::check_segment_size(v).map_err(|e| e.to_string())?;
    Ok(v)
}

/// Where the pool is and how to map it.
#[derive(clap::Args, Debug, Clone)]
pub struct PmemArgs {
    /// Pool location: a directory (the pool is DIR/boomkv.pool), a pool file, or a
    /// device-DAX node such as /dev/dax0.0.
    #[arg(long, value_name = "PATH")]
    pub pmem: PathBuf,
}

/// How to create and map a pool (for commands that may create one).
#[derive(clap::Args, Debug, Clone)]
pub struct MediaArgs {
    /// Size of a NEW pool. Implies --create. An existing pool keeps its size: a
    /// different --pool-size is refused, larger or smaller.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub pool_size: Option<u64>,
    /// Create the pool if --pmem names none (1G unless --pool-size); without it, or
    /// --pool-size, a missing pool is an error, so a typo never starts an empty store.
    #[arg(long)]
    pub create: bool,
    /// Segment size of a NEW pool: the unit a client is granted [default: the paper's
    /// 64M, or pool size / 64 for pools under 4G, so that a pool holds about 64 segments].
    #[arg(long, value_name = "SIZE", value_parser = segment_size_arg)]
    pub segment_size: Option<u64>,
    /// Cache-line write-back instruction [default: the best this CPU has].
    #[arg(long, value_name = "clwb|clflushopt|clflush|none", value_parser = flush_parser())]
    pub flush: Option<FlushKind>,
    /// How durability is reached: `flush` (write-back + fence; enough on DAX or eADR) or
    /// `msync` (also msync the pages: needed for power-loss durability off DAX; slow).
    #[arg(long, ignore_case = true, value_name = "flush|msync", default_value = "flush", value_parser = crate::common::one_of::<Durability>(&["flush", "msync"]))]
    pub durability: Durability,
    /// Index to rebuild: `hash` (point lookups) or `ordered` (also scans, YCSB E).
    #[arg(long, value_name = "hash|ordered", default_value = "hash")]
    pub index: IndexKind,
}

impl MediaArgs {
    /// Pool options for a read-write open that may create the pool.
    pub fn pool_options(&self) -> PoolOptions {
        PoolOptions {
            media: MediaOptions {
                create_size: self.pool_size,
                create: self.create || self.pool_size.is_some(),
                read_only: false,
                flush: self.flush,
                durability: self.durability,
            },
            segment_size: self.segment_size.unwrap_or_else(|| {
                boomkv::log::format::default_segment_size(self.pool_size.unwrap_or(boomkv::pmem::DEFAULT_POOL_SIZE))
            }),
            index: self.index,
        }
    }
}

/// Pool options for looking at an existing pool without changing it.
pub fn read_only_options(index: IndexKind) -> PoolOptions {
    PoolOptions {
        media: MediaOptions { create: false, read_only: true, flush: Some(FlushKind::None), ..Default::default() },
        index,
        ..Default::default()
    }
}

/// Writes `v` as pretty JSON to stdout.
pub fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    let s = serde_json::to_string_pretty(v)?;
    crate::outln!("{s}")?;
    Ok(())
}

/// RDMA device options for `verbs://` listen addresses. Client commands take the same
/// settings from BOOMKV_RDMA_DEVICE, BOOMKV_RDMA_PORT and BOOMKV_RDMA_GID_INDEX.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct VerbsArgs {
    /// RDMA device for verbs:// addresses, e.g. mlx5_0 or rxe0
    /// [default: $BOOMKV_RDMA_DEVICE, else the first device].
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Port of the RDMA device [default: $BOOMKV_RDMA_PORT, else 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..))]
    pub port: Option<u8>,
    /// GID index to use on RoCE [default: $BOOMKV_RDMA_GID_INDEX, else a RoCE v2 IPv4 GID].
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u8>,
}

impl VerbsArgs {
    /// True when any option was given.
    pub fn given(&self) -> bool {
        self.device.is_some() || self.port.is_some() || self.gid_index.is_some()
    }

    /// The environment's settings with these options on top.
    #[cfg(feature = "rdma")]
    pub fn config(&self) -> anyhow::Result<boomkv::transport::VerbsConfig> {
        let mut c = boomkv::transport::VerbsConfig::from_env()?;
        if let Some(d) = &self.device {
            c.device = Some(d.clone());
        }
        if let Some(p) = self.port {
            c.port = p;
        }
        if let Some(g) = self.gid_index {
            c.gid_index = Some(g);
        }
        Ok(c)
    }
}

/// `--pin`: where an embedded server's workers and the client threads run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PinMode {
    /// split while each client thread has a CPU beside the workers'; past that, over
    /// shm or tcp with --workers not given, colocate.
    Auto,
    /// The server's workers on CPUs of their own (the last this process may use), the
    /// client threads on the others (with two or more CPUs).
    Split,
    /// A worker on each CPU, sharing it with the client threads it serves; both
    /// yield the CPU while they wait. With --workers k: the first k CPUs (round again
    /// past the CPU count).
    Colocate,
    /// Wherever the scheduler puts them.
    Off,
}

impl From<PinMode> for boomkv::cpus::Placement {
    fn from(p: PinMode) -> Self {
        match p {
            PinMode::Auto => boomkv::cpus::Placement::Auto,
            PinMode::Split => boomkv::cpus::Placement::Split,
            PinMode::Colocate => boomkv::cpus::Placement::Colocate,
            PinMode::Off => boomkv::cpus::Placement::Off,
        }
    }
}

/// The layout `--pin` asks for, for an embedded server with `workers` workers (`None`:
/// not given) and `threads` client threads over `backend` (`None`: off, or fewer than
/// two CPUs to place on).
pub fn pin_layout(
    pin: PinMode,
    workers: Option<usize>,
    threads: usize,
    backend: boomkv::transport::Backend,
) -> Option<boomkv::cpus::Layout> {
    let allowed = boomkv::cpus::CpuList::allowed()?;
    let colocatable = backend != boomkv::transport::Backend::Verbs;
    boomkv::cpus::Layout::place(&allowed, pin.into(), workers, boomkv::server::default_workers(), threads, colocatable)
}

/// On SIGINT, SIGTERM or SIGHUP, removes the temporary pools and crash images this
/// process made (in the default place, the temporary directory and `also`, a --pmem
/// DIR) and exits with 128 + the signal: an interrupted benchmark otherwise leaves its
/// pool behind, in /dev/shm by default, where it holds memory until someone finds it.
/// A thread of its own waits for the signals; the commands that make such pools call
/// this first.
pub fn clean_up_on_signal(also: Option<PathBuf>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    // What a killed run (SIGKILL, the OOM killer) could not remove: its pool would pin
    // its size of memory in /dev/shm for good.
    let mut parents = vec![boomkv::bench::embedded::default_parent(), std::env::temp_dir()];
    parents.extend(also.clone());
    parents.dedup();
    for p in &parents {
        for (path, bytes) in boomkv::bench::embedded::remove_dead_temp_dirs(p) {
            eprintln!(
                "boomctl: removed {} ({}), left behind by a boomkv process that was killed",
                path.display(),
                boomkv::units::short_bytes(bytes)
            );
        }
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| anyhow::anyhow!("cannot install signal handlers: {e}"))?;
    std::thread::Builder::new()
        .name("boomctl-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // Before the directories: a server writing into its own would leave files.
                boomkv::bench::redis::stop_started();
                let mut dirs = vec![boomkv::bench::embedded::default_parent(), std::env::temp_dir()];
                dirs.extend(also);
                for d in &dirs {
                    boomkv::bench::embedded::remove_own_temp_dirs(d);
                }
                eprintln!("boomctl: stopped by signal {sig}; its temporary files are removed");
                std::process::exit(128 + sig);
            }
        })
        .map_err(|e| anyhow::anyhow!("cannot start the signal thread: {e}"))?;
    Ok(())
}

/// Fails if the output file `path` (named by `what`, such as `--csv`) cannot be
/// written: its directory is missing, it is a directory, or it is not writable. An
/// existing file is left as it is; a file made by the check is removed again.
pub fn check_writable(what: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let existed = path.exists();
    let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("{what} {}: cannot write there", path.display()))?;
    if !existed {
        // What the open made: the file, or through a link to nothing yet, the link's
        // target (the link stays, for the run to write through).
        let made = if link { std::fs::canonicalize(path).ok() } else { Some(path.to_path_buf()) };
        if let Some(m) = made {
            let _ = std::fs::remove_file(m);
        }
    }
    Ok(())
}

/// Writes `bytes` as the whole of the file at `path`, replacing it only once they are
/// all written: beside it first, then renamed over it, so a write that fails (a full
/// disk) leaves the earlier file as it was, not cut short. A path that is not a
/// regular file (`/dev/stdout`, a FIFO) is written in place.
pub fn write_replacing(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return std::fs::write(path, bytes);
    }
    // Through a link to the file it names: the link stays.
    let resolved = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path)?,
        _ => path.to_path_buf(),
    };
    let path = resolved.as_path();
    let name = path.file_name().ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let r = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Whether `a` and `b` name the same file, written as they may be (`dir/../dir/x`, a
/// link to the directory): the directories are resolved, the files need not exist.
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    let resolved = |p: &std::path::Path| -> Option<PathBuf> {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.canonicalize().ok()?,
            _ => std::env::current_dir().ok()?,
        };
        // A link's target, if the file is one.
        let full = dir.join(p.file_name()?);
        Some(full.canonicalize().unwrap_or(full))
    };
    a == b || matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y)
}

/// A count that must be 1 or more (threads, workers): 0 is refused, not made 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::{one_line, same_file, with_server, write_replacing};

    #[test]
    fn a_replaced_file_is_whole_and_a_link_to_it_stays_a_link() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("r.json");
        write_replacing(&f, b"first").unwrap();
        let link = d.path().join("l.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        write_replacing(&link, b"second").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&f).unwrap(), b"second");
        // Nothing left beside it, and a device is written in place.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
        write_replacing(std::path::Path::new("/dev/null"), b"x").unwrap();
        // A failed write (no such directory) leaves nothing behind and says why.
        assert!(write_replacing(&d.path().join("no/such.json"), b"x").is_err());
    }

    #[test]
    fn the_same_file_is_found_however_it_is_written() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("o");
        std::fs::create_dir(&sub).unwrap();
        let (a, b) = (sub.join("j.json"), sub.join("..").join("o").join("j.json"));
        assert!(same_file(&a, &b), "{} {}", a.display(), b.display());
        assert!(!same_file(&a, &sub.join("c.csv")));
        std::os::unix::fs::symlink(&sub, d.path().join("link")).unwrap();
        assert!(same_file(&a, &d.path().join("link").join("j.json")));
    }
    use boomkv::Error;

    #[test]
    fn with_server_names_the_server_once_and_hints_when_none_answered() {
        let line = |e: Error| one_line(&with_server(e, &"tcp://h:1"));
        let unreachable = || Error::Unreachable { addr: "tcp://h:1".into(), why: "Connection refused".into() };
        let hint = "cannot connect to tcp://h:1: Connection refused (is `boomctl serve` running there?)";
        assert_eq!(line(unreachable()), hint);
        assert_eq!(line(Error::Phase { phase: "load", error: Box::new(unreachable()) }), format!("load phase: {hint}"));
        let slow = Error::Timeout(std::time::Duration::from_secs(10), "the handshake");
        assert_eq!(
            line(Error::Phase { phase: "load", error: Box::new(slow) }),
            "server tcp://h:1: load phase: timed out after 10s waiting for the handshake"
        );
        assert_eq!(line(Error::Transport("reset".into())), "server tcp://h:1: transport: reset");
    }

    #[test]
    fn one_line_says_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = anyhow::Error::new(Error::io("reading workload file w", io)).context("ycsb");
        assert_eq!(format!("{e:#}").matches("os error 2").count(), 2, "what one_line is for");
        assert_eq!(one_line(&e), "ycsb: reading workload file w: No such file or directory (os error 2)");
        assert_eq!(one_line(&anyhow::anyhow!("inner").context("outer")), "outer: inner");
        // A cause is compared with the error it is the source of, not with the whole
        // line: a context that happens to hold the same words keeps the cause.
        let e = anyhow::anyhow!("timed out").context("wrapped").context("GET timed out");
        assert_eq!(one_line(&e), "GET timed out: wrapped: timed out");
    }
}
