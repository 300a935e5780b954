//! Memory regions and the protection domain's region table, shared by both backends.
//!
//! A protection domain (`Pd`) owns a table of [`SLOTS`] 8-byte state words, one per
//! region slot. A word holds `(rkey << 32) | users`: the rkey that is currently valid for
//! the slot (0 when the slot is free or revoked) and how many one-sided operations are
//! copying into or out of the region right now. An initiator (a `tcp` I/O or waiting thread, or a
//! `shm` peer process that has the table mapped) brackets each copy with
//! `guard_enter`/`guard_exit`: `enter` adds a user and checks the rkey in one atomic
//! step. Revocation clears the rkey, then waits until the users drain, so once
//! [`Mr::deregister`] returns no copy is running and none can start.
//!
//! For `tcp` the table is private memory and the initiators are the owner's own
//! threads, which count themselves in the table words. For `shm` the table lives in a
//! shared-memory file that only the owner can write (sealed with `F_SEAL_FUTURE_WRITE`;
//! peers map it read-only), and a peer initiator counts its copies in two words of its
//! own queue-pair page instead (`peer_guard_enter`): copies started, then (after it
//! checked the rkey, and copied if it matched) copies finished. Revocation clears the
//! rkey, reads how many copies each peer that could be copying had started
//! (`CopyWatch`), and waits until as many have finished: exactly the copies that may
//! have seen the old rkey, however busy the peer stays with others. A peer that does not
//! finish them within [`PEER_REVOKE_WAIT`] is disconnected, so a hostile peer can stall
//! one revocation once, by that much, and never write the owner's table.
//!
//! # Remote keys
//!
//! An rkey is 32 bits that say nothing about the slot: the `n`-th registration of a
//! protection domain gets a keyed pseudo-random permutation of `n` (a four-round Feistel
//! network whose round function is SipHash under a key drawn from the OS at start-up).
//! A permutation never repeats, so an rkey is never reused within the domain's life and
//! a stale rkey never matches a newer region; and a peer that knows its own rkeys cannot
//! compute another's. Owners find a region by rkey through a hash map, not by decoding it.
//!
//! # Binding to a queue pair
//!
//! A region may be *bound* to one local queue pair (`Pd::register_bound`, [`crate::transport::Transport::register_bound`]), like a
//! type-2 memory window in verbs: a peer's one-sided operation on it is accepted only
//! when it arrives on that queue pair. A server binds every region it exposes to the one
//! client it is for, so one client's rkeys are worthless on another client's connection.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::pmem::Mapping;
use crate::transport::{Access, MemoryRegion, RemoteRegion};

/// Region slots per protection domain.
pub const SLOTS: u32 = 1 << 16;

/// Bytes of the region table.
pub(crate) const TABLE_BYTES: usize = SLOTS as usize * 8;

/// How long revocation waits for a copy in progress; a peer that stays inside a copy
/// longer is presumed dead (its process cannot touch the memory any more).
const REVOKE_WAIT: Duration = Duration::from_secs(1);

/// How long revocation waits for one shm peer's copies before it disconnects that peer
/// (generous: an honest peer may be descheduled in the middle of a copy).
pub const PEER_REVOKE_WAIT: Duration = Duration::from_secs(1);

static NEXT_PD_ID: AtomicU64 = AtomicU64::new(1);

/// A connection whose peer may be copying into or out of our regions right now (the shm
/// backend's queue pairs): revocation asks it, and disconnects it when it stays busy.
pub(crate) trait CopyWatch: Send + Sync {
    /// Copies the peer says it has started (a counter that only grows).
    fn copies_started(&self) -> u64;
    /// Copies the peer says it has finished.
    fn copies_finished(&self) -> u64;
    /// The peer did not finish its copies within [`PEER_REVOKE_WAIT`]: close its connection.
    fn stuck(&self);
}

/// A peer initiator's copy counters: two words of its own queue-pair page.
pub(crate) struct CopyCounters<'a> {
    /// Copies started.
    pub started: &'a AtomicU64,
    /// Copies finished (refused ones included).
    pub finished: &'a AtomicU64,
}

/// Starts a peer initiator's access to a region of the owner's table: counts the copy
/// as started, then checks `rkey` against the table word of `slot`. On `true` the
/// caller copies and then calls [`peer_guard_exit`]; on `false` it is already counted
/// as finished.
pub(crate) fn peer_guard_enter(
    table: &crate::pmem::shared::ReadOnlyWords,
    c: &CopyCounters<'_>,
    slot: u32,
    rkey: u32,
) -> bool {
    // SeqCst on both sides (here, and in `Pd::revoke`): either the owner counts this
    // copy among the started ones, or we see its cleared rkey.
    c.started.fetch_add(1, Ordering::SeqCst);
    let word = table.load(slot as u64 * 8, Ordering::SeqCst).unwrap_or(0);
    if rkey != 0 && (word >> 32) as u32 == rkey {
        true
    } else {
        c.finished.fetch_add(1, Ordering::Release);
        false
    }
}

/// Ends a copy started by a successful [`peer_guard_enter`].
pub(crate) fn peer_guard_exit(c: &CopyCounters<'_>) {
    c.finished.fetch_add(1, Ordering::Release);
}

/// What the owner knows about one registered region.
#[derive(Debug)]
pub(crate) struct RegionInfo {
    pub slot: u32,
    pub rkey: u32,
    pub mapping: Arc<Mapping>,
    pub file: Option<Arc<File>>,
    /// Offset of the region's first byte in `mapping` (and in `file`).
    pub map_off: u64,
    pub len: u64,
    pub addr: u64,
    pub access: Access,
    /// The local queue pair this region is bound to (see the module docs), if any.
    pub bound: Option<u32>,
}

impl RegionInfo {
    /// True when a peer's one-sided operation arriving on local queue pair `qp_num` may
    /// use this region at all (before access rights and bounds are checked).
    pub fn reachable_from(&self, qp_num: u32) -> bool {
        self.bound.is_none_or(|q| q == qp_num)
    }

    /// Translates `[remote_addr, remote_addr + len)` into an offset in `mapping`, if it
    /// lies inside the region.
    pub fn translate(&self, remote_addr: u64, len: u64) -> Option<u64> {
        let off = remote_addr.checked_sub(self.addr)?;
        let end = off.checked_add(len)?;
        (end <= self.len).then_some(self.map_off + off)
    }
}

struct SlotAlloc {
    free: Vec<u32>,
    next_fresh: u32,
}

/// The keyed permutation behind rkeys (see the module docs).
struct RkeyGen {
    keys: std::collections::hash_map::RandomState,
    next: AtomicU32,
}

impl RkeyGen {
    fn new() -> RkeyGen {
        // RandomState draws its SipHash keys from the OS (once per process, then
        // advanced per instance), so every protection domain permutes differently.
        RkeyGen { keys: std::collections::hash_map::RandomState::new(), next: AtomicU32::new(1) }
    }

    fn round(&self, round: u32, half: u16) -> u16 {
        let mut h = self.keys.build_hasher();
        h.write_u32(round);
        h.write_u16(half);
        h.finish() as u16
    }

    /// The permutation of `n`: four Feistel rounds over 16-bit halves.
    fn permute(&self, n: u32) -> u32 {
        let (mut l, mut r) = ((n >> 16) as u16, n as u16);
        for round in 0..4 {
            let f = self.round(round, r);
            (l, r) = (r, l ^ f);
        }
        ((l as u32) << 16) | r as u32
    }

    /// A fresh rkey: never 0 (the region table's "no region"), never one given before.
    fn fresh(&self) -> Result<u32> {
        loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            if n == 0 {
                // 2^32 registrations: the permutation is used up; never wrap into reuse.
                self.next.store(0, Ordering::Relaxed);
                return Err(Error::Transport("protection domain has used every rkey".into()));
            }
            let k = self.permute(n);
            if k != 0 {
                return Ok(k);
            }
        }
    }
}

/// A protection domain: the region table and the registered regions.
pub(crate) struct Pd {
    pub id: u64,
    pub table: Arc<Mapping>,
    pub table_file: Option<Arc<File>>,
    alloc: Mutex<SlotAlloc>,
    rkeys: RkeyGen,
    infos: RwLock<HashMap<u32, Arc<RegionInfo>>>,
    /// Peers' one-sided operations refused (bad rkey, wrong queue pair, bounds, access).
    violations: AtomicU64,
    /// shm connections by local queue-pair number, for revocation to wait on.
    watchers: Mutex<HashMap<u32, std::sync::Weak<dyn CopyWatch>>>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd").field("id", &self.id).finish()
    }
}

impl Pd {
    /// A protection domain whose table is shared memory (`shared`) or private memory.
    pub fn new(shared: bool) -> Result<Pd> {
        let (table, table_file) = if shared {
            let (f, m) = crate::pmem::shared::owner_writable_memfd("boomkv-pd", TABLE_BYTES)?;
            (m, Some(Arc::new(f)))
        } else {
            (Mapping::anonymous(TABLE_BYTES)?, None)
        };
        Ok(Pd {
            id: NEXT_PD_ID.fetch_add(1, Ordering::Relaxed),
            table: Arc::new(table),
            table_file,
            alloc: Mutex::new(SlotAlloc { free: Vec::new(), next_fresh: 0 }),
            rkeys: RkeyGen::new(),
            infos: RwLock::new(HashMap::new()),
            violations: AtomicU64::new(0),
            watchers: Mutex::new(HashMap::new()),
        })
    }

    /// Registers the connection on local queue pair `qp_num` as one whose peer copies
    /// by itself (shm); it is forgotten when dropped.
    pub fn watch(&self, qp_num: u32, w: std::sync::Weak<dyn CopyWatch>) {
        if let Ok(mut m) = self.watchers.lock() {
            m.retain(|_, w| w.strong_count() > 0);
            m.insert(qp_num, w);
        }
    }

    /// Waits for the peers that could be copying in a region bound to `bound` (all of
    /// them for an unbound region); disconnects each that stays inside a copy too long.
    fn wait_for_peers(&self, bound: Option<u32>) {
        let watchers: Vec<Arc<dyn CopyWatch>> = match self.watchers.lock() {
            Ok(m) => match bound {
                Some(q) => m.get(&q).and_then(std::sync::Weak::upgrade).into_iter().collect(),
                None => m.values().filter_map(std::sync::Weak::upgrade).collect(),
            },
            Err(_) => return,
        };
        for w in watchers {
            // Wrapping: a hostile peer may set any value; it then only waits out the bound.
            let started = w.copies_started();
            let until = Instant::now() + PEER_REVOKE_WAIT;
            while (started.wrapping_sub(w.copies_finished()) as i64) > 0 {
                if Instant::now() >= until {
                    w.stuck();
                    break;
                }
                std::thread::yield_now();
            }
        }
    }

    /// Counts a refused one-sided operation of a peer.
    pub fn count_violation(&self) {
        self.violations.fetch_add(1, Ordering::Relaxed);
    }

    /// Peers' one-sided operations refused so far.
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }

    /// Live regions with a remote right (see [`crate::transport::Transport::exposed_regions`]).
    pub fn exposed(&self) -> u64 {
        let m = self.infos.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.values().filter(|i| i.access.is_remote()).count() as u64
    }

    /// Registers `[offset, offset + len)` of `mapping`, reachable from every queue pair.
    pub fn register(
        self: &Arc<Self>,
        mapping: Arc<Mapping>,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Mr> {
        self.register_bound(mapping, file, offset, len, access, None)
    }

    /// Registers `[offset, offset + len)` of `mapping`; with `bound`, peers reach it only
    /// through that local queue pair.
    pub fn register_bound(
        self: &Arc<Self>,
        mapping: Arc<Mapping>,
        file: Option<Arc<File>>,
        offset: u64,
        len: u64,
        access: Access,
        bound: Option<u32>,
    ) -> Result<Mr> {
        let ulen = usize::try_from(len).map_err(|_| Error::invalid("region too large"))?;
        mapping.check(offset, ulen)?;
        if let Some(f) = &file {
            let flen = crate::pmem::shared::file_len(f)?;
            if offset + len > flen {
                return Err(Error::invalid(format!(
                    "region [{offset}, {}) is beyond the end of its {flen}-byte file",
                    offset + len
                )));
            }
        }
        let rkey = self.rkeys.fresh()?;
        let slot = {
            let mut a = self.alloc.lock().map_err(|_| Error::Transport("region table lock poisoned".into()))?;
            match a.free.pop() {
                Some(s) => s,
                None if a.next_fresh < SLOTS => {
                    a.next_fresh += 1;
                    a.next_fresh - 1
                }
                None => return Err(Error::Transport(format!("protection domain is out of region slots ({SLOTS})"))),
            }
        };
        let info = Arc::new(RegionInfo {
            slot,
            rkey,
            addr: mapping.as_ptr() as u64 + offset,
            mapping,
            file,
            map_off: offset,
            len,
            access,
            bound,
        });
        {
            let mut infos = self.infos.write().map_err(|_| Error::Transport("region table lock poisoned".into()))?;
            infos.insert(rkey, info.clone());
        }
        // Publish the rkey last, keeping any user count a stale initiator left behind.
        let word = self.word(slot)?;
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let new = ((rkey as u64) << 32) | (cur & 0xffff_ffff);
            match word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(v) => cur = v,
            }
        }
        Ok(Mr {
            inner: Arc::new(MrInner { pd: self.clone(), info, revoked: std::sync::atomic::AtomicBool::new(false) }),
        })
    }

    fn word(&self, slot: u32) -> Result<&AtomicU64> {
        self.table.atomic_u64(slot as u64 * 8)
    }

    /// The live region named by `rkey`, if any.
    pub fn lookup(&self, rkey: u32) -> Option<Arc<RegionInfo>> {
        self.infos.read().ok()?.get(&rkey).cloned()
    }

    /// The live region named by `rkey` that a peer on local queue pair `qp_num` may use
    /// with `need`; `None` (counted as a violation) otherwise.
    pub fn lookup_remote(&self, rkey: u32, qp_num: u32, need: Access) -> Option<Arc<RegionInfo>> {
        let found = self.lookup(rkey).filter(|i| i.reachable_from(qp_num) && i.access.contains(need));
        if found.is_none() {
            self.count_violation();
        }
        found
    }

    fn revoke(&self, info: &RegionInfo) {
        let Ok(word) = self.word(info.slot) else { return };
        let mut cur = word.load(Ordering::Acquire);
        loop {
            if (cur >> 32) as u32 != info.rkey {
                break;
            }
            match word.compare_exchange_weak(cur, cur & 0xffff_ffff, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => break,
                Err(v) => cur = v,
            }
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        self.wait_for_peers(info.bound);
        // Wait for copies that entered before the rkey was cleared.
        let until = Instant::now() + REVOKE_WAIT;
        let mut drained = false;
        while Instant::now() < until {
            if word.load(Ordering::Acquire) & 0xffff_ffff == 0 {
                drained = true;
                break;
            }
            std::thread::yield_now();
        }
        if let Ok(mut infos) = self.infos.write() {
            infos.remove(&info.rkey);
        }
        if drained {
            if let Ok(mut a) = self.alloc.lock() {
                a.free.push(info.slot);
            }
        } else {
            // A user count that never drains belongs to a dead peer; keep the slot out of
            // circulation rather than let a new region inherit it.
            crate::transport::log_event(&format!(
                "region slot {} still had users {REVOKE_WAIT:?} after revocation; retiring the slot",
                info.slot
            ));
        }
    }
}

/// Starts a one-sided access to the region in `slot` of a region table: adds a user and
/// checks that `rkey` is still the slot's key. On `true` the caller must call
/// [`guard_exit`] when its copy is done.
pub(crate) fn guard_enter(table: &Mapping, slot: u32, rkey: u32) -> bool {
    let Ok(word) = table.atomic_u64(slot as u64 * 8) else { return false };
    let prev = word.fetch_add(1, Ordering::AcqRel);
    if (prev >> 32) as u32 == rkey && rkey != 0 {
        true
    } else {
        word.fetch_sub(1, Ordering::AcqRel);
        false
    }
}

/// Ends an access started by a successful [`guard_enter`].
pub(crate) fn guard_exit(table: &Mapping, slot: u32) {
    if let Ok(word) = table.atomic_u64(slot as u64 * 8) {
        word.fetch_sub(1, Ordering::Release);
    }
}

// Aligned to two cache lines: the regions of connections served on different CPUs
// are made one after another, and their reference counts would share a line.
#[repr(align(128))]
struct MrInner {
    pd: Arc<Pd>,
    info: Arc<RegionInfo>,
    revoked: std::sync::atomic::AtomicBool,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        if !self.revoked.swap(true, Ordering::AcqRel) {
            self.pd.revoke(&self.info);
        }
    }
}

/// A registered memory region (both backends). Clones share the registration; it is
/// revoked by [`MemoryRegion::deregister`] or when the last clone drops.
#[derive(Clone)]
pub struct Mr {
    inner: Arc<MrInner>,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = &self.inner.info;
        f.debug_struct("Mr")
            .field("rkey", &format_args!("{:#x}", i.rkey))
            .field("addr", &format_args!("{:#x}", i.addr))
            .field("len", &i.len)
            .field("access", &i.access)
            .field("registered", &self.is_registered())
            .finish()
    }
}

impl Mr {
    pub(crate) fn info(&self) -> &Arc<RegionInfo> {
        &self.inner.info
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.info.rkey
    }

    /// Checks a local access of `len` bytes at region offset `off` needing `need`, as a
    /// posting queue pair of protection domain `pd` does. `Err` means a local
    /// protection error.
    pub(crate) fn check_local(&self, pd: u64, off: u64, len: u32, need: Access) -> std::result::Result<u64, ()> {
        let i = &self.inner.info;
        if self.inner.pd.id != pd || !self.is_registered() || !i.access.contains(need) {
            return Err(());
        }
        match off.checked_add(len as u64) {
            Some(end) if end <= i.len => Ok(i.map_off + off),
            _ => Err(()),
        }
    }
}

impl MemoryRegion for Mr {
    fn remote(&self) -> RemoteRegion {
        let i = &self.inner.info;
        RemoteRegion { addr: i.addr, len: i.len, rkey: i.rkey }
    }

    fn len(&self) -> u64 {
        self.inner.info.len
    }

    fn access(&self) -> Access {
        self.inner.info.access
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let i = &self.inner.info;
        match off.checked_add(buf.len() as u64) {
            Some(end) if end <= i.len => i.mapping.read(i.map_off + off, buf),
            _ => Err(Error::OutOfBounds { offset: off, len: buf.len() as u64, limit: i.len }),
        }
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let i = &self.inner.info;
        match off.checked_add(data.len() as u64) {
            Some(end) if end <= i.len => i.mapping.write(i.map_off + off, data),
            _ => Err(Error::OutOfBounds { offset: off, len: data.len() as u64, limit: i.len }),
        }
    }

    fn mapping(&self) -> (&Arc<Mapping>, u64) {
        (&self.inner.info.mapping, self.inner.info.map_off)
    }

    fn deregister(&self) {
        if !self.inner.revoked.swap(true, Ordering::AcqRel) {
            self.inner.pd.revoke(&self.inner.info);
        }
    }

    fn is_registered(&self) -> bool {
        !self.inner.revoked.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_lookup_revoke() {
        let pd = Arc::new(Pd::new(false).unwrap());
        let m = Arc::new(Mapping::anonymous(8192).unwrap());
        let mr = pd.register(m.clone(), None, 4096, 100, Access::ALL).unwrap();
        let r = mr.remote();
        assert_eq!(r.addr, m.as_ptr() as u64 + 4096);
        let info = pd.lookup(r.rkey).unwrap();
        assert_eq!(info.translate(r.addr + 10, 90), Some(4106));
        assert_eq!(info.translate(r.addr + 10, 91), None);
        assert_eq!(info.translate(r.addr - 1, 1), None);
        assert!(guard_enter(&pd.table, info.slot, r.rkey));
        guard_exit(&pd.table, info.slot);
        assert!(!guard_enter(&pd.table, info.slot, r.rkey ^ 0x10000));
        mr.write(0, b"hi").unwrap();
        assert_eq!(m.view(4096, 2).unwrap(), b"hi");
        assert!(mr.write(99, b"hi").is_err());
        mr.deregister();
        assert!(!guard_enter(&pd.table, info.slot, r.rkey));
        assert!(pd.lookup(r.rkey).is_none());
        // The slot is reused with a new rkey; the old rkey stays dead.
        let mr2 = pd.register(m, None, 0, 10, Access::ALL).unwrap();
        assert_ne!(mr2.rkey(), r.rkey);
        assert_eq!(mr2.info().slot, info.slot);
        assert!(!guard_enter(&pd.table, info.slot, r.rkey));
        assert!(pd.lookup(r.rkey).is_none());
        assert!(mr.check_local(pd.id, 0, 1, Access::NONE).is_err());
        assert_eq!(mr2.check_local(pd.id, 2, 8, Access::LOCAL_WRITE), Ok(2));
        assert!(mr2.check_local(pd.id, 2, 9, Access::NONE).is_err());
        assert!(mr2.check_local(pd.id + 1, 0, 1, Access::NONE).is_err());
    }

    #[test]
    fn rkeys_are_never_reused_and_do_not_reveal_the_slot() {
        let pd = Arc::new(Pd::new(false).unwrap());
        let m = Arc::new(Mapping::anonymous(4096).unwrap());
        let mut seen = std::collections::HashSet::new();
        let mut low_bits_equal_slot = 0;
        for _ in 0..20_000 {
            let mr = pd.register(m.clone(), None, 0, 64, Access::ALL).unwrap();
            assert!(seen.insert(mr.rkey()), "rkey {:#x} given twice", mr.rkey());
            assert_ne!(mr.rkey(), 0);
            if mr.rkey() & 0xffff == mr.info().slot {
                low_bits_equal_slot += 1;
            }
            // Dropped here: the slot is reused every time, the rkey never.
        }
        assert!(low_bits_equal_slot < 10, "{low_bits_equal_slot} rkeys carried their slot number");
        // Two protection domains permute differently.
        let pd2 = Arc::new(Pd::new(false).unwrap());
        let a: Vec<u32> = (0..8).map(|_| pd.register(m.clone(), None, 0, 64, Access::ALL).unwrap().rkey()).collect();
        let b: Vec<u32> = (0..8).map(|_| pd2.register(m.clone(), None, 0, 64, Access::ALL).unwrap().rkey()).collect();
        assert_ne!(a, b);
        // The permutation is a bijection on a sample.
        let g = RkeyGen::new();
        let outs: std::collections::HashSet<u32> = (0..100_000u32).map(|n| g.permute(n)).collect();
        assert_eq!(outs.len(), 100_000);
    }

    #[test]
    fn bound_regions_are_reachable_only_from_their_queue_pair() {
        let pd = Arc::new(Pd::new(false).unwrap());
        let m = Arc::new(Mapping::anonymous(4096).unwrap());
        let mr = pd.register_bound(m.clone(), None, 0, 64, Access::REMOTE_WRITE, Some(7)).unwrap();
        let open = pd.register(m, None, 0, 64, Access::REMOTE_READ).unwrap();
        assert!(pd.lookup_remote(mr.rkey(), 7, Access::REMOTE_WRITE).is_some());
        assert_eq!(pd.violations(), 0);
        assert!(pd.lookup_remote(mr.rkey(), 8, Access::REMOTE_WRITE).is_none());
        assert!(pd.lookup_remote(mr.rkey(), 7, Access::REMOTE_READ).is_none());
        assert!(pd.lookup_remote(open.rkey(), 8, Access::REMOTE_READ).is_some());
        assert!(pd.lookup_remote(open.rkey() ^ 1, 8, Access::REMOTE_READ).is_none());
        assert_eq!(pd.violations(), 3);
    }

    #[test]
    fn peers_cannot_write_the_table_and_cannot_stall_revocation_for_long() {
        use std::io::Write;
        use std::sync::atomic::AtomicBool;
        let pd = Arc::new(Pd::new(true).unwrap());
        let f = pd.table_file.as_ref().unwrap();
        // What a peer receives: it can map the table only read-only, and not write it.
        assert!(Mapping::map_file(f, 0, TABLE_BYTES, false).is_err(), "a writable mapping of the table");
        assert!((&**f).write(&[1u8; 8]).is_err(), "a write(2) into the table");
        let ro = crate::pmem::shared::ReadOnlyWords::map(f, TABLE_BYTES).unwrap();

        // A peer that starts a copy and never finishes it.
        struct Hostile(AtomicBool);
        impl CopyWatch for Hostile {
            fn copies_started(&self) -> u64 {
                7
            }
            fn copies_finished(&self) -> u64 {
                if self.0.load(Ordering::Acquire) {
                    7
                } else {
                    6
                }
            }
            fn stuck(&self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let hostile = Arc::new(Hostile(AtomicBool::new(false)));
        let h: Arc<dyn CopyWatch> = hostile.clone();
        pd.watch(3, Arc::downgrade(&h));
        let m = Arc::new(Mapping::anonymous(4096).unwrap());
        let mr = pd.register_bound(m.clone(), None, 0, 64, Access::REMOTE_WRITE, Some(3)).unwrap();
        let (started, finished) = (AtomicU64::new(0), AtomicU64::new(0));
        let c = CopyCounters { started: &started, finished: &finished };
        assert!(peer_guard_enter(&ro, &c, mr.info().slot, mr.rkey()));
        peer_guard_exit(&c);
        let t = Instant::now();
        mr.deregister();
        assert!(t.elapsed() < PEER_REVOKE_WAIT * 3, "revocation waited {:?}", t.elapsed());
        assert!(hostile.0.load(Ordering::Acquire), "the stuck peer was told to go");
        assert!(!peer_guard_enter(&ro, &c, mr.info().slot, mr.rkey()), "revoked for peers");
        assert_eq!(started.load(Ordering::Relaxed), finished.load(Ordering::Relaxed));
        // An unrelated connection's peer is not waited for on a bound region.
        let other = Arc::new(Hostile(AtomicBool::new(false)));
        let o: Arc<dyn CopyWatch> = other.clone();
        pd.watch(4, Arc::downgrade(&o));
        let mr2 = pd.register_bound(m, None, 0, 64, Access::REMOTE_WRITE, Some(3)).unwrap();
        mr2.deregister();
        assert!(!other.0.load(Ordering::Acquire), "a peer on another queue pair was left alone");
    }

    #[test]
    fn revocation_waits_for_users() {
        let pd = Arc::new(Pd::new(true).unwrap());
        let m = Arc::new(Mapping::anonymous(4096).unwrap());
        let mr = pd.register(m, None, 0, 4096, Access::ALL).unwrap();
        let (slot, rkey) = (mr.info().slot, mr.rkey());
        assert!(guard_enter(&pd.table, slot, rkey));
        let pd2 = pd.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            guard_exit(&pd2.table, slot);
            Instant::now()
        });
        mr.deregister();
        let done = Instant::now();
        let exited = h.join().unwrap();
        assert!(done >= exited, "deregister returned while a copy was running");
    }
}
