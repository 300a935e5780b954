//! An embedded server on a temporary pool, for benchmark runs without `--server`.
//!
//! The pool lives in a fresh directory under `/dev/shm` when it exists (memory, like
//! persistent memory) or the system temp directory, or under a directory the user
//! names; the directory and everything in it are removed when the [`Embedded`] server
//! is dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::index::IndexKind;
use crate::log::{Pool, PoolOptions};
use crate::pmem::{FlushKind, MediaOptions};
use crate::server::{Server, ServerConfig};
use crate::transport::{Backend, Endpoint, Transport};
use crate::wire::Protocol;

/// Where and how to make the temporary pool.
#[derive(Clone, Debug)]
pub struct EmbeddedOptions {
    /// Parent directory of the temporary pool directory.
    pub parent: Option<PathBuf>,
    /// Pool size.
    pub pool_size: u64,
    /// Segment size.
    pub segment_size: u64,
    /// Index variant.
    pub index: IndexKind,
    /// Write-back instruction (`None`: the best the CPU has).
    pub flush: Option<FlushKind>,
    /// Server settings.
    pub server: ServerConfig,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            parent: None,
            pool_size: 512 << 20,
            segment_size: 64 << 20,
            index: IndexKind::Hash,
            flush: None,
            server: ServerConfig { log_clients: false, ..Default::default() },
        }
    }
}

/// The pool an embedded server needs for `entries` keys with values of up to
/// `value_size` bytes, written by `clients` clients with segments of `segment_size`:
/// every key's entry twice over (live data, and room for the cleaner to work), a
/// segment for each client of the load and each of the run (the load's stay sealed,
/// holding records, until the cleaner compacts them) and four spare; at least 256 MiB,
/// rounded up to a power of two (the file is sparse; [`pool_need`] is the size before
/// rounding). `boomctl ycsb` and
/// the sweeps size their pools with it.
pub fn pool_size_for(entries: u64, value_size: u64, clients: u64, segment_size: u64) -> u64 {
    let need = pool_need(entries, value_size, clients, segment_size);
    need.checked_next_power_of_two().unwrap_or(need)
}

/// [`pool_size_for`] before the rounding: what the pool's file system must hold.
pub fn pool_need(entries: u64, value_size: u64, clients: u64, segment_size: u64) -> u64 {
    // Header, key (YCSB's are ~23 bytes) and slot rounding.
    let slot = value_size + crate::log::format::ENTRY_HEADER_SIZE + 64;
    slot.saturating_mul(entries)
        .saturating_mul(2)
        .saturating_add(clients_need(clients, segment_size))
        .saturating_add(4 * segment_size)
        .max(256 << 20)
}

/// The part of [`pool_need`] that `clients` clients take: two log segments each.
pub fn clients_need(clients: u64, segment_size: u64) -> u64 {
    clients.saturating_mul(2).saturating_mul(segment_size)
}

/// Bytes of pool that pDPM-Direct's cell table or Clover's arena, sized by
/// [`crate::client::ClientOptions::size_passive`] for `keys` keys written `writes`
/// more times with values up to `value_size` bytes, takes, in whole segments (0 for the
/// other protocols).
pub fn passive_need(p: Protocol, keys: u64, writes: u64, value_size: u64, segment_size: u64) -> u64 {
    let (cells, value) = crate::client::ClientOptions::cells_for(keys, value_size);
    let bytes = match p {
        Protocol::PdpmDirect => {
            let slot_size = crate::log::cells::CellTable::slot_size_for(value);
            crate::log::cells::CellTable { first_segment: 0, segments: 0, cells, slot_size }.bytes()
        }
        Protocol::Clover => {
            let data = crate::client::ClientOptions::clover_data_for(keys, writes, value_size);
            // The chunks' rounding: at most one chunk more (a chunk is at least 64 KiB,
            // 4 versions of the largest value).
            let chunk = crate::log::clover::version_len(40 + 1024 + value_size).saturating_mul(4).max(64 << 10);
            cells * crate::log::clover::HEAD_SIZE + 4096 + data + chunk
        }
        _ => return 0,
    };
    bytes.div_ceil(segment_size.max(1)).saturating_add(1).saturating_mul(segment_size)
}

/// [`pool_size_for`] for protocol `p` with `keys` keys written `writes` more times:
/// pDPM-Direct's cell table and Clover's arena come on top.
pub fn pool_size_for_protocol(
    p: Protocol,
    keys: u64,
    writes: u64,
    value_size: u64,
    clients: u64,
    segment_size: u64,
) -> u64 {
    pool_size_reclaiming(p, keys, writes, writes, value_size, clients, segment_size)
}

/// [`pool_size_for_protocol`] with a log that holds `log_writes` of the `writes`: past
/// them the cleaner reclaims what updates supersede. pDPM-Direct's cells and Clover's
/// arena (every version, which no cleaner reclaims while clients run) still hold every
/// write.
pub fn pool_size_reclaiming(
    p: Protocol,
    keys: u64,
    writes: u64,
    log_writes: u64,
    value_size: u64,
    clients: u64,
    segment_size: u64,
) -> u64 {
    let need = pool_need(keys.saturating_add(log_writes), value_size, clients, segment_size)
        .saturating_add(passive_need(p, keys, writes, value_size, segment_size));
    need.checked_next_power_of_two().unwrap_or(need)
}

/// A server on a temporary pool.
pub struct Embedded<T: Transport> {
    server: Option<Server<T>>,
    ep: Endpoint,
    dir: tempfile::TempDir,
}

/// Where the temporary pool directory goes by default: /dev/shm if it exists, else
/// the temporary directory.
pub fn default_parent() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let usable = std::fs::metadata(shm).map(|m| m.is_dir() && !m.permissions().readonly()).unwrap_or(false);
    if usable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Lets an embedded server take every client of a run of `clients` clients, however
/// many (the default limit is for a shared server), twice over: the load phase's
/// clients may not all be reaped when the run phase's connect.
pub fn allow_run_clients(cfg: &mut ServerConfig, clients: usize) {
    cfg.max_clients = cfg.max_clients.max(clients.saturating_mul(2).saturating_add(1));
}

/// Removes the temporary directories and files in `parent` that a boomkv process which
/// is gone left behind (killed with SIGKILL, or by the OOM killer: no clean-up ran),
/// each of them a pool of up to the run's size pinning memory in /dev/shm: the
/// entries named with [`crate::log::temp_prefix`] of a process ID that no process has
/// now, owned by this user. Returns what was removed, with its size in bytes.
pub fn remove_dead_temp_dirs(parent: &Path) -> Vec<(PathBuf, u64)> {
    use std::os::unix::fs::MetadataExt;
    let own = std::process::id();
    let Ok(me) = std::fs::metadata("/proc/self") else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("boomkv-"))
            .and_then(|r| r.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // A live process (this one, or one that reuses the ID) keeps its entry.
        if pid == own || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let Ok(meta) = e.path().symlink_metadata() else { continue };
        if meta.uid() != me.uid() {
            continue;
        }
        let size = disk_usage(&e.path());
        let gone = if meta.is_dir() { std::fs::remove_dir_all(e.path()) } else { std::fs::remove_file(e.path()) };
        if gone.is_ok() {
            removed.push((e.path(), size));
        }
    }
    removed
}

/// The bytes the files under `p` take on disk (what a removal frees).
fn disk_usage(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = p.symlink_metadata() else { return 0 };
    if !m.is_dir() {
        return m.blocks() * 512;
    }
    std::fs::read_dir(p).map(|d| d.flatten().map(|e| disk_usage(&e.path())).sum()).unwrap_or(0)
}

/// Removes this process's temporary directories and files (a socket) in `parent`
/// ([`crate::log::temp_prefix`]): for a binary's signal handler, on its way out of an
/// interrupted run (best effort: what cannot be removed is left).
pub fn remove_own_temp_dirs(parent: &Path) {
    let prefix = crate::log::temp_prefix();
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            // Directories (pools, crash images) and single files (a socket).
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(e.path());
            } else {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl<T: Transport> Embedded<T> {
    /// Creates the pool and starts serving it over `t` (`backend` says which address to use).
    pub fn start(t: T, backend: Backend, o: &EmbeddedOptions) -> Result<Embedded<T>> {
        let parent = o.parent.clone().unwrap_or_else(default_parent);
        let dir = tempfile::Builder::new()
            .prefix(&crate::log::temp_prefix())
            .tempdir_in(&parent)
            .map_err(|e| Error::io(format!("cannot create a temporary pool directory in {}", parent.display()), e))?;
        let opts = PoolOptions {
            media: MediaOptions { create_size: Some(o.pool_size), flush: o.flush, ..Default::default() },
            segment_size: o.segment_size,
            index: o.index,
        };
        let (pool, _) = Pool::open(dir.path(), &opts)?;
        let listen = match backend {
            Backend::Shm => Endpoint::Shm(dir.path().join("boomkv.sock")),
            Backend::Tcp => Endpoint::parse("127.0.0.1:0")?,
            // The handshake listens on loopback TCP; the queue pairs use the device's GID.
            Backend::Verbs => Endpoint::Verbs("127.0.0.1:0".into()),
        };
        let server = Server::start(t, Arc::new(pool), &[listen], o.server.clone())?;
        let ep = server.endpoints()[0].clone();
        Ok(Embedded { server: Some(server), ep, dir })
    }

    /// The address to connect to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The server.
    pub fn server(&self) -> Option<&Server<T>> {
        self.server.as_ref()
    }

    /// The temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl<T: Transport> Drop for Embedded<T> {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}
