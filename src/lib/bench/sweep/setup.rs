//! `SETUP.md`: the machine and the settings a sweep ran with, so its numbers can be
//! read next to the paper's (which ran on 2x Xeon 8260, ConnectX-5, Optane DCPMM).
//!
//! Facts come from `/proc/cpuinfo`, `/proc/meminfo`, `uname`, CPUID (flush
//! instructions) and the commit the binary was built from (recorded by `build.rs`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{io_err, Result, SweepOptions};
use crate::pmem::{FlushKind, Media, MediaOptions};

/// Today's date (UTC) as `YYYY-MM-DD`.
pub fn today() -> String {
    let days = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() / 86_400).unwrap_or(0) as i64;
    let (y, m, d) = crate::units::civil_date(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// This host's name (`unknown-host` when it cannot be read).
pub fn hostname() -> String {
    let n = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let clean: String =
        n.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    if clean.is_empty() {
        "unknown-host".into()
    } else {
        clean
    }
}

/// Facts about this machine.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// Total memory in bytes.
    pub memory: u64,
    /// Kernel `sysname release version machine`.
    pub kernel: String,
    /// Host name.
    pub host: String,
}

impl Machine {
    /// Reads the facts (missing ones stay empty).
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|k| k.parse::<u64>().ok())
            .map(|k| k * 1024)
            .unwrap_or(0);
        let k =
            |f: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{f}")).unwrap_or_default().trim().to_string();
        let kernel = format!("{} {} {} {}", k("ostype"), k("osrelease"), k("version"), std::env::consts::ARCH);
        Machine { cpu, cores: crate::cpus::count(), memory, kernel, host: hostname() }
    }
}

/// The git commit this binary was built from (`-dirty` with uncommitted changes), as
/// `--version` says; `None` when it was built outside a git checkout. Read at build
/// time: the source tree's state when the sweep runs (checked out elsewhere since,
/// or gone) says nothing about the binary.
pub fn git_commit() -> Option<String> {
    let c = env!("BOOMKV_COMMIT");
    (c != "unknown").then(|| c.to_string())
}

/// What durability the embedded servers' pools get in `dir` (one sentence).
fn durability(dir: Option<PathBuf>) -> String {
    let parent = dir.unwrap_or_else(|| {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    let probe = || -> crate::error::Result<String> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{}probe-", crate::log::temp_prefix()))
            .tempdir_in(&parent)
            .map_err(|e| crate::error::Error::io("probing the pool directory", e))?;
        let (m, _) = Media::open(
            &tmp.path().join("probe.pool"),
            &MediaOptions { create_size: Some(1 << 20), ..Default::default() },
        )?;
        Ok(m.durability_statement())
    };
    match probe() {
        Ok(s) => format!("{s} (pools in {})", parent.display()),
        Err(e) => format!("unknown ({e})"),
    }
}

/// Appends how busy the machine was during the runs, and how much the probes sampled
/// before each run (its speed, the distance between its CPUs) moved, to `SETUP.md`.
/// `resumed`: the runs were added by a `--resume` ([`write_setup`] appended a section).
pub fn append_load(
    o: &SweepOptions,
    load: &crate::bench::busy::MachineLoad,
    probes: &[&crate::bench::busy::SampleLog],
    resumed: bool,
) -> Result<()> {
    let path = o.out.join("SETUP.md");
    let runs = if resumed { "the resumed runs" } else { "the runs" };
    let mut text = format!("\n## Machine load during {runs}\n\n{}\n", load.describe());
    for d in probes.iter().filter_map(|p| p.describe()) {
        text.push_str(&format!("\n{d}.\n"));
    }
    for w in load.warnings().into_iter().chain(probes.iter().filter_map(|p| p.warning())) {
        text.push_str(&format!("\n**Warning**: {w}; compare these figures with a run on an idle machine.\n"));
    }
    append(&path, &text)
}

/// The heading of SETUP.md's section on the spread between repeats.
const SPREAD: &str = "## Spread between repeats";

/// Rewrites SETUP.md's section on the spread between repeats (each render replaces it):
/// the presets whose repeats disagree, or that they agree. Nothing without a SETUP.md.
pub fn record_spread(dir: &Path, noisy: &[String]) -> Result<()> {
    let path = dir.join("SETUP.md");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
    let mut kept = match text.find(SPREAD) {
        Some(at) => {
            // The section runs to the next heading of its level, or to the end.
            let rest = &text[at + SPREAD.len()..];
            let end = rest.find("\n## ").map_or(text.len(), |e| at + SPREAD.len() + e + 1);
            format!("{}{}", &text[..at], &text[end..])
        }
        None => text,
    };
    kept.truncate(kept.trim_end().len());
    let _ = writeln!(kept, "\n\n{SPREAD}\n");
    if noisy.is_empty() {
        let _ = writeln!(kept, "Every point's repeats agree within 25% (or each point ran once).");
    } else {
        for n in noisy {
            let _ = writeln!(kept, "{n}");
        }
    }
    std::fs::write(&path, kept).map_err(io_err(&path))
}

/// Writes `SETUP.md` into the output directory, or, for a `--resume` that has runs to
/// add (`adding`) to a directory that has one, appends a section with this invocation's
/// machine and settings: the runs already there were made under the file's, which a
/// rewrite would lose. Returns whether it appended.
pub fn write_setup(o: &SweepOptions, adding: bool) -> Result<bool> {
    let path = o.out.join("SETUP.md");
    if o.resume && path.exists() {
        if !adding {
            return Ok(false);
        }
        let before = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        let mut text = format!(
            "\n## Resumed on {} (--resume)\n\nThe runs not yet in the CSV files were added by a later invocation, \
             on this machine and with these settings (the runs before were made under the ones above; column \
             `unix_time` tells them apart):\n\n{}",
            today(),
            setup_text(o, "###")
        );
        // How the presets this invocation adds measure, unless the file says it already.
        let methods: Vec<&str> = methods(o).into_iter().filter(|m| !before.contains(m)).collect();
        if !methods.is_empty() {
            let _ = writeln!(text, "\n### Method\n");
            for m in methods {
                let _ = writeln!(text, "- {m}");
            }
        }
        append(&path, &text)?;
        return Ok(true);
    }
    let mut s = String::from("# Sweep setup\n\n");
    if o.resume {
        let _ = writeln!(
            s,
            "Written by a --resume: runs already in the CSV files were made under a machine and settings this \
             file does not record (column `unix_time` tells them apart).\n"
        );
    }
    s.push_str(&setup_text(o, "##"));
    let _ = writeln!(s, "\n## Method\n");
    let _ = writeln!(
        s,
        "Every point runs against a fresh embedded server on a temporary pool (or the --server given) through the \
         YCSB runner, one client thread unless stated. The grids below are the presets' defaults; an axis given \
         on the command line above (--sizes, --threads, --ops, ...) replaced its default in this run.\n"
    );
    for m in methods(o) {
        let _ = writeln!(s, "- {m}");
    }
    let _ = writeln!(s, "\nBreakdown: {}", super::components::BREAKDOWN_METHOD);
    std::fs::write(&path, s).map_err(io_err(&path))?;
    Ok(false)
}

/// How the presets of this invocation measure, each text once.
fn methods(o: &SweepOptions) -> Vec<&'static str> {
    let mut said = Vec::new();
    for p in &o.presets {
        let m = p.meta().method;
        if !said.contains(&m) {
            said.push(m);
        }
    }
    said
}

/// Appends `text` to the file at `path`.
fn append(path: &Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(io_err(path))
}

/// The machine and the settings of this invocation, under headings of level `h` (`##`).
fn setup_text(o: &SweepOptions, h: &str) -> String {
    let m = Machine::detect();
    let mut s = String::new();
    let _ = writeln!(s, "{h} Machine\n");
    let _ = writeln!(s, "- host: {}", m.host);
    let _ = writeln!(s, "- CPU: {}", m.cpu);
    let _ = writeln!(s, "- cores (available to boomctl): {}", m.cores);
    let _ = writeln!(s, "- memory: {:.1} GiB", m.memory as f64 / (1u64 << 30) as f64);
    let _ = writeln!(s, "- kernel: {}", m.kernel);
    if let Some(w) = crate::bench::wake::WakeCost::measure() {
        let _ = writeln!(s, "- {}", w.describe());
    }
    let _ = writeln!(s, "\n{h} Settings\n");
    let _ = writeln!(
        s,
        "- transport: {}{}",
        o.transport(),
        match &o.server {
            Some(e) => format!(" (server {e}: a running server; its settings are its own)"),
            None => " (embedded server per run, on a temporary pool, same host)".into(),
        }
    );
    let f = FlushKind::detect();
    let supported: Vec<&str> = [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush]
        .into_iter()
        .filter(|k| k.supported())
        .map(FlushKind::name)
        .collect();
    let _ = writeln!(
        s,
        "- flush primitive: {f} (the best this CPU has; supported: {}); the writeback preset sets it per run",
        supported.join(", ")
    );
    let _ = writeln!(s, "- durability: {}", durability(o.pmem_dir.clone()));
    let _ = writeln!(s, "- persistent memory: none on this machine; pools are memory-mapped files (see durability)");
    let _ = writeln!(s, "- mode: {}", if o.quick { "quick (small op counts, fewer points)" } else { "full" });
    let _ = writeln!(
        s,
        "- presets: {}",
        o.presets.iter().map(|p| format!("{p} ({})", p.figures())).collect::<Vec<_>>().join(", ")
    );
    let _ = writeln!(
        s,
        "- thread placement: {}",
        match o.layout() {
            Some(l) => {
                // Auto places points of many client threads otherwise (`Layout::place`).
                let crowded = match (o.pin, o.layout_for(usize::MAX, crate::transport::Backend::Shm)) {
                    (crate::cpus::Placement::Auto, Some(c)) if c.colocated && !l.colocated => format!(
                        "; with more client threads than CPU {} over shm or tcp (points of the peers and threads \
                         presets), {c}",
                        l.clients
                    ),
                    _ => String::new(),
                };
                format!(
                    "{l} (--pin {}){crowded}; the transport floor's two threads on the first two CPUs; not pinned: \
                     Redis and its clients, and the writeback preset, whose workers share the write-back",
                    o.pin.name()
                )
            }
            None if o.server.is_some() => "the server's own; client threads not pinned".into(),
            None if o.pin != crate::cpus::Placement::Off => "not pinned (fewer than two CPUs)".into(),
            None => "not pinned (--pin off)".into(),
        }
    );
    let _ = writeln!(s, "- seed: {}", o.seed);
    let _ = writeln!(s, "- boomctl version: {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(
        s,
        "- git commit: {}",
        git_commit().unwrap_or_else(|| "unknown (built outside a git checkout)".into())
    );
    let _ = writeln!(s, "- command: `{}`", o.command);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_section_is_replaced_not_repeated() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("SETUP.md");
        std::fs::write(&p, "# Sweep setup\n\n## Machine\n\n- host: x\n").unwrap();
        record_spread(dir.path(), &["- latency: NOISY: a".into()]).unwrap();
        record_spread(dir.path(), &["- latency: NOISY: b".into()]).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert_eq!(s.matches(SPREAD).count(), 1, "{s}");
        assert!(s.contains("NOISY: b") && !s.contains("NOISY: a"), "{s}");
        assert!(s.starts_with("# Sweep setup\n\n## Machine\n\n- host: x\n\n## Spread"), "{s}");
        record_spread(dir.path(), &[]).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.ends_with("agree within 25% (or each point ran once).\n") && s.matches(SPREAD).count() == 1, "{s}");
    }

    #[test]
    fn a_resume_keeps_the_first_setup_and_adds_its_own() {
        use super::super::Preset;
        let preset = |n: &str| -> Preset { n.parse().unwrap() };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("SETUP.md");
        let mut o = SweepOptions::new(vec![preset("latency")], dir.path().to_path_buf());
        o.command = "first".into();
        assert!(!write_setup(&o, true).unwrap(), "no file yet: written whole");
        let first = std::fs::read_to_string(&p).unwrap();
        assert!(first.starts_with("# Sweep setup") && first.contains("`first`"), "{first}");
        // A resume with nothing to run leaves it alone.
        o.resume = true;
        o.command = "second".into();
        assert!(!write_setup(&o, false).unwrap());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), first);
        // One with runs to add (and a preset more) appends its machine, settings and
        // the method of the preset the file does not describe yet, once.
        o.presets.push(preset("threads"));
        assert!(write_setup(&o, true).unwrap());
        let s = std::fs::read_to_string(&p).unwrap();
        let tail = s.strip_prefix(first.as_str()).expect("the first setup kept as it was");
        assert!(tail.starts_with("\n## Resumed on ") && tail.contains("### Machine") && tail.contains("`second`"));
        let (latency, threads) = (preset("latency").meta().method, preset("threads").meta().method);
        assert!(tail.contains(threads) && !tail.contains(latency), "{tail}");
        assert_eq!(s.matches(latency).count(), 1, "{s}");
    }

    #[test]
    fn dates_and_facts() {
        let d = today();
        assert_eq!(d.len(), 10, "{d}");
        assert!(d.starts_with("20"), "{d}");
        let m = Machine::detect();
        assert!(m.cores >= 1);
        assert!(!hostname().contains('/'));
    }
}
