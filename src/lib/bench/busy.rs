//! Was the machine busy while we measured? A benchmark's numbers mean little when other
//! processes took CPU time from it, so a run samples the machine's CPU accounting at
//! its start and end (Linux `/proc/stat`, `/proc/self/stat`, `/proc/loadavg`) and says
//! so, the way hyperfine warns about outliers.
//!
//! What is measured, over the run: CPU time used by *other* processes (all CPU time
//! that was not idle, not stolen and not ours), steal time (a hypervisor running other
//! guests on our CPUs), and the load average at the end. Our own process, embedded
//! servers included, does not count; a server started separately (`--server`) does.
//!
//! A virtual machine's CPUs can also be slower in one run than in the next with no
//! steal time and no other process to show for it (a busy host, frequency changes): on
//! a 2-vCPU guest a fixed integer loop took anywhere from 0.40 to 0.56 s, run to run,
//! while the guest was idle and its steal counter read 0. So a sweep also times a fixed
//! loop before every run ([`SampleLog`] of [`Probe::Speed`]) and says how much that
//! time moved, and likewise for the round trip of a cache line between two CPUs
//! ([`Probe::Handoff`], sampled by [`crate::bench::wake::handoff_ns`]).
//!
//! This module owns only the reading, the verdict and its wording ([`RunMachine`] also
//! its report rows); callers print it. From the rest of the crate it imports only
//! `cpus` (the CPU count a load is judged against).

use std::time::{Duration, Instant};

/// Other processes may use this much CPU (in CPUs, averaged over the run) before a run
/// is called busy: a tenth of one CPU.
pub const OTHERS_LIMIT_CPUS: f64 = 0.1;
/// Steal time above this share of the run's CPU time makes a run busy.
pub const STEAL_LIMIT_PCT: f64 = 2.0;
/// Runs shorter than this get no verdict: CPU time is counted in ticks of 10 ms, so
/// over a few milliseconds one tick of another process reads as whole CPUs busy (a
/// sweep whose every run failed at once said "BUSY: other processes 2.00 CPUs of 2
/// over 0.0 s").
pub const MIN_LOAD_SECONDS: f64 = 0.5;

/// CPU time counters of the whole machine, in clock ticks (the `cpu` line of `/proc/stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// All ticks.
    pub total: u64,
    /// Idle and I/O-wait ticks.
    pub idle: u64,
    /// Ticks stolen by the hypervisor.
    pub steal: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`.
pub fn parse_proc_stat(s: &str) -> Option<CpuTimes> {
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    if v.len() < 8 {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
    // already counted in user, so the total is the first eight.
    Some(CpuTimes { total: v[..8].iter().sum(), idle: v[3] + v[4], steal: v[7] })
}

/// Parses `/proc/self/stat` (or `/proc/PID/stat`): user plus system ticks of the
/// process and of its children that have ended (a `redis-server` the peers preset
/// started and stopped is ours, not another process's load).
pub fn parse_self_stat(s: &str) -> Option<u64> {
    // The command name is in parentheses and may contain spaces: split after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 (index 0 here), utime field 14, stime field 15,
    // then cutime and cstime (fields 16, 17) of the children waited for.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let children: u64 = f.get(13..15).map_or(0, |c| c.iter().filter_map(|x| x.parse::<u64>().ok()).sum());
    Some(utime + stime + children)
}

/// Parses `/proc/loadavg`: the 1-minute load average and the runnable tasks now.
pub fn parse_loadavg(s: &str) -> Option<(f64, u32)> {
    let mut it = s.split_whitespace();
    let load1: f64 = it.next()?.parse().ok()?;
    let runnable: u32 = it.nth(2)?.split('/').next()?.parse().ok()?;
    Some((load1, runnable))
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A sample taken at the start of a run; [`LoadProbe::finish`] compares with the end.
#[derive(Clone, Debug)]
pub struct LoadProbe {
    machine: Option<CpuTimes>,
    ours: Option<u64>,
    started: Instant,
}

impl LoadProbe {
    /// Samples now.
    pub fn start() -> LoadProbe {
        LoadProbe {
            machine: read("/proc/stat").as_deref().and_then(parse_proc_stat),
            ours: read("/proc/self/stat").as_deref().and_then(parse_self_stat),
            started: Instant::now(),
        }
    }

    /// What happened on the machine since [`LoadProbe::start`]; `None` where `/proc` is
    /// not readable (not Linux).
    pub fn finish(&self) -> Option<MachineLoad> {
        let end = read("/proc/stat").as_deref().and_then(parse_proc_stat)?;
        let ours_end = read("/proc/self/stat").as_deref().and_then(parse_self_stat)?;
        let (load1, runnable) = read("/proc/loadavg").as_deref().and_then(parse_loadavg).unwrap_or((0.0, 0));
        Some(MachineLoad::between(
            self.machine?,
            end,
            self.ours?,
            ours_end,
            crate::cpus::count(),
            self.started.elapsed().as_secs_f64(),
            load1,
            runnable,
        ))
    }
}

/// The machine's load over one run.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MachineLoad {
    /// CPUs available.
    pub cpus: usize,
    /// Length of the run, seconds.
    pub seconds: f64,
    /// CPU used by other processes, in CPUs, averaged over the run.
    pub others_cpus: f64,
    /// Ticks stolen by the hypervisor, as a percentage of all ticks.
    pub steal_pct: f64,
    /// The 1-minute load average at the end.
    pub load1: f64,
    /// Runnable tasks at the end (ours included).
    pub runnable: u32,
}

impl MachineLoad {
    /// The load between two samples of the machine's and our own CPU ticks.
    #[allow(clippy::too_many_arguments)]
    pub fn between(
        a: CpuTimes,
        b: CpuTimes,
        ours_a: u64,
        ours_b: u64,
        cpus: usize,
        seconds: f64,
        load1: f64,
        runnable: u32,
    ) -> MachineLoad {
        let total = b.total.saturating_sub(a.total);
        let idle = b.idle.saturating_sub(a.idle);
        let steal = b.steal.saturating_sub(a.steal);
        let ours = ours_b.saturating_sub(ours_a);
        let others = total.saturating_sub(idle).saturating_sub(steal).saturating_sub(ours);
        // `total` ticks are spread over `cpus` CPUs for the run's length.
        let others_cpus = if total == 0 { 0.0 } else { others as f64 / total as f64 * cpus as f64 };
        let steal_pct = if total == 0 { 0.0 } else { 100.0 * steal as f64 / total as f64 };
        MachineLoad { cpus, seconds, others_cpus, steal_pct, load1, runnable }
    }

    /// True when the numbers of this run should not be trusted as an idle machine's.
    pub fn is_busy(&self) -> bool {
        !self.warnings().is_empty()
    }

    /// One sentence per reason the machine was busy (none when it was quiet, or when
    /// the run was too short to tell: [`MIN_LOAD_SECONDS`]).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.too_short() {
            return w;
        }
        if self.others_cpus > OTHERS_LIMIT_CPUS {
            w.push(format!("other processes kept {:.2} of {} CPUs busy during the run", self.others_cpus, self.cpus));
        }
        if self.steal_pct > STEAL_LIMIT_PCT {
            w.push(format!("the hypervisor stole {:.1}% of the CPU time", self.steal_pct));
        }
        w
    }

    /// Whether the run was too short for the CPU accounting to say anything.
    fn too_short(&self) -> bool {
        self.seconds < MIN_LOAD_SECONDS
    }

    /// A one-line description for reports and SETUP.md.
    pub fn describe(&self) -> String {
        let verdict = if self.too_short() {
            "too short to tell"
        } else if self.is_busy() {
            "BUSY"
        } else {
            "quiet"
        };
        format!(
            "{verdict}: other processes {:.2} CPUs of {}, steal {:.1}%, load average {:.2} ({} runnable) over {:.1} s",
            self.others_cpus, self.cpus, self.steal_pct, self.load1, self.runnable, self.seconds
        )
    }
}

/// A sweep whose speed samples spread more than this (10th to 90th percentile, over the
/// median) ran on a machine whose speed changed under it.
pub const SPEED_SPREAD_LIMIT_PCT: f64 = 15.0;

/// Iterations of the speed sample's loop: a few hundred microseconds on a current CPU.
const SPEED_LOOP: u32 = 200_000;

/// How long a fixed loop of dependent integer operations takes now: the fastest of
/// three tries, so an interrupt or a preemption during one try does not count as the
/// machine being slow. About a millisecond in all.
pub fn speed_sample() -> Duration {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            // xorshift64: each step depends on the last, so neither the compiler nor the
            // CPU can do the loop's work in fewer steps; black_box keeps it from being
            // computed at compile time.
            let mut x = std::hint::black_box(0x9E37_79B9_7F4A_7C15u64);
            for _ in 0..SPEED_LOOP {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            std::hint::black_box(x);
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// What a [`SampleLog`] holds: one probe's samples, one before each run of a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// [`speed_sample`], in microseconds: how fast one CPU computes.
    Speed,
    /// [`crate::bench::wake::handoff_ns`], in nanoseconds: how fast a cache line goes
    /// from one CPU to another and back.
    Handoff,
}

impl Probe {
    fn unit(self) -> &'static str {
        match self {
            Probe::Speed => "us",
            Probe::Handoff => "ns",
        }
    }
}

/// The samples of one [`Probe`] over a sweep, one before each run.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleLog {
    probe: Probe,
    v: Vec<f64>,
    /// Runs before which the probe gave no figure: why, and how many times.
    misses: Vec<(String, usize)>,
}

impl SampleLog {
    /// An empty log of `probe`'s samples.
    pub fn new(probe: Probe) -> SampleLog {
        SampleLog { probe, v: Vec::new(), misses: Vec::new() }
    }

    /// Keeps a sample (in the probe's unit).
    pub fn push(&mut self, x: f64) {
        self.v.push(x);
    }

    /// Counts a run before which the probe gave no figure, and why (its CSV cell stays
    /// empty, so the reports say why instead).
    pub fn miss(&mut self, why: &str) {
        match self.misses.iter_mut().find(|m| m.0 == why) {
            Some(m) => m.1 += 1,
            None => self.misses.push((why.to_string(), 1)),
        }
    }

    /// "no figure before K of N runs: why (k), ..."; `None` when every run had one.
    fn misses_text(&self) -> Option<String> {
        let k: usize = self.misses.iter().map(|m| m.1).sum();
        (k > 0).then(|| {
            let why: Vec<String> = self.misses.iter().map(|(w, n)| format!("{w} ({n})")).collect();
            format!("no figure before {k} of {} runs: {}", k + self.v.len(), why.join(", "))
        })
    }

    /// The median, the 10th and the 90th percentile (nearest rank) of the samples, in
    /// the probe's unit; `None` before two samples.
    pub fn quantiles(&self) -> Option<(f64, f64, f64)> {
        if self.v.len() < 2 {
            return None;
        }
        let mut v = self.v.clone();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some((at(0.5), at(0.1), at(0.9)))
    }

    /// The 10th-to-90th percentile range over the median, in percent.
    pub fn spread_pct(&self) -> Option<f64> {
        self.quantiles().filter(|q| q.0 > 0.0).map(spread_of)
    }

    /// A line for reports and SETUP.md, with the runs that had no figure and why;
    /// `None` before two samples and no miss.
    pub fn describe(&self) -> Option<String> {
        let Some(q @ (med, lo, hi)) = self.quantiles() else {
            let name = match self.probe {
                Probe::Speed => "CPU speed",
                Probe::Handoff => "CPU distance (column `handoff_ns`)",
            };
            return self.misses_text().map(|m| format!("{name}: {m}"));
        };
        let (n, u, spread) = (self.v.len(), self.probe.unit(), spread_of(q));
        let what = match self.probe {
            Probe::Speed => {
                format!("CPU speed: a fixed integer loop, timed before each of {n} runs (the fastest of 3 tries), took")
            }
            Probe::Handoff => format!(
                "CPU distance: a cache line's round trip between the first and the last CPU boomctl may use (where \
                 `--pin split` puts a client and the server's worker), timed before each run ({n} figures, each the \
                 fastest of a few short batches; column `handoff_ns`), took"
            ),
        };
        let missed = self.misses_text().map(|m| format!("; {m}")).unwrap_or_default();
        Some(format!(
            "{what} {med:.0} {u} (median), {lo:.0} .. {hi:.0} {u} (10th .. 90th percentile): a {spread:.0}% \
             spread{missed}"
        ))
    }

    /// Why the probe makes the runs hard to compare, when it does. For [`Probe::Speed`]:
    /// a spread above [`SPEED_SPREAD_LIMIT_PCT`]. For [`Probe::Handoff`]: any figure
    /// [`HANDOFF_MOVED`] times the median or more (or that much below it). A spread of
    /// percentiles misses what matters there: the CPUs are either near or far, so a
    /// sweep of 100 runs of which 9 ran far has its 90th percentile near, while each of
    /// those 9 shared-memory results is off by a third or more.
    pub fn warning(&self) -> Option<String> {
        let q @ (med, lo, hi) = self.quantiles()?;
        let u = self.probe.unit();
        match self.probe {
            Probe::Speed => {
                let (spread, limit) = (spread_of(q), SPEED_SPREAD_LIMIT_PCT);
                (spread > limit).then(|| {
                    format!(
                        "the machine's speed changed during the runs: a fixed loop took {lo:.0} .. {hi:.0} {u}, a \
                         {spread:.0}% spread (more than {limit:.0}%) that steal time and other processes do not \
                         account for"
                    )
                })
            }
            Probe::Handoff => {
                let moved: Vec<f64> = self.v.iter().copied().filter(|&x| handoff_moved(x, med)).collect();
                let lo = moved.iter().copied().reduce(f64::min)?;
                let hi = moved.iter().copied().reduce(f64::max)?;
                Some(format!(
                    "the distance between the CPUs changed during the runs: before {} of {} runs a cache line's round \
                     trip between them took {lo:.0} .. {hi:.0} {u}, {HANDOFF_MOVED}x the median ({med:.0} {u}) or \
                     more away from it, as when a hypervisor moves virtual CPUs between cores; shared-memory (shm) \
                     results follow it, so set each run beside its `handoff_ns`",
                    moved.len(),
                    self.v.len()
                ))
            }
        }
    }
}

/// Round trips between the CPUs whose slowest is this many times the fastest are worth
/// naming beside a run's figures: the distance between the CPUs changed.
pub const HANDOFF_MOVED: f64 = 1.5;

/// Whether round trips of `a` and `b` nanoseconds (either order) say the distance
/// between the CPUs changed ([`HANDOFF_MOVED`]).
pub fn handoff_moved(a: f64, b: f64) -> bool {
    a > 0.0 && b > 0.0 && a.max(b) >= HANDOFF_MOVED * a.min(b)
}

/// What the machine did around one run (a `boomctl ycsb`): its load over the run, and
/// the round trip of a cache line between its CPUs just before and just after
/// ([`crate::bench::wake::handoff_ns`], taken by the caller).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RunMachine {
    /// [`LoadProbe::finish`] over the run (`None` without `/proc`).
    pub load: Option<MachineLoad>,
    /// Nanoseconds per round trip before the run (`None` with one CPU).
    pub handoff_before_ns: Option<f64>,
    /// ... and after it.
    pub handoff_after_ns: Option<f64>,
}

impl RunMachine {
    /// `(name, value)` rows for a report (YCSB-style names, values without commas);
    /// what was not measured is left out.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let mut r = Vec::new();
        if let Some(l) = &self.load {
            r.push(("OtherProcessesCPUs", format!("{:.2}", l.others_cpus)));
            r.push(("StealPercent", format!("{:.1}", l.steal_pct)));
            r.push(("LoadAverage1m", format!("{:.2}", l.load1)));
        }
        if let Some(ns) = self.handoff_before_ns {
            r.push(("CpuRoundTripBefore(ns)", format!("{ns:.0}")));
        }
        if let Some(ns) = self.handoff_after_ns {
            r.push(("CpuRoundTripAfter(ns)", format!("{ns:.0}")));
        }
        r
    }

    /// One sentence per reason the run's figures may measure the machine.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.load.map(|l| l.warnings()).unwrap_or_default();
        if let (Some(b), Some(a)) = (self.handoff_before_ns, self.handoff_after_ns) {
            if handoff_moved(b, a) {
                w.push(format!(
                    "a cache line's round trip between the CPUs took {b:.0} ns before the run and {a:.0} ns after \
                     it: the distance between them changed (as when a hypervisor moves virtual CPUs), and what \
                     crosses between CPUs follows it (shared memory most, a loopback socket's wake-ups too)"
                ));
            }
        }
        w
    }
}

/// The 10th-to-90th percentile range of `(median, 10th, 90th)` over the median, in
/// percent (0 for a zero median).
fn spread_of((med, lo, hi): (f64, f64, f64)) -> f64 {
    if med > 0.0 {
        100.0 * (hi - lo) / med
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "cpu  647838 0 59462 21623 713 0 1283 7853 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let c = parse_proc_stat(stat).unwrap();
        assert_eq!(c, CpuTimes { total: 647838 + 59462 + 21623 + 713 + 1283 + 7853, idle: 21623 + 713, steal: 7853 });
        assert!(parse_proc_stat("cpu0 1 2 3\n").is_none());
        let me = "12351 (my (odd) name) R 12329 12329 1104 0 -1 4194304 128 0 0 0 17 4 0 0 20 0 1";
        assert_eq!(parse_self_stat(me), Some(21));
        let parent = "12351 (boomctl) S 1 1 1 0 -1 4194304 128 0 0 0 17 4 30 9 20 0 1";
        assert_eq!(parse_self_stat(parent), Some(17 + 4 + 30 + 9));
        assert_eq!(parse_loadavg("12.47 11.89 9.73 9/165 12350\n"), Some((12.47, 9)));
        assert!(parse_loadavg("x").is_none());
    }

    #[test]
    fn others_are_what_is_neither_idle_stolen_nor_ours() {
        let a = CpuTimes { total: 0, idle: 0, steal: 0 };
        // 2 CPUs for 1 s at 100 ticks/s = 200 ticks: 100 ours, 50 others, 40 idle, 10 stolen.
        let b = CpuTimes { total: 200, idle: 40, steal: 10 };
        let l = MachineLoad::between(a, b, 0, 100, 2, 1.0, 3.0, 4);
        assert!((l.others_cpus - 0.5).abs() < 1e-9, "{l:?}");
        assert!((l.steal_pct - 5.0).abs() < 1e-9);
        assert!(l.is_busy());
        assert_eq!(l.warnings().len(), 2);
        assert!(l.describe().starts_with("BUSY"));
        // Only us and idle time: quiet.
        let b = CpuTimes { total: 200, idle: 99, steal: 0 };
        let q = MachineLoad::between(a, b, 0, 100, 2, 1.0, 1.0, 1);
        assert!(!q.is_busy(), "{q:?}");
        assert!(q.describe().starts_with("quiet"));
        // The busy ticks of the first over 10 ms: no verdict either way.
        let short = MachineLoad { seconds: 0.01, ..l };
        assert!(!short.is_busy() && short.warnings().is_empty(), "{short:?}");
        assert!(short.describe().starts_with("too short to tell"), "{}", short.describe());
    }

    #[test]
    fn a_probe_of_this_machine_reads_sane_numbers() {
        let p = LoadProbe::start();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        if let Some(l) = p.finish() {
            assert!(l.cpus >= 1 && l.others_cpus >= 0.0 && l.others_cpus <= l.cpus as f64 + 0.01, "{l:?}");
            assert!((0.0..=100.0).contains(&l.steal_pct));
        }
    }

    #[test]
    fn speed_spread_is_the_middle_eighty_percent_over_the_median() {
        let mut l = SampleLog::new(Probe::Speed);
        assert_eq!(l.describe(), None);
        l.push(400.0);
        assert_eq!(l.quantiles(), None, "one sample has no spread");
        // Ten samples: 400 .. 490 us and one slow outlier at 900 us. Nearest rank:
        // 10th percentile = 1st, median = 5th, 90th = 9th: the outlier does not count.
        for us in [410.0, 420.0, 430.0, 440.0, 450.0, 460.0, 470.0, 480.0, 900.0] {
            l.push(us);
        }
        assert_eq!(l.quantiles(), Some((440.0, 400.0, 480.0)));
        let spread = l.spread_pct().unwrap();
        assert!((spread - 100.0 * 80.0 / 440.0).abs() < 1e-9, "{spread}");
        assert!(spread > SPEED_SPREAD_LIMIT_PCT);
        assert!(l.warning().unwrap().contains("400 .. 480 us"), "{:?}", l.warning());
        assert!(l.describe().unwrap().contains("each of 10 runs"), "{:?}", l.describe());
        // A steady machine: no warning.
        let mut q = SampleLog::new(Probe::Speed);
        for us in [400.0, 405.0, 398.0, 402.0] {
            q.push(us);
        }
        assert_eq!(q.warning(), None, "{:?}", q.quantiles());
    }

    #[test]
    fn cache_line_round_trips_far_from_their_median_are_a_warning() {
        // Runs that saw about 250 ns and runs that saw about 650 ns (a 2-vCPU guest
        // whose vCPUs the host moved): median 260, 10th 240, 90th 660.
        let mut l = SampleLog::new(Probe::Handoff);
        for ns in [240.0, 250.0, 255.0, 260.0, 262.0, 640.0, 650.0, 660.0, 670.0, 245.0] {
            l.push(ns);
        }
        let w = l.warning().expect("4 runs 2.5x the median");
        assert!(w.contains("before 4 of 10 runs") && w.contains("640 .. 670 ns"), "{w}");
        assert!(w.contains("the median (260 ns)") && w.contains("handoff_ns"), "{w}");
        assert!(l.describe().unwrap().contains("(10 figures,"), "{:?}", l.describe());
        assert!(l.describe().unwrap().contains("took 260 ns (median)"), "{:?}", l.describe());
        // 240 .. 330 ns around 260: none 1.5x away from the median.
        let mut q = SampleLog::new(Probe::Handoff);
        for ns in [240.0, 250.0, 260.0, 270.0, 330.0] {
            q.push(ns);
        }
        assert_eq!(q.warning(), None, "{:?}", q.quantiles());
        // 91 runs near and 9 far: the percentiles stay near (a 10% spread), and the
        // warning still names the 9.
        let mut r = SampleLog::new(Probe::Handoff);
        for i in 0..100 {
            r.push(if i % 11 == 5 { 390.0 + (i / 10) as f64 } else { 95.0 + (i % 10) as f64 });
        }
        assert!(r.spread_pct().unwrap() < 15.0, "{:?}", r.quantiles());
        let w = r.warning().expect("9 far runs");
        assert!(w.contains("before 9 of 100 runs") && w.contains("390 .. 399 ns"), "{w}");
        // Mostly far, a few near: the near ones are the odd ones out.
        let mut f = SampleLog::new(Probe::Handoff);
        for ns in [400.0, 410.0, 390.0, 100.0, 405.0] {
            f.push(ns);
        }
        assert!(f.warning().unwrap().contains("before 1 of 5 runs"), "{:?}", f.warning());
        // Runs with no figure are counted by reason, beside the figures or alone.
        f.miss("no answer");
        f.miss("no answer");
        f.miss("not placed");
        let d = f.describe().unwrap();
        assert!(d.ends_with("; no figure before 3 of 8 runs: no answer (2), not placed (1)"), "{d}");
        let mut one = SampleLog::new(Probe::Handoff);
        assert_eq!(one.describe(), None);
        one.miss("boomctl may use one CPU only");
        one.miss("boomctl may use one CPU only");
        assert_eq!(
            one.describe().as_deref(),
            Some("CPU distance (column `handoff_ns`): no figure before 2 of 2 runs: boomctl may use one CPU only (2)")
        );
        assert_eq!(one.warning(), None);
    }

    #[test]
    fn a_run_reports_the_machine_and_warns_when_the_cpus_moved_apart() {
        let load = MachineLoad { cpus: 2, seconds: 2.0, others_cpus: 0.0, steal_pct: 0.0, load1: 1.5, runnable: 2 };
        let quiet = RunMachine { load: Some(load), handoff_before_ns: Some(99.0), handoff_after_ns: Some(120.0) };
        assert_eq!(
            quiet.rows(),
            vec![
                ("OtherProcessesCPUs", "0.00".to_string()),
                ("StealPercent", "0.0".into()),
                ("LoadAverage1m", "1.50".into()),
                ("CpuRoundTripBefore(ns)", "99".into()),
                ("CpuRoundTripAfter(ns)", "120".into()),
            ]
        );
        assert!(quiet.warnings().is_empty(), "{:?}", quiet.warnings());
        assert!(quiet.rows().iter().all(|(_, v)| !v.contains(',')));
        // Farther apart after the run, and another process busy: two warnings.
        let busy = MachineLoad { others_cpus: 0.5, ..load };
        let moved = RunMachine { load: Some(busy), handoff_after_ns: Some(385.0), ..quiet };
        let w = moved.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[1].contains("99 ns before the run and 385 ns after"), "{w:?}");
        // Closer after the run counts too; one figure alone, or none, says nothing.
        let closer = RunMachine { handoff_before_ns: Some(400.0), handoff_after_ns: Some(100.0), load: None };
        assert_eq!(closer.warnings().len(), 1);
        assert!(RunMachine { handoff_after_ns: None, ..closer }.warnings().is_empty());
        assert!(RunMachine::default().rows().is_empty() && RunMachine::default().warnings().is_empty());
    }

    #[test]
    fn a_speed_sample_takes_real_time() {
        let d = speed_sample();
        assert!(d > Duration::ZERO && d < Duration::from_secs(5), "{d:?}");
    }
}
