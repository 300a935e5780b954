//! What waking a sleeping thread costs on this machine. Two threads hand a token back
//! and forth, each sleeping (futex, through `std::thread::park`) until the other wakes
//! it: once on two different CPUs and once on one. A closed-loop benchmark with more
//! threads than cores pays about one such wake-up per operation, so its throughput
//! depends on this figure as much as on the code measured: on a KVM guest whose idle
//! CPUs halt at once (guest halt polling off), waking a thread on another CPU has cost
//! 20 us a time, against 2 us with halt polling on; two hosts that differ only in that
//! give different throughput for the same build. SETUP.md records it for that reason.
//!
//! The same two places are also timed without sleeping ([`handoff_ns`]): a cache line
//! passed back and forth by two spinning threads, which is what every shared-memory
//! request and reply costs. On a virtual machine that figure is not a constant of the
//! machine: on a 2-vCPU KVM guest it was 66 to 103 ns at some moments and 380 to 410 ns
//! at others, changing within seconds as the host placed the two vCPUs, and the shm
//! backend's throughput moved with it (about 0.6 M against 0.33 M ops/s for one YCSB-B
//! client), so a sweep samples it before every run and `boomctl ycsb` before and after.
//!
//! This module owns the probes and the wake-up's description (the round trip's, over a
//! sweep, is [`crate::bench::busy::SampleLog`]'s). It imports [`crate::cpus`] (to place
//! the two threads).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpus::CpuList;

/// Round trips per timed batch, and batches per figure (the median batch is reported).
const PER_BATCH: u32 = 50;
const BATCHES: usize = 9;

/// A wake-up round trip is called slow above this (microseconds) and this many times
/// the round trip on one CPU.
pub const SLOW_CROSS_US: f64 = 10.0;
/// See [`SLOW_CROSS_US`].
pub const SLOW_RATIO: f64 = 4.0;

/// Median wake-up round trips, microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct WakeCost {
    /// The two threads on two different CPUs (`None` with one CPU).
    pub cross_us: Option<f64>,
    /// Both threads on one CPU.
    pub same_us: f64,
    /// The guest's idle settings where the kernel shows them (`cpuidle haltpoll,
    /// guest_halt_poll_ns 0`), else `None`.
    pub idle: Option<String>,
}

impl WakeCost {
    /// Measures now (about 20-50 ms; `None` where threads cannot be placed).
    pub fn measure() -> Option<WakeCost> {
        let (first, last) = first_and_last()?;
        let same_us = round_trip_us(first, first)?;
        let cross_us = if first == last { None } else { round_trip_us(first, last) };
        Some(WakeCost { cross_us, same_us, idle: idle_settings() })
    }

    /// Whether a wake-up across CPUs costs so much that it bounds closed-loop throughput.
    pub fn is_slow(&self) -> bool {
        self.cross_us.is_some_and(|c| c > SLOW_CROSS_US && c > SLOW_RATIO * self.same_us)
    }

    /// One line for SETUP.md.
    pub fn describe(&self) -> String {
        let cross = self.cross_us.map_or_else(|| "n/a (one CPU)".to_string(), |c| format!("{c:.1} us"));
        let mut s = format!(
            "wake-up round trip (two threads waking each other, median): across CPUs {cross}, on one CPU {:.1} us",
            self.same_us
        );
        if let Some(i) = &self.idle {
            s.push_str(&format!("; {i}"));
        }
        if self.is_slow() {
            s.push_str(
                ". SLOW: with more threads than cores a closed-loop benchmark pays about one wake-up per operation, \
                 so its throughput here says as much about this machine's wake-ups as about the code; on a KVM guest \
                 with guest halt polling off, turning it on (guest_halt_poll_ns) shortens them",
            );
        }
        s
    }
}

/// The first and the last CPU this process may use (one CPU: the same twice), where
/// `--pin split` puts a client and the server's worker.
fn first_and_last() -> Option<(usize, usize)> {
    let allowed = CpuList::allowed()?;
    Some((*allowed.cpus().first()?, *allowed.cpus().last()?))
}

/// The median round trip of a token between a thread on `a` and one on `b`.
fn round_trip_us(a: usize, b: usize) -> Option<f64> {
    let (ca, cb) = (CpuList::from_cpus(vec![a])?, CpuList::from_cpus(vec![b])?);
    std::thread::spawn(move || {
        ca.pin_current_thread().ok()?;
        // 0: the first thread's turn; 1: the second's.
        let turn = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let me = std::thread::current();
        let (t2, s2) = (turn.clone(), stop.clone());
        let other = std::thread::spawn(move || {
            if cb.pin_current_thread().is_err() {
                s2.store(true, Ordering::SeqCst);
                me.unpark();
                return;
            }
            loop {
                while t2.load(Ordering::SeqCst) != 1 {
                    if s2.load(Ordering::SeqCst) {
                        return;
                    }
                    std::thread::park();
                }
                t2.store(0, Ordering::SeqCst);
                me.unpark();
            }
        });
        let mut batches = Vec::with_capacity(BATCHES);
        // One unmeasured batch first: the second thread's start and first migration.
        for b in 0..=BATCHES {
            let t0 = Instant::now();
            for _ in 0..PER_BATCH {
                turn.store(1, Ordering::SeqCst);
                other.thread().unpark();
                while turn.load(Ordering::SeqCst) != 0 {
                    if stop.load(Ordering::SeqCst) {
                        let _ = other.join();
                        return None;
                    }
                    std::thread::park();
                }
            }
            if b > 0 {
                batches.push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(PER_BATCH));
            }
        }
        stop.store(true, Ordering::SeqCst);
        other.thread().unpark();
        let _ = other.join();
        batches.sort_by(f64::total_cmp);
        Some(batches[batches.len() / 2])
    })
    .join()
    .ok()
    .flatten()
}

/// Round trips per timed batch of [`handoff_ns`], and its batches (the fastest counts:
/// short batches, so that one of them likely runs with neither thread preempted).
const HANDOFF_TRIPS: u64 = 500;
const HANDOFF_BATCHES: usize = 5;
/// [`handoff_ns`] gives up once a wait is still unanswered this long after its start:
/// the other thread did not run (a CPU taken by something else), so there is no figure.
const HANDOFF_LIMIT: Duration = Duration::from_millis(200);

/// A word on a cache line of its own (two of them must not share one).
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Line(pub(crate) AtomicU64);

/// Why [`handoff_probe`] gave no figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoHandoff {
    /// This process may use one CPU only (or the system does not say which).
    OneCpu,
    /// One of the two threads could not be pinned to its CPU.
    NotPlaced,
    /// A wait was still unanswered 200 ms after the probe began:
    /// the other thread did not get its CPU (something else ran there).
    NoAnswer,
}

impl std::fmt::Display for NoHandoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoHandoff::OneCpu => f.write_str("boomctl may use one CPU only (or cannot tell which)"),
            NoHandoff::NotPlaced => f.write_str("a thread could not be pinned to its CPU"),
            NoHandoff::NoAnswer => {
                write!(f, "no answer within {} ms (the other CPU was taken)", HANDOFF_LIMIT.as_millis())
            }
        }
    }
}

/// The round trip of a cache line between the first and the last CPU this process may
/// use (where `--pin split` puts a client and the server's worker), in nanoseconds: two
/// threads, one on each, spin on two lines and answer each other's number, as a
/// shared-memory request and its reply do. The fastest of five batches of 500, so a
/// preemption in one does not count; a few milliseconds in all. No figure with one
/// CPU, where a thread cannot be placed, or when a wait is still unanswered 200 ms
/// after the probe began ([`NoHandoff`] says which).
pub fn handoff_probe() -> Result<f64, NoHandoff> {
    let (first, last) = first_and_last().ok_or(NoHandoff::OneCpu)?;
    if first == last {
        return Err(NoHandoff::OneCpu);
    }
    handoff_between(first, last)
}

/// [`handoff_probe`]'s figure, if it gave one.
pub fn handoff_ns() -> Option<f64> {
    handoff_probe().ok()
}

/// [`handoff_probe`] between CPUs `a` and `b`.
fn handoff_between(a: usize, b: usize) -> Result<f64, NoHandoff> {
    let one = |c: usize| CpuList::from_cpus(vec![c]).ok_or(NoHandoff::NotPlaced);
    let (ca, cb) = (one(a)?, one(b)?);
    let (ping, pong) = (Line::default(), Line::default());
    let end = Instant::now() + HANDOFF_LIMIT;
    // Spins until `w` holds something other than `not`; `None` past `end`. The clock is
    // read every 256 polls only.
    let wait = |w: &AtomicU64, not: u64| -> Option<u64> {
        let mut polls = 0u32;
        loop {
            let v = w.load(Ordering::Acquire);
            if v != not {
                return Some(v);
            }
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls % 256 == 0 && Instant::now() >= end {
                return None;
            }
        }
    };
    // In `ping`, the last number sent: the answering thread stops when it sees it. In
    // `pong`, the answering thread could not be placed: the timing stops at once.
    const DONE: u64 = u64::MAX;
    std::thread::scope(|s| {
        s.spawn(|| {
            if cb.pin_current_thread().is_err() {
                pong.0.store(DONE, Ordering::Release);
                return;
            }
            let mut seen = 0;
            while let Some(n) = wait(&ping.0, seen).filter(|&n| n != DONE) {
                pong.0.store(n, Ordering::Release);
                seen = n;
            }
        });
        // Its own thread too: pinning the caller would leave it pinned.
        let timed = s.spawn(|| {
            ca.pin_current_thread().map_err(|_| NoHandoff::NotPlaced)?;
            let mut best = f64::INFINITY;
            let mut n = 0u64;
            for _ in 0..HANDOFF_BATCHES {
                let t0 = Instant::now();
                for _ in 0..HANDOFF_TRIPS {
                    n += 1;
                    ping.0.store(n, Ordering::Release);
                    match wait(&pong.0, n - 1) {
                        Some(DONE) => return Err(NoHandoff::NotPlaced),
                        Some(_) => {}
                        None => return Err(NoHandoff::NoAnswer),
                    }
                }
                best = best.min(t0.elapsed().as_secs_f64() * 1e9 / HANDOFF_TRIPS as f64);
            }
            Ok(best)
        });
        let timed = timed.join().unwrap_or(Err(NoHandoff::NoAnswer));
        // The answering thread ends on this (or on its own timeout); the scope joins it.
        ping.0.store(DONE, Ordering::Release);
        timed
    })
}

/// The cpuidle driver and, with `haltpoll`, the guest's halt-polling window.
fn idle_settings() -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    let driver = read("/sys/devices/system/cpu/cpuidle/current_driver")?;
    let mut s = format!("cpuidle driver {driver}");
    if let Some(ns) = read("/sys/module/haltpoll/parameters/guest_halt_poll_ns") {
        let state = if ns == "0" { "guest halt polling off" } else { "guest halt polling on" };
        s.push_str(&format!(", guest_halt_poll_ns {ns} ({state})"));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_measures_and_says_when_cross_cpu_wake_ups_are_slow() {
        let w = WakeCost::measure().expect("Linux can place threads");
        assert!(w.same_us > 0.0 && w.same_us < 10_000.0, "{w:?}");
        if CpuList::allowed().unwrap().len() > 1 {
            let c = w.cross_us.expect("two CPUs: a cross-CPU figure");
            assert!(c > 0.0 && c < 10_000.0, "{w:?}");
        }
        assert!(w.describe().starts_with("wake-up round trip"), "{}", w.describe());
        let slow = WakeCost { cross_us: Some(40.0), same_us: 2.0, idle: None };
        assert!(slow.is_slow() && slow.describe().contains("SLOW"));
        let fast = WakeCost { cross_us: Some(5.0), same_us: 2.0, idle: Some("cpuidle driver x".into()) };
        assert!(!fast.is_slow() && !fast.describe().contains("SLOW") && fast.describe().ends_with("cpuidle driver x"));
        assert!(!WakeCost { cross_us: None, same_us: 2.0, idle: None }.is_slow());
    }

    #[test]
    fn the_handoff_probe_times_a_round_trip_between_two_cpus() {
        let allowed = CpuList::allowed().unwrap();
        let ns = handoff_ns();
        if allowed.len() < 2 {
            assert_eq!(handoff_probe(), Err(NoHandoff::OneCpu), "one CPU: nothing to hand off between");
            return;
        }
        // Other tests may keep the other CPU busy, so a try may find no batch with both
        // threads running: one of ten must. Two stores and two loads that miss take
        // more than a nanosecond and, on any machine this runs on, less than 100 us.
        let ns = ns.or_else(|| (1..10).find_map(|_| handoff_ns())).expect("two CPUs and ten tries: a figure");
        assert!(ns > 1.0 && ns < 100_000.0, "{ns} ns");
        // The caller's own CPUs are as they were.
        assert_eq!(CpuList::this_thread().unwrap(), allowed);
        // A CPU no system has: no figure, at once (both ways round), and no thread left
        // spinning. (A CPU merely outside this process's affinity might be allowed by
        // its cpuset, and pinning to it would succeed.)
        let none = rustix::thread::CpuSet::MAX_CPU - 1;
        let t0 = Instant::now();
        assert_eq!(handoff_between(allowed.cpus()[0], none), Err(NoHandoff::NotPlaced));
        assert_eq!(handoff_between(none, allowed.cpus()[0]), Err(NoHandoff::NotPlaced));
        assert!(t0.elapsed() < HANDOFF_LIMIT, "{:?}: a failed placement waited for the limit", t0.elapsed());
    }
}
