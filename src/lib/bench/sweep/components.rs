//! The per-request components a latency point is broken down into (figures 1, 2):
//! measured on this machine for each value size, cached in the [`super::context::Context`].
//!
//! May import: pmem, index, log::format, workload (key names) and the floor.

use std::path::PathBuf;
use std::time::Instant;

use super::{Result, SweepError};
use crate::index::{Index, IndexKind, KeySource, Loc};
use crate::pmem::{Media, MediaOptions};
use crate::wire::Protocol;

/// Per-request costs measured on this machine for one value size (microseconds,
/// medians), used to break a request's latency down. How each is measured:
///
/// - `wir`: the transport floor's WRITE_WITH_IMM of the size plus a 16 B SEND reply,
///   round trip: the shape of a BOOM PUT (and, reversed, of a BOOM GET and of an RPC
///   request/reply that carries the value one way).
/// - `read`: the floor's READ of the size (the RDMP GET's data phase).
/// - `meta`: the floor's 64 B SEND/RECV round trip: the metadata RPC of RDMP.
/// - `writeback`: [`Media::persist`] of one freshly written entry of the size (header +
///   24 B key + value) on a pool file in the embedded servers' directory, with the
///   flush instruction the servers use.
/// - `count`: [`Media::persist`] of one freshly stored 8-byte word: the second fence of
///   an append (`count`), or of an in-place rewrite (`version_num`).
/// - `index_put`, `index_get`: [`Index::upsert`] / [`Index::get`] of one key in a hash
///   index of 100 000 keys (keys compared through a [`KeySource`], as on PM).
/// - `memcpy`: one copy of an entry of the size between two DRAM buffers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Components {
    /// WRITE_WITH_IMM + reply round trip.
    pub wir: f64,
    /// READ.
    pub read: f64,
    /// 64 B SEND/RECV round trip.
    pub meta: f64,
    /// Write-back of one entry.
    pub writeback: f64,
    /// Persist of one 8-byte word (`count`).
    pub count: f64,
    /// Index upsert.
    pub index_put: f64,
    /// Index lookup.
    pub index_get: f64,
    /// One entry copy.
    pub memcpy: f64,
}

/// Entry-size copies outside the transport per request, from the code paths:
/// BOOM and RDMP PUT encode the entry and stage it in the registered buffer (2); their
/// GETs copy the entry out of the response buffer and the value out of the entry (2).
/// RPC PUT encodes the entry, encodes the message, and the server copies it from DRAM
/// into PM (3); RPC GET copies PM -> DRAM on the server, receive buffer -> entry and
/// entry -> value on the client (3).
pub fn copies(p: Protocol) -> (f64, f64) {
    match p {
        Protocol::Boom | Protocol::Rdmp | Protocol::RdmpCc | Protocol::PdpmDirect | Protocol::Clover => (2.0, 2.0),
        Protocol::Rpc => (3.0, 3.0),
        // RDMA-KV's, plus the request staged in the slot buffer and the server's private
        // copy of the polled slot (PUT); the GET's copies are RDMA-KV's.
        Protocol::Herd | Protocol::Rfp => (5.0, 3.0),
    }
}

/// How the breakdown is measured, for SETUP.md and the figure captions.
pub const BREAKDOWN_METHOD: &str = "transport = the floor's WRITE_WITH_IMM+16 B reply round trip of the size \
(RDMP GET: READ of the size); metadata = the floor's 64 B SEND/RECV round trip per small round trip: \
RDMP-KV's and RDMP-CC's metadata RPC, pDPM-Direct's lock and release (two per PUT), Clover's link (one per PUT); \
copies = \
entry-size memcpy x copies on the code path (BOOM/RDMP/RDMP-CC/pDPM-Direct/Clover 2, RPC 3, HERD/RFP PUT 5 and GET 3); write-back = Media::persist of one entry \
plus Media::persist of one 8-byte word (PUT only: every protocol's commit fences twice, the entry with its version, \
then count); index = hash index upsert/get at 100k keys; other = median latency minus all of these \
(protocol processing, checksums, scheduling; negative when the parts overlap). All medians.";

/// The short form of [`BREAKDOWN_METHOD`] for figure captions.
pub const BREAKDOWN_CAPTION: &str = "transport, metadata: transport-floor round trips of the request's shape; \
copies: memcpy x copies on the code path; write-back: Media::persist of one entry and of count; index: one hash-index \
operation; other: the rest of the median. Full method: SETUP.md.";

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    super::summary::median_sorted(v)
}

/// Median time (us) of [`Media::persist`] of `len` freshly written bytes, on a pool
/// file in `dir` (default: `/dev/shm` or the temp dir) with the CPU's best flush.
pub fn writeback_us(dir: Option<PathBuf>, len: usize, iters: usize) -> Result<f64> {
    let parent = dir.unwrap_or_else(|| {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{}wb-", crate::log::temp_prefix()))
        .tempdir_in(&parent)
        .map_err(|e| SweepError::Io { path: parent.clone(), source: e })?;
    let region = (len.next_power_of_two() * 64).max(4 << 20);
    let (media, _) = Media::open(
        &tmp.path().join("wb.pool"),
        &MediaOptions { create_size: Some(region as u64), ..Default::default() },
    )?;
    let data = vec![0xa5u8; len];
    let slots = (region / len.next_power_of_two()).max(1);
    let mut v = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let off = ((i % slots) * len.next_power_of_two()) as u64;
        media.map().write(off, &data)?;
        let t0 = Instant::now();
        media.persist(off, len)?;
        let dt = t0.elapsed().as_nanos() as f64 / 1000.0;
        if i >= iters / 10 {
            v.push(dt);
        }
    }
    Ok(median(&mut v))
}

struct Keys(Vec<Vec<u8>>);

impl KeySource for Keys {
    fn key_matches(&self, loc: &Loc, key: &[u8]) -> bool {
        self.0.get(loc.offset as usize).is_some_and(|k| k == key)
    }
}

/// Median time (us) of one hash-index upsert (`put`) or lookup of an existing key in
/// an index of `n` keys, timed over batches of 1000.
pub fn index_us(put: bool, n: usize) -> Result<f64> {
    let keys =
        Keys((0..n as u64).map(|i| format!("user{}", crate::workload::fnvhash64(i as i64)).into_bytes()).collect());
    let idx = Index::new(IndexKind::Hash);
    let loc = |i: usize, v: u64| Loc { segment: 1, offset: i as u32, len: 64, version: v, tombstone: false };
    for (i, k) in keys.0.iter().enumerate() {
        idx.upsert(k, loc(i, 1), &keys);
    }
    let batch = 1000.min(n.max(1));
    let mut v = Vec::new();
    let mut version = 2;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..50 {
        let picks: Vec<usize> = (0..batch)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % n as u64) as usize
            })
            .collect();
        let t0 = Instant::now();
        for &i in &picks {
            if put {
                std::hint::black_box(idx.upsert(&keys.0[i], loc(i, version), &keys));
                version += 1;
            } else {
                std::hint::black_box(idx.get(&keys.0[i], &keys));
            }
        }
        v.push(t0.elapsed().as_nanos() as f64 / 1000.0 / batch as f64);
    }
    Ok(median(&mut v))
}

/// Median time (us) of one copy of `len` bytes between two DRAM buffers.
pub fn memcpy_us(len: usize, iters: usize) -> f64 {
    let src = vec![0x5au8; len];
    let mut dst = vec![0u8; len];
    let batch = 100;
    let mut v = Vec::new();
    for _ in 0..(iters / batch).max(5) {
        let t0 = Instant::now();
        for _ in 0..batch {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        v.push(t0.elapsed().as_nanos() as f64 / 1000.0 / batch as f64);
    }
    median(&mut v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_measure_something() {
        assert!(memcpy_us(4096, 1000) > 0.0);
        assert!(index_us(true, 2000).unwrap() > 0.0);
        assert!(index_us(false, 2000).unwrap() > 0.0);
        assert!(writeback_us(None, 1024, 200).unwrap() >= 0.0);
    }
}
