//! The crash-simulating media: a durable image beside the live mapping.
//!
//! Real persistent memory keeps a store only once its cache line has been written back
//! and the writing thread has fenced. The simulator mirrors that: a write-back
//! snapshots the line into the writing thread's pending set, a fence by that thread
//! copies its pending lines into the durable image. At a simulated power failure, any
//! line not yet durable may or may not have reached the media: [`CrashSim::crash_image`]
//! keeps a seeded random subset of them, and with tearing keeps only some of a line's
//! 8-byte words (aligned 8-byte stores never tear, so words are the unit).
//!
//! A one-sided FLUSH (the IBTA's RDMA FLUSH) makes lines durable without the owner's
//! CPU: the transports run it through [`crate::pmem::persist_remote`], which finds the
//! simulator of the file the flushed mapping maps ([`register_file`]) and makes those
//! lines durable at once ([`CrashSim::remote_persisted`]), as the target's NIC would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::ThreadId;

use rand::{RngExt, SeedableRng};

use super::flush::CACHE_LINE;
use super::map::Mapping;

/// How a simulated power failure treats lines that were not durable yet.
#[derive(Clone, Copy, Debug)]
pub struct CrashOptions {
    /// Seed of the random choices (same seed, same image).
    pub seed: u64,
    /// Probability that a non-durable line (or snapshot) reaches the media anyway.
    pub keep_probability: f64,
    /// Keep a random subset of a kept line's 8-byte words instead of the whole line.
    pub tear: bool,
}

impl Default for CrashOptions {
    fn default() -> Self {
        CrashOptions { seed: 0, keep_probability: 0.5, tear: true }
    }
}

type Line = [u8; CACHE_LINE];

/// A written-back line not yet fenced: offset, content, and when it was snapshotted.
type Snap = (usize, Line, u64);

/// The durable image and, per line, the write-back sequence number of its content.
#[derive(Debug)]
struct Durable {
    image: Vec<u8>,
    seq: HashMap<usize, u64>,
}

/// Durable image and per-thread pending write-backs.
///
/// Lock order: `pending`, then `durable`.
#[derive(Debug)]
pub struct CrashSim {
    durable: Mutex<Durable>,
    pending: Mutex<HashMap<ThreadId, Vec<Snap>>>,
    /// Orders write-back snapshots: an older snapshot never overwrites a newer durable line.
    snap_seq: AtomicU64,
    /// Crash points (write-backs, fences, protocol steps) seen so far.
    events: AtomicU64,
    /// Crash at this event (0: not armed).
    armed_at: AtomicU64,
    armed_opts: Mutex<CrashOptions>,
    /// The image captured when the armed crash happened.
    captured: Mutex<Option<Vec<u8>>>,
    crashed: AtomicBool,
    /// The live image (the media's mapping), for crash points raised by peers' FLUSHes.
    live: OnceLock<Weak<Mapping>>,
}

/// Simulators by the (device, inode) of their memory file, for one-sided FLUSHes that
/// arrive through another mapping of the same file.
type Registry = Vec<((u64, u64), Weak<CrashSim>)>;

static REGISTRY: Mutex<Registry> = Mutex::new(Vec::new());
/// Entries in [`REGISTRY`] (a FLUSH takes no lock while it is zero).
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

/// Makes `sim` the simulator of one-sided FLUSHes into `file` (whose live mapping is
/// `live`): every mapping of the file reports its [`crate::pmem::persist_remote`] to it.
pub fn register_file(file: &std::fs::File, sim: &Arc<CrashSim>, live: &Arc<Mapping>) {
    let Some(o) = super::map::FileOrigin::of(file, 0) else { return };
    let _ = sim.live.set(Arc::downgrade(live));
    let mut r = REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    r.retain(|(_, w)| w.strong_count() > 0);
    r.push(((o.dev, o.ino), Arc::downgrade(sim)));
    REGISTERED.store(r.len(), Ordering::Release);
}

/// The simulator registered for the file `m` maps, if any.
pub(crate) fn simulator_of(m: &Mapping) -> Option<Arc<CrashSim>> {
    if REGISTERED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let o = m.origin()?;
    let r = REGISTRY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    r.iter().find(|(id, _)| *id == (o.dev, o.ino)).and_then(|(_, w)| w.upgrade())
}

impl CrashSim {
    /// A simulator whose durable image starts as `image`.
    pub fn new(image: Vec<u8>) -> CrashSim {
        CrashSim {
            durable: Mutex::new(Durable { image, seq: HashMap::new() }),
            pending: Mutex::new(HashMap::new()),
            snap_seq: AtomicU64::new(0),
            events: AtomicU64::new(0),
            armed_at: AtomicU64::new(0),
            armed_opts: Mutex::new(CrashOptions::default()),
            captured: Mutex::new(None),
            crashed: AtomicBool::new(false),
            live: OnceLock::new(),
        }
    }

    /// A one-sided FLUSH of `[off, off + len)` of `src` (a mapping of this media's file
    /// whose first byte is media offset `src_base`) reached the persistence domain: a
    /// crash point first (a crash there leaves the FLUSH unacknowledged), then the lines
    /// (the bytes of them `src` covers) become durable, as written back and fenced.
    pub fn remote_persisted(&self, src: &Mapping, src_base: u64, off: u64, len: usize) {
        if let Some(live) = self.live.get().and_then(Weak::upgrade) {
            self.event(&live);
        }
        let l = CACHE_LINE as u64;
        let (start, end) = (src_base + off, src_base + off + len as u64);
        let mut line = start / l * l;
        let mut d = self.durable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while line < end {
            // The part of the line inside both the source mapping and the image.
            let from = line.max(src_base);
            let to = (line + l).min(src_base + src.len() as u64).min(d.image.len() as u64);
            if from < to {
                let mut buf = [0u8; CACHE_LINE];
                let n = (to - from) as usize;
                if src.read(from - src_base, &mut buf[..n]).is_ok() {
                    let seq = self.snap_seq.fetch_add(1, Ordering::SeqCst);
                    if d.seq.get(&(line as usize)).is_none_or(|&cur| cur < seq) {
                        d.seq.insert(line as usize, seq);
                        d.image[from as usize..to as usize].copy_from_slice(&buf[..n]);
                    }
                }
            }
            line += l;
        }
    }

    /// Arms a power failure at the `n`-th crash point from now (n >= 1): at that
    /// point, before it takes effect, the crash image is captured ([`CrashSim::take_captured`]).
    /// The live image goes on changing; only the capture counts.
    pub fn arm(&self, n: u64, opts: CrashOptions) {
        *self.armed_opts.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = opts;
        let now = self.events.load(Ordering::SeqCst);
        self.armed_at.store(now + n.max(1), Ordering::SeqCst);
    }

    /// Crash points seen so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::SeqCst)
    }

    /// Whether the armed crash has happened.
    pub fn has_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Takes the captured crash image.
    pub fn take_captured(&self) -> Option<Vec<u8>> {
        self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// A crash point: counts it, and captures the crash image if this is the armed one.
    pub fn event(&self, live: &Mapping) {
        let n = self.events.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.armed_at.load(Ordering::SeqCst) {
            self.crash_now(live);
        }
    }

    /// Captures the crash image now (if no crash was captured yet).
    ///
    /// The crashed flag is raised before the image is taken: a writer that still sees
    /// it lowered after its last fence knows its lines are in the image.
    pub fn crash_now(&self, live: &Mapping) {
        let mut cap = self.captured.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.crashed.swap(true, Ordering::SeqCst) {
            return;
        }
        let opts = *self.armed_opts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *cap = Some(self.crash_image(live, &opts));
    }

    /// Records a write-back of the lines covering `[off, off + len)` of `live`.
    pub fn written_back(&self, live: &Mapping, off: u64, len: usize) {
        let l = CACHE_LINE as u64;
        let mut line = off / l * l;
        let end = off + len as u64;
        let mut snaps = Vec::new();
        while line < end {
            let mut buf = [0u8; CACHE_LINE];
            let n = (live.len() as u64 - line).min(l) as usize;
            if live.read(line, &mut buf[..n]).is_ok() {
                snaps.push((line as usize, buf, self.snap_seq.fetch_add(1, Ordering::SeqCst)));
            }
            line += l;
        }
        let mut p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        p.entry(std::thread::current().id()).or_default().extend(snaps);
    }

    /// A fence by the calling thread: its pending lines become durable (unless a newer
    /// write-back of the same line already is).
    pub fn fenced(&self) {
        let mut p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lines) = p.remove(&std::thread::current().id()) {
            let mut d = self.durable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (off, data, seq) in lines {
                if d.seq.get(&off).is_some_and(|&cur| cur > seq) {
                    continue;
                }
                d.seq.insert(off, seq);
                let n = (d.image.len() - off).min(CACHE_LINE);
                d.image[off..off + n].copy_from_slice(&data[..n]);
            }
        }
    }

    /// A copy of the durable image.
    pub fn durable(&self) -> Vec<u8> {
        self.durable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).image.clone()
    }

    /// The pool a power failure now would leave: the durable image, then each pending
    /// (written back, not fenced) snapshot and each dirty live line kept with
    /// `keep_probability`, whole or torn into 8-byte words.
    pub fn crash_image(&self, live: &Mapping, opts: &CrashOptions) -> Vec<u8> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
        // One consistent instant: pending and durable lines and the live image, copied
        // while no fence can complete (same lock order as `fenced`). Plain stores may still
        // race with the copy, as they would with a real power failure; but a store that
        // follows a fence (say `count` after its entry) cannot land in the copy without
        // the fenced lines being durable in it.
        let (mut img, pending, live_copy) = {
            let p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let d = self.durable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut v: Vec<Snap> = p
                .values()
                .flatten()
                .filter(|(off, _, seq)| d.seq.get(off).is_none_or(|&cur| cur < *seq))
                .copied()
                .collect();
            v.sort_by_key(|(o, _, seq)| (*o, *seq));
            let mut live_copy = vec![0u8; live.len().min(d.image.len())];
            let _ = live.read(0, &mut live_copy);
            (d.image.clone(), v, live_copy)
        };
        for (off, data, _) in pending {
            if rng.random_bool(opts.keep_probability) {
                let n = (img.len() - off).min(CACHE_LINE);
                merge_line(&mut img[off..off + n], &data[..n], opts.tear, &mut rng);
            }
        }
        let mut off = 0usize;
        while off < live_copy.len() {
            let n = (live_copy.len() - off).min(CACHE_LINE);
            let line = &live_copy[off..off + n];
            if line != &img[off..off + n] && rng.random_bool(opts.keep_probability) {
                merge_line(&mut img[off..off + n], line, opts.tear, &mut rng);
            }
            off += CACHE_LINE;
        }
        img
    }
}

fn merge_line(dst: &mut [u8], src: &[u8], tear: bool, rng: &mut impl RngExt) {
    if !tear {
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_mut(8).zip(src.chunks(8)) {
        if rng.random_bool(0.5) {
            d.copy_from_slice(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmem::{FlushKind, Media};

    #[test]
    fn only_fenced_lines_are_durable() {
        let m = Media::simulated(4096, FlushKind::None).unwrap();
        m.map().write(0, &[1u8; 64]).unwrap();
        m.map().write(64, &[2u8; 64]).unwrap();
        m.flush(0, 64).unwrap();
        // flushed but not fenced: not durable yet
        assert_eq!(m.durable_image().unwrap()[0], 0);
        m.fence();
        let d = m.durable_image().unwrap();
        assert_eq!(d[0], 1);
        assert_eq!(d[64], 0, "line 1 was never written back");
    }

    #[test]
    fn crash_keeps_durable_lines_and_a_subset_of_dirty_ones() {
        let m = Media::simulated(64 * 256, FlushKind::None).unwrap();
        m.map().write(0, &[9u8; 64]).unwrap();
        m.persist(0, 64).unwrap();
        for i in 1..256u64 {
            m.map().write(i * 64, &[7u8; 64]).unwrap();
        }
        let none = m.crash_image(&CrashOptions { seed: 1, keep_probability: 0.0, tear: false }).unwrap();
        assert!(none[..64].iter().all(|&b| b == 9));
        assert!(none[64..].iter().all(|&b| b == 0));
        let all = m.crash_image(&CrashOptions { seed: 1, keep_probability: 1.0, tear: false }).unwrap();
        assert!(all[64..].iter().all(|&b| b == 7));
        let some = m.crash_image(&CrashOptions { seed: 5, keep_probability: 0.5, tear: false }).unwrap();
        let kept = (1..256).filter(|i| some[i * 64] == 7).count();
        assert!(kept > 60 && kept < 200, "{kept}");
        // lines are whole without tearing
        for i in 1..256 {
            assert!(some[i * 64..(i + 1) * 64].iter().all(|&b| b == some[i * 64]));
        }
        let again = m.crash_image(&CrashOptions { seed: 5, keep_probability: 0.5, tear: false }).unwrap();
        assert_eq!(some, again, "same seed, same image");
    }

    #[test]
    fn tearing_is_at_8_byte_granularity() {
        let m = Media::simulated(64 * 64, FlushKind::None).unwrap();
        m.map().write(0, &[3u8; 64 * 64]).unwrap();
        let img = m.crash_image(&CrashOptions { seed: 2, keep_probability: 1.0, tear: true }).unwrap();
        let mut mixed = 0;
        for line in img.chunks(64) {
            for w in line.chunks(8) {
                assert!(w.iter().all(|&b| b == w[0]), "a word tore");
            }
            if line.contains(&3) && line.contains(&0) {
                mixed += 1;
            }
        }
        assert!(mixed > 0, "some line should be torn");
    }
}
