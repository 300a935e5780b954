//! YCSB's status lines (`StatusThread`): what a running benchmark prints on standard
//! error every `status.interval` seconds, first at 0 s and once more at the end:
//!
//! ```text
//! 2026-11-24 03:12:44:517 10 sec: 123456 operations; 12345.6 current ops/sec; est completion in 1 minute [READ: Count=61728, Max=812, Min=3, Avg=7.9, 90=11, 99=17, 99.9=35, 99.99=120] [UPDATE: ...]
//! ```
//!
//! Latencies are YCSB's whole microseconds over the interval since the previous
//! line. Numbers print like Java's `DecimalFormat("#.##")` and the remaining time like
//! YCSB's `RemainingFormatter` (its quirks included: " second " for one digit). The
//! time stamp is UTC (YCSB uses the JVM's time zone).

use std::time::{SystemTime, UNIX_EPOCH};

use super::measure::Measurements;

/// Java's `new DecimalFormat("#.##").format(v)`: at most two decimals, half-even,
/// no trailing zeros.
pub fn decimal2(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞".into() } else { "-∞".into() };
    }
    let s = format!("{v:.2}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if s == "-0" {
        "-0".into()
    } else {
        s
    }
}

/// YCSB's `RemainingFormatter.format(seconds)`.
pub fn remaining(mut seconds: i64) -> String {
    let mut t = String::new();
    let days = seconds / 86_400;
    if days > 0 {
        t.push_str(&format!("{days}{}", if days == 1 { " day " } else { " days " }));
        seconds -= days * 86_400;
    }
    let hours = seconds / 3600;
    if hours > 0 {
        t.push_str(&format!("{hours}{}", if hours == 1 { " hour " } else { " hours " }));
        seconds -= hours * 3600;
    }
    if days < 1 {
        let minutes = seconds / 60;
        if minutes > 0 {
            t.push_str(&format!("{minutes}{}", if minutes == 1 { " minute " } else { " minutes " }));
        }
    }
    if t.is_empty() {
        let digits = seconds.to_string();
        // YCSB tests the length after appending the number: one digit reads " second ".
        let unit = if digits.len() == 1 { " second " } else { " seconds " };
        t = format!("{digits}{unit}");
    }
    t
}

/// `yyyy-MM-dd HH:mm:ss:SSS` in UTC.
pub fn timestamp(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::units::civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}:{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// `[NAME: Count=, Max=, Min=, Avg=, 90=, 99=, 99.9=, 99.99=]` for each series of
/// `interval`, space-separated with a trailing space (YCSB's `Measurements.getSummary`).
pub fn summary(interval: &Measurements) -> String {
    let mut out = String::new();
    for (name, series) in interval.series() {
        let h = series.truncated_us();
        let (max, min, mean) = if h.is_empty() { (0, 0, 0.0) } else { (h.max(), h.min(), h.mean()) };
        let at = |p: f64| if h.is_empty() { 0 } else { h.value_at_percentile(p) };
        out.push_str(&format!(
            "[{name}: Count={}, Max={max}, Min={min}, Avg={}, 90={}, 99={}, 99.9={}, 99.99={}] ",
            h.len(),
            decimal2(mean),
            at(90.0),
            at(99.0),
            at(99.9),
            at(99.99)
        ));
    }
    out
}

/// The numbers of one status line.
#[derive(Clone, Copy, Debug)]
pub struct StatusPoint {
    /// Milliseconds since the phase started.
    pub elapsed_ms: u64,
    /// Milliseconds since the previous line.
    pub interval_ms: u64,
    /// Operations done so far.
    pub total_ops: u64,
    /// Operations done at the previous line.
    pub last_total_ops: u64,
    /// Operations still to do (0: unknown or done).
    pub todo_ops: u64,
}

/// One status line, as YCSB's `StatusThread.computeStats` prints it.
pub fn line(now: SystemTime, p: &StatusPoint, interval: &Measurements) -> String {
    let mut msg = format!("{} {} sec: {} operations; ", timestamp(now), p.elapsed_ms / 1000, p.total_ops);
    // A line in the same millisecond as the one before (the last, when the run ends
    // just after a tick) has no interval to divide by: no rate, not NaN.
    if p.total_ops != 0 && p.interval_ms != 0 {
        let cur = 1000.0 * (p.total_ops - p.last_total_ops.min(p.total_ops)) as f64 / p.interval_ms as f64;
        msg.push_str(&format!("{} current ops/sec; ", decimal2(cur)));
    }
    if p.todo_ops != 0 {
        let throughput = 1000.0 * p.total_ops as f64 / p.elapsed_ms as f64;
        // Java's (long) Math.ceil(x): NaN is 0, infinities saturate (as Rust's `as`).
        let est = (p.todo_ops as f64 / throughput).ceil() as i64;
        msg.push_str("est completion in ");
        msg.push_str(&remaining(est));
    }
    msg.push_str(&summary(interval));
    msg
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::measure::{MeasurementInterval, Status};

    #[test]
    fn numbers_format_like_java() {
        assert_eq!(decimal2(7.0), "7");
        assert_eq!(decimal2(7.899), "7.9");
        assert_eq!(decimal2(12345.678), "12345.68");
        assert_eq!(decimal2(0.004), "0");
        assert_eq!(remaining(0), "0 second ");
        assert_eq!(remaining(42), "42 seconds ");
        assert_eq!(remaining(61), "1 minute ");
        assert_eq!(remaining(3 * 3600 + 120), "3 hours 2 minutes ");
        assert_eq!(remaining(86_400 + 3600 + 60), "1 day 1 hour ");
        assert_eq!(timestamp(UNIX_EPOCH + Duration::from_millis(1_795_000_000_123)), "2026-11-18 11:06:40:123");
    }

    #[test]
    fn status_line_has_ycsbs_parts() {
        let mut m = Measurements::new(MeasurementInterval::Op);
        for us in [3u64, 5, 10, 812] {
            m.record("READ", Duration::from_nanos(us * 1000 + 700), Status::Ok);
        }
        let p = StatusPoint { elapsed_ms: 10_000, interval_ms: 10_000, total_ops: 4, last_total_ops: 0, todo_ops: 36 };
        let l = line(UNIX_EPOCH, &p, &m);
        assert_eq!(
            l,
            "1970-01-01 00:00:00:000 10 sec: 4 operations; 0.4 current ops/sec; est completion in 1 minute \
             [READ: Count=4, Max=812, Min=3, Avg=207.5, 90=812, 99=812, 99.9=812, 99.99=812] "
        );
        // The first line: nothing done, nothing known.
        let first = StatusPoint { elapsed_ms: 0, interval_ms: 0, total_ops: 0, last_total_ops: 0, todo_ops: 100 };
        let l = line(UNIX_EPOCH, &first, &Measurements::new(MeasurementInterval::Op));
        assert_eq!(l, "1970-01-01 00:00:00:000 0 sec: 0 operations; est completion in 0 second ");
        // A last line in the same millisecond as the one before: no rate (it read NaN).
        let last = StatusPoint { elapsed_ms: 1000, interval_ms: 0, total_ops: 1000, last_total_ops: 1000, todo_ops: 0 };
        let l = line(UNIX_EPOCH, &last, &Measurements::new(MeasurementInterval::Op));
        assert_eq!(l, "1970-01-01 00:00:00:000 1 sec: 1000 operations; ");
    }
}
