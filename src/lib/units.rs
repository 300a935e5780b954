//! Byte sizes as users type them (`2k`, `64MiB`, `1G`) and as reports print them.

use crate::error::{Error, Result};

/// Parses a byte count: a number with an optional binary suffix, any case: `k`,
/// `KiB` (1024), `m`, `MiB`, `g`, `GiB`, `t`, `TiB`; `b` or none for bytes.
///
/// `kb`, `KB`, `MB`... are refused: they mean 1000 to some and 1024 to others, and a
/// silent guess either way mis-sizes a benchmark. Every unit here is a power of 1024.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(Error::invalid(format!("'{s}': a size cannot be negative")));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, suf) = t.split_at(split);
    let suf = suf.trim();
    let mult: u64 = match suf.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" | "mb" | "gb" | "tb" => {
            let unit = &suf[..1];
            return Err(Error::invalid(format!(
                "'{s}' is ambiguous ({}B means 1000 or 1024): write {num}{unit} or {num}{}iB for powers of 1024, \
                 or the number of bytes",
                unit.to_ascii_uppercase(),
                unit.to_ascii_uppercase()
            )));
        }
        other => {
            return Err(Error::invalid(format!(
                "'{s}': unknown size suffix '{other}' (use k, M, G or T; or KiB, MiB...)"
            )))
        }
    };
    if num.is_empty() {
        return Err(Error::invalid(format!("'{s}' is not a size (examples: 64, 2k, 64M, 1G)")));
    }
    let v: f64 = num.parse().map_err(|_| Error::invalid(format!("'{s}' is not a size (examples: 64, 2k, 64M, 1G)")))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(Error::invalid(format!("'{s}' is out of range")));
    }
    if bytes.fract() != 0.0 {
        return Err(Error::invalid(format!("'{s}' is not a whole number of bytes")));
    }
    Ok(bytes as u64)
}

/// `n` and `noun`, plural when `n` is not 1: `1 segment`, `4 segments`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The `n` segments from `first` for people, ends included: `segment 2`,
/// `segments 3 to 12` (`3..13` read as overlapping the next run, which began at 13).
pub fn segment_span(first: u64, n: u64) -> String {
    match n {
        0 => "no segment".into(),
        1 => format!("segment {first}"),
        n => format!("segments {first} to {}", first.saturating_add(n - 1)),
    }
}

/// Formats a byte count for people: `512 B`, `2.0 KiB`, `1.50 GiB`.
pub fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", U[i])
    } else if v >= 10.0 {
        format!("{v:.1} {}", U[i])
    } else {
        format!("{v:.2} {}", U[i])
    }
}

/// Formats a size compactly for labels and file names: `32`, `2k`, `16k`, `64M`, `1G`.
pub fn short_bytes(b: u64) -> String {
    for (shift, s) in [(40, "T"), (30, "G"), (20, "M"), (10, "k")] {
        if b >= 1 << shift && b % (1 << shift) == 0 {
            return format!("{}{s}", b >> shift);
        }
    }
    b.to_string()
}

/// The calendar date (UTC) of `days` days after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`), as (year, month, day).
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    #[test]
    fn spans_of_segments_include_their_ends() {
        assert_eq!(segment_span(2, 1), "segment 2");
        assert_eq!(segment_span(3, 10), "segments 3 to 12");
        assert_eq!(count(1, "segment"), "1 segment");
        assert_eq!(count(0, "segment"), "0 segments");
        assert!(parse_bytes("-1").unwrap_err().to_string().contains("negative"));
    }

    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(59), (1970, 3, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_781), (2026, 11, 24));
        assert_eq!(civil_date(-1), (1969, 12, 31));
    }

    #[test]
    fn parses_what_users_type() {
        assert_eq!(parse_bytes("64").unwrap(), 64);
        assert_eq!(parse_bytes("2k").unwrap(), 2048);
        assert_eq!(parse_bytes("2K").unwrap(), 2048);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1G").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("1.5k").unwrap(), 1536);
        assert_eq!(parse_bytes(" 16 kib ").unwrap(), 16384);
        for ambiguous in ["16kb", "16KB", "16kB", "1MB", "1gb", "2TB"] {
            let e = parse_bytes(ambiguous).unwrap_err().to_string();
            assert!(e.contains("ambiguous"), "{ambiguous}: {e}");
        }
        for bad in ["", "k", "12q", "-1", "1.3", "abc", "1e400"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_for_people_and_labels() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(2048), "2.00 KiB");
        assert_eq!(human_bytes(1 << 30), "1.00 GiB");
        assert_eq!(short_bytes(2048), "2k");
        assert_eq!(short_bytes(64 << 20), "64M");
        assert_eq!(short_bytes(100), "100");
    }
}
