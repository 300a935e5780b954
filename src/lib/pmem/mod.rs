//! Persistent memory: the pool file and its mapping, write-back and fences, and the
//! crash-simulating media.
//!
//! This module owns every `unsafe` block of the crate outside the verbs backend:
//! mapping files and shared memory ([`map`], [`shared`]), executing
//! `clwb`/`clflushopt`/`clflush` and `sfence` ([`flush`]), the SIGBUS report of a
//! pool truncated under the process ([`fault`]), and two libc calls here
//! (`posix_fallocate`, `flock`). Everything above it uses the safe, bounds-checked
//! [`Mapping`] and [`Media`] APIs.
//!
//! [`Media`] is what the log writes to. It is either a real pool (a file, a file in a
//! directory, or a device-DAX node, mapped with `MAP_SYNC` where possible) or a
//! simulated one ([`Media::simulated`]) whose durable image receives only cache lines
//! that were written back and fenced; [`Media::crash_image`] then builds the pool that a
//! power failure would leave behind.

pub mod crashsim;
pub mod fault;
pub mod flush;
pub mod map;
pub mod shared;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use crashsim::{CrashOptions, CrashSim};
pub use flush::{FlushKind, CACHE_LINE};
pub use map::{MapMode, Mapping};

/// The largest piece [`copy_bytes`] (and [`Mapping::read`], [`Mapping::write`]) hand
/// to `memcpy` at once: below glibc's `rep movsb` threshold (4 KiB with AVX2).
pub const COPY_CHUNK: usize = 2048;

/// Copies `src` into `dst` (equal lengths) in pieces of [`COPY_CHUNK`] bytes.
///
/// Why: glibc before 2.39 copies blocks of 4 KiB and more with `rep movsb`, which on
/// AMD Zen runs several times slower when source and destination lie at certain
/// distances modulo 4 KiB. Which distance a pair of buffers has depends on where the
/// allocator put them, so it changes from process to process: a 16 KiB GET over shm
/// took 4-5 us in some runs and 10-16 us in others, the same binary and machine
/// (`GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4000000` made every run fast).
/// Pieces below the threshold take glibc's vector loop, which has no such cliff; the
/// extra calls cost nothing measurable at these sizes.
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_mut(COPY_CHUNK).zip(src.chunks(COPY_CHUNK)) {
        d.copy_from_slice(s);
    }
}

/// Appends `src` to `out` like `extend_from_slice`, in pieces (see [`copy_bytes`]).
pub fn extend_bytes(out: &mut Vec<u8>, src: &[u8]) {
    out.reserve(src.len());
    for s in src.chunks(COPY_CHUNK) {
        out.extend_from_slice(s);
    }
}

use crate::error::{Error, Result};

/// File name used when `--pmem` names a directory.
pub const POOL_FILE_NAME: &str = "boomkv.pool";

/// The smallest pool a create makes: 1 MiB.
const MIN_POOL_SIZE: u64 = 1 << 20;

/// Default pool size on creation: 1 GiB.
pub const DEFAULT_POOL_SIZE: u64 = 1 << 30;

/// How persistence is reached after cache lines are written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Cache-line write-back + fence (true persistence on DAX, or with eADR).
    Flush,
    /// Write-back + fence, then `msync` of the touched pages (page-cache files on disk).
    Msync,
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "flush" => Ok(Durability::Flush),
            "msync" => Ok(Durability::Msync),
            o => Err(format!("unknown durability '{o}' (expected flush or msync)")),
        }
    }
}

/// Counters of write-back work, for reports.
#[derive(Debug, Default)]
pub struct FlushStats {
    /// Cache lines written back.
    pub lines: AtomicU64,
    /// Fences executed.
    pub fences: AtomicU64,
    /// `msync` calls.
    pub msyncs: AtomicU64,
}

/// A snapshot of [`FlushStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlushCounts {
    /// Cache lines written back.
    pub lines: u64,
    /// Fences executed.
    pub fences: u64,
    /// `msync` calls.
    pub msyncs: u64,
}

/// Options for opening or creating a pool.
#[derive(Clone, Debug)]
pub struct MediaOptions {
    /// Size when the pool is created; `None` keeps an existing pool's size (or uses the default).
    pub create_size: Option<u64>,
    /// Create the pool file if it does not exist.
    pub create: bool,
    /// Map copy-on-write so nothing reaches the file (for `inspect-log`, `recover --dry-run`).
    pub read_only: bool,
    /// Write-back instruction; `None` picks the best the CPU has.
    pub flush: Option<FlushKind>,
    /// How persistence is reached.
    pub durability: Durability,
}

impl Default for MediaOptions {
    fn default() -> Self {
        MediaOptions { create_size: None, create: true, read_only: false, flush: None, durability: Durability::Flush }
    }
}

/// The mapped persistent memory of one pool.
pub struct Media {
    path: PathBuf,
    _file: Option<Arc<File>>,
    shared_file: Option<Arc<File>>,
    map: Arc<Mapping>,
    flush: FlushKind,
    durability: Durability,
    read_only: bool,
    /// A read-only open found the pool file locked by a writer (a running server?).
    held: bool,
    stats: FlushStats,
    sim: Option<Arc<CrashSim>>,
}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Media")
            .field("path", &self.path)
            .field("len", &self.map.len())
            .field("mode", &self.map.mode())
            .field("flush", &self.flush)
            .field("simulated", &self.sim.is_some())
            .finish()
    }
}

/// A one-sided FLUSH applied to `[off, off + len)` of mapping `m` (the target's memory,
/// mapped by whoever carries the FLUSH out: the initiator in `shm`, the software NIC in
/// `tcp`): the lines are written back with `kind` and fenced; on simulated media (a
/// mapping of a simulator's file) the simulator records them as durable, as a NIC's
/// FLUSH to the persistence domain would leave them.
pub fn persist_remote(m: &Mapping, kind: FlushKind, off: u64, len: usize) -> Result<()> {
    m.flush(kind, off, len)?;
    flush::sfence();
    if let Some(sim) = crashsim::simulator_of(m) {
        let base = m.origin().map_or(0, |o| o.offset);
        sim.remote_persisted(m, base, off, len);
    }
    Ok(())
}

/// Turns the user's `--pmem` argument into the pool file path: a directory gets
/// [`POOL_FILE_NAME`] inside it; a file or device node is used as it is.
pub fn resolve_pool_path(arg: &Path) -> Result<PathBuf> {
    match std::fs::metadata(arg) {
        Ok(m) if m.is_dir() => Ok(arg.join(POOL_FILE_NAME)),
        Ok(m) if m.is_file() || m.file_type().is_char_device() => Ok(arg.to_path_buf()),
        Ok(_) => Err(Error::Path { path: arg.into(), problem: "not a file, directory or DAX device".into() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && arg.as_os_str().as_encoded_bytes().ends_with(b"/") => {
            Err(Error::Path { path: arg.into(), problem: "no such directory".into() })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = arg.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if parent.is_dir() {
                Ok(arg.to_path_buf())
            } else {
                Err(Error::Path { path: arg.into(), problem: format!("directory {} does not exist", parent.display()) })
            }
        }
        Err(e) => Err(Error::Path { path: arg.into(), problem: e.to_string() }),
    }
}

fn device_size(path: &Path, meta: &std::fs::Metadata) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    let sys = format!("/sys/dev/char/{maj}:{min}/size");
    std::fs::read_to_string(&sys).ok().and_then(|s| s.trim().parse::<u64>().ok()).ok_or_else(|| {
        // A device-DAX node (/dev/daxX.Y) says its size there; any other character
        // device (/dev/null, a terminal) is no memory to map.
        let problem = if Path::new(&format!("/sys/dev/char/{maj}:{min}")).exists() {
            format!("a character device that is not device-DAX ({sys} gives no size): not persistent memory")
        } else {
            format!("cannot read device size from {sys}")
        };
        Error::Path { path: path.into(), problem }
    })
}

impl Media {
    /// Opens the pool at `path` (already resolved by [`resolve_pool_path`]), creating it
    /// with `opts.create_size` (or [`DEFAULT_POOL_SIZE`]) when it does not exist and
    /// `opts.create` is set. Returns the media and whether the file was created.
    pub fn open(path: &Path, opts: &MediaOptions) -> Result<(Media, bool)> {
        let perr = |problem: String| Error::Path { path: path.into(), problem };
        let exists = path.exists();
        if !exists && opts.read_only {
            return Err(perr("no such pool file (nothing to inspect)".into()));
        }
        if !exists && !opts.create {
            return Err(perr("no such pool file (pass --create, or --pool-size SIZE, to create a new pool)".into()));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .create(!exists && opts.create)
            .truncate(false)
            .open(path)
            .map_err(|e| perr(format!("cannot open: {e}")))?;
        if !opts.read_only {
            lock_exclusive(&file).map_err(perr)?;
        }
        let held = opts.read_only && held_by_writer(&file);
        let meta = file.metadata().map_err(|e| perr(e.to_string()))?;
        let is_dev = meta.file_type().is_char_device();
        let mut created = false;
        let len = if is_dev {
            device_size(path, &meta)?
        } else if exists && meta.len() == 0 {
            // Never format a file someone else made without being asked: it may be a
            // pool whose content was lost, or not meant as a pool at all.
            return Err(perr("empty file (0 bytes): not a BOOM-KV pool; remove it to create a new pool here".into()));
        } else if !exists {
            if opts.read_only || !opts.create {
                return Err(perr("no such pool file".into()));
            }
            let size = opts.create_size.unwrap_or(DEFAULT_POOL_SIZE);
            if size < MIN_POOL_SIZE || size > i64::MAX as u64 {
                if !exists {
                    let _ = std::fs::remove_file(path);
                }
                return Err(perr(if size < MIN_POOL_SIZE {
                    format!("pool size {size} is below the 1 MiB minimum")
                } else {
                    format!("pool size {size} is more than a file can hold")
                }));
            }
            allocate(&file, size).map_err(|e| {
                if !exists {
                    let _ = std::fs::remove_file(path);
                }
                perr(format!("cannot allocate {size} bytes: {e}"))
            })?;
            created = true;
            size
        } else {
            let len = meta.len();
            if !opts.read_only {
                // A sparse pool file would raise SIGBUS on a store once the disk fills:
                // allocate every block now, so a full disk is an error at open instead.
                allocate(&file, len)
                    .map_err(|e| perr(format!("cannot allocate the pool's {len} bytes on disk: {e}")))?;
            }
            if let Some(want) = opts.create_size {
                // Not yet known to be a pool: the header is read later. A file smaller
                // than any pool --pool-size makes is not one made so: say that, not
                // "omit --pool-size" (whose open would then fail on the header).
                if len < MIN_POOL_SIZE {
                    return Err(perr(format!(
                        "the file exists ({len} bytes) and is no pool --pool-size made (those have 1 MiB or more)"
                    )));
                }
                if want < len {
                    return Err(perr(format!(
                        "the file exists ({len} bytes); --pool-size {want} would shrink it, which is refused (that \
                         would lose data): omit --pool-size to open it as it is"
                    )));
                }
                if want > len {
                    return Err(perr(format!(
                        "the file exists ({len} bytes); --pool-size {want} would grow it, which is not supported: \
                         omit --pool-size to open it as it is"
                    )));
                }
            }
            len
        };
        let map = if opts.read_only {
            map_private(&file, len as usize).map_err(|e| perr(e.to_string()))?
        } else {
            Mapping::map_file(&file, 0, len as usize, true).map_err(|e| perr(e.to_string()))?
        };
        let flush = pick_flush(opts.flush)?;
        let shared = if opts.read_only { None } else { reopen(&file) };
        let file = Arc::new(file);
        Ok((
            Media {
                path: path.into(),
                shared_file: Some(shared.map(Arc::new).unwrap_or_else(|| file.clone())),
                _file: Some(file),
                map: Arc::new(map),
                flush,
                durability: opts.durability,
                read_only: opts.read_only,
                held,
                stats: FlushStats::default(),
                sim: None,
            },
            created,
        ))
    }

    /// A simulated pool of `len` bytes in shared memory (memfd, so the `shm` transport
    /// can hand it to clients): the mapping is the live image, and a separate durable
    /// image receives only lines written back and fenced.
    pub fn simulated(len: u64, flush: FlushKind) -> Result<Media> {
        Self::simulated_from(&vec![0u8; len as usize], flush)
    }

    /// A simulated pool whose live and durable images both start as `image` (for
    /// recovering from a crash image, or crashing again).
    pub fn simulated_from(image: &[u8], flush: FlushKind) -> Result<Media> {
        let (file, map) = Mapping::memfd("boomkv-sim", image.len())?;
        map.write(0, image)?;
        let file = Arc::new(file);
        let map = Arc::new(map);
        let sim = Arc::new(CrashSim::new(image.to_vec()));
        crashsim::register_file(&file, &sim, &map);
        Ok(Media {
            path: PathBuf::from("<simulated>"),
            shared_file: Some(file.clone()),
            _file: Some(file),
            map,
            flush,
            durability: Durability::Flush,
            read_only: false,
            held: false,
            stats: FlushStats::default(),
            sim: Some(sim),
        })
    }

    /// The pool file's path (or `<simulated>`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mapped bytes.
    pub fn map(&self) -> &Mapping {
        &self.map
    }

    /// The mapping, shared (for registering pool ranges with a transport).
    pub fn map_arc(&self) -> &Arc<Mapping> {
        &self.map
    }

    /// The pool file, for handing to a peer (shm transport) or registering (verbs).
    pub fn file(&self) -> Option<&Arc<File>> {
        self.shared_file.as_ref()
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Always false (pools are at least 1 MiB).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The write-back instruction in use.
    pub fn flush_kind(&self) -> FlushKind {
        self.flush
    }

    /// How the mapping was made.
    pub fn map_mode(&self) -> MapMode {
        self.map.mode()
    }

    /// How persistence is reached.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Whether writes stay out of the file (copy-on-write mapping).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether, when this read-only open was made, another open of the pool file held
    /// its exclusive lock (a running server, or a server starting or exiting; in this
    /// process too): what a writer writes meanwhile reaches this mapping page by page,
    /// so entries it is writing may look torn. Checked once, at the open.
    pub fn held_by_writer(&self) -> bool {
        self.held
    }

    /// Whether this is the crash-simulating media.
    pub fn is_simulated(&self) -> bool {
        self.sim.is_some()
    }

    /// One sentence on what an acknowledged write survives with this media, for `serve`.
    pub fn durability_statement(&self) -> String {
        if self.sim.is_some() {
            return "simulated media: durability is modelled by the crash simulator".into();
        }
        match (self.map.mode(), self.durability, self.flush) {
            (_, _, FlushKind::None) if self.durability == Durability::Flush => {
                "no cache-line write-back (--flush none): durable only on a platform with eADR".into()
            }
            (MapMode::DaxSync, _, f) => {
                format!("DAX with MAP_SYNC: {f} + sfence makes writes durable against power loss")
            }
            (MapMode::PageCache, Durability::Msync, f) => {
                format!("page-cache mapping: {f} + sfence, then msync: durable against power loss, slowly")
            }
            (MapMode::PageCache, Durability::Flush, f) => format!(
                "page-cache mapping (no DAX): {f} + sfence survives a process crash but NOT power loss; use --durability msync for that"
            ),
            (MapMode::Volatile, _, _) => "volatile memory: nothing survives the process".into(),
        }
    }

    /// Write-back and fence counters so far.
    pub fn flush_counts(&self) -> FlushCounts {
        FlushCounts {
            lines: self.stats.lines.load(Ordering::Relaxed),
            fences: self.stats.fences.load(Ordering::Relaxed),
            msyncs: self.stats.msyncs.load(Ordering::Relaxed),
        }
    }

    /// A crash point between two protocol steps: the crash simulator may fail here.
    /// A no-op on real media.
    #[inline]
    pub fn crash_point(&self) {
        if let Some(sim) = &self.sim {
            sim.event(&self.map);
        }
    }

    /// The crash simulator, on simulated media.
    pub fn crash_sim(&self) -> Option<&CrashSim> {
        self.sim.as_deref()
    }

    /// Writes back the lines covering `[off, off + len)`; no fence.
    pub fn flush(&self, off: u64, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.crash_point();
        let n = self.map.flush(self.flush, off, len)?;
        let lines = if n == 0 { line_count(off, len) } else { n };
        self.stats.lines.fetch_add(lines, Ordering::Relaxed);
        if let Some(sim) = &self.sim {
            sim.written_back(&self.map, off, len);
        }
        if self.durability == Durability::Msync && self.sim.is_none() && self.map.mode() == MapMode::PageCache {
            self.map.msync(off, len)?;
            self.stats.msyncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Store fence: makes this thread's earlier write-backs durable.
    pub fn fence(&self) {
        self.crash_point();
        flush::sfence();
        self.stats.fences.fetch_add(1, Ordering::Relaxed);
        if let Some(sim) = &self.sim {
            sim.fenced();
        }
    }

    /// Writes back `[off, off + len)` and fences.
    pub fn persist(&self, off: u64, len: usize) -> Result<()> {
        self.flush(off, len)?;
        self.fence();
        Ok(())
    }

    /// One aligned 8-byte store (never torn), not yet written back.
    pub fn store_u64(&self, off: u64, v: u64) -> Result<()> {
        self.map.atomic_u64(off)?.store(v, Ordering::Release);
        Ok(())
    }

    /// Aligned 8-byte load.
    pub fn load_u64(&self, off: u64) -> Result<u64> {
        Ok(self.map.atomic_u64(off)?.load(Ordering::Acquire))
    }

    /// Builds the pool a power failure at this instant would leave behind (simulated
    /// media only): the durable image plus a seeded random subset of dirty lines,
    /// optionally torn at 8-byte granularity.
    pub fn crash_image(&self, opts: &CrashOptions) -> Result<Vec<u8>> {
        let sim = self.sim.as_ref().ok_or_else(|| Error::invalid("crash_image needs simulated media"))?;
        Ok(sim.crash_image(&self.map, opts))
    }

    /// The durable image of simulated media (what survives if no dirty line does).
    pub fn durable_image(&self) -> Result<Vec<u8>> {
        let sim = self.sim.as_ref().ok_or_else(|| Error::invalid("durable_image needs simulated media"))?;
        Ok(sim.durable())
    }
}

fn line_count(off: u64, len: usize) -> u64 {
    let l = CACHE_LINE as u64;
    (off + len as u64).div_ceil(l) - off / l
}

fn pick_flush(requested: Option<FlushKind>) -> Result<FlushKind> {
    match requested {
        None => Ok(FlushKind::detect()),
        Some(k) if k.supported() => Ok(k),
        Some(k) => Err(Error::invalid(format!("this CPU does not support {k}; try --flush {}", FlushKind::detect()))),
    }
}

fn allocate(file: &File, size: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on an open fd.
    let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    match r {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(size),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

/// A second open file description of `file`, for handing to peers. The lock belongs to
/// the first one: a client that still holds a region's descriptor after the server died
/// would otherwise keep the pool locked against the next server.
fn reopen(file: &File) -> Option<File> {
    use std::os::fd::AsRawFd;
    OpenOptions::new().read(true).write(true).open(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// How long a held lock is retried before the pool is called in use. A lock can be held
/// for a moment without a server: any process of ours that forks holds a duplicate of
/// every descriptor (close-on-exec ones too) until its child calls exec, and a server
/// that is exiting holds it until its last descriptor closes.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// Takes an exclusive advisory lock on the pool file for as long as it is open, so a
/// second server (or `recover --repair`) cannot write the same pool.
fn lock_exclusive(file: &File) -> std::result::Result<(), String> {
    use std::os::fd::AsRawFd;
    let until = std::time::Instant::now() + LOCK_RETRY;
    loop {
        // SAFETY: plain syscall on an open fd; the lock is released when the fd is closed.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(format!("cannot lock the pool file: {e}"));
        }
        if std::time::Instant::now() >= until {
            return Err("the pool is in use by another process (a running server?)".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether another open of the pool file holds its exclusive lock (a server): tried with
/// a shared lock, released at once, so a server starting meanwhile is not kept out.
fn held_by_writer(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on an open fd.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if r == 0 {
        // SAFETY: as above; drops the shared lock just taken.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

fn map_private(file: &File, len: usize) -> Result<Mapping> {
    Mapping::map_private_file(file, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_in_pieces_are_whole_copies() {
        let map = Mapping::anonymous(64 << 10).unwrap();
        for len in [0usize, 1, COPY_CHUNK - 1, COPY_CHUNK, COPY_CHUNK + 1, 16 << 10, (16 << 10) + 37] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut dst = vec![0u8; len];
            copy_bytes(&mut dst, &src);
            assert_eq!(dst, src, "copy_bytes {len}");
            let mut out = vec![9u8];
            out.clear();
            extend_bytes(&mut out, &src);
            assert_eq!(out, src, "extend_bytes {len}");
            map.write(13, &src).unwrap();
            let mut back = vec![0u8; len];
            map.read(13, &mut back).unwrap();
            assert_eq!(back, src, "mapping {len}");
            map.copy_to(13, &map, 40 << 10, len.min(20 << 10)).unwrap();
            let mut moved = vec![0u8; len.min(20 << 10)];
            map.read(40 << 10, &mut moved).unwrap();
            assert_eq!(moved, src[..len.min(20 << 10)], "copy_to {len}");
        }
        // Overlapping moves stay memmove.
        map.write(0, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        map.copy_to(0, &map, 2, 6).unwrap();
        let mut b = [0u8; 8];
        map.read(0, &mut b).unwrap();
        assert_eq!(b, [1, 2, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn create_open_refuse_shrink_and_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = resolve_pool_path(dir.path()).unwrap();
        assert_eq!(path, dir.path().join(POOL_FILE_NAME));
        // A directory that is not there, named as one, is said to be missing (not taken
        // for a file to create).
        let e = resolve_pool_path(&dir.path().join("missing/")).unwrap_err().to_string();
        assert!(e.contains("no such directory"), "{e}");
        assert_eq!(resolve_pool_path(&dir.path().join("new.pool")).unwrap(), dir.path().join("new.pool"));
        let opts = MediaOptions { create_size: Some(2 << 20), ..Default::default() };
        let (m, created) = Media::open(&path, &opts).unwrap();
        assert!(created);
        assert_eq!(m.len(), 2 << 20);
        m.map().write(64, b"abc").unwrap();
        m.persist(64, 3).unwrap();
        assert!(m.flush_counts().fences >= 1);
        drop(m);
        let small = MediaOptions { create_size: Some(1 << 20), ..Default::default() };
        let e = Media::open(&path, &small).unwrap_err().to_string();
        assert!(e.contains("would shrink it, which is refused"), "{e}");
        let big = MediaOptions { create_size: Some(4 << 20), ..Default::default() };
        let e = Media::open(&path, &big).unwrap_err().to_string();
        assert!(e.contains("would grow it, which is not supported: omit --pool-size"), "{e}");
        // A file too small for any pool --pool-size makes, with --pool-size: not advice
        // to open it as it is (which would fail on its header), and left alone.
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, b"hello\n").unwrap();
        let e = Media::open(&text, &big).unwrap_err().to_string();
        assert!(e.contains("(6 bytes) and is no pool --pool-size made") && !e.contains("omit --pool-size"), "{e}");
        assert_eq!(std::fs::read(&text).unwrap(), b"hello\n");
        // A size no file can have is refused before anything is made.
        let huge = MediaOptions { create_size: Some(u64::MAX), ..Default::default() };
        let e = Media::open(&dir.path().join("huge.pool"), &huge).unwrap_err().to_string();
        assert!(e.contains("more than a file can hold"), "{e}");
        assert!(!dir.path().join("huge.pool").exists());
        let ro = MediaOptions { read_only: true, create: false, ..Default::default() };
        let (m, created) = Media::open(&path, &ro).unwrap();
        assert!(!created);
        assert_eq!(m.map().view(64, 3).unwrap(), b"abc");
        m.map().write(64, b"xyz").unwrap();
        drop(m);
        let (m, _) = Media::open(&path, &ro).unwrap();
        assert_eq!(m.map().view(64, 3).unwrap(), b"abc", "read-only writes must not reach the file");
    }

    #[test]
    fn a_pool_is_opened_read_write_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let opts = MediaOptions { create_size: Some(2 << 20), ..Default::default() };
        let (_m, _) = Media::open(&path, &opts).unwrap();
        let e = Media::open(&path, &opts).unwrap_err().to_string();
        assert!(e.contains("in use by another process"), "{e}");
        let ro = MediaOptions { read_only: true, create: false, ..Default::default() };
        let (seen, _) = Media::open(&path, &ro).expect("inspection of a live pool is allowed");
        assert!(seen.held_by_writer(), "a look at a live pool knows it");
        drop(_m);
        let (seen, _) = Media::open(&path, &ro).unwrap();
        assert!(!seen.held_by_writer(), "nobody writes it now");
        // The look took no lock that stays: a writer opens it again.
        assert!(Media::open(&path, &opts).is_ok());
    }

    #[test]
    fn a_peer_holding_the_shared_descriptor_does_not_keep_the_pool_locked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        let opts = MediaOptions { create_size: Some(2 << 20), ..Default::default() };
        let (m, _) = Media::open(&path, &opts).unwrap();
        // What the shm transport hands a client (SCM_RIGHTS makes a dup like this one).
        let peer = m.file().unwrap().try_clone().unwrap();
        drop(m);
        let (m2, _) = Media::open(&path, &opts).expect("the server died; its successor must open the pool");
        drop((m2, peer));
    }

    #[test]
    fn missing_directory_is_a_clear_error() {
        let e = resolve_pool_path(Path::new("/nonexistent-dir-xyz/pool")).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
    }

    #[test]
    fn line_count_covers_partial_lines() {
        assert_eq!(line_count(0, 64), 1);
        assert_eq!(line_count(63, 2), 2);
        assert_eq!(line_count(10, 200), 4);
    }
}
