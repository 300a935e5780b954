//! CPU sets: the CPUs this process may run on, lists as users type them (`0-3,6`), and
//! pinning the calling thread to a set.
//!
//! Why a benchmark cares: on a machine with fewer cores than threads, the scheduler
//! places a woken client on the CPU where the server's polling worker runs, preempts
//! the worker and later moves it; every such switch costs the worker the request it was
//! serving. A server whose workers keep CPUs of their own and clients that share the
//! others avoid that ([`Layout::split`]), as RDMA key-value benchmarks place their
//! server threads on dedicated cores.
//!
//! This module owns CPU lists and thread affinity (through `rustix`, no `unsafe`), and
//! the rule that splits state every server worker writes into per-worker parts
//! ([`WORKER_PARTS`]). It imports only [`crate::error`].

use std::fmt;

use crate::error::{Error, Result};

/// How many CPUs this process may use now (its affinity and CPU quota, as
/// `std::thread::available_parallelism` reports them; 1 when that is unknown), whatever
/// thread asks: a thread pinned to fewer CPUs than the process has (a benchmark's
/// client) counts the process's, not its own (then without the quota).
pub fn count() -> usize {
    let here = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let own = rustix::thread::sched_getaffinity(None).map(|s| s.count() as usize);
    match (own, process_affinity().map(|s| s.count() as usize)) {
        (Ok(own), Some(process)) if own < process => process,
        _ => here,
    }
}

/// The process's affinity: its main thread's, read once, at first use. Pinning is for
/// the threads a benchmark starts; the one thread of ours that pins the thread that
/// called it, the transport floor's client (`bench::floor`), reads this first,
/// so that a count taken while it runs is still the process's.
fn process_affinity() -> Option<rustix::thread::CpuSet> {
    static SET: std::sync::OnceLock<Option<rustix::thread::CpuSet>> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        let pid = rustix::thread::Pid::from_raw(i32::try_from(std::process::id()).ok()?)?;
        rustix::thread::sched_getaffinity(Some(pid)).ok()
    })
}

/// The highest CPU number a list may name (the kernel's `CpuSet` holds this many).
const MAX_CPU: usize = rustix::thread::CpuSet::MAX_CPU;

/// A set of CPUs, ascending, no repeats, never empty.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// Parses a list the way `taskset -c` and `/sys/devices/system/cpu/online` write
    /// them: numbers and ranges separated by commas (`0-3,6`).
    pub fn parse(s: &str) -> Result<CpuList> {
        let bad = |why: String| Error::invalid(format!("CPU list {s:?}: {why} (expected e.g. 0-3,6)"));
        let mut v = Vec::new();
        for part in s.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(bad("an empty item".into()));
            }
            let num = |x: &str| -> Result<usize> {
                let n: usize = x.trim().parse().map_err(|_| bad(format!("{x:?} is not a CPU number")))?;
                if n >= MAX_CPU {
                    return Err(bad(format!("CPU {n} is beyond the highest this system can name ({})", MAX_CPU - 1)));
                }
                Ok(n)
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(bad(format!("the range {part} runs backwards")));
                    }
                    v.extend(a..=b);
                }
                None => v.push(num(part)?),
            }
        }
        Self::from_cpus(v).ok_or_else(|| bad("no CPU".into()))
    }

    /// The set of `cpus` (sorted, repeats dropped); `None` when empty.
    pub fn from_cpus(mut cpus: Vec<usize>) -> Option<CpuList> {
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.is_empty() {
            None
        } else {
            Some(CpuList(cpus))
        }
    }

    /// The CPUs the calling thread may run on: its own affinity (a pinned thread's one
    /// CPU), where [`CpuList::allowed`] is the process's.
    pub fn this_thread() -> Option<CpuList> {
        let set = rustix::thread::sched_getaffinity(None).ok()?;
        Self::from_cpus((0..MAX_CPU).filter(|&c| set.is_set(c)).collect())
    }

    /// The CPUs this process may run on (its affinity: what `taskset` or a container
    /// allows, not merely what the machine has), whichever thread asks: a pinned thread
    /// (a benchmark's client) gets the CPUs a layout may use, not the one it is on;
    /// `None` where the system does not say.
    pub fn allowed() -> Option<CpuList> {
        let set = process_affinity().or_else(|| rustix::thread::sched_getaffinity(None).ok())?;
        Self::from_cpus((0..MAX_CPU).filter(|&c| set.is_set(c)).collect())
    }

    /// The CPUs, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// The `i`-th CPU, counting round the list (any `i`, however large, picks one), as a
    /// list of one: worker `i` of a colocated layout.
    pub fn pick(&self, i: usize) -> CpuList {
        CpuList(vec![self.0[i % self.0.len()]])
    }

    /// How many CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true (a list holds at least one CPU); for symmetry with [`CpuList::len`].
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs of this list that are not in `allowed` (empty: all may be used).
    pub fn outside(&self, allowed: &CpuList) -> Vec<usize> {
        self.0.iter().copied().filter(|c| !allowed.0.contains(c)).collect()
    }

    /// Restricts the calling thread to these CPUs. Threads it starts afterwards inherit
    /// the restriction.
    pub fn pin_current_thread(&self) -> Result<()> {
        let mut set = rustix::thread::CpuSet::new();
        for &c in &self.0 {
            set.set(c);
        }
        rustix::thread::sched_setaffinity(None, &set)
            .map_err(|e| Error::io(format!("cannot restrict a thread to CPUs {self}"), e.into()))
    }

    /// Checks that every CPU of this list may be used by this process; `what` names the
    /// list in the error ("the server's workers").
    pub fn check_allowed(&self, what: &str) -> Result<()> {
        let Some(allowed) = Self::allowed() else { return Ok(()) };
        let out = self.outside(&allowed);
        if out.is_empty() {
            Ok(())
        } else {
            let out = CpuList::from_cpus(out).map(|l| l.to_string()).unwrap_or_default();
            Err(Error::invalid(format!("{what}: CPUs {out} are not available to this process (it may use {allowed})")))
        }
    }
}

impl fmt::Display for CpuList {
    /// Ranges collapsed: `0-3,6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

impl std::str::FromStr for CpuList {
    type Err = Error;
    fn from_str(s: &str) -> Result<CpuList> {
        CpuList::parse(s)
    }
}

impl TryFrom<String> for CpuList {
    type Error = Error;
    fn try_from(s: String) -> Result<CpuList> {
        CpuList::parse(&s)
    }
}

impl From<CpuList> for String {
    fn from(l: CpuList) -> String {
        l.to_string()
    }
}

/// Where a benchmark's server workers and client threads run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The server's polling workers: split, all of them on these CPUs; colocated,
    /// worker `i` on the `i`-th CPU only (counting round the list).
    pub server: CpuList,
    /// The client threads: split, these CPUs and nothing of the server's; colocated,
    /// the same CPUs as the workers, each client thread on the CPU of the worker that
    /// serves its (first) client.
    pub clients: CpuList,
    /// Each worker shares its CPU with the client threads it serves (see
    /// [`Layout::colocate`]).
    pub colocated: bool,
}

/// How `--pin` places an embedded server's workers and the client threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// [`Layout::split`] while the client threads have a CPU each beside the workers'
    /// CPUs; past that, over a transport where colocation was measured faster (shm,
    /// tcp) and with the worker count left to the layout, [`Layout::colocate`].
    Auto,
    /// Always [`Layout::split`].
    Split,
    /// Always [`Layout::colocate`].
    Colocate,
    /// Wherever the scheduler puts them.
    Off,
}

impl Placement {
    /// The name `--pin` takes.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Auto => "auto",
            Placement::Split => "split",
            Placement::Colocate => "colocate",
            Placement::Off => "off",
        }
    }
}

impl Layout {
    /// The workers on the last `workers` CPUs of `allowed` (at most all but one), the
    /// clients on the others; `None` with fewer than two CPUs (nothing to split).
    pub fn split(allowed: &CpuList, workers: usize) -> Option<Layout> {
        let n = allowed.len();
        if n < 2 {
            return None;
        }
        let w = workers.clamp(1, n - 1);
        let (clients, server) = allowed.0.split_at(n - w);
        Some(Layout { server: CpuList(server.to_vec()), clients: CpuList(clients.to_vec()), colocated: false })
    }

    /// A worker on each of the first `workers` CPUs of `allowed` (at most one per CPU),
    /// each sharing its CPU with the client threads it serves; `None` with fewer than
    /// two CPUs.
    ///
    /// Why: when the client threads outnumber the CPUs [`Layout::split`] leaves them,
    /// their CPUs are saturated while the workers' idle part of the time, and every
    /// request and reply crosses between CPUs. A worker beside its own clients uses
    /// what its CPU has left, and its requests and replies stay in that CPU's cache.
    /// The price: a worker and its clients take turns on the CPU (the worker yields
    /// when idle, the clients at every wait), so with one client thread the other CPUs
    /// idle. Measured on 2 CPUs, YCSB-B 2 KiB over shm and tcp (README, "Thread
    /// placement").
    pub fn colocate(allowed: &CpuList, workers: usize) -> Option<Layout> {
        if allowed.len() < 2 {
            return None;
        }
        let cpus = CpuList(allowed.0[..workers.clamp(1, allowed.len())].to_vec());
        Some(Layout { server: cpus.clone(), clients: cpus, colocated: true })
    }

    /// The layout `placement` gives on `allowed` for `threads` client threads:
    /// `workers` is the worker count asked for (`None`: not asked; then `default` for
    /// a split, one per CPU colocated), and `colocatable` whether colocation was
    /// measured faster over the transport: shm and tcp, where the CPUs move every byte
    /// (README, "Thread placement"); not verbs, where a NIC does and nothing was
    /// measured.
    pub fn place(
        allowed: &CpuList,
        placement: Placement,
        workers: Option<usize>,
        default: usize,
        threads: usize,
        colocatable: bool,
    ) -> Option<Layout> {
        let split = || Layout::split(allowed, workers.unwrap_or(default));
        let colocate = || Layout::colocate(allowed, workers.unwrap_or(allowed.len()));
        match placement {
            Placement::Off => None,
            Placement::Split => split(),
            Placement::Colocate => colocate(),
            Placement::Auto => {
                let s = split()?;
                if threads > s.clients.len() && colocatable && workers.is_none() {
                    colocate()
                } else {
                    Some(s)
                }
            }
        }
    }

    /// The CPU worker `worker` runs on, as a list of one (colocated), or the workers'
    /// CPUs (split).
    pub fn worker_cpus(&self, worker: usize) -> CpuList {
        if self.colocated {
            self.server.pick(worker)
        } else {
            self.server.clone()
        }
    }
}

impl fmt::Display for Layout {
    /// `server workers on CPU 1; client threads on CPU 0`: no comma outside the CPU
    /// lists, so a report whose fields are comma-separated can replace theirs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.colocated {
            write!(
                f,
                "colocated: server workers on CPU {}; each shares its CPU with the client threads it serves",
                self.server
            )
        } else {
            write!(f, "server workers on CPU {}; client threads on CPU {}", self.server, self.clients)
        }
    }
}

/// Parts that state every server worker writes (its counters, GETs in flight, read
/// pins) is split into: worker `w` writes part [`worker_part`]`(w)` only, so two
/// workers on two CPUs never write one cache line on a request, and readers sum the
/// parts. More than the workers of most machines; workers past it share parts.
pub const WORKER_PARTS: usize = 16;

/// The part of per-worker state worker `worker` writes (see [`WORKER_PARTS`]).
pub fn worker_part(worker: usize) -> usize {
    worker % WORKER_PARTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_as_taskset_writes_them() {
        let l = CpuList::parse("6,0-3, 2").unwrap();
        assert_eq!(l.cpus(), &[0, 1, 2, 3, 6]);
        assert_eq!(l.to_string(), "0-3,6");
        assert_eq!(CpuList::parse("1").unwrap().to_string(), "1");
        assert_eq!(CpuList::parse("0,2,4-5").unwrap().to_string(), "0,2,4-5");
        for bad in ["", "a", "3-1", "1,,2", "-1", "0-", &format!("{MAX_CPU}")] {
            let e = CpuList::parse(bad).unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{bad:?}: {e}");
        }
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(json, "\"0-3,6\"");
        assert_eq!(serde_json::from_str::<CpuList>(&json).unwrap(), l);
    }

    #[test]
    fn the_split_gives_workers_cpus_of_their_own() {
        let four = CpuList::parse("0-3").unwrap();
        let l = Layout::split(&four, 1).unwrap();
        assert_eq!((l.server.to_string(), l.clients.to_string()), ("3".into(), "0-2".into()));
        let l = Layout::split(&four, 2).unwrap();
        assert_eq!((l.server.to_string(), l.clients.to_string()), ("2-3".into(), "0-1".into()));
        // More workers than CPUs: one CPU stays the clients'.
        let l = Layout::split(&four, 9).unwrap();
        assert_eq!((l.server.to_string(), l.clients.to_string()), ("1-3".into(), "0".into()));
        assert_eq!(l.to_string(), "server workers on CPU 1-3; client threads on CPU 0");
        assert!(Layout::split(&CpuList::parse("5").unwrap(), 1).is_none());
    }

    #[test]
    fn colocation_puts_a_worker_on_each_cpu_and_auto_chooses_it_only_when_clients_crowd() {
        let two = CpuList::parse("0-1").unwrap();
        let l = Layout::colocate(&two, 9).unwrap();
        assert!(l.colocated);
        assert_eq!((l.server.to_string(), l.clients.to_string()), ("0-1".into(), "0-1".into()));
        assert_eq!((l.worker_cpus(0).to_string(), l.worker_cpus(1).to_string()), ("0".into(), "1".into()));
        // A worker number beyond the list (a server with more workers) wraps around.
        assert_eq!(l.worker_cpus(3).to_string(), "1");
        assert_eq!(two.pick(usize::MAX).len(), 1, "any number picks a CPU");
        assert_eq!(
            l.to_string(),
            "colocated: server workers on CPU 0-1; each shares its CPU with the client threads it serves"
        );
        assert_eq!(Layout::colocate(&CpuList::parse("0-3").unwrap(), 2).unwrap().server.to_string(), "0-1");
        assert!(Layout::colocate(&CpuList::parse("5").unwrap(), 1).is_none());
        let split = Layout::split(&two, 1).unwrap();
        assert_eq!(split.worker_cpus(0), split.server);
        let place = |p, workers, threads, shm| Layout::place(&two, p, workers, 1, threads, shm);
        // One client thread has a CPU of its own beside the worker's: split.
        assert_eq!(place(Placement::Auto, None, 1, true), Some(split.clone()));
        // More: colocated over shm, with a worker per CPU.
        let co = place(Placement::Auto, None, 2, true).unwrap();
        assert_eq!((co.colocated, co.server.len()), (true, 2));
        // Not over a transport where it was not measured (verbs), nor when the worker
        // count was asked for.
        assert_eq!(place(Placement::Auto, None, 16, false), Some(split.clone()));
        assert_eq!(place(Placement::Auto, Some(1), 16, true), Some(split.clone()));
        assert_eq!(place(Placement::Split, None, 16, true), Some(split));
        assert!(place(Placement::Colocate, None, 1, false).unwrap().colocated);
        assert_eq!(place(Placement::Off, None, 16, true), None);
        let four = CpuList::parse("0-3").unwrap();
        // Four CPUs: split leaves three to the clients; a fourth thread crowds them.
        assert!(!Layout::place(&four, Placement::Auto, None, 1, 3, true).unwrap().colocated);
        assert!(Layout::place(&four, Placement::Auto, None, 1, 4, true).unwrap().colocated);
    }

    #[test]
    fn a_thread_can_be_pinned_and_an_unavailable_cpu_is_refused() {
        let allowed = CpuList::allowed().expect("Linux reports the affinity");
        let last = CpuList::from_cpus(vec![*allowed.cpus().last().unwrap()]).unwrap();
        let seen = std::thread::spawn(move || {
            last.pin_current_thread().unwrap();
            let own = rustix::thread::sched_getaffinity(None).unwrap();
            (own.count(), rustix::thread::sched_getcpu(), CpuList::allowed().unwrap(), count())
        })
        .join()
        .unwrap();
        assert_eq!(seen.0, 1);
        assert_eq!(seen.1, *allowed.cpus().last().unwrap());
        // The pinned thread still sees the process's CPUs: a pinned client asking how
        // many there are (whether a spin takes a core another thread needs) counted
        // one, and every later wait of the process believed it.
        assert_eq!(seen.2, allowed);
        assert_eq!(seen.3, allowed.len());
        // This thread was not restricted by the other's pin.
        assert_eq!(CpuList::this_thread().unwrap(), allowed);
        let beyond = CpuList::from_cpus(vec![MAX_CPU - 1]).unwrap();
        let e = beyond.check_allowed("the test's workers").unwrap_err();
        assert!(e.to_string().contains("not available"), "{e}");
        allowed.check_allowed("all").unwrap();
    }
}
