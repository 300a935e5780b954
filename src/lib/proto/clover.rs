//! Clover (Tsai et al., ATC'20, with pDPM-Direct; Liu Xuran's "Survey on Distributed
//! Storage Systems Based on NVM and RDMA" (HUST, 2020), section 3.2, figures 16-19):
//! passive data, with a metadata server for space only.
//!
//! # The paper's design
//!
//! Data and metadata are split. Compute nodes write data out of place, with one-sided
//! RDMA, into space they obtained in bulk from a metadata server (MS); the versions of
//! a key form a list, each version pointing to the next newer one, the newest's pointer
//! empty. A write writes its new version, then links it with a compare-and-swap on the
//! newest version's pointer; when that fails (another writer linked first) it moves to
//! the newer version and retries: 2 round trips at best. A read follows the version the
//! client has cached, and in parallel the key's shortcut pointer (a hint to a recent
//! version); at best the cached version is the newest: 1 round trip. The MS hands out
//! free space and reclaims old versions (compute nodes return them in batches).
//!
//! # What is reproduced
//!
//! - **PUT (and DELETE, a tombstone version)**: at best 2 round trips: a WRITE of the
//!   version (its `next` word zero, its version number the newest's plus one) into the
//!   client's chunk and a FLUSH of it; then a compare-and-swap of the newest version's
//!   `next` from 0 to it and a FLUSH of that word (posted together). Then a WRITE of the
//!   head's shortcut, not waited for. A failed link walks on to the newer versions
//!   (a READ each), gives the version the next number (a WRITE), and links again.
//!   Counted in `tests/kv.rs`: 1 WRITE + 1 FLUSH, 1 CAS + 1 FLUSH, the shortcut WRITE.
//! - **GET**: at best 1 round trip: a READ of the cached version and a READ of the
//!   key's head record (first version and shortcut), posted together; if the cached
//!   version's `next` is 0 it is the value; otherwise the walk goes on from its next
//!   (or from the shortcut) until a version whose `next` is 0. A split GET (several
//!   clients per thread) leaves that pair of READs in flight and runs the rest whole.
//! - **The metadata server** (a role of `boomctl serve`): creates the arena, hands out
//!   chunks in bulk (`ChunkReq`), and reclaims old versions: it moves each chain's
//!   start to its newest version and frees every chunk no chain reaches
//!   ([`crate::log::arena`]).
//! - The versions hold this crate's entry format and CRC-32C; recovery walks each
//!   chain from its start while versions verify ([`crate::log::clover`]).
//!
//! # What differs, and why
//!
//! - **New keys**: a head table of the arena (a linear probe from the key's hash, like
//!   pDPM-Direct's cells); a key's first version is linked by a compare-and-swap of its
//!   head's `first` from 0. Clover's MS keeps the keys' metadata; here a client finds a
//!   key with one-sided READs, so a key this client has not touched costs a READ per
//!   probed head first (and a new key's link tries its home head at once).
//! - **Reclamation only with no client connected.** Clover's compute nodes return old
//!   versions to the MS while they run; a client that still caches a pointer to a
//!   version whose space was reused would then compare-and-swap a word inside another
//!   key's version. Without the epochs or leases that would make it safe, reclamation
//!   here runs when the last Clover client leaves and at recovery: a long run without a
//!   break fills the arena (`--cells`, and the arena's bytes, size it).
//! - **Versions are per key** (their position in the list), not the server's counter.
//! - **No seal** (as pDPM-Direct): the arena trusts its clients, as the paper's design
//!   does: any Clover client can overwrite any key's versions. The server isolates the
//!   arena from the rest of the pool, recovery checks every version it walks, and a
//!   reader gets an error, never a wrong value, for a version that does not verify.
//! - Replication (Clover writes every version to several memory nodes) is not
//!   reproduced: one pool. Clover keys are their own namespace.
//! - **Links another writer made are FLUSHed by whoever builds on them.** A link is
//!   visible (the compare-and-swap) before it is durable (its FLUSH): a second writer
//!   that follows it in between, links behind it and is acknowledged would lose its
//!   write if the power failed before the first writer's FLUSH (the crash test found
//!   this: "recovered version 1 but version 3 was acknowledged"). So every link an
//!   operation follows past the point it started from (its cached version, the
//!   shortcut, or the head's `first`) is FLUSHed before it completes: a PUT posts those
//!   FLUSHes with its compare-and-swap (no extra round trip), a GET that walked spends
//!   one more round trip on them. Where an operation starts is always a version whose
//!   links are durable: one a completed operation returned, or the shortcut, which a
//!   PUT writes only after its own FLUSHes (and recovery resets).

use std::collections::HashMap;

use super::{ClientSide, Fetched, ServerSide};
use crate::error::{Error, Result};
use crate::link::{Link, PairRead, PutInfo};
use crate::log::clover::{self, Arena, VersionFault, HEAD_SIZE, NEXT_LEN, SHORTCUT_OFF};
use crate::log::format as fmt;
use crate::service::Ctx;
use crate::transport::{Access, MemoryRegion, Transport};
use crate::wire::{ErrorCode, Msg};

/// Bytes a GET reads of a version whose length it does not know.
const FIRST_READ: u64 = 512;

// ---- server side ----

/// Clover's server half: the metadata server (the arena, its chunks).
pub(crate) struct Server<T: Transport> {
    mr: Option<T::Mr>,
    chunk: Option<u64>,
}

impl<T: Transport> Default for Server<T> {
    fn default() -> Self {
        Server { mr: None, chunk: None }
    }
}

impl<T: Transport> Server<T> {
    fn describe(&mut self, cx: &mut Ctx<'_, T>, heads: u64, data: u64, value_max: u32, req: u32) -> Result<()> {
        let pool = cx.pool();
        let a = match pool.clover_arena() {
            Some(a) => a,
            None => {
                if heads == 0 || heads > clover::MAX_HEADS {
                    return cx.refuse(req, ErrorCode::BadRequest, format!("an arena of {heads} heads"));
                }
                if value_max > cx.max_value() {
                    let m =
                        format!("versions of values of {value_max} bytes: the server's limit is {}", cx.max_value());
                    return cx.refuse(req, ErrorCode::TooLarge, m);
                }
                match pool.create_clover_arena(heads, data, value_max) {
                    Ok(a) => {
                        cx.sh.log(&format!(
                            "created the Clover arena: {} heads, {} chunks of {} bytes in {}",
                            a.heads,
                            a.chunks,
                            a.chunk_size,
                            crate::units::segment_span(a.first_segment, a.segments)
                        ));
                        a
                    }
                    Err(e) => return cx.refuse(req, e.refusal_code(), e.to_string()),
                }
            }
        };
        if self.mr.is_none() {
            let base = cx.pool().arena_base(&a);
            let mr =
                cx.pool_region(base, a.bytes(), Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)?;
            self.mr = Some(mr);
            cx.pool().clover_join();
        }
        let Some(r) = self.mr.as_ref().map(MemoryRegion::remote) else { return Ok(()) };
        let m = Msg::CloverArena {
            addr: r.at(0),
            rkey: r.rkey,
            heads: a.heads,
            chunk_size: a.chunk_size,
            chunks: a.chunks,
        };
        cx.reply(&m, req)
    }

    fn chunk(&mut self, cx: &mut Ctx<'_, T>, req: u32) -> Result<()> {
        if self.mr.is_none() {
            return cx.refuse(req, ErrorCode::BadRequest, "a chunk before the arena".into());
        }
        let pool = cx.pool();
        if let Some(old) = self.chunk.take() {
            pool.release_chunk(old);
        }
        match pool.take_chunk() {
            Some(c) => {
                self.chunk = Some(c);
                cx.reply(&Msg::Chunk { chunk: c }, req)
            }
            None => cx.refuse(
                req,
                ErrorCode::PoolFull,
                "pool full: every chunk of the Clover arena is in use (old versions are reclaimed when no Clover client is connected)".into(),
            ),
        }
    }
}

impl<T: Transport> ServerSide<T> for Server<T> {
    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::CloverReq { heads, data, value_max } => self.describe(cx, heads, data, value_max, req),
            Msg::ChunkReq => self.chunk(cx, req),
            m => cx.common(m, req),
        }
    }

    fn before_close(&mut self, cx: &mut Ctx<'_, T>) {
        if let Some(mr) = self.mr.take() {
            mr.deregister();
            match cx.pool().clover_leave(self.chunk.take()) {
                Ok(Some(r)) => cx.sh.log(&format!(
                    "Clover: the last client left: {} chains compacted, {} of {} chunks free",
                    r.chains_compacted,
                    r.chunks_free,
                    r.arena.map_or(0, |a| a.chunks)
                )),
                Ok(None) => {}
                Err(e) => cx.sh.log(&format!("Clover: compacting the arena: {e}")),
            }
        }
    }
}

// ---- client side ----

#[derive(Clone, Copy, Debug)]
struct View {
    addr: u64,
    rkey: u32,
    a: Arena,
}

/// What a client knows of a key: its head, its newest version (offset, number,
/// bytes with the next word).
#[derive(Clone, Copy, Debug)]
struct Known {
    head: u64,
    newest: u64,
    version: u64,
    len: u64,
}

const MAX_KNOWN: usize = 1 << 20;

/// Clover's client half. Every version it caches (and every shortcut it writes) has
/// its chain durable up to it: the links it followed to get there were FLUSHed (module
/// docs), so a PUT that hangs a version behind it needs FLUSH only its own link.
pub(crate) struct Client {
    want: (u64, u64, u32),
    view: Option<View>,
    chunk: Option<(u64, u64)>,
    known: HashMap<Vec<u8>, Known>,
    /// The split GET in flight ([`ClientSide::get_start`]): the version the client
    /// knows and the READs of it and its head.
    pending: Option<(Known, PairRead)>,
}

/// A version read: its header, next word, and length (next word included).
struct Read {
    h: fmt::EntryHeader,
    next: u64,
    len: u64,
}

impl Client {
    /// A client that asks for `heads` head records and `data` bytes of chunks for
    /// values up to `value_max` bytes if the pool has no arena yet.
    pub(crate) fn new(heads: u64, data: u64, value_max: u32) -> Client {
        Client { want: (heads, data, value_max), view: None, chunk: None, known: HashMap::new(), pending: None }
    }

    fn view<T: Transport>(&mut self, l: &mut Link<T>) -> Result<View> {
        if let Some(v) = self.view {
            return Ok(v);
        }
        let (heads, data, value_max) = self.want;
        let v = match l.call(&Msg::CloverReq { heads, data, value_max }, "asking for the Clover arena")? {
            Msg::CloverArena { addr, rkey, heads, chunk_size, chunks } => {
                let a = Arena { first_segment: 0, segments: 0, heads, chunk_size, chunks };
                let ok = (1..=clover::MAX_HEADS).contains(&heads)
                    && chunk_size % 4096 == 0
                    && chunk_size > 0
                    && chunk_size <= 1 << 32
                    && chunks > 0
                    && chunks
                        .checked_mul(chunk_size)
                        .and_then(|d| d.checked_add(a.data_start()))
                        .and_then(|b| addr.checked_add(b))
                        .is_some();
                if !ok {
                    return Err(Error::Protocol(format!(
                        "the server described an arena of {heads} heads and {chunks} chunks of {chunk_size} bytes"
                    )));
                }
                View { addr, rkey, a }
            }
            m => return Err(Error::Protocol(format!("expected the Clover arena, got {m:?}"))),
        };
        self.view = Some(v);
        Ok(v)
    }

    fn remember(&mut self, key: &[u8], k: Known) {
        if self.known.len() >= MAX_KNOWN && !self.known.contains_key(key) {
            self.known.clear();
        }
        self.known.insert(key.to_vec(), k);
    }

    /// Room for a version of `len` bytes: its arena offset (a new chunk when the
    /// current one is full).
    fn place<T: Transport>(&mut self, l: &mut Link<T>, v: &View, len: u64) -> Result<u64> {
        if len > v.a.chunk_size {
            return Err(Error::TooLarge { what: "value", len, limit: v.a.chunk_size });
        }
        if self.chunk.is_none_or(|(_, used)| used + len > v.a.chunk_size) {
            let c = match l.call(&Msg::ChunkReq, "asking for a chunk")? {
                Msg::Chunk { chunk } if chunk < v.a.chunks => chunk,
                m => return Err(Error::Protocol(format!("expected a chunk, got {m:?}"))),
            };
            self.chunk = Some((c, 0));
        }
        let (c, used) = self.chunk.unwrap_or((0, 0));
        self.chunk = Some((c, used + len.div_ceil(8) * 8));
        Ok(v.a.chunk_offset(c) + used)
    }

    /// Reads the version at `off` (at least `len` bytes of it) into `l.buf`.
    fn read_version<T: Transport>(&self, l: &mut Link<T>, v: &View, off: u64, len: u64) -> Result<Read> {
        let mut want = len;
        for _ in 0..3 {
            let room = v.a.chunk_of(off).map_or(0, |c| v.a.chunk_offset(c) + v.a.chunk_size - off);
            if room < NEXT_LEN + fmt::ENTRY_HEADER_SIZE || off % 8 != 0 {
                return Err(damaged(off, "a pointer outside the chunks"));
            }
            let n = want.clamp(NEXT_LEN + fmt::ENTRY_HEADER_SIZE, room);
            l.read_remote(n as u32, v.addr + off, v.rkey, "reading a version")?;
            match clover::check_version(&l.buf, off) {
                Ok((h, next)) => return Ok(Read { h, next, len: NEXT_LEN + h.entry_len() }),
                Err(VersionFault::Short(n)) => want = n,
                Err(VersionFault::Bad(why)) => return Err(damaged(off, why)),
            }
        }
        Err(damaged(off, "length"))
    }

    /// Walks from the version at `off` (already read: `r`) to the newest one; returns
    /// its offset and read, `l.buf` holding it. Adds the address of every link it
    /// followed to `links` (see [`Client`] on why they are FLUSHed).
    fn walk<T: Transport>(
        &self,
        l: &mut Link<T>,
        v: &View,
        key: &[u8],
        mut off: u64,
        mut r: Read,
        links: &mut Vec<u64>,
    ) -> Result<(u64, Read)> {
        let bound = v.a.chunks.saturating_mul(v.a.chunk_size / 56).saturating_add(1);
        let mut steps = 0u64;
        while r.next != 0 {
            let n = self.read_version(l, v, r.next, FIRST_READ)?;
            if fmt::claimed_key(&l.buf[NEXT_LEN as usize..]) != key || n.h.version <= r.h.version {
                return Err(damaged(r.next, "a link to another key's version"));
            }
            links.push(v.addr + off);
            (off, r) = (r.next, n);
            steps += 1;
            if steps > bound {
                return Err(damaged(off, "a cycle"));
            }
        }
        Ok((off, r))
    }

    /// The newest version of `key` from the pair read of the version the client knows
    /// (`k`, now in `l.buf`) and of its head (`head`), `l.buf` holding it; walks on
    /// from there (adding the links it follows to `links`). `None` when the cached
    /// version is not `key`'s any more (the cache is dropped: find the key anew).
    fn after_cached<T: Transport>(
        &mut self,
        l: &mut Link<T>,
        v: &View,
        key: &[u8],
        k: Known,
        head: &[u8],
        links: &mut Vec<u64>,
    ) -> Result<Option<(Known, Read)>> {
        let r = match clover::check_version(&l.buf, k.newest) {
            Ok((h, next)) if fmt::claimed_key(&l.buf[NEXT_LEN as usize..]) == key => {
                Read { h, next, len: NEXT_LEN + h.entry_len() }
            }
            _ => {
                self.known.remove(key);
                return Ok(None);
            }
        };
        // Not the newest any more: the shortcut, read beside it, may be closer to the
        // newest than the cached version's successor.
        let shortcut = u64::from_le_bytes(head[8..16].try_into().unwrap_or([0; 8]));
        let (mut from, mut r) = (k.newest, r);
        if r.next != 0 && shortcut != 0 && shortcut != k.newest && shortcut != r.next {
            let (cached_version, cached_next) = (r.h.version, r.next);
            match self.read_version(l, v, shortcut, k.len) {
                Ok(s) if s.h.version > cached_version && fmt::claimed_key(&l.buf[NEXT_LEN as usize..]) == key => {
                    (from, r) = (shortcut, s);
                }
                _ => {
                    // Back to the cached version's successor.
                    let n = self.read_version(l, v, cached_next, k.len)?;
                    links.push(v.addr + k.newest);
                    (from, r) = (cached_next, n);
                }
            }
        }
        let (newest, r) = self.walk(l, v, key, from, r, links)?;
        Ok(Some((Known { newest, version: r.h.version, len: r.len, ..k }, r)))
    }

    /// A GET's end, its newest version `r` (of `k`) in `l.buf`: the `links` it
    /// walked are FLUSHed, the version remembered; the entry's place in `l.buf`
    /// (`None` for a tombstone).
    fn found<T: Transport>(
        &mut self,
        l: &mut Link<T>,
        v: &View,
        key: &[u8],
        k: Known,
        r: &Read,
        links: &[u64],
    ) -> Result<Option<(usize, usize)>> {
        if !links.is_empty() {
            // What this GET returns (and remembers, for the next PUT to hang behind)
            // must not vanish in a crash: the links to it are FLUSHed first. One more
            // round trip, only when the GET walked past what it knew.
            l.flush_words(links, v.rkey, "a Clover FLUSH")?;
        }
        self.remember(key, k);
        Ok((!r.h.is_tombstone()).then_some((NEXT_LEN as usize, r.h.entry_len() as usize)))
    }

    /// Finds `key`'s head (probing) and its newest version, `l.buf` holding it;
    /// `Err(head)` (as `Ok(Err)`) with the empty head where it would go. Adds the links
    /// it followed to `links` (the head's `first` among them when it started there).
    fn find<T: Transport>(
        &mut self,
        l: &mut Link<T>,
        v: &View,
        key: &[u8],
        links: &mut Vec<u64>,
    ) -> Result<std::result::Result<(Known, Read), u64>> {
        let mut i = clover::home(key, v.a.heads);
        for _ in 0..v.a.heads {
            l.read_remote(16, v.addr + v.a.head_offset(i), v.rkey, "reading a head")?;
            let first = u64::from_le_bytes(l.buf[..8].try_into().unwrap_or([0; 8]));
            let shortcut = u64::from_le_bytes(l.buf[8..16].try_into().unwrap_or([0; 8]));
            if first == 0 {
                return Ok(Err(i));
            }
            // The shortcut is a hint: a linked version of this head's key, newer than
            // first (recovery and compaction set it back to the newest version). Only
            // `first` says whose head this is: a shortcut that does not lead to this
            // key is passed over for it.
            let start = if shortcut != 0 { shortcut } else { first };
            let mut r = self.read_version(l, v, start, FIRST_READ);
            let mut at = start;
            if start != first && !(r.is_ok() && fmt::claimed_key(&l.buf[NEXT_LEN as usize..]) == key) {
                r = self.read_version(l, v, first, FIRST_READ);
                at = first;
            }
            let r = r?;
            if fmt::claimed_key(&l.buf[NEXT_LEN as usize..]) == key {
                if at == first {
                    links.push(v.addr + v.a.head_offset(i));
                }
                let (newest, r) = self.walk(l, v, key, at, r, links)?;
                return Ok(Ok((Known { head: i, newest, version: r.h.version, len: r.len }, r)));
            }
            i = (i + 1) % v.a.heads;
        }
        Err(Error::Server {
            code: ErrorCode::PoolFull,
            message: format!("pool full: the Clover arena's {} heads are all taken (--cells sizes it)", v.a.heads),
        })
    }
}

/// The two READs of a GET of a key the client knows (`k`): its cached version (the
/// length it last had, at least a header), and its head.
fn pair(v: &View, k: &Known) -> ((u32, u64), (u32, u64)) {
    (
        (k.len.max(NEXT_LEN + fmt::ENTRY_HEADER_SIZE) as u32, v.addr + k.newest),
        (HEAD_SIZE as u32, v.addr + v.a.head_offset(k.head)),
    )
}

fn damaged(off: u64, why: &str) -> Error {
    Error::corrupt("version", format!("the Clover version at arena offset {off} does not verify ({why})"))
}

/// Whether this build plants the bug of linking (and acknowledging) a version that
/// was never FLUSHed.
fn skip_flush() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        crate::log::planted::clover_skip_flush()
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let v = self.view(l)?;
        let len = clover::version_len(fmt::ENTRY_HEADER_SIZE + key.len() as u64 + value.len() as u64);
        if len > v.a.chunk_size {
            // Told in value bytes, with this key: the version around it is the user's
            // business only through them.
            let limit = v.a.chunk_size.saturating_sub(NEXT_LEN + fmt::ENTRY_HEADER_SIZE + key.len() as u64);
            return Err(Error::TooLarge { what: "value", len: value.len() as u64, limit });
        }
        let off = self.place(l, &v, len)?;
        // What this version follows: the newest the client knows, or (a key it has not
        // touched) nothing yet: a new key's link tries its home head at once.
        let mut after: std::result::Result<Known, u64> =
            self.known.get(key).copied().ok_or_else(|| clover::home(key, v.a.heads));
        let mut sure = after.is_ok();
        let mut version = after.map_or(1, |k| k.version + 1);
        let n = l.encode_version(off, key, value, tomb, version)?;
        // Round trip 1: the version, durable.
        l.write_entry_quiet(n, v.addr + off, v.rkey)?;
        if !skip_flush() {
            l.flush_remote(v.addr + off, v.rkey, n as u32, "a Clover FLUSH")?;
        }
        let start = std::time::Instant::now();
        // Links this version will hang behind that another writer made and may not have
        // FLUSHed yet: FLUSHed with the link (see [`Client`]).
        let mut links = Vec::new();
        loop {
            // Round trip 2: the link, durable.
            let target = match after {
                Ok(k) => v.addr + k.newest,
                Err(head) => v.addr + v.a.head_offset(head),
            };
            let old = l.compare_swap((target, v.rkey), 0, off, true, &links, "linking a Clover version")?;
            links.clear();
            // `off` is this client's fresh slot, which no one else links: finding it
            // means the version is linked (taking it as failed would link it after
            // itself).
            if l.cas_took_effect(old, 0, off) {
                break;
            }
            if start.elapsed() > l.timeout {
                return Err(Error::Timeout(l.timeout, "linking a Clover version"));
            }
            // Another writer linked first (or the head is another key's): find the
            // newest version and follow it.
            let found = match after {
                Ok(k) if sure => {
                    let r = self.read_version(l, &v, old, FIRST_READ)?;
                    if fmt::claimed_key(&l.buf[NEXT_LEN as usize..]) != key {
                        return Err(damaged(old, "a link to another key's version"));
                    }
                    links.push(target);
                    let (newest, r) = self.walk(l, &v, key, old, r, &mut links)?;
                    Ok(Known { head: k.head, newest, version: r.h.version, len: r.len })
                }
                _ => self.find(l, &v, key, &mut links)?.map(|(k, _)| k),
            };
            sure = true;
            after = found;
            let next_version = after.map_or(1, |k| k.version + 1);
            if next_version != version {
                version = next_version;
                l.reseal_version(off, version, v.addr + off, v.rkey)?;
                l.flush_remote(v.addr + off, v.rkey, n as u32, "a Clover FLUSH")?;
            }
            // `buf` held other versions meanwhile: the entry buffer still holds ours.
        }
        let head = match after {
            Ok(k) => k.head,
            Err(h) => h,
        };
        l.write_word_quiet(off, v.addr + v.a.head_offset(head) + SHORTCUT_OFF, v.rkey)?;
        self.remember(key, Known { head, newest: off, version, len: n as u64 });
        l.counters.appends += 1;
        Ok(PutInfo { version, in_place: false })
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let v = self.view(l)?;
        let mut links = Vec::new();
        let cached = match self.known.get(key).copied() {
            Some(k) => {
                // 1 round trip: the cached version and the head, together.
                let (a, b) = pair(&v, &k);
                let head = l.read_pair(a, b, v.rkey, "reading a version")?;
                self.after_cached(l, &v, key, k, &head, &mut links)?
            }
            None => None,
        };
        let (k, r) = match cached {
            Some(x) => x,
            None => match self.find(l, &v, key, &mut links)? {
                Ok(x) => x,
                Err(_) => return Ok(None),
            },
        };
        self.found(l, &v, key, k, &r, &links)
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        let v = self.view(l)?;
        // A key this client does not know yet is found whole (probing the heads).
        let Some(k) = self.known.get(key).copied() else { return Ok(false) };
        let (a, b) = pair(&v, &k);
        self.pending = Some((k, l.post_read_pair(a, b, v.rkey, "reading a version")?));
        Ok(true)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        let (Some(v), Some((k, mut p))) = (self.view, self.pending.take()) else {
            return Err(Error::invalid("no GET in flight"));
        };
        let Some(head) = l.poll_pair(&mut p, "reading a version")? else {
            self.pending = Some((k, p));
            return Ok(None);
        };
        // Past the pair, the rare rest (a walk to a newer version, a cache gone stale)
        // runs whole.
        let mut links = Vec::new();
        let entry = match self.after_cached(l, &v, key, k, &head, &mut links)? {
            Some((k, r)) => self.found(l, &v, key, k, &r, &links)?,
            None => ClientSide::<T>::get(self, l, key)?,
        };
        Ok(Some(Fetched::in_buf(l, key, entry, out)))
    }

    fn awaits_reply(&self) -> bool {
        // A split GET's READs are its own: no reply is owed when it is given up on.
        false
    }
}
