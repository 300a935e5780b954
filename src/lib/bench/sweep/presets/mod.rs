//! The sweep's presets, one file each behind [`PresetDef`]: its grid, its CSV columns
//! (a constant), what a point runs, its figures and its summary. The driver
//! ([`super::run`], [`super::render`]) knows no preset by name: it walks
//! [`Preset::ALL`], the one list here.
//!
//! A new preset is a file with a `PRESET` constant and a line in [`Preset::ALL`]. Its
//! coordinates are its own type, stored in the [`Point`] and read back with
//! [`Point::params`]; shared measurements (the transport floor, the request
//! components) come from the [`Context`].
//!
//! May import: the sweep's driver types, [`super::context`], [`super::plot`],
//! [`super::summary`], [`super::paper`], and the rooms below `bench`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::context::Context;
use super::plot::Figure;
use super::summary::Builder;
use super::{Point, Result, Row, SweepError, SweepOptions, Table};

pub mod breakdown;
pub mod latency;
pub mod peers;
pub mod segment_size;
pub mod skew;
pub mod space;
pub mod threads;
pub mod transport;
pub mod writeback;
pub mod ycsb;

/// What a preset says about itself.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// The name on the command line and of the CSV file.
    pub name: &'static str,
    /// One line for `--help`: what it measures.
    pub about: &'static str,
    /// The paper's figures the preset reproduces.
    pub reproduces: &'static str,
    /// What a point runs, for SETUP.md.
    pub method: &'static str,
    /// The CSV columns, in order (the first ones are [`super::context::COMMON`]).
    pub columns: &'static [&'static str],
    /// Whether the preset varies the server's settings (so it needs embedded servers).
    pub needs_embedded: bool,
    /// The axes ([`super::Axes`], by field name) it reads: one given to a sweep whose
    /// presets read none of them is refused, not ignored.
    pub axes: &'static [&'static str],
}

/// What a preset is: everything the driver asks of it.
pub trait PresetDef: Sync {
    /// Its name, figures, method and columns.
    fn meta(&self) -> &'static Meta;
    /// The grid: defaults (quick or full) with the user's overrides.
    fn grid(&self, o: &SweepOptions) -> Result<Vec<Point>>;
    /// Called before the preset's points run (to share measurements among them).
    fn begin(&self, _cx: &mut Context<'_>, _points: &[Point]) {}
    /// Runs one point and fills its columns of `row`.
    fn run(&self, cx: &mut Context<'_>, pt: &Point, row: &mut Row) -> Result<()>;
    /// The figures, from the preset's table (and derived CSVs in `dir`).
    fn plots(&self, t: &Table, dir: &Path) -> Result<Vec<Figure>>;
    /// The summary section (may write derived CSVs into `dir`).
    fn summarize(&self, t: &Table, b: &mut Builder, dir: &Path) -> Result<()>;
}

/// A preset: a handle on its [`PresetDef`], compared and ordered by name.
#[derive(Clone, Copy)]
pub struct Preset(&'static dyn PresetDef);

impl Preset {
    /// Every preset, in the order `all` runs them.
    pub const ALL: [Preset; 9] = [
        transport::PRESET,
        latency::PRESET,
        breakdown::PRESET,
        ycsb::PRESET,
        segment_size::PRESET,
        skew::PRESET,
        writeback::PRESET,
        threads::PRESET,
        peers::PRESET,
    ];

    /// The handle of a definition.
    pub const fn new(def: &'static dyn PresetDef) -> Preset {
        Preset(def)
    }

    /// What it says about itself.
    pub fn meta(self) -> &'static Meta {
        self.0.meta()
    }

    /// The definition.
    pub fn def(self) -> &'static dyn PresetDef {
        self.0
    }

    /// The name on the command line and of the CSV file.
    pub fn name(self) -> &'static str {
        self.0.meta().name
    }

    /// The paper's figures this preset reproduces.
    pub fn figures(self) -> &'static str {
        self.0.meta().reproduces
    }

    /// The CSV file of this preset in `dir`.
    pub fn csv_path(self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.csv", self.name()))
    }

    /// The CSV columns, in order.
    pub fn columns(self) -> &'static [&'static str] {
        self.0.meta().columns
    }

    /// Whether the preset needs an embedded server (it varies the server's settings).
    pub fn needs_embedded(self) -> bool {
        self.0.meta().needs_embedded
    }
}

/// The `--help` text of the presets: one line each, with the paper's figures.
pub fn help() -> String {
    let mut s = String::from("Presets:\n");
    for p in Preset::ALL {
        let m = p.meta();
        s.push_str(&format!("  {:<13} {}\n  {:<13}   ({})\n", m.name, m.about, "", m.reproduces));
    }
    s.push_str(&format!("  {:<13} every preset\n", "all"));
    s
}

impl PartialEq for Preset {
    fn eq(&self, other: &Preset) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Preset {}

impl std::hash::Hash for Preset {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name().hash(h);
    }
}

impl fmt::Debug for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Preset({})", self.name())
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = SweepError;
    fn from_str(s: &str) -> Result<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == s.trim().to_ascii_lowercase()).ok_or_else(|| {
            SweepError::Invalid(format!(
                "unknown preset '{s}' (expected all, {})",
                Preset::ALL.map(Preset::name).join(", ")
            ))
        })
    }
}

/// What every preset file imports.
mod prelude {
    pub(super) use super::super::context::{cols, Context};
    pub(super) use super::super::plot::Figure;
    pub(super) use super::super::summary::Builder;
    pub(super) use super::super::{Point, Result, Row, SweepError, SweepOptions, Table};
    pub(super) use super::{transport_of, Meta, Preset, PresetDef};
}

/// The transport of a table's runs (its first row), for figure titles.
fn transport_of(t: &Table) -> String {
    t.rows.first().map(|r| r.get(2).cloned().unwrap_or_default()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_columns_start_alike() {
        let mut names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Preset::ALL.len());
        for p in Preset::ALL {
            let common = super::super::context::COMMON;
            assert_eq!(&p.columns()[..common.len()], &common, "{p}");
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
    }
}
