//! The pool's Clover arena: creating it, handing out its chunks (the metadata
//! server's space management), walking a key's version chain, compacting the chains
//! and reclaiming chunks, and its recovery step. The bytes are [`clover`]'s; this
//! module is the pool's side.
//!
//! Reclamation is safe only when no Clover client holds a pointer into the arena: a
//! client's cached version may be in a chunk that is reclaimed and written again, and
//! a compare-and-swap at that stale address would land inside another key's version.
//! So chains are compacted and chunks reclaimed at recovery and when the last Clover
//! client leaves the server ([`Pool::compact_clover`]), never under a connected client.
//!
//! Imports the pool (`super`), `clover`, `table` (the segment run), `format` and `error`.

use std::collections::HashSet;

use super::clover::{self, Arena, VersionFault};
use super::format::{entry_key, EntryHeader};
use super::Pool;
use crate::error::{Error, Result};

/// The metadata server's chunk state (volatile; rebuilt by recovery from the chains).
#[derive(Debug, Default)]
pub(super) struct Chunks {
    /// Chunks no chain reaches and no client holds.
    free: Vec<u64>,
    /// Chunks handed to connected clients.
    held: HashSet<u64>,
    /// Clover clients connected.
    clients: u64,
}

/// A key's newest version, as a chain walk found it.
#[derive(Clone, Debug)]
pub struct FoundVersion {
    /// The key's head record.
    pub head: u64,
    /// Arena offset of the newest version.
    pub offset: u64,
    /// Its entry header.
    pub header: EntryHeader,
    /// Its entry (header, key, value).
    pub entry: Vec<u8>,
    /// Versions walked from `first`.
    pub walked: u64,
    /// The newest version's `next` word when it is not 0: a link to something that
    /// is not this key's next version (damage), where the walk stopped.
    pub dangling: u64,
}

/// What recovery (or a compaction) did to the arena.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CloverReport {
    /// The arena (none in most pools).
    pub arena: Option<Arena>,
    /// Keys with a chain.
    pub keys: u64,
    /// Versions walked.
    pub versions: u64,
    /// Heads whose first version does not verify (their key reads as absent).
    pub heads_damaged: u64,
    /// Chains whose first pointer was moved to their newest version.
    pub chains_compacted: u64,
    /// Heads whose shortcut was set back to their newest version (or, on a damaged
    /// head, cleared): a shortcut is written without a FLUSH, so after a crash it may
    /// point at a version whose link was lost, in a chunk about to be reused.
    pub shortcuts_reset: u64,
    /// Newest versions whose `next` pointed at something that does not verify: the
    /// link was cut, so the key takes writes again after its newest good version.
    pub links_cut: u64,
    /// Chunks free after it.
    pub chunks_free: u64,
    /// Chunks holding a newest version.
    pub chunks_live: u64,
}

impl Pool {
    /// The Clover arena, if the pool has one.
    pub fn clover_arena(&self) -> Option<Arena> {
        self.clover.get().copied()
    }

    /// Pool offset of the arena's first byte.
    pub fn arena_base(&self, a: &Arena) -> u64 {
        self.segment_offset(a.first_segment)
    }

    /// Creates the arena with `heads` head records and room for `data` bytes of
    /// versions of values up to `value_max` bytes, or returns the one the pool has.
    pub fn create_clover_arena(&self, heads: u64, data: u64, value_max: u32) -> Result<Arena> {
        let _one = self.cells_create.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(a) = self.clover_arena() {
            return Ok(a);
        }
        if heads == 0 || heads > clover::MAX_HEADS {
            return Err(Error::invalid(format!("a Clover arena of {heads} heads (1..={})", clover::MAX_HEADS)));
        }
        let largest = clover::version_len(40 + u64::from(super::format::MAX_KEY_LEN) + u64::from(value_max));
        let chunk_size = (4 * largest).div_ceil(4096).saturating_mul(4096).clamp(64 << 10, 1 << 30);
        let chunks = data.div_ceil(chunk_size).max(1);
        let mut a = Arena { first_segment: 0, segments: 0, heads, chunk_size, chunks };
        let what = format!("a Clover arena of {heads} heads and {chunks} chunks of {chunk_size} bytes");
        (a.first_segment, a.segments) = self.take_run(a.bytes(), &what)?;
        // The run's whole length: the last segment's tail is chunks too.
        a.chunks = (a.segments * self.segment_size() - a.data_start()) / chunk_size;
        self.publish_run(a.first_segment, a.segments, clover::DESCRIPTOR_OFF, &a.encode())?;
        *self.clover_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Chunks { free: (0..a.chunks).rev().collect(), held: HashSet::new(), clients: 0 };
        let _ = self.clover.set(a);
        Ok(a)
    }

    /// Hands a free chunk to a client (the metadata server's bulk allocation).
    pub fn take_chunk(&self) -> Option<u64> {
        let mut c = self.clover_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = c.free.pop()?;
        c.held.insert(id);
        Some(id)
    }

    /// A client is done with chunk `id` (full, or it left): it stays in use until a
    /// compaction finds no chain in it.
    pub fn release_chunk(&self, id: u64) {
        self.clover_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).held.remove(&id);
    }

    /// Free chunks now.
    pub fn free_chunks(&self) -> u64 {
        self.clover_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).free.len() as u64
    }

    /// Walks the chain of head `i` to its newest version (the chain's key is its first
    /// version's). `None` if the head is empty; `Err` with why if its first version
    /// does not verify.
    pub fn clover_newest(&self, a: &Arena, i: u64) -> std::result::Result<Option<FoundVersion>, &'static str> {
        let base = self.arena_base(a);
        let m = self.media.map();
        let first = m.read_u64(base + a.head_offset(i)).map_err(|_| "outside the pool")?;
        if first == 0 {
            return Ok(None);
        }
        let read = |off: u64| -> std::result::Result<(EntryHeader, u64, Vec<u8>), &'static str> {
            let c = a.chunk_of(off).ok_or("a pointer outside the chunks")?;
            let end = a.chunk_offset(c) + a.chunk_size;
            if off % 8 != 0 {
                return Err("an unaligned pointer");
            }
            let b = m.view(base + off, (end - off) as usize).map_err(|_| "outside the pool")?;
            match clover::check_version(b, off) {
                Ok((h, next)) => {
                    let e = &b[clover::NEXT_LEN as usize..][..h.entry_len() as usize];
                    Ok((h, next, e.to_vec()))
                }
                Err(VersionFault::Short(_)) => Err("a version past its chunk"),
                Err(VersionFault::Bad(why)) => Err(why),
            }
        };
        let (mut h, mut next, mut e) = read(first)?;
        let key = entry_key(&e, &h).to_vec();
        let mut off = first;
        let mut walked = 1u64;
        // Every version is at least 56 bytes: a longer walk is a cycle.
        let bound = a.chunks.saturating_mul(a.chunk_size / 56).saturating_add(1);
        while next != 0 && walked < bound {
            match read(next) {
                // A newer version of the same key, with a higher version number.
                Ok((h2, n2, e2)) if entry_key(&e2, &h2) == key && h2.version > h.version => {
                    (off, h, next, e) = (next, h2, n2, e2);
                    walked += 1;
                }
                // A link to something that is not this key's next version: damage
                // (links are made only to durable versions); the chain ends here.
                _ => break,
            }
        }
        Ok(Some(FoundVersion { head: i, offset: off, header: h, entry: e, walked, dangling: next }))
    }

    /// The newest version of `key` (live or deleted), probing the heads as a client
    /// does; `None` if the probe meets an empty head first.
    pub fn clover_lookup(&self, key: &[u8]) -> Option<FoundVersion> {
        let a = self.clover_arena()?;
        let mut i = clover::home(key, a.heads);
        for _ in 0..a.heads {
            let f = self.clover_newest(&a, i).ok()??;
            if entry_key(&f.entry, &f.header) == key {
                return Some(f);
            }
            i = (i + 1) % a.heads;
        }
        None
    }

    /// Calls `f` with the newest version of every key of the arena.
    pub fn for_each_clover_key(&self, mut f: impl FnMut(&FoundVersion)) {
        let Some(a) = self.clover_arena() else { return };
        for i in 0..a.heads {
            if let Ok(Some(v)) = self.clover_newest(&a, i) {
                f(&v);
            }
        }
    }

    /// A Clover client arrives (waits for a compaction in progress).
    pub fn clover_join(&self) {
        self.clover_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clients += 1;
    }

    /// A Clover client leaves, giving back the chunk it held; the last one to leave
    /// compacts the chains and reclaims the chunks ([`Pool::compact_clover`]), with no
    /// client able to arrive meanwhile.
    pub fn clover_leave(&self, held: Option<u64>) -> Result<Option<CloverReport>> {
        let mut c = self.clover_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(id) = held {
            c.held.remove(&id);
        }
        c.clients = c.clients.saturating_sub(1);
        if c.clients > 0 || self.media.is_read_only() {
            return Ok(None);
        }
        self.compact_locked(&mut c, true).map(Some)
    }

    /// Compacts every chain (its `first` moved, durably, to its newest version, and its
    /// shortcut with it; a dangling `next` of the newest cut) and frees every chunk no
    /// newest version is in and no client holds. Only when no Clover client is
    /// connected (module docs): recovery, and the last client's leaving; `writable`
    /// false only counts.
    pub fn compact_clover(&self, writable: bool) -> Result<CloverReport> {
        let mut c = self.clover_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.compact_locked(&mut c, writable)
    }

    fn compact_locked(&self, c: &mut Chunks, writable: bool) -> Result<CloverReport> {
        let Some(a) = self.clover_arena() else { return Ok(CloverReport::default()) };
        let mut rep = CloverReport { arena: Some(a), ..Default::default() };
        let base = self.arena_base(&a);
        let mut live = vec![false; a.chunks as usize];
        for i in 0..a.heads {
            let head = base + a.head_offset(i);
            match self.clover_newest(&a, i) {
                Ok(None) => {}
                Ok(Some(v)) => {
                    rep.keys += 1;
                    rep.versions += v.walked;
                    if let Some(c) = a.chunk_of(v.offset) {
                        live[c as usize] = true;
                    }
                    if !writable {
                        continue;
                    }
                    if v.dangling != 0 {
                        // Clients would stop at it with an error on every write.
                        self.media.store_u64(base + v.offset, 0)?;
                        self.media.persist(base + v.offset, 8)?;
                        rep.links_cut += 1;
                    }
                    // Every chunk but the live ones is about to be reused: no pointer
                    // into them may stay, the shortcut (never FLUSHed) included.
                    let m = self.media.map();
                    let (first, shortcut) = (m.read_u64(head)?, m.read_u64(head + clover::SHORTCUT_OFF)?);
                    if first != v.offset || shortcut != v.offset {
                        self.media.store_u64(head + clover::SHORTCUT_OFF, v.offset)?;
                        self.media.store_u64(head, v.offset)?;
                        self.media.persist(head, 16)?;
                        rep.chains_compacted += u64::from(first != v.offset);
                        rep.shortcuts_reset += u64::from(shortcut != v.offset);
                    }
                }
                Err(_) => {
                    rep.heads_damaged += 1;
                    if writable && self.media.map().read_u64(head + clover::SHORTCUT_OFF)? != 0 {
                        self.media.store_u64(head + clover::SHORTCUT_OFF, 0)?;
                        self.media.persist(head + clover::SHORTCUT_OFF, 8)?;
                        rep.shortcuts_reset += 1;
                    }
                }
            }
        }
        let held = std::mem::take(&mut c.held);
        c.free = (0..a.chunks).rev().filter(|id| !live[*id as usize] && !held.contains(id)).collect();
        c.held = held;
        rep.chunks_free = c.free.len() as u64;
        rep.chunks_live = live.iter().filter(|l| **l).count() as u64;
        Ok(rep)
    }
}

/// Reads the arena's descriptor line: the arena, or a problem for the report.
pub(super) fn read_descriptor(pool: &Pool) -> (Option<Arena>, Option<String>) {
    let h = &pool.header;
    match pool.media.map().view(clover::DESCRIPTOR_OFF, clover::DESCRIPTOR_LEN) {
        Ok(b) => match Arena::decode(b, h.segment_count, h.segment_size) {
            Ok(a) => (a, None),
            Err(e) => (None, Some(e)),
        },
        Err(e) => (None, Some(format!("Clover arena descriptor: {e}"))),
    }
}

/// Recovery's step for the arena `a`: takes its segments out of the allocator, walks
/// every chain, compacts them when `writable`, and rebuilds the free chunks.
pub(super) fn recover_clover(pool: &Pool, a: Arena, writable: bool) -> Result<CloverReport> {
    super::table::reserve_run(pool, a.first_segment, a.segments);
    let _ = pool.clover.set(a);
    pool.compact_clover(writable)
}
