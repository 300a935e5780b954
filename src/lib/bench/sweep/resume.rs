//! `<preset>.settings`: the run-wide settings a preset's CSV rows were measured under,
//! so that a `--resume` adds runs only under the same ones.
//!
//! A row's `point` names its coordinates on the grid (protocol, size, ...), not what
//! every point of the invocation shares: the transport, the server, `--quick`, the op
//! count, the seed, where the pools live. A `--resume --transport tcp` into a directory
//! of shm results used to find every point "done" and report the shm figures as the
//! tcp ones. This module owns the file's format (`key = value` lines, the grid file's
//! syntax); the driver ([`super::run`]) writes it when a preset's CSV starts empty and
//! checks it before a resume adds rows. A CSV without one (written by an earlier
//! version) is resumed unchecked, as before.
//!
//! Imports: the sweep's options and presets only.

use std::path::{Path, PathBuf};

use super::{io_err, Preset, Result, SweepError, SweepOptions};

/// The settings file of `preset` in `dir`.
pub fn path(preset: Preset, dir: &Path) -> PathBuf {
    dir.join(format!("{}.settings", preset.name()))
}

/// The settings of this invocation that every row of `preset` is measured under, by
/// the name of the option that sets them. The axes that vary between points (sizes,
/// protocols, ...) and `--repeats` (a resume may add repeats) are not among them.
pub fn settings(preset: Preset, o: &SweepOptions) -> Vec<(&'static str, String)> {
    let or_default = |v: Option<String>| v.unwrap_or_else(|| "default".into());
    let mut s = vec![
        ("server", o.server.as_ref().map_or_else(|| "embedded".to_string(), ToString::to_string)),
        ("transport", o.backend.to_string()),
        ("quick", o.quick.to_string()),
        ("seed", o.seed.to_string()),
    ];
    if o.server.is_none() {
        // `auto` split every point before colocation existed: a sweep recorded then is
        // not resumed with points placed otherwise.
        s.push((
            "pin",
            if o.pin == crate::cpus::Placement::Auto { "auto (split, colocate when crowded)" } else { o.pin.name() }
                .to_string(),
        ));
        s.push(("pmem", or_default(o.pmem_dir.as_ref().map(|p| one_line(&p.display().to_string())))));
    }
    let axes = preset.meta().axes;
    let a = &o.axes;
    for (name, v) in [
        ("ops", a.ops.map(|v| v.to_string())),
        ("keys", a.keys.map(|v| v.to_string())),
        ("workers", a.workers.map(|v| v.to_string())),
        ("client_threads", a.client_threads.map(|v| v.to_string())),
    ] {
        if axes.contains(&name) {
            s.push((name, or_default(v)));
        }
    }
    s
}

/// A value on one line: the file has one setting per line.
fn one_line(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r")
}

/// Writes `preset`'s settings file for the rows this invocation starts.
pub fn write(preset: Preset, o: &SweepOptions) -> Result<()> {
    let p = path(preset, &o.out);
    let mut text = format!(
        "# The settings every row of {}.csv was measured under; a `boomctl sweep --resume` must give the same.\n",
        preset.name()
    );
    for (k, v) in settings(preset, o) {
        text.push_str(&format!("{k} = {v}\n"));
    }
    std::fs::write(&p, text).map_err(io_err(&p))
}

/// Refuses a resume of `preset` under settings other than those its rows were
/// measured under (its settings file; none: an earlier version's CSV, not checked).
pub fn check(preset: Preset, o: &SweepOptions) -> Result<()> {
    let p = path(preset, &o.out);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(&p)(e)),
    };
    let recorded: Vec<(&str, &str)> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let differ: Vec<String> = settings(preset, o)
        .into_iter()
        .filter_map(|(k, now)| {
            let (_, was) = recorded.iter().find(|(rk, _)| *rk == k)?;
            (*was != now).then(|| format!("{} {was} (now {now})", k.replace('_', "-")))
        })
        .collect();
    if differ.is_empty() {
        return Ok(());
    }
    Err(SweepError::Invalid(format!(
        "--resume: the runs in {} were made with {}: resume with those settings, or start again with \
         --overwrite or --out another directory",
        preset.csv_path(&o.out).display(),
        differ.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::sweep::presets::{latency, peers};

    fn opts(dir: &Path) -> SweepOptions {
        SweepOptions::new(vec![latency::PRESET], dir.to_path_buf())
    }

    #[test]
    fn a_resume_under_other_settings_is_refused_and_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        o.axes.ops = Some(200);
        write(latency::PRESET, &o).unwrap();
        check(latency::PRESET, &o).unwrap();
        // What varies between points, and the repeats, may differ.
        o.repeats = 5;
        o.axes.sizes = Some(vec![32, 4096]);
        check(latency::PRESET, &o).unwrap();

        o.backend = crate::transport::Backend::Tcp;
        o.axes.ops = Some(300);
        let e = check(latency::PRESET, &o).unwrap_err().to_string();
        assert!(e.contains("transport shm (now tcp)"), "{e}");
        assert!(e.contains("ops 200 (now 300)"), "{e}");
        assert!(e.contains("latency.csv"), "{e}");
    }

    #[test]
    fn only_the_axes_a_preset_uses_are_its_settings() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(dir.path());
        let names: Vec<&str> = settings(latency::PRESET, &o).into_iter().map(|s| s.0).collect();
        assert!(names.contains(&"ops") && names.contains(&"workers"), "{names:?}");
        assert!(!names.contains(&"client_threads") && !names.contains(&"keys"), "{names:?}");
        let peers: Vec<&str> = settings(peers::PRESET, &o).into_iter().map(|s| s.0).collect();
        assert!(peers.contains(&"client_threads") && peers.contains(&"keys"), "{peers:?}");
    }

    #[test]
    fn no_settings_file_is_an_earlier_versions_csv_and_is_not_checked() {
        let dir = tempfile::tempdir().unwrap();
        check(latency::PRESET, &opts(dir.path())).unwrap();
    }

    #[test]
    fn a_path_with_a_line_break_stays_one_setting() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path());
        o.pmem_dir = Some(PathBuf::from("/mnt/pm\nquick = true"));
        write(latency::PRESET, &o).unwrap();
        check(latency::PRESET, &o).unwrap();
        o.pmem_dir = Some(PathBuf::from("/mnt/pm"));
        let e = check(latency::PRESET, &o).unwrap_err().to_string();
        assert!(e.contains("pmem /mnt/pm\\nquick = true (now /mnt/pm)"), "{e}");
    }
}
