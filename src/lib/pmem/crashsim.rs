//! The crash-simulating media: a durable image beside the live mapping.
//!
//! Real persistent memory keeps a store only once its cache line has been written back
//! and the writing thread has fenced. The simulator mirrors that: a write-back
//! snapshots the line into the writing thread's pending set, a fence by that thread
//! copies its pending lines into the durable image. At a simulated power failure, any
//! line not yet durable may or may not have reached the media: [`CrashSim::crash_image`]
//! keeps a seeded random subset of them, and with tearing keeps only some of a line's
//! 8-byte words (aligned 8-byte stores never tear, so words are the unit).

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::ThreadId;

use rand::{Rng, SeedableRng};

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

/// Durable image and per-thread pending write-backs.
#[derive(Debug)]
pub struct CrashSim {
    durable: Mutex<Vec<u8>>,
    pending: Mutex<HashMap<ThreadId, Vec<(usize, Line)>>>,
}

impl CrashSim {
    /// A simulator whose durable image starts as `image`.
    pub fn new(image: Vec<u8>) -> CrashSim {
        CrashSim { durable: Mutex::new(image), pending: Mutex::new(HashMap::new()) }
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
                snaps.push((line as usize, buf));
            }
            line += l;
        }
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.entry(std::thread::current().id()).or_default().extend(snaps);
    }

    /// A fence by the calling thread: its pending lines become durable.
    pub fn fenced(&self) {
        let lines = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.remove(&std::thread::current().id())
        };
        if let Some(lines) = lines {
            let mut d = self.durable.lock().unwrap_or_else(|e| e.into_inner());
            for (off, data) in lines {
                let n = (d.len() - off).min(CACHE_LINE);
                d[off..off + n].copy_from_slice(&data[..n]);
            }
        }
    }

    /// A copy of the durable image.
    pub fn durable(&self) -> Vec<u8> {
        self.durable.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The pool a power failure now would leave: the durable image, then each pending
    /// (written back, not fenced) snapshot and each dirty live line kept with
    /// `keep_probability`, whole or torn into 8-byte words.
    pub fn crash_image(&self, live: &Mapping, opts: &CrashOptions) -> Vec<u8> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
        let mut img = self.durable();
        let pending: Vec<(usize, Line)> = {
            let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let mut v: Vec<_> = p.values().flatten().copied().collect();
            v.sort_by_key(|(o, _)| *o);
            v
        };
        for (off, data) in pending {
            if rng.gen_bool(opts.keep_probability) {
                let n = (img.len() - off).min(CACHE_LINE);
                merge_line(&mut img[off..off + n], &data[..n], opts.tear, &mut rng);
            }
        }
        let mut line = [0u8; CACHE_LINE];
        let mut off = 0usize;
        while off < img.len() {
            let n = (img.len() - off).min(CACHE_LINE);
            if live.read(off as u64, &mut line[..n]).is_ok()
                && line[..n] != img[off..off + n]
                && rng.gen_bool(opts.keep_probability)
            {
                merge_line(&mut img[off..off + n], &line[..n], opts.tear, &mut rng);
            }
            off += CACHE_LINE;
        }
        img
    }
}

fn merge_line(dst: &mut [u8], src: &[u8], tear: bool, rng: &mut impl Rng) {
    if !tear {
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_mut(8).zip(src.chunks(8)) {
        if rng.gen_bool(0.5) {
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
