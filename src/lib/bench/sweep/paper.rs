//! The paper's reported results (BOOM-KV, High Technology Letters 2023, section 4), as
//! and the reductions it reports that a run is judged against (its headline numbers:
//! figures 13 and 14).
//!
//! Reductions and gains are percentages of the baseline: `-42` means BOOM's latency
//! is 42% below the baseline's, `+40.5` means 40.5% more throughput.

use crate::wire::Protocol;

/// What the paper reports for one comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaperValue {
    /// The figure.
    pub figure: &'static str,
    /// A single value (percent), when the paper gives one.
    pub value: Option<f64>,
    /// The paper's statement as printed in tables (`-42%`, `-10% to -42%`).
    pub text: &'static str,
}

const fn v(figure: &'static str, value: f64, text: &'static str) -> Option<PaperValue> {
    Some(PaperValue { figure, value: Some(value), text })
}

const fn r(figure: &'static str, text: &'static str) -> Option<PaperValue> {
    Some(PaperValue { figure, value: None, text })
}

/// PUT or GET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// PUT.
    Put,
    /// GET.
    Get,
}

impl Op {
    /// `PUT` / `GET`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "PUT",
            Op::Get => "GET",
        }
    }
}

/// BOOM's latency reduction against `baseline` at value size `size` (figures 13 and 14; 6 and 7 against RDMP-KV).
pub fn latency_reduction(op: Op, baseline: Protocol, size: u64) -> Option<PaperValue> {
    match (op, baseline) {
        (Op::Put, Protocol::Rdmp) => match size {
            32 => v("13", -42.0, "-42%"),
            1024 => v("6", -31.6, "-31.6%"),
            16384 => v("6", -17.5, "-17.5%"),
            _ => r("13", "-10% to -42%"),
        },
        (Op::Get, Protocol::Rdmp) => match size {
            32 => v("14", -41.0, "-41%"),
            s if s <= 4096 => r("14", "-30% or more"),
            _ => r("7", "up to -37%"),
        },
        (Op::Put, Protocol::Rpc) => match size {
            s if s <= 1024 => r("13", "higher (> 0%)"),
            _ => r("13", "-5% to -13%"),
        },
        (Op::Get, Protocol::Rpc) => match size {
            s if s <= 1024 => v("14", -8.0, "-8%"),
            _ => r("14", "-38% to -44%"),
        },
        _ => None,
    }
}

/// A reduction the paper reports: BOOM at least `pct` percent below `baseline` (`pct` > 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    /// The operation.
    pub op: Op,
    /// The baseline.
    pub baseline: Protocol,
    /// Required reduction in percent (positive).
    pub pct: f64,
    /// In words.
    pub text: &'static str,
}

/// The paper's headline reduction for `op` against `baseline` at `size`, if it reports
/// one: PUT and GET at 32 B 42% and 41% below RDMP-KV (figures 13, 14); GET above 1 KiB
/// at least 38% below RDMA-KV (figure 14).
pub fn latency_target(op: Op, baseline: Protocol, size: u64) -> Option<Target> {
    match (op, baseline) {
        (Op::Put, Protocol::Rdmp) if size == 32 => {
            Some(Target { op, baseline, pct: 42.0, text: "PUT at 32 B at least 42% below RDMP-KV" })
        }
        (Op::Get, Protocol::Rdmp) if size == 32 => {
            Some(Target { op, baseline, pct: 41.0, text: "GET at 32 B at least 41% below RDMP-KV" })
        }
        (Op::Get, Protocol::Rpc) if size > 1024 => {
            Some(Target { op, baseline, pct: 38.0, text: "GET above 1 KiB at least 38% below RDMA-KV" })
        }
        _ => None,
    }
}

/// YCSB average latency reduction against RDMP-KV over the sizes (figures 15-17).
pub fn ycsb_reduction(mix: char) -> Option<PaperValue> {
    match mix {
        'a' => r("15", "-13.4% to -41.5%"),
        'b' => r("16", "-18.2% to -41.7%"),
        'c' => r("17", "-18.4% to -41.5%"),
        _ => None,
    }
}

/// Multi-thread throughput gain at 2 KiB (figures 18, 19).
pub fn threads_gain(op: Op, baseline: Protocol) -> Option<PaperValue> {
    match (op, baseline) {
        (Op::Put, Protocol::Rdmp) => r("18", "+40.5% to +46.7%"),
        (Op::Put, Protocol::Rpc) => r("18", "+7.2% to +22.1%"),
        (Op::Get, Protocol::Rdmp) => r("19", "+56.7% to +61.7%"),
        (Op::Get, Protocol::Rpc) => r("19", "+47.5% to +48.9%"),
        _ => None,
    }
}

/// PUT throughput gain of cooperative write-back, 2 clients (figures 11, 12).
pub fn writeback_gain(flush: &str, size: u64) -> Option<PaperValue> {
    match (flush, size) {
        ("clflush", 4096) => v("11", 25.0, "+25%"),
        ("clflush", 8192) => v("11", 23.5, "+23.5%"),
        ("clflush", 16384) => v("11", 14.8, "+14.8%"),
        ("clwb", 4096) => v("12", 0.0, "~0"),
        ("clwb", 8192) => v("12", 6.4, "+6.4%"),
        ("clwb", 16384) => v("12", 24.9, "+24.9%"),
        _ => None,
    }
}

/// PM space change of hybrid updates against append-only, 1 GB of 100% PUT (figure 9).
pub fn skew_saving(theta: &str) -> Option<PaperValue> {
    match theta {
        "uniform" => v("9", 0.0, "no saving"),
        "0.99" => v("9", -57.2, "-57.2%"),
        "1.1" => v("9", -76.5, "-76.5%"),
        _ => None,
    }
}

/// The breakdown headlines (figures 1, 2).
pub const METADATA_SHARE_PUT_64: PaperValue =
    PaperValue { figure: "1", value: Some(41.4), text: "41.4% of a 64 B RDMP-KV PUT" };
/// The metadata phase of a 64 B GET.
pub const METADATA_SHARE_GET_64: PaperValue =
    PaperValue { figure: "1", value: Some(57.5), text: "57.5% of a 64 B RDMP-KV GET" };
/// Flush share of a 16 KB PUT.
pub const FLUSH_SHARE_PUT_16K: PaperValue = PaperValue { figure: "2", value: Some(41.2), text: "41.2% of a 16 KB PUT" };

/// Segment size (figures 8, 10): qualitative.
pub const SEGMENT_SIZE: &str = "bigger segment: higher throughput, lower latency (fig. 8), more saving (fig. 10)";
