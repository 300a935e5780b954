//! pDPM-Direct (Tsai et al., "Disaggregating Persistent Memory and Controlling Them
//! Remotely", ATC'20; Liu Xuran's "Survey on Distributed Storage Systems Based on NVM
//! and RDMA" (HUST, 2020), section 3.2, figures 12 and 13): passive persistent memory.
//! The memory node's CPU takes no part in reads or writes; clients manage the data with
//! one-sided RDMA.
//!
//! # The paper's design
//!
//! Every key has, preallocated in PM, a lock and two slots, committed and uncommitted,
//! each holding the data with a CRC. A write takes the remote lock (compare-and-swap),
//! writes the data and CRC into the uncommitted slot, then into the committed slot,
//! then releases the lock: 4 round trips. A read READs the committed slot and checks
//! the CRC, and reads again when it fails (a write in progress).
//!
//! # What is reproduced
//!
//! - **PUT (and DELETE, a tombstone entry)**: 4 round trips: a compare-and-swap of the
//!   cell's lock word from free at version v to held by this client at v; a WRITE of
//!   the entry (version v+1) into the uncommitted slot and a FLUSH of it; the same
//!   WRITE into the committed slot and its FLUSH; a WRITE of the lock word, free at
//!   v+1. The FLUSH completions are the durability (the transport's one-sided FLUSH,
//!   as RDMP-CC's: [`crate::transport::QueuePair::post_flush`]); the PUT returns after
//!   the release. Counted in `tests/kv.rs`: 1 CAS, 3 WRITEs, 2 FLUSHes.
//! - **GET**: 1 READ of the cell's lock line and committed slot (its first bytes: the
//!   key's last known length, or 512 bytes; a second READ for the rest of a longer
//!   entry), checked; read again while it fails its check and the lock is held. A
//!   split GET (several clients per thread) is the same probe, one READ per poll that
//!   finds the last one done, its back-off a time to READ again from, not a sleep.
//! - The slots hold this crate's entry format and CRC-32C
//!   ([`crate::log::format`]); the table lies in the pool's segments and recovery
//!   applies pDPM's rule: the committed slot if it verifies, else the uncommitted one
//!   ([`crate::log::cells`], [`crate::log::table`]), with one change: an uncommitted
//!   slot that verifies with a newer version than a verifying committed one wins. A
//!   GET may read the committed slot after its WRITE and before its FLUSH; the
//!   uncommitted copy of that version is durable by then, so what a GET returned
//!   survives a crash (pDPM's rule would restore the older committed slot).
//!
//! # What differs, and why
//!
//! - **Where a key lives.** The paper preallocates per key; here the table is a hash
//!   table of cells created at the first pDPM-Direct client's request (`--cells`,
//!   `--cell-value`; fixed for the pool's life), a key in the first cell of a linear
//!   probe from its hash that is empty or holds it. A client caches each key's cell and
//!   lock word (from its writes and its GETs). A write of a key it has not touched
//!   first tries to claim the key's home cell as empty: a new key costs the 4 round
//!   trips; a key already in the table costs that failed compare-and-swap and one READ
//!   per probed cell more, once per client. A writer never probes past a cell whose
//!   first write is in progress (it waits for the lock), so every cell a key's probe
//!   passes is committed and durable, and stays so through a crash; recovery leaves a
//!   damaged cell locked-looking (a version with no holder and a slot that does not
//!   verify), so probes through it fail loudly instead of claiming it.
//! - **Versions are per key** (48 bits of the lock word), not the server's counter: no
//!   server is on the write path to assign one.
//! - **No seal.** The server's seal on entries (keyed by a secret clients never see)
//!   cannot be made without the server; a slot carries the writer's check instead (the
//!   CRC-32C of cell, version and entry checksum). So the table trusts its clients, as
//!   the paper's design does: **any pDPM-Direct client can overwrite, corrupt or lock
//!   any key of the table**, and the server cannot tell (it never sees a write). What
//!   the server still isolates: the table is a region of its own (no client of another
//!   protocol can reach it, nor a pDPM-Direct client anything else in the pool), the
//!   table's geometry lives in the pool header outside every region, recovery checks
//!   every slot before it believes it and never panics on what clients wrote, and
//!   readers get an error, never a wrong value, for a slot that does not verify.
//! - **A lock whose holder died** stays held until the server restarts (recovery
//!   releases every lock); a writer waiting for it gives up after the client's
//!   timeout with an error naming the cell. The paper leaves this open too.
//! - Keys at most [`crate::log::cells::CELL_KEY_MAX`] bytes; a cell's value size is
//!   the table's. pDPM-Direct keys are their own namespace: the server's index and the
//!   other protocols do not see them.

use std::collections::HashMap;
use std::time::Instant;

use super::{ClientSide, Fetched, ServerSide};
use crate::error::{Error, Result};
use crate::link::{Link, PutInfo};
use crate::log::cells::{self, CellTable, SlotFault, LOCK_LINE};
use crate::log::format as fmt;
use crate::service::Ctx;
use crate::transport::{Access, MemoryRegion, Transport};
use crate::wire::{ErrorCode, Msg};

/// Cells a client asks for by default.
pub const DEFAULT_CELLS: u64 = 4096;
/// Largest value a client asks cells for by default.
pub const DEFAULT_CELL_VALUE: u32 = 4096;
/// Bytes a GET reads of a key whose length it does not know yet.
const FIRST_READ: u64 = 512;

// ---- server side ----

/// pDPM-Direct's server half: it only hands out the table (creating it first).
pub(crate) struct Server<T: Transport> {
    mr: Option<T::Mr>,
}

impl<T: Transport> Default for Server<T> {
    fn default() -> Self {
        Server { mr: None }
    }
}

impl<T: Transport> Server<T> {
    fn describe(&mut self, cx: &mut Ctx<'_, T>, cells: u64, value_max: u32, req: u32) -> Result<()> {
        let pool = cx.pool();
        let t = match pool.cell_table() {
            Some(t) => t,
            None => {
                if cells == 0 || cells > cells::MAX_CELLS {
                    return cx.refuse(req, ErrorCode::BadRequest, format!("a table of {cells} cells"));
                }
                if value_max > cx.max_value() {
                    let m = format!("cells for values of {value_max} bytes: the server's limit is {}", cx.max_value());
                    return cx.refuse(req, ErrorCode::TooLarge, m);
                }
                match pool.create_cell_table(cells, value_max) {
                    Ok(t) => {
                        cx.sh.log(&format!(
                            "created the pDPM-Direct cell table: {} cells of {} bytes in {}",
                            t.cells,
                            t.cell_size(),
                            crate::units::segment_span(t.first_segment, t.segments)
                        ));
                        t
                    }
                    Err(e) => return cx.refuse(req, e.refusal_code(), e.to_string()),
                }
            }
        };
        if self.mr.is_none() {
            let base = cx.pool().cell_table_base(&t);
            let mr =
                cx.pool_region(base, t.bytes(), Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)?;
            self.mr = Some(mr);
        }
        let Some(r) = self.mr.as_ref().map(MemoryRegion::remote) else { return Ok(()) };
        let tag = cells::holder_tag(cx.conn.id);
        cx.reply(&Msg::Cells { addr: r.at(0), rkey: r.rkey, cells: t.cells, slot_size: t.slot_size, tag }, req)
    }
}

impl<T: Transport> ServerSide<T> for Server<T> {
    fn on_msg(&mut self, cx: &mut Ctx<'_, T>, m: Msg, req: u32) -> Result<()> {
        match m {
            Msg::CellsReq { cells, value_max } => self.describe(cx, cells, value_max, req),
            m => cx.common(m, req),
        }
    }

    fn on_close(&mut self) {
        if let Some(mr) = self.mr.take() {
            mr.deregister();
        }
    }
}

// ---- client side ----

/// The table as the server described it.
#[derive(Clone, Copy, Debug)]
struct Table {
    addr: u64,
    rkey: u32,
    geo: CellTable,
    tag: u16,
}

impl Table {
    fn lock(&self, i: u64) -> u64 {
        self.addr + self.geo.lock_offset(i)
    }
    fn committed(&self, i: u64) -> u64 {
        self.addr + self.geo.committed_offset(i)
    }
    fn uncommitted(&self, i: u64) -> u64 {
        self.addr + self.geo.uncommitted_offset(i)
    }
}

/// What a client knows of a key: its cell, the lock word it last saw free, the
/// length of its entry.
#[derive(Clone, Copy, Debug)]
struct Known {
    cell: u64,
    word: u64,
    len: u64,
}

/// Keys a client remembers (then it forgets them all and probes again).
const MAX_KNOWN: usize = 1 << 20;

/// pDPM-Direct's client half.
pub(crate) struct Client {
    want: (u64, u32),
    table: Option<Table>,
    known: HashMap<Vec<u8>, Known>,
    /// The split GET in flight ([`ClientSide::get_start`]).
    pending: Option<Pending>,
}

/// A GET's probe of the table: the cell it reads next and what it has seen.
struct Probe {
    i: u64,
    /// Bytes of the committed slot to read.
    len: u64,
    /// Cells passed that hold other keys.
    probes: u64,
    backoff: Backoff,
    /// The lock word of the cell last read, free but its slot not verifying: read once
    /// more (the release may have raced the READ); the same again is damage.
    recheck: Option<u64>,
    /// READs looked at.
    reads: u32,
}

/// What the READ of a probe's cell says.
enum Step {
    /// The GET's answer: the entry's place in `l.buf`, `None` for an absent key.
    Found(Option<(usize, usize)>),
    /// READ the probe's cell (as it now says).
    Read,
    /// A write is in progress: READ the cell again after a back-off.
    BackOff,
}

/// The phase of a split GET.
enum Pending {
    /// The READ of `n` bytes of the probe's cell is out (work request `wr`).
    Reading { p: Probe, wr: u64, n: u32 },
    /// Backing off: the cell is READ again from `until` on.
    Waiting { p: Probe, until: Instant },
}

impl Pending {
    /// Posts the READ of `p`'s cell.
    fn start<T: Transport>(l: &mut Link<T>, t: &Table, p: Probe) -> Result<Pending> {
        let n = cell_read_len(t, p.len);
        let wr = l.post_read_response(n, t.lock(p.i), t.rkey, "reading a cell")?;
        Ok(Pending::Reading { p, wr, n })
    }
}

/// Bytes of a READ of a cell's lock line and the first `len` bytes of its committed slot.
fn cell_read_len(t: &Table, len: u64) -> u32 {
    (LOCK_LINE + len.clamp(fmt::ENTRY_HEADER_SIZE, t.geo.slot_size)) as u32
}

impl Client {
    /// A client that asks for `cells` cells of values up to `value_max` bytes if the
    /// pool has no table yet.
    pub(crate) fn new(cells: u64, value_max: u32) -> Client {
        Client { want: (cells, value_max), table: None, known: HashMap::new(), pending: None }
    }

    fn table<T: Transport>(&mut self, l: &mut Link<T>) -> Result<Table> {
        if let Some(t) = self.table {
            return Ok(t);
        }
        let (cells, value_max) = self.want;
        let t = match l.call(&Msg::CellsReq { cells, value_max }, "asking for the cell table")? {
            Msg::Cells { addr, rkey, cells, slot_size, tag } => {
                let geo = CellTable { first_segment: 0, segments: 0, cells, slot_size };
                let ok = (1..=cells::MAX_CELLS).contains(&cells)
                    && slot_size % 64 == 0
                    && (CellTable::slot_size_for(0)..=1 << 30).contains(&slot_size)
                    && cells.checked_mul(geo.cell_size()).and_then(|b| addr.checked_add(b)).is_some()
                    && tag != 0;
                if !ok {
                    return Err(Error::Protocol(format!(
                        "the server described a cell table of {cells} cells of {slot_size}-byte slots (tag {tag})"
                    )));
                }
                Table { addr, rkey, geo, tag }
            }
            m => return Err(Error::Protocol(format!("expected the cell table, got {m:?}"))),
        };
        self.table = Some(t);
        Ok(t)
    }

    fn remember(&mut self, key: &[u8], k: Known) {
        if self.known.len() >= MAX_KNOWN && !self.known.contains_key(key) {
            self.known.clear();
        }
        self.known.insert(key.to_vec(), k);
    }

    /// Reads cell `i`'s lock line and the first `len` bytes of its committed slot into
    /// `l.buf`; returns the lock word.
    fn read_cell<T: Transport>(&self, l: &mut Link<T>, t: &Table, i: u64, len: u64) -> Result<u64> {
        l.read_remote(cell_read_len(t, len), t.lock(i), t.rkey, "reading a cell")?;
        Ok(u64::from_le_bytes(l.buf[..8].try_into().unwrap_or([0; 8])))
    }

    /// A GET's probe for `key`: from the cell this client last saw it in, else from
    /// its home cell.
    fn probe(&self, t: &Table, key: &[u8]) -> Probe {
        let (i, len) = self.known.get(key).map_or((cells::home(key, t.geo.cells), FIRST_READ), |k| (k.cell, k.len));
        Probe { i, len, probes: 0, backoff: Backoff::new(), recheck: None, reads: 0 }
    }

    /// What the READ of `p`'s cell (lock word `word`, the cell in `l.buf`) tells a GET
    /// of `key`; `p` is set for the next READ.
    fn look<T: Transport>(&mut self, l: &mut Link<T>, t: &Table, key: &[u8], p: &mut Probe, word: u64) -> Result<Step> {
        let recheck = p.recheck.take();
        // Bounded in time, not only by the back-off: a cell whose free lock word another
        // client keeps changing while its slot does not verify is re-read without one.
        p.reads = p.reads.wrapping_add(1);
        if p.reads % 64 == 0 && p.backoff.start.elapsed() > l.timeout {
            return Err(Error::Timeout(l.timeout, "reading a cell"));
        }
        let slot = &l.buf[LOCK_LINE as usize..];
        Ok(match cells::check_slot(slot, p.i, t.geo.slot_size) {
            Ok(h) => {
                if fmt::entry_key(slot, &h) == key {
                    let n = h.entry_len();
                    // The word a write will expect: free at the version read (a wrong
                    // guess costs the write one more compare-and-swap).
                    self.remember(key, Known { cell: p.i, word: cells::lock_word(h.version, 0), len: n });
                    return Ok(Step::Found((!h.is_tombstone()).then_some((LOCK_LINE as usize, n as usize))));
                }
                p.probes += 1;
                if p.probes >= t.geo.cells {
                    return Ok(Step::Found(None));
                }
                p.i = (p.i + 1) % t.geo.cells;
                p.len = FIRST_READ;
                Step::Read
            }
            Err(SlotFault::Empty) => Step::Found(None),
            Err(SlotFault::Short(n)) => {
                p.len = n;
                Step::Read
            }
            Err(SlotFault::Bad(_)) if cells::lock_holder(word) == 0 && word != 0 => {
                // Free and not verifying: read once more (the release may have raced
                // the READ), then it is damage.
                if recheck == Some(word) {
                    return Err(damaged(p.i));
                }
                p.recheck = Some(word);
                Step::Read
            }
            Err(SlotFault::Bad(_)) => {
                // A write in progress: read again, as the paper's reader does.
                l.counters.torn_retries += 1;
                Step::BackOff
            }
        })
    }

    /// The cell a write of `key` goes to and the lock word seen free there (0: an
    /// empty cell to claim), found by probing from its home cell.
    fn cell_for_write<T: Transport>(&mut self, l: &mut Link<T>, t: &Table, key: &[u8]) -> Result<(u64, u64)> {
        let mut backoff = Backoff::new();
        let mut i = cells::home(key, t.geo.cells);
        let mut probes = 0u64;
        loop {
            let word = self.read_cell(l, t, i, fmt::ENTRY_HEADER_SIZE + key.len() as u64)?;
            if cells::lock_holder(word) != 0 {
                // Being written (perhaps its first write): wait for the holder, never
                // probe past a cell that may not be committed.
                backoff.wait(l, i, word)?;
                continue;
            }
            if word == 0 {
                return Ok((i, 0));
            }
            let slot = &l.buf[LOCK_LINE as usize..];
            if fmt::EntryHeader::decode(slot).is_err() {
                return Err(damaged(i));
            }
            if fmt::claimed_key(slot) == key {
                return Ok((i, word));
            }
            probes += 1;
            if probes >= t.geo.cells {
                return Err(Error::Server {
                    code: ErrorCode::PoolFull,
                    message: format!(
                        "pool full: the cell table's {} cells are all taken (its size is fixed when the pool's first pDPM-Direct client creates it: --cells)",
                        t.geo.cells
                    ),
                });
            }
            i = (i + 1) % t.geo.cells;
        }
    }
}

fn damaged(i: u64) -> Error {
    Error::corrupt("cell", format!("cell {i}'s committed slot does not verify and no writer holds its lock"))
}

/// Waiting for a cell's lock: a few yields, then sleeps doubling up to
/// [`Backoff::MAX_SLEEP`], bounded by the link's timeout. Waiters that retried at once
/// would keep the cell's lock word busy with compare-and-swaps and READs (a NIC
/// serializes atomics on one address) and slow the holder they wait for (over
/// soft-RoCE under emulation, three writers once timed out after 10 s on one cell's
/// lock; whether this was the cause is not known).
struct Backoff {
    start: Instant,
    tries: u32,
}

impl Backoff {
    const YIELDS: u32 = 8;
    const MAX_SLEEP: std::time::Duration = std::time::Duration::from_millis(1);

    fn new() -> Backoff {
        Backoff { start: Instant::now(), tries: 0 }
    }

    /// Backs off once while cell `i`'s lock is held (`word`); an error once the link's
    /// timeout has passed since the first wait began.
    fn wait<T: Transport>(&mut self, l: &Link<T>, i: u64, word: u64) -> Result<()> {
        match self.delay(l, i, word)? {
            d if d.is_zero() => std::thread::yield_now(),
            d => std::thread::sleep(d),
        }
        Ok(())
    }

    /// The next back-off's length (zero: a yield), for a caller that does not wait
    /// in it (a split GET); an error once the link's timeout has passed since the
    /// first back-off began.
    fn delay<T: Transport>(&mut self, l: &Link<T>, i: u64, word: u64) -> Result<std::time::Duration> {
        if self.start.elapsed() > l.timeout {
            return Err(Error::Protocol(format!(
                "cell {i} stayed locked (by client tag {}) for over {:?}: a client that died holding it? restarting the server releases every lock",
                cells::lock_holder(word),
                l.timeout
            )));
        }
        self.tries += 1;
        if self.tries <= Self::YIELDS {
            return Ok(std::time::Duration::ZERO);
        }
        let us = 1u64 << (self.tries - Self::YIELDS).min(10);
        Ok(std::time::Duration::from_micros(us).min(Self::MAX_SLEEP))
    }
}

/// Whether this build plants the bug of writing the committed slot before the
/// uncommitted copy is durable.
fn early_commit() -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        crate::log::planted::pdpm_early_commit()
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}

impl<T: Transport> ClientSide<T> for Client {
    fn put(&mut self, l: &mut Link<T>, key: &[u8], value: &[u8], tomb: bool) -> Result<PutInfo> {
        let t = self.table(l)?;
        if key.len() > cells::CELL_KEY_MAX as usize {
            return Err(Error::TooLarge { what: "key", len: key.len() as u64, limit: u64::from(cells::CELL_KEY_MAX) });
        }
        if value.len() as u64 > t.geo.value_max(key.len()) {
            return Err(Error::TooLarge { what: "value", len: value.len() as u64, limit: t.geo.value_max(key.len()) });
        }
        let (mut cell, mut word, mut sure) = match self.known.get(key) {
            Some(k) => (k.cell, k.word, true),
            // A key this client has not touched: claim its home cell as if it were
            // empty (a new key costs the design's 4 round trips); if it is not, find
            // the key's cell by probing.
            None => (cells::home(key, t.geo.cells), 0, false),
        };
        let mut backoff = Backoff::new();
        // Round trip 1: the lock.
        loop {
            let held = cells::lock_word(cells::lock_version(word), t.tag);
            let old = l.compare_swap((t.lock(cell), t.rkey), word, held, false, &[], "locking a cell")?;
            // `held` carries this client's tag, which no other client has, and this
            // client holds no lock between calls: finding it means the lock is ours
            // (taking it as failed would wait on ourselves until the timeout).
            if l.cas_took_effect(old, word, held) {
                break;
            }
            if !sure || (word == 0 && cells::lock_holder(old) == 0) {
                // Not empty (or another key's first write claimed it first).
                self.known.remove(key);
                (cell, word) = self.cell_for_write(l, &t, key)?;
                sure = true;
                continue;
            }
            if cells::lock_holder(old) != 0 {
                backoff.wait(l, cell, old)?;
                word = cells::lock_word(cells::lock_version(old), 0);
            } else {
                word = old;
            }
        }
        let version = cells::lock_version(word) + 1;
        if version > cells::MAX_CELL_VERSION {
            return Err(Error::VersionsExhausted { limit: cells::MAX_CELL_VERSION + 1 });
        }
        let n = l.encode_entry(key, value, tomb, 0)?;
        l.seal_cell_entry(cell, version)?;
        let (c, u) = (t.committed(cell), t.uncommitted(cell));
        if early_commit() {
            // The planted bug: the committed slot first, one FLUSH for both at the end.
            l.write_entry_quiet(n, c, t.rkey)?;
            l.write_entry_quiet(n, u, t.rkey)?;
            l.flush_remote(c, t.rkey, (t.geo.slot_size + n as u64) as u32, "a pDPM-Direct FLUSH")?;
        } else {
            // Round trips 2 and 3: the uncommitted copy durable, then the committed one.
            l.write_entry_quiet(n, u, t.rkey)?;
            l.flush_remote(u, t.rkey, n as u32, "a pDPM-Direct FLUSH")?;
            l.write_entry_quiet(n, c, t.rkey)?;
            l.flush_remote(c, t.rkey, n as u32, "a pDPM-Direct FLUSH")?;
        }
        // Round trip 4: the release, at the new version.
        let free = cells::lock_word(version, 0);
        l.write_word(free, t.lock(cell), t.rkey, "releasing a cell's lock")?;
        self.remember(key, Known { cell, word: free, len: n as u64 });
        l.counters.in_place += 1;
        Ok(PutInfo { version, in_place: true })
    }

    fn get(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<Option<(usize, usize)>> {
        let t = self.table(l)?;
        let mut p = self.probe(&t, key);
        loop {
            let word = self.read_cell(l, &t, p.i, p.len)?;
            match self.look(l, &t, key, &mut p, word)? {
                Step::Found(entry) => return Ok(entry),
                Step::Read => {}
                Step::BackOff => p.backoff.wait(l, p.i, word)?,
            }
        }
    }

    fn get_start(&mut self, l: &mut Link<T>, key: &[u8]) -> Result<bool> {
        let t = self.table(l)?;
        let p = self.probe(&t, key);
        self.pending = Some(Pending::start(l, &t, p)?);
        Ok(true)
    }

    fn get_poll(&mut self, l: &mut Link<T>, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Fetched>> {
        let (Some(t), Some(pending)) = (self.table, self.pending.take()) else {
            return Err(Error::invalid("no GET in flight"));
        };
        let (mut p, wr, n) = match pending {
            Pending::Reading { p, wr, n } => (p, wr, n),
            Pending::Waiting { p, until } => {
                self.pending = Some(if Instant::now() < until {
                    Pending::Waiting { p, until }
                } else {
                    Pending::start(l, &t, p)?
                });
                return Ok(None);
            }
        };
        if !l.poll_completion(wr, "reading a cell")? {
            self.pending = Some(Pending::Reading { p, wr, n });
            return Ok(None);
        }
        l.take_response(n as usize)?;
        let word = u64::from_le_bytes(l.buf[..8].try_into().unwrap_or([0; 8]));
        match self.look(l, &t, key, &mut p, word)? {
            Step::Found(entry) => return Ok(Some(Fetched::in_buf(l, key, entry, out))),
            Step::Read => self.pending = Some(Pending::start(l, &t, p)?),
            // The thread's other clients go on meanwhile: no yield, no sleep.
            Step::BackOff => {
                let until = Instant::now() + p.backoff.delay(l, p.i, word)?;
                self.pending = Some(Pending::Waiting { p, until });
            }
        }
        Ok(None)
    }

    fn awaits_reply(&self) -> bool {
        // A split GET's READs are its own: no reply is owed when it is given up on.
        false
    }
}
