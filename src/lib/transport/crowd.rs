//! How client threads that share their CPUs wait over shm when the process has more
//! threads polling than cores: each spins through a turn of its CPU (500 us,
//! `transport::CLIENT_TURN`), or each yields its CPU as soon as it has posted. Which
//! is faster depends on the machine, so the process measures both and keeps the
//! faster.
//!
//! Spinning through a turn serves one operation at a time on each client CPU: a
//! client takes its reply the moment it lands and goes on, but nothing overlaps its
//! wait. Yielding lets the other clients on the CPU post their requests while the
//! server works on one, at the price of a switch between threads per operation. The
//! first wins where a round trip is short next to a switch, the second where it is
//! long. Measured on 2 cores, YCSB-B 2 KiB over shm, embedded server, client threads on
//! one CPU, ops/s: on an AMD VM whose cache line crosses between CPUs in about 100 ns,
//! 2 threads 546k to 551k spinning against 293k to 375k yielding (see
//! `transport::client_cpu_spin`); on an Intel VM with 270 to 305 ns, 3 interleaved runs
//! at each of 2, 4, 8 and 16 threads, 244k to 309k spinning against 296k to 437k
//! yielding, yielding ahead in all 12 pairs (1.09x to 1.53x).
//!
//! So the choice is measured where it is made. A *cycle* of [`CYCLE`] begins with four
//! trial windows of [`WINDOW`] each, spin, yield, yield, spin (the order cancels a
//! steady drift), which count the waits the crowded clients begin in each; the rest of
//! the cycle uses the mode that began them at the higher rate in both pairs of windows
//! (the first spin against the first yield, the second yield against the second spin;
//! where the pairs disagree, one noisy window decided nothing, and the last choice
//! stays). A window ends at the first wait past its end, so their lengths differ a
//! little; a trial a whole window late starts the cycle again. Each change of mode is followed by [`SETTLE`] that
//! counts for neither: right after it the clients are still in the other mode's state
//! (parked threads, turns under way). Counting from the change, 3 of 16 cycles of
//! 16-thread runs chose spin on the Intel VM above, where whole runs made 257k ops/s
//! spinning and 407k yielding (medians); with the settling, none of 9. A wait that
//! finds its completion at its first poll never asks, and counts for neither. The
//! trials put at most 30 ms of each cycle (under 4%) in the slower mode, and each
//! cycle measures again, as the load may change.
//!
//! `BOOMKV_CROWD_WAIT=spin` or `yield` fixes the mode instead (`auto`, the default,
//! measures).
//!
//! Owns: the process-wide [`CrowdWait`] choice, its trial counters and its clock.
//! Imports: `crate::error` only; its caller (`transport::client_cpu_spin`) decides who is
//! crowded.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How a crowded client waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrowdWait {
    /// Spin through a turn of its CPU, then yield it once.
    Spin,
    /// Yield the CPU at once and poll between yields.
    Yield,
}

impl CrowdWait {
    fn code(self) -> u8 {
        match self {
            CrowdWait::Spin => 0,
            CrowdWait::Yield => 1,
        }
    }

    fn from_code(c: u8) -> CrowdWait {
        if c == 1 {
            CrowdWait::Yield
        } else {
            CrowdWait::Spin
        }
    }
}

/// One trial window, in which waits are counted.
pub const WINDOW: Duration = Duration::from_millis(10);

/// Uncounted time after a change of mode before its window: the clients' state (parked
/// threads, turns under way) is still the other mode's.
pub const SETTLE: Duration = Duration::from_millis(5);

/// A whole cycle: the trials and the time the winner then runs.
pub const CYCLE: Duration = Duration::from_millis(800);

/// The trials of a cycle, in order: the mode, which counted window it is (none for a
/// settling time), and for how long. Windows 0 and 1 are the first pair compared, 3 and
/// 2 the second.
const TRIALS: [(CrowdWait, Option<usize>, Duration); 7] = [
    (CrowdWait::Spin, None, SETTLE),
    (CrowdWait::Spin, Some(0), WINDOW),
    (CrowdWait::Yield, None, SETTLE),
    (CrowdWait::Yield, Some(1), WINDOW),
    (CrowdWait::Yield, Some(2), WINDOW),
    (CrowdWait::Spin, None, SETTLE),
    (CrowdWait::Spin, Some(3), WINDOW),
];

/// The choice and its measurement. One per process ([`mode`]); a value of its own in
/// tests, which drive its clock.
pub struct Chooser {
    base: Instant,
    /// Nanoseconds since `base` at which the current trial (or the winner's run that
    /// follows the trials) ends: a wait before it just reads `state`.
    next_at: AtomicU64,
    /// The mode (bit 0: yield), whether the waits begun now count (bit 1) and in which
    /// window (bits 2 and 3), in one word so that a wait never pairs one step's mode
    /// with another's window.
    state: AtomicU8,
    /// Waits begun in each counted window of the current cycle.
    begun: [AtomicU64; 4],
    /// Cycles decided for spin, for yield, and undecided (too few waits, a tie, or
    /// the last choice kept for want of a measurement), for reports.
    cycles: [AtomicU64; 3],
    step: Mutex<Step>,
}

/// Where in its cycle a [`Chooser`] is.
#[derive(Clone, Copy, Debug)]
struct Step {
    /// Index into [`TRIALS`], or `TRIALS.len()` once the winner runs.
    window: usize,
    /// Nanoseconds since `base` at which the cycle began, and the current trial.
    cycle_at: u64,
    window_at: u64,
    /// Nanoseconds each counted window really lasted (a window ends at the first wait
    /// past its end, so lengths differ a little).
    spent: [u64; 4],
    /// The mode the last cycle chose (spin before any).
    last: CrowdWait,
}

/// Fewer waits than this in a cycle's trials decide nothing (the last choice stays).
const MIN_TRIAL_WAITS: u64 = 64;

const COUNTING: u8 = 2;

/// How a cycle ended, counted in [`Chooser::cycles`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cycles {
    /// Cycles whose trials found spinning faster.
    pub spin: u64,
    /// Cycles whose trials found yielding faster.
    pub yielded: u64,
    /// Cycles that decided nothing: too few waits in their trials, or a tie; the last
    /// choice ran on (spin before any).
    pub undecided: u64,
}

impl Cycles {
    /// Whether no cycle ended (no client was ever crowded, or the mode was fixed).
    pub fn is_empty(&self) -> bool {
        self.spin + self.yielded + self.undecided == 0
    }
}

impl Chooser {
    /// A chooser that has measured nothing yet (its first wait starts a cycle).
    pub fn new(base: Instant) -> Chooser {
        Chooser {
            base,
            next_at: AtomicU64::new(0),
            state: AtomicU8::new(CrowdWait::Spin.code()),
            begun: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            cycles: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            step: Mutex::new(Step {
                window: TRIALS.len(),
                cycle_at: 0,
                window_at: 0,
                spent: [0; 4],
                last: CrowdWait::Spin,
            }),
        }
    }

    /// How a crowded client whose wait begins at `now` waits; the wait is counted if a
    /// trial window is open. Two loads and a compare, unless a trial is over.
    pub fn begin(&self, now: Instant) -> CrowdWait {
        let t = now.saturating_duration_since(self.base).as_nanos() as u64;
        if t >= self.next_at.load(Ordering::Relaxed) {
            self.advance(t);
        }
        let st = self.state.load(Ordering::Relaxed);
        let m = CrowdWait::from_code(st & 1);
        if st & COUNTING != 0 {
            self.begun[usize::from(st >> 2) & 3].fetch_add(1, Ordering::Relaxed);
        }
        m
    }

    /// Moves to the next trial (one thread does; the others go on in the current mode).
    fn advance(&self, t: u64) {
        let Ok(mut s) = self.step.try_lock() else { return };
        let due = self.next_at.load(Ordering::Relaxed);
        if t < due {
            return;
        }
        let window_ns = WINDOW.as_nanos() as u64;
        let next = match TRIALS.get(s.window) {
            // A trial that ran a whole window past its end (the clients were idle, or
            // the thread that would have moved on was not running) measured something
            // else: the cycle starts again.
            Some(_) if t > due + window_ns => None,
            Some(&(_, slot, _)) => {
                if let Some(w) = slot {
                    s.spent[w] = t - s.window_at;
                }
                Some(s.window + 1)
            }
            // The winner's time is over (or nothing ran yet).
            None => None,
        };
        let next = next.unwrap_or_else(|| {
            s.cycle_at = t;
            s.spent = [0; 4];
            for b in &self.begun {
                b.store(0, Ordering::Relaxed);
            }
            0
        });
        s.window = next;
        s.window_at = t;
        if let Some(&(m, slot, len)) = TRIALS.get(next) {
            let counting = slot.map_or(0, |w| COUNTING | (w as u8) << 2);
            self.state.store(m.code() | counting, Ordering::Relaxed);
            self.next_at.store(t + len.as_nanos() as u64, Ordering::Relaxed);
            return;
        }
        let begun: [u64; 4] = std::array::from_fn(|w| self.begun[w].load(Ordering::Relaxed));
        // Which of two windows began waits at the higher rate (rates compared by
        // cross-multiplying): `None` for a tie.
        let faster = |spin: usize, yielded: usize| {
            let (a, b) = (
                u128::from(begun[spin]) * u128::from(s.spent[yielded].max(1)),
                u128::from(begun[yielded]) * u128::from(s.spent[spin].max(1)),
            );
            (a != b).then_some(if b > a { CrowdWait::Yield } else { CrowdWait::Spin })
        };
        // Both pairs must agree (one noisy window decides nothing), on enough waits.
        let (first, second) = (faster(0, 1), faster(3, 2));
        let decided = if begun.iter().sum::<u64>() < MIN_TRIAL_WAITS || first != second { None } else { first };
        if let Some(d) = decided {
            s.last = d;
        }
        self.cycles[decided.map_or(2, |d| d.code() as usize)].fetch_add(1, Ordering::Relaxed);
        self.state.store(s.last.code(), Ordering::Relaxed);
        let end = s.cycle_at + CYCLE.as_nanos() as u64;
        self.next_at.store(end.max(t + window_ns), Ordering::Relaxed);
    }

    /// How the cycles so far ended.
    pub fn cycles(&self) -> Cycles {
        let l = |i: usize| self.cycles[i].load(Ordering::Relaxed);
        Cycles { spin: l(0), yielded: l(1), undecided: l(2) }
    }
}

fn chooser() -> &'static Chooser {
    static C: std::sync::OnceLock<Chooser> = std::sync::OnceLock::new();
    C.get_or_init(|| Chooser::new(Instant::now()))
}

/// `BOOMKV_CROWD_WAIT` as set: `Ok(None)` when unset, empty or `auto` (measure),
/// `Ok(Some(mode))` for `spin` or `yield`, an error for anything else (a program checks
/// it at start; [`mode`] ignores a bad value).
pub fn setting() -> Result<Option<CrowdWait>> {
    let Some(v) = std::env::var_os("BOOMKV_CROWD_WAIT").filter(|v| !v.is_empty()) else { return Ok(None) };
    match v.to_str().map(str::trim) {
        Some("auto") => Ok(None),
        Some("spin") => Ok(Some(CrowdWait::Spin)),
        Some("yield") => Ok(Some(CrowdWait::Yield)),
        _ => Err(Error::invalid(format!(
            "BOOMKV_CROWD_WAIT={}: expected auto (measure which is faster, the default), spin (clients that \
             share a CPU spin in turns) or yield (they yield it at once)",
            v.to_string_lossy()
        ))),
    }
}

/// The process's choice for a crowded client's wait beginning at `now` (see the module
/// docs), or the one `BOOMKV_CROWD_WAIT` forces.
pub fn mode(now: Instant) -> CrowdWait {
    static FORCED: std::sync::OnceLock<Option<CrowdWait>> = std::sync::OnceLock::new();
    match *FORCED.get_or_init(|| setting().ok().flatten()) {
        Some(m) => m,
        None => chooser().begin(now),
    }
}

/// How this process's cycles ended so far; none when no client was ever crowded, or
/// `BOOMKV_CROWD_WAIT` chose.
pub fn cycles() -> Cycles {
    chooser().cycles()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `c` for `total` with one client whose waits take `spin` or `yielded` each
    /// (the time one operation takes in that mode), and returns the waits begun in each
    /// mode.
    fn drive(c: &Chooser, base: Instant, total: Duration, spin: Duration, yielded: Duration) -> [u64; 2] {
        let mut t = Duration::ZERO;
        let mut n = [0u64; 2];
        while t < total {
            let m = c.begin(base + t);
            n[m.code() as usize] += 1;
            t += if m == CrowdWait::Spin { spin } else { yielded };
        }
        n
    }

    /// `base` plus `ms` milliseconds.
    fn at(base: Instant, ms: f64) -> Instant {
        base + Duration::from_secs_f64(ms / 1000.0)
    }

    /// `n` waits begun at even steps from `from` to `to` (milliseconds after `base`).
    fn burst(c: &Chooser, base: Instant, from: f64, to: f64, n: u32) {
        for i in 0..n {
            c.begin(at(base, from + (to - from) * f64::from(i) / f64::from(n)));
        }
    }

    #[test]
    fn the_faster_mode_runs_after_the_trials_whichever_it_is() {
        for (spin, yielded, want) in [
            (Duration::from_micros(3), Duration::from_micros(2), CrowdWait::Yield),
            (Duration::from_micros(2), Duration::from_micros(3), CrowdWait::Spin),
        ] {
            let base = Instant::now();
            let c = Chooser::new(base);
            // Ten cycles: each spends its trials on both modes and the rest on the winner.
            let n = drive(&c, base, CYCLE * 10, spin, yielded);
            let (s, y) = if want == CrowdWait::Yield { (0, 10) } else { (10, 0) };
            assert_eq!(c.cycles(), Cycles { spin: s, yielded: y, undecided: 0 });
            // The winner ran at least 85% of the time (the loser's trials are 30 ms in 800).
            let fast = if want == CrowdWait::Yield { yielded } else { spin };
            let ran_fast = n[want.code() as usize] as f64 * fast.as_secs_f64();
            assert!(ran_fast >= 0.85 * (CYCLE * 10).as_secs_f64(), "{n:?}");
        }
    }

    #[test]
    fn a_change_of_machine_is_followed_within_a_cycle() {
        let base = Instant::now();
        let c = Chooser::new(base);
        drive(&c, base, CYCLE * 3, Duration::from_micros(2), Duration::from_micros(4));
        assert_eq!(c.cycles(), Cycles { spin: 3, yielded: 0, undecided: 0 });
        // From here yielding is the faster (say the server's CPU got slower): the next
        // cycle's trials find it.
        let later = base + CYCLE * 3;
        drive(&c, later, CYCLE, Duration::from_micros(4), Duration::from_micros(2));
        assert_eq!(c.cycles(), Cycles { spin: 3, yielded: 1, undecided: 0 });
    }

    #[test]
    fn sparse_or_even_trials_keep_the_last_choice() {
        let base = Instant::now();
        let c = Chooser::new(base);
        drive(&c, base, CYCLE, Duration::from_micros(4), Duration::from_micros(2));
        assert_eq!(c.cycles(), Cycles { spin: 0, yielded: 1, undecided: 0 });
        // Then a wait now and then: each opens the next window and is all it counts,
        // too few to decide anything; yield stays.
        let gap = base + CYCLE * 20;
        let n = TRIALS.len() as u32 + 1;
        for i in 0..n {
            c.begin(gap + WINDOW * i);
        }
        assert_eq!(c.cycles(), Cycles { spin: 0, yielded: 1, undecided: 1 });
        assert_eq!(c.begin(gap + WINDOW * n), CrowdWait::Yield, "the winner runs until the cycle ends");
        // A busy cycle whose trials tie keeps it too.
        let busy = gap + CYCLE;
        drive(&c, busy, CYCLE, Duration::from_micros(2), Duration::from_micros(2));
        assert_eq!(c.cycles(), Cycles { spin: 0, yielded: 1, undecided: 2 });
    }

    #[test]
    fn a_trial_left_a_window_late_starts_the_cycle_again() {
        let base = Instant::now();
        let c = Chooser::new(base);
        assert_eq!(c.begin(base), CrowdWait::Spin, "the first trial settles spin");
        // Nothing waits for 100 ms: the settling trial ran 95 ms past its end, and
        // whatever came next would compare windows of different things.
        let later = base + Duration::from_millis(100);
        drive(&c, later, CYCLE, Duration::from_micros(4), Duration::from_micros(2));
        // One cycle, started again at `later`, and decided on its own windows.
        assert_eq!(c.cycles(), Cycles { spin: 0, yielded: 1, undecided: 0 });
    }

    #[test]
    fn windows_are_compared_by_rate_not_by_count() {
        // Spin's windows run 19 ms each (the wait that ends them comes 9 ms late, less
        // than a window) and begin 1100 waits, 58 a ms; yield's run 10 ms and begin
        // 1000, 100 a ms. Counted, spin would win.
        let base = Instant::now();
        let c = Chooser::new(base);
        let burst = |from: f64, to: f64, n: u32| burst(&c, base, from, to, n);
        burst(0.0, 5.0, 1); // settle spin
        burst(5.0, 15.0, 1100); // spin, counted; ends at 24
        burst(24.0, 29.0, 1); // settle yield
        burst(29.0, 39.0, 1000); // yield, counted
        burst(39.0, 49.0, 1000); // yield, counted
        burst(49.0, 54.0, 1); // settle spin
        burst(54.0, 64.0, 1100); // spin, counted; ends at 73
        c.begin(at(base, 73.0));
        assert_eq!(c.cycles(), Cycles { spin: 0, yielded: 1, undecided: 0 });
    }

    #[test]
    fn pairs_that_disagree_decide_nothing() {
        // The first pair finds spinning faster (100 waits a ms against 50), the second
        // yielding (200 against 100): one of them measured something else.
        let base = Instant::now();
        let c = Chooser::new(base);
        let burst = |from: f64, to: f64, n: u32| burst(&c, base, from, to, n);
        burst(0.0, 5.0, 1);
        burst(5.0, 15.0, 1000);
        burst(15.0, 20.0, 1);
        burst(20.0, 30.0, 500);
        burst(30.0, 40.0, 2000);
        burst(40.0, 45.0, 1);
        burst(45.0, 55.0, 1000);
        assert_eq!(c.begin(at(base, 55.0)), CrowdWait::Spin, "undecided: the last choice (spin before any) stays");
        assert_eq!(c.cycles(), Cycles { spin: 0, yielded: 0, undecided: 1 });
    }
}
