//! Value sizes: `--size 2k` (constant), `--size 32..16k` (uniform), or YCSB's
//! record model (`fieldcount` fields of `fieldlength` bytes from
//! `fieldlengthdistribution`).
//!
//! Size syntax (the `boomkv.valuesize` property and `--size`):
//!
//! | text | meaning |
//! |---|---|
//! | `100`, `100b` | 100 bytes |
//! | `2k`, `2K`, `2KiB` | 2048 bytes (all units are powers of 1024; `2kb` is refused as ambiguous) |
//! | `1m`, `1MiB` | 1048576 bytes; `g` likewise |
//! | `32..16k` | uniform over 32..=16384 bytes |
//! | `32..16k:zipfian` | YCSB-Zipfian over 32..=16384, shortest most popular |
//! | `32..16k:uniform` | same as `32..16k` |

use std::fmt;

use super::generator::{UniformGenerator, ZipfianGenerator};
use super::rng::WorkloadRng;
use crate::error::{Error, Result};

/// How the size of each written value is chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueSize {
    /// Always this many bytes.
    Constant(u64),
    /// Uniform over `min..=max` bytes.
    Uniform {
        /// Smallest size.
        min: u64,
        /// Largest size.
        max: u64,
    },
    /// YCSB's `ZipfianGenerator(min, max)`: `min` most popular.
    Zipfian {
        /// Smallest (most popular) size.
        min: u64,
        /// Largest size.
        max: u64,
    },
    /// YCSB's record: the sum of `count` draws of `field` (CoreWorkload's
    /// `buildValues`: `fieldcount` fields from `fieldlengthdistribution`).
    Fields {
        /// `fieldcount`.
        count: u64,
        /// The size of one field.
        field: Box<ValueSize>,
    },
}

impl ValueSize {
    /// Parses `--size` syntax (see the module docs). `what` names the source in errors
    /// (e.g. "--size" or "property `boomkv.valuesize`").
    pub fn parse(text: &str, what: &str) -> Result<ValueSize> {
        let t = text.trim();
        let err = |why: String| Error::invalid(format!("{what}: invalid value size `{text}`: {why}"));
        let (range, dist) = match t.rsplit_once(':') {
            Some((r, d)) => (r.trim(), Some(d.trim())),
            None => (t, None),
        };
        match range.split_once("..") {
            None => {
                if dist.is_some() {
                    return Err(err("a distribution needs a range, e.g. `32..16k:zipfian`".into()));
                }
                let n = parse_bytes(range).map_err(err)?;
                if n == 0 {
                    return Err(err("a value needs at least 1 byte".into()));
                }
                Ok(ValueSize::Constant(n))
            }
            Some((lo, hi)) => {
                let min = parse_bytes(lo.trim()).map_err(&err)?;
                let max = parse_bytes(hi.trim()).map_err(&err)?;
                if min > max {
                    return Err(err(format!("range start {min} is above its end {max}")));
                }
                if min == 0 {
                    return Err(err("a value needs at least 1 byte: start the range at 1 or more".into()));
                }
                match dist.map(str::to_ascii_lowercase).as_deref() {
                    None | Some("uniform") => Ok(ValueSize::Uniform { min, max }),
                    Some("zipfian") => Ok(ValueSize::Zipfian { min, max }),
                    Some(other) => Err(err(format!("unknown distribution `{other}` (uniform or zipfian)"))),
                }
            }
        }
    }

    /// Smallest size this can produce.
    pub fn min(&self) -> u64 {
        match self {
            ValueSize::Constant(n) => *n,
            ValueSize::Uniform { min, .. } | ValueSize::Zipfian { min, .. } => *min,
            ValueSize::Fields { count, field } => count * field.min(),
        }
    }

    /// Largest size this can produce.
    pub fn max(&self) -> u64 {
        match self {
            ValueSize::Constant(n) => *n,
            ValueSize::Uniform { max, .. } | ValueSize::Zipfian { max, .. } => *max,
            ValueSize::Fields { count, field } => count * field.max(),
        }
    }

    /// A per-thread chooser drawing sizes from this distribution.
    pub fn chooser(&self) -> Result<SizeChooser> {
        Ok(match self {
            ValueSize::Constant(n) => SizeChooser::Constant(*n),
            ValueSize::Uniform { min, max } => SizeChooser::Uniform(UniformGenerator::new(*min, *max)?),
            ValueSize::Zipfian { min, max } => SizeChooser::Zipfian(ZipfianGenerator::new(*min, *max)?),
            ValueSize::Fields { count, field } => match field.chooser()? {
                // Constant fields: no need to draw `count` times.
                SizeChooser::Constant(n) => SizeChooser::Constant(count * n),
                inner => SizeChooser::Fields(*count, Box::new(inner)),
            },
        })
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSize::Constant(n) => write!(f, "{}", format_bytes(*n)),
            ValueSize::Uniform { min, max } => write!(f, "{}..{}", format_bytes(*min), format_bytes(*max)),
            ValueSize::Zipfian { min, max } => write!(f, "{}..{}:zipfian", format_bytes(*min), format_bytes(*max)),
            ValueSize::Fields { count, field } => write!(f, "{count} x ({field})"),
        }
    }
}

/// Serialised as its `--size` spelling (`"2k"`, `"32..16k"`).
impl serde::Serialize for ValueSize {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// `2048` -> `2k`, `100` -> `100`: the shortest exact `--size` spelling.
pub fn format_bytes(n: u64) -> String {
    for (shift, unit) in [(30, "g"), (20, "m"), (10, "k")] {
        if n != 0 && n % (1u64 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// A byte count in `--size` syntax: [`crate::units::parse_bytes`], whole bytes only.
pub fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    crate::units::parse_bytes(text).map_err(|e| match e {
        Error::Invalid(msg) => msg,
        other => other.to_string(),
    })
}

/// Draws value sizes (one per thread).
#[derive(Clone, Debug)]
pub enum SizeChooser {
    /// Always this size.
    Constant(u64),
    /// Uniform.
    Uniform(UniformGenerator),
    /// Zipfian.
    Zipfian(ZipfianGenerator),
    /// Sum of several draws.
    Fields(u64, Box<SizeChooser>),
}

impl SizeChooser {
    /// The next size in bytes.
    pub fn next(&mut self, rng: &mut WorkloadRng) -> u64 {
        match self {
            SizeChooser::Constant(n) => *n,
            SizeChooser::Uniform(g) => g.next(rng),
            SizeChooser::Zipfian(g) => g.next(rng),
            SizeChooser::Fields(count, inner) => (0..*count).map(|_| inner.next(rng)).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(ValueSize::parse("2k", "--size").unwrap(), ValueSize::Constant(2048));
        assert_eq!(ValueSize::parse(" 100 ", "--size").unwrap(), ValueSize::Constant(100));
        assert_eq!(ValueSize::parse("1KiB", "--size").unwrap(), ValueSize::Constant(1024));
        assert_eq!(ValueSize::parse("1m", "--size").unwrap(), ValueSize::Constant(1 << 20));
        assert_eq!(ValueSize::parse("32..16k", "--size").unwrap(), ValueSize::Uniform { min: 32, max: 16384 });
        assert_eq!(ValueSize::parse("32..16k:zipfian", "--size").unwrap(), ValueSize::Zipfian { min: 32, max: 16384 });
        for zero in ["0", "0..1k"] {
            assert!(ValueSize::parse(zero, "--size").unwrap_err().to_string().contains("at least 1 byte"), "{zero}");
        }
        for ambiguous in ["2kb", "2KB", "1MB", "1gb"] {
            assert!(
                ValueSize::parse(ambiguous, "--size").unwrap_err().to_string().contains("ambiguous"),
                "{ambiguous}"
            );
        }
    }

    #[test]
    fn rejects_bad_sizes_with_the_source_named() {
        for bad in ["", "k", "2x", "16k..32", "1..2:pareto", "2k:zipfian", "99999999999999999999", "20000000000g"] {
            let e = ValueSize::parse(bad, "--size").unwrap_err().to_string();
            assert!(e.starts_with("--size: invalid value size"), "{bad}: {e}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["2k", "100", "32..16k", "1..1m:zipfian"] {
            let v = ValueSize::parse(text, "t").unwrap();
            assert_eq!(v.to_string(), text);
            assert_eq!(ValueSize::parse(&v.to_string(), "t").unwrap(), v);
        }
    }

    #[test]
    fn choosers_stay_in_range() {
        let mut rng = WorkloadRng::new(1, 0);
        let mut u = ValueSize::Uniform { min: 32, max: 16384 }.chooser().unwrap();
        let mut z = ValueSize::Zipfian { min: 32, max: 16384 }.chooser().unwrap();
        let mut small = 0;
        for _ in 0..10_000 {
            assert!((32..=16384).contains(&u.next(&mut rng)));
            let s = z.next(&mut rng);
            assert!((32..=16384).contains(&s));
            if s < 64 {
                small += 1;
            }
        }
        assert!(small > 2_000, "zipfian sizes favour the smallest: {small}");
        let f = ValueSize::Fields { count: 10, field: Box::new(ValueSize::Constant(100)) };
        assert_eq!(f.chooser().unwrap().next(&mut rng), 1000);
        let f = ValueSize::Fields { count: 10, field: Box::new(ValueSize::Uniform { min: 1, max: 100 }) };
        let mut c = f.chooser().unwrap();
        assert!((10..=1000).contains(&c.next(&mut rng)));
        assert_eq!((f.min(), f.max()), (10, 1000));
    }
}
