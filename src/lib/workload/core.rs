//! The operation stream: boomkv's equivalent of YCSB's `CoreWorkload`.
//!
//! [`CoreConfig`] is the typed, validated form of a [`WorkloadSpec`];
//! [`CoreWorkload`] holds what all threads share (insert counters, precomputed
//! generator constants); [`OpStream`] is one thread's seeded stream of [`Op`]s.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::generator::{
    AcknowledgedCounter, DiscreteGenerator, ExponentialGenerator, HotspotGenerator, ScrambledZipfianGenerator,
    SequentialGenerator, SkewedLatestGenerator, UniformGenerator, ZipfianGenerator, ZIPFIAN_CONSTANT,
};
use super::keys::{InsertOrder, KeyNamer};
use super::properties::{names, WorkloadSpec};
use super::rng::WorkloadRng;
use super::size::{SizeChooser, ValueSize};
use crate::error::{Error, Result};

/// Largest `zeropadding`: "user" and a number padded this far make a key of 1024 bytes,
/// the longest boomkv stores (`log::format::MAX_KEY_LEN`, which this room may not import;
/// a test keeps the two together).
pub const MAX_ZERO_PADDING: u64 = 1020;

/// The kind of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum OpKind {
    /// Read one record.
    Read,
    /// Overwrite one record.
    Update,
    /// Insert a new record.
    Insert,
    /// Read `scan_len` records in key order from a start key.
    Scan,
    /// Read a record, then update it.
    ReadModifyWrite,
}

impl OpKind {
    /// All kinds, in YCSB's chooser order.
    pub const ALL: [OpKind; 5] = [OpKind::Read, OpKind::Update, OpKind::Insert, OpKind::Scan, OpKind::ReadModifyWrite];

    /// The measurement name YCSB reports it under: `READ`, `UPDATE`, `INSERT`,
    /// `SCAN`, `READ-MODIFY-WRITE`.
    ///
    /// YCSB measures a read-modify-write three times: its read as `READ`, its update as
    /// `UPDATE` and the whole as `READ-MODIFY-WRITE`; a runner matching YCSB's report
    /// does the same.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "READ",
            OpKind::Update => "UPDATE",
            OpKind::Insert => "INSERT",
            OpKind::Scan => "SCAN",
            OpKind::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }

    /// True for kinds that write a value (`value_len` is meaningful).
    pub fn writes(self) -> bool {
        matches!(self, OpKind::Update | OpKind::Insert | OpKind::ReadModifyWrite)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Load phase (`doInsert`, keys `insertstart..insertstart+insertcount`) or run phase
/// (`doTransaction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Phase {
    /// Loading the initial records.
    Load,
    /// The measured transaction phase.
    Run,
}

/// One operation to execute.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Op {
    /// What to do.
    pub kind: OpKind,
    /// Load or run phase.
    pub phase: Phase,
    /// The key number (before hashing); for run-phase inserts, the number to
    /// acknowledge with [`OpStream::complete`].
    pub keynum: u64,
    /// The key name (`user...`); for scans, the start key.
    pub key: String,
    /// Bytes to write (updates, inserts, read-modify-writes); 0 otherwise.
    pub value_len: usize,
    /// Records to scan (scans); 0 otherwise.
    pub scan_len: usize,
}

impl fmt::Display for Op {
    /// One line for `--dry-run --print-ops`: the op name padded to 17 columns, the key,
    /// then `value_size=N` for writes or `scan_length=N` for scans.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<17} {}", self.kind.name(), self.key)?;
        if self.kind == OpKind::Scan {
            write!(f, " scan_length={}", self.scan_len)?;
        } else if self.kind.writes() {
            write!(f, " value_size={}", self.value_len)?;
        }
        Ok(())
    }
}

/// Formats one op as a `--print-ops` line (same as its `Display`).
pub fn format_op(op: &Op) -> String {
    op.to_string()
}

/// YCSB's `requestdistribution` (how run-phase keys are chosen).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestDistribution {
    /// Uniform over `insertstart..insertstart+insertcount`.
    Uniform,
    /// Scrambled Zipfian (YCSB's, or boomkv's true Zipf when `boomkv.theta` is set).
    Zipfian,
    /// Skewed towards the most recently inserted keys.
    Latest,
    /// A hot set of keys gets most operations.
    Hotspot {
        /// `hotspotdatafraction` (default 0.2).
        data_fraction: f64,
        /// `hotspotopnfraction` (default 0.8).
        opn_fraction: f64,
    },
    /// Keys in order, wrapping around.
    Sequential,
    /// Exponentially skewed back from the newest key.
    Exponential {
        /// `exponential.percentile` (default 95).
        percentile: f64,
        /// `exponential.frac` (default 0.8571428571).
        frac: f64,
    },
}

/// YCSB's `scanlengthdistribution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanLengthDistribution {
    /// Uniform over `minscanlength..=maxscanlength`.
    Uniform,
    /// YCSB Zipfian (theta 0.99), `minscanlength` most popular.
    Zipfian,
}

/// The typed, validated workload: everything [`CoreWorkload`] needs.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CoreConfig {
    /// `recordcount` (YCSB: 0 or unset means 2147483647).
    pub record_count: u64,
    /// `operationcount`.
    pub operation_count: u64,
    /// `insertstart` (default 0): first key number this client loads.
    pub insert_start: u64,
    /// `insertcount` (default `recordcount - insertstart`).
    pub insert_count: u64,
    /// `readproportion` (default 0.95).
    pub read_proportion: f64,
    /// `updateproportion` (default 0.05).
    pub update_proportion: f64,
    /// `insertproportion` (default 0).
    pub insert_proportion: f64,
    /// `scanproportion` (default 0).
    pub scan_proportion: f64,
    /// `readmodifywriteproportion` (default 0).
    pub read_modify_write_proportion: f64,
    /// `requestdistribution` (default uniform).
    pub request_distribution: RequestDistribution,
    /// `boomkv.theta`: Zipfian constant for `zipfian` and `latest`; `None` = YCSB's.
    pub theta: Option<f64>,
    /// `insertorder` and `zeropadding`.
    pub insert_order: InsertOrder,
    /// `zeropadding` (default 1).
    pub zero_padding: usize,
    /// `minscanlength` (default 1).
    pub min_scan_length: u64,
    /// `maxscanlength` (default 1000).
    pub max_scan_length: u64,
    /// `scanlengthdistribution` (default uniform).
    pub scan_length_distribution: ScanLengthDistribution,
    /// Value size: `boomkv.valuesize`, else `fieldcount` x `fieldlength` from
    /// `fieldlengthdistribution` (default 10 x 100 bytes).
    pub value_size: ValueSize,
}

impl CoreConfig {
    /// Reads and validates every CoreWorkload property of `spec`, with YCSB's defaults.
    pub fn from_spec(spec: &WorkloadSpec) -> Result<CoreConfig> {
        let workload = spec.get_str("workload", "site.ycsb.workloads.CoreWorkload");
        if !matches!(workload, "site.ycsb.workloads.CoreWorkload" | "com.yahoo.ycsb.workloads.CoreWorkload") {
            return Err(Error::invalid(format!(
                "property `workload` = `{workload}`: boomkv implements only site.ycsb.workloads.CoreWorkload"
            )));
        }
        let mut record_count = spec.get_u64(names::RECORD_COUNT, 0)?;
        if record_count == 0 {
            // CoreWorkload: if (recordcount == 0) recordcount = Integer.MAX_VALUE;
            record_count = i32::MAX as u64;
        }
        let operation_count = spec.get_u64(names::OPERATION_COUNT, 0)?;
        let insert_start = spec.get_u64("insertstart", 0)?;
        let insert_count = spec.get_u64("insertcount", record_count.saturating_sub(insert_start))?;
        if insert_start.checked_add(insert_count).is_none_or(|end| end > record_count) {
            return Err(Error::invalid(format!(
                "insertstart ({insert_start}) + insertcount ({insert_count}) is above recordcount ({record_count}); \
                 recordcount must be at least insertstart + insertcount"
            )));
        }

        let proportion = |key: &str, default: f64| -> Result<f64> {
            let v = spec.get_f64(key, default)?;
            if !(0.0..=1e300).contains(&v) {
                return Err(Error::invalid(format!("property `{key}` = `{v}`: proportions must be >= 0")));
            }
            Ok(v)
        };
        let read_proportion = proportion("readproportion", 0.95)?;
        let update_proportion = proportion("updateproportion", 0.05)?;
        let insert_proportion = proportion("insertproportion", 0.0)?;
        let scan_proportion = proportion("scanproportion", 0.0)?;
        let read_modify_write_proportion = proportion("readmodifywriteproportion", 0.0)?;
        let total =
            read_proportion + update_proportion + insert_proportion + scan_proportion + read_modify_write_proportion;
        if total <= 0.0 {
            return Err(Error::invalid(format!("{}: every operation proportion is 0; nothing to run", spec.name())));
        }

        let request_distribution = match spec.get_str("requestdistribution", "uniform").to_ascii_lowercase().as_str() {
            "uniform" => RequestDistribution::Uniform,
            "zipfian" => RequestDistribution::Zipfian,
            "latest" => RequestDistribution::Latest,
            "hotspot" => RequestDistribution::Hotspot {
                data_fraction: spec.get_f64("hotspotdatafraction", 0.2)?,
                opn_fraction: spec.get_f64("hotspotopnfraction", 0.8)?,
            },
            "sequential" => RequestDistribution::Sequential,
            "exponential" => RequestDistribution::Exponential {
                percentile: spec.get_f64("exponential.percentile", 95.0)?,
                frac: spec.get_f64("exponential.frac", 0.8571428571)?,
            },
            other => {
                return Err(Error::invalid(format!(
                    "property `requestdistribution` = `{other}`: expected uniform, zipfian, latest, hotspot, sequential or exponential"
                )))
            }
        };
        let theta = spec.get(names::THETA).map(|_| spec.get_f64(names::THETA, ZIPFIAN_CONSTANT)).transpose()?;
        // A skew for a distribution that has none would be ignored without a word.
        if theta.is_some()
            && !matches!(request_distribution, RequestDistribution::Zipfian | RequestDistribution::Latest)
        {
            let origin = spec.property(names::THETA).map(|p| p.origin.to_string()).unwrap_or_default();
            return Err(Error::invalid(format!(
                "{} ({origin}) skews the zipfian and latest distributions only; requestdistribution is {}",
                names::THETA,
                spec.get_str("requestdistribution", "uniform")
            )));
        }

        // CoreWorkload takes anything but "hashed" for ordered; a typo there would
        // silently change every key, so only the two documented values are taken.
        let insert_order = match spec.get_str("insertorder", "hashed") {
            "hashed" => InsertOrder::Hashed,
            "ordered" => InsertOrder::Ordered,
            other => {
                return Err(Error::invalid(format!("property `insertorder` = `{other}`: expected hashed or ordered")))
            }
        };
        let zero_padding = spec.get_u64("zeropadding", 1)?;
        // 10^10 zeros per key took all the memory.
        if zero_padding > MAX_ZERO_PADDING {
            return Err(Error::invalid(format!(
                "property `zeropadding` = `{zero_padding}`: at most {MAX_ZERO_PADDING} (a boomkv key is at most \
                 {} bytes, \"user\" and the number)",
                MAX_ZERO_PADDING + 4
            )));
        }
        let zero_padding = zero_padding as usize;

        let min_scan_length = spec.get_u64("minscanlength", 1)?;
        let max_scan_length = spec.get_u64("maxscanlength", 1000)?;
        if min_scan_length > max_scan_length {
            return Err(Error::invalid(format!(
                "minscanlength ({min_scan_length}) is above maxscanlength ({max_scan_length})"
            )));
        }
        // YCSB reads both as a Java int; a longer scan was cut to 32 bits on its way out.
        if max_scan_length > i32::MAX as u64 {
            return Err(Error::invalid(format!(
                "maxscanlength ({max_scan_length}) is over {}, the longest scan YCSB's int allows",
                i32::MAX
            )));
        }
        let scan_length_distribution = match spec.get_str("scanlengthdistribution", "uniform") {
            "uniform" => ScanLengthDistribution::Uniform,
            "zipfian" => ScanLengthDistribution::Zipfian,
            other => {
                return Err(Error::invalid(format!(
                    "property `scanlengthdistribution` = `{other}`: expected uniform or zipfian"
                )))
            }
        };

        let value_size = match spec.get_with(names::VALUE_SIZE, |v| ValueSize::parse(v, "value size"))? {
            Some(size) => size,
            None => {
                let field_count = spec.get_u64("fieldcount", 10)?;
                let field_length = spec.get_u64("fieldlength", 100)?;
                let min_field_length = spec.get_u64("minfieldlength", 1)?;
                let field = match spec.get_str("fieldlengthdistribution", "constant") {
                    "constant" => ValueSize::Constant(field_length),
                    "uniform" | "zipfian" if min_field_length > field_length => {
                        return Err(Error::invalid(format!(
                            "minfieldlength ({min_field_length}) is above fieldlength ({field_length})"
                        )))
                    }
                    "uniform" => ValueSize::Uniform { min: min_field_length, max: field_length },
                    "zipfian" => ValueSize::Zipfian { min: min_field_length, max: field_length },
                    other => {
                        return Err(Error::invalid(format!(
                        "property `fieldlengthdistribution` = `{other}`: boomkv supports constant, uniform and zipfian"
                    )))
                    }
                };
                ValueSize::Fields { count: field_count, field: Box::new(field) }
            }
        };

        Ok(CoreConfig {
            record_count,
            operation_count,
            insert_start,
            insert_count,
            read_proportion,
            update_proportion,
            insert_proportion,
            scan_proportion,
            read_modify_write_proportion,
            request_distribution,
            theta,
            insert_order,
            zero_padding,
            min_scan_length,
            max_scan_length,
            scan_length_distribution,
            value_size,
        })
    }

    /// The proportion of each op kind, normalised, in YCSB's order (kinds with weight 0
    /// omitted).
    pub fn op_mix(&self) -> Vec<(f64, OpKind)> {
        self.op_chooser().probabilities()
    }

    fn op_chooser(&self) -> DiscreteGenerator<OpKind> {
        let mut d = DiscreteGenerator::new();
        d.add(self.read_proportion, OpKind::Read);
        d.add(self.update_proportion, OpKind::Update);
        d.add(self.insert_proportion, OpKind::Insert);
        d.add(self.scan_proportion, OpKind::Scan);
        d.add(self.read_modify_write_proportion, OpKind::ReadModifyWrite);
        d
    }

    /// The key numbers the zipfian chooser spans: `insertstart ..= insertstart +
    /// insertcount + (int)(operationcount * insertproportion * 2)` (YCSB's "fudge
    /// factor" 2 for keys inserted during the run; draws above the acknowledged insert
    /// limit are redrawn).
    pub fn zipfian_span(&self) -> (u64, u64) {
        let expected_new_keys = (self.operation_count as f64 * self.insert_proportion * 2.0) as u64;
        // Saturating: an absurd insertproportion must reach the generator's span check,
        // not wrap around to a small span.
        (self.insert_start, self.insert_start.saturating_add(self.insert_count).saturating_add(expected_new_keys))
    }

    /// The key namer (`insertorder`, `zeropadding`).
    pub fn key_namer(&self) -> KeyNamer {
        KeyNamer::new(self.insert_order, self.zero_padding)
    }
}

/// Key chooser for run-phase operations; cloned into every stream.
#[derive(Clone, Debug)]
enum KeyChooser {
    Uniform(UniformGenerator),
    Zipfian(ScrambledZipfianGenerator),
    Latest(SkewedLatestGenerator),
    Hotspot(HotspotGenerator),
    Sequential(SequentialGenerator),
    Exponential(ExponentialGenerator),
}

#[derive(Clone, Debug)]
enum ScanChooser {
    Uniform(UniformGenerator),
    Zipfian(ZipfianGenerator),
}

#[derive(Debug)]
struct Shared {
    config: CoreConfig,
    namer: KeyNamer,
    /// YCSB `keysequence`: load-phase key numbers.
    load_sequence: AtomicU64,
    /// YCSB `transactioninsertkeysequence`.
    inserts: Arc<AcknowledgedCounter>,
    op_chooser: DiscreteGenerator<OpKind>,
    key_chooser: Option<KeyChooser>,
    scan_chooser: ScanChooser,
    sizes: SizeChooser,
}

/// What all threads of a run share: the configuration, the insert counters and the
/// prebuilt generators. Cheap to clone (an `Arc`).
///
/// ```
/// use boomkv::workload::{CoreWorkload, WorkloadSpec, OpKind};
/// let mut spec = WorkloadSpec::from_mix('d')?;
/// spec.set("boomkv.valuesize", "2k")?;
/// let workload = CoreWorkload::new(&spec)?;
/// let mut stream = workload.stream(42, 0);
/// // Load phase: every thread pulls from one shared key sequence until it runs dry.
/// while let Some(op) = stream.next_load_op() {
///     assert_eq!(op.kind, OpKind::Insert);
/// }
/// // Run phase: execute each op, then complete it (acknowledges inserts).
/// for _ in 0..10 {
///     let op = stream.next_op();
///     // ... execute op, record its latency ...
///     stream.complete(&op)?;
/// }
/// # Ok::<(), boomkv::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CoreWorkload {
    shared: Arc<Shared>,
}

impl CoreWorkload {
    /// Validates `spec` and prepares the shared state.
    pub fn new(spec: &WorkloadSpec) -> Result<CoreWorkload> {
        CoreWorkload::from_config(CoreConfig::from_spec(spec)?)
    }

    /// Prepares the shared state for a validated configuration.
    pub fn from_config(config: CoreConfig) -> Result<CoreWorkload> {
        let inserts = Arc::new(AcknowledgedCounter::new(config.record_count));
        let needs_keys = config.read_proportion
            + config.update_proportion
            + config.scan_proportion
            + config.read_modify_write_proportion
            > 0.0;
        let key_chooser = if needs_keys { Some(Self::key_chooser(&config, &inserts)?) } else { None };
        let scan_chooser = match config.scan_length_distribution {
            ScanLengthDistribution::Uniform => {
                ScanChooser::Uniform(UniformGenerator::new(config.min_scan_length, config.max_scan_length)?)
            }
            ScanLengthDistribution::Zipfian => {
                ScanChooser::Zipfian(ZipfianGenerator::new(config.min_scan_length, config.max_scan_length)?)
            }
        };
        let sizes = config.value_size.chooser()?;
        Ok(CoreWorkload {
            shared: Arc::new(Shared {
                namer: config.key_namer(),
                load_sequence: AtomicU64::new(config.insert_start),
                inserts,
                op_chooser: config.op_chooser(),
                key_chooser,
                scan_chooser,
                sizes,
                config,
            }),
        })
    }

    fn key_chooser(c: &CoreConfig, inserts: &Arc<AcknowledgedCounter>) -> Result<KeyChooser> {
        // The scrambled zipfian's limit (its item count must fit an i64, as in YCSB).
        const MAX_KEYS: u64 = i64::MAX as u64;
        if c.insert_count == 0 {
            return Err(Error::invalid(
                "insertcount is 0: reads, updates and scans have no keys to choose from".to_string(),
            ));
        }
        // The generators' own limit (the scrambled zipfian's, the tightest) is refused
        // here, where the count comes from, not as a generator's span.
        if c.insert_count > MAX_KEYS {
            return Err(Error::invalid(format!(
                "insertcount {} (from recordcount {}, --records): reads, updates and scans choose among at most \
                 2^63 - 1 keys",
                c.insert_count, c.record_count
            )));
        }
        let (lo, hi) = (c.insert_start, c.insert_start + c.insert_count - 1);
        Ok(match &c.request_distribution {
            RequestDistribution::Uniform => KeyChooser::Uniform(UniformGenerator::new(lo, hi)?),
            RequestDistribution::Zipfian => {
                let (min, max) = c.zipfian_span();
                // YCSB's span is one key more than the inserts (and twice the expected
                // run-time inserts more): said in the inputs' names, not the span's.
                if (max - min).saturating_add(1) > MAX_KEYS {
                    let span = if c.insert_count >= MAX_KEYS {
                        format!("insertcount {} (from recordcount {}, --records) + 1", c.insert_count, c.record_count)
                    } else {
                        format!(
                            "insertcount {} + 1 + 2 x operationcount {} x insertproportion {}",
                            c.insert_count, c.operation_count, c.insert_proportion
                        )
                    };
                    return Err(Error::invalid(format!(
                        "the zipfian chooser spans {span} keys, as YCSB's does: at most 2^63 - 1"
                    )));
                }
                KeyChooser::Zipfian(match c.theta {
                    None => ScrambledZipfianGenerator::ycsb(min, max)?,
                    Some(theta) => ScrambledZipfianGenerator::with_theta(min, max, theta)?,
                })
            }
            RequestDistribution::Latest => KeyChooser::Latest(match c.theta {
                None => SkewedLatestGenerator::ycsb(Arc::clone(inserts))?,
                Some(theta) => SkewedLatestGenerator::with_theta(Arc::clone(inserts), theta)?,
            }),
            RequestDistribution::Hotspot { data_fraction, opn_fraction } => {
                KeyChooser::Hotspot(HotspotGenerator::new(lo, hi, *data_fraction, *opn_fraction)?)
            }
            RequestDistribution::Sequential => KeyChooser::Sequential(SequentialGenerator::new(lo, hi)?),
            RequestDistribution::Exponential { percentile, frac } => {
                KeyChooser::Exponential(ExponentialGenerator::new(*percentile, c.record_count as f64 * frac)?)
            }
        })
    }

    /// The validated configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.shared.config
    }

    /// Thread `thread_id`'s stream of a run seeded with `seed`.
    ///
    /// The random draws of a stream are a pure function of `(spec, seed, thread_id)`.
    /// With one thread the whole op sequence is; with several, the shared counters
    /// (load keys, insert keys, the `latest` limit, `sequential`) interleave as the
    /// threads run, as in YCSB.
    pub fn stream(&self, seed: u64, thread_id: u64) -> OpStream {
        OpStream {
            shared: Arc::clone(&self.shared),
            rng: WorkloadRng::new(seed, thread_id),
            key_chooser: self.shared.key_chooser.clone(),
            scan_chooser: self.shared.scan_chooser.clone(),
            sizes: self.shared.sizes.clone(),
        }
    }

    /// The shared run-phase insert counter (acknowledged limit = keys safe to read).
    pub fn inserts(&self) -> &Arc<AcknowledgedCounter> {
        &self.shared.inserts
    }

    /// The key name of key number `keynum`.
    pub fn key_name(&self, keynum: u64) -> String {
        self.shared.namer.name(keynum)
    }
}

/// One thread's operations. Not shared between threads: create one per thread with
/// [`CoreWorkload::stream`].
#[derive(Debug)]
pub struct OpStream {
    shared: Arc<Shared>,
    rng: WorkloadRng,
    key_chooser: Option<KeyChooser>,
    scan_chooser: ScanChooser,
    sizes: SizeChooser,
}

impl OpStream {
    /// The next load-phase insert (YCSB `doInsert`), or `None` once this client's
    /// `insertcount` keys have all been handed out (across all threads).
    pub fn next_load_op(&mut self) -> Option<Op> {
        let c = &self.shared.config;
        let keynum = self.shared.load_sequence.fetch_add(1, Ordering::Relaxed);
        if keynum >= c.insert_start + c.insert_count {
            return None;
        }
        let value_len = self.sizes.next(&mut self.rng) as usize;
        Some(Op {
            kind: OpKind::Insert,
            phase: Phase::Load,
            keynum,
            key: self.shared.namer.name(keynum),
            value_len,
            scan_len: 0,
        })
    }

    /// The next run-phase operation (YCSB `doTransaction`): kind by the proportions,
    /// key by the request distribution, then value size or scan length.
    pub fn next_op(&mut self) -> Op {
        let kind = self.shared.op_chooser.next(&mut self.rng).unwrap_or(OpKind::Read);
        let keynum = if kind == OpKind::Insert { self.shared.inserts.next_value() } else { self.next_keynum() };
        let (value_len, scan_len) = match kind {
            OpKind::Read => (0, 0),
            OpKind::Scan => (0, self.next_scan_length()),
            OpKind::Update | OpKind::Insert | OpKind::ReadModifyWrite => (self.sizes.next(&mut self.rng) as usize, 0),
        };
        Op { kind, phase: Phase::Run, keynum, key: self.shared.namer.name(keynum), value_len, scan_len }
    }

    /// Reports that `op` has been executed (successfully or not): acknowledges
    /// run-phase inserts, so `latest` and the key choosers may pick their keys. YCSB
    /// acknowledges in a `finally` block, i.e. also after a failed insert.
    pub fn complete(&self, op: &Op) -> Result<()> {
        if op.kind == OpKind::Insert && op.phase == Phase::Run {
            self.shared.inserts.acknowledge(op.keynum)?;
        }
        Ok(())
    }

    /// `n` run-phase ops, each completed at once: the `--dry-run --print-ops` stream.
    pub fn dry_run(&mut self, n: usize) -> Result<Vec<Op>> {
        (0..n)
            .map(|_| {
                let op = self.next_op();
                self.complete(&op)?;
                Ok(op)
            })
            .collect()
    }

    /// A key number for a read, update, scan or read-modify-write (YCSB
    /// `nextKeynum`): drawn from the request distribution and redrawn while it is at
    /// or above the acknowledged insert limit.
    pub fn next_keynum(&mut self) -> u64 {
        let inserts = &self.shared.inserts;
        let Some(chooser) = self.key_chooser.as_mut() else {
            // Only inserts are configured; callers asking anyway get the first key.
            return self.shared.config.insert_start;
        };
        loop {
            let limit = inserts.limit();
            if limit == 0 {
                return 0;
            }
            let keynum = match chooser {
                KeyChooser::Exponential(g) => {
                    // keynum = lastValue - (int) exponential; redraw while negative.
                    let d = g.next(&mut self.rng);
                    if d.is_nan() || d >= limit as f64 {
                        continue;
                    }
                    (limit - 1) - d as u64
                }
                KeyChooser::Uniform(g) => g.next(&mut self.rng),
                KeyChooser::Zipfian(g) => g.next(&mut self.rng),
                KeyChooser::Latest(g) => g.next(&mut self.rng),
                KeyChooser::Hotspot(g) => g.next(&mut self.rng),
                KeyChooser::Sequential(g) => g.next_value(),
            };
            if keynum < limit {
                return keynum;
            }
        }
    }

    fn next_scan_length(&mut self) -> usize {
        (match &mut self.scan_chooser {
            ScanChooser::Uniform(g) => g.next(&mut self.rng),
            ScanChooser::Zipfian(g) => g.next(&mut self.rng),
        }) as usize
    }

    /// The workload this stream belongs to.
    pub fn config(&self) -> &CoreConfig {
        &self.shared.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::generator::fnvhash64;
    use std::collections::HashMap;

    fn spec(mix: char, overrides: &[&str]) -> WorkloadSpec {
        let mut s = WorkloadSpec::from_mix(mix).unwrap();
        for o in overrides {
            s.set_override(o).unwrap();
        }
        s
    }

    #[test]
    fn thread_safety() {
        fn assert_send_sync<T: Send + Sync>() {}
        fn assert_send<T: Send>() {}
        assert_send_sync::<CoreWorkload>();
        assert_send::<OpStream>();
        assert_send::<crate::measure::Measurements>();
    }

    #[test]
    fn insertorder_takes_hashed_or_ordered_only() {
        let order = |v: &str| CoreConfig::from_spec(&spec('a', &[&format!("insertorder={v}")])).map(|c| c.insert_order);
        assert_eq!(order("hashed").unwrap(), InsertOrder::Hashed);
        assert_eq!(order("ordered").unwrap(), InsertOrder::Ordered);
        // YCSB would take a typo for ordered and change every key without a word.
        let e = order("hashd").unwrap_err().to_string();
        assert!(e.contains("insertorder") && e.contains("hashd"), "{e}");
    }

    #[test]
    fn a_scan_longer_than_an_int_is_refused() {
        // It was cut to 32 bits on its way to the server, without a word.
        let c = |v: &str| CoreConfig::from_spec(&spec('e', &[&format!("maxscanlength={v}")]));
        assert!(c("2147483647").is_ok());
        let e = c("5000000000").unwrap_err().to_string();
        assert!(e.contains("maxscanlength (5000000000)"), "{e}");
    }

    #[test]
    fn defaults_are_ycsbs() {
        let c = CoreConfig::from_spec(&WorkloadSpec::new("empty")).unwrap();
        assert_eq!(c.record_count, i32::MAX as u64);
        assert_eq!((c.read_proportion, c.update_proportion), (0.95, 0.05));
        assert_eq!(c.request_distribution, RequestDistribution::Uniform);
        assert_eq!(c.value_size, ValueSize::Fields { count: 10, field: Box::new(ValueSize::Constant(100)) });
        assert_eq!((c.min_scan_length, c.max_scan_length), (1, 1000));
        assert_eq!(c.insert_order, InsertOrder::Hashed);
        assert_eq!(c.zero_padding, 1);
    }

    #[test]
    fn zipfian_span_includes_expected_inserts() {
        let c = CoreConfig::from_spec(&spec('e', &["operationcount=10000", "recordcount=5000"])).unwrap();
        // 5000 + (int)(10000 * 0.05 * 2) = 6000, inclusive bound.
        assert_eq!(c.zipfian_span(), (0, 6000));
        let c = CoreConfig::from_spec(&spec('b', &["insertstart=100", "insertcount=400"])).unwrap();
        assert_eq!(c.zipfian_span(), (100, 500));
    }

    #[test]
    fn invalid_configs_are_errors() {
        for (overrides, needle) in [
            (&["insertstart=900", "insertcount=200"][..], "recordcount must be at least"),
            (&["requestdistribution=pareto"][..], "requestdistribution"),
            (&["readproportion=0", "updateproportion=0"][..], "every operation proportion is 0"),
            (&["readproportion=-1"][..], "proportions must be >= 0"),
            (&["workload=site.ycsb.workloads.TimeSeriesWorkload"][..], "only site.ycsb.workloads.CoreWorkload"),
            (&["boomkv.valuesize=2q"][..], "boomkv.valuesize"),
            (&["boomkv.theta=-1"][..], "theta"),
            (&["fieldlengthdistribution=histogram"][..], "fieldlengthdistribution"),
            (&["minscanlength=10", "maxscanlength=5"][..], "minscanlength"),
            (&["insertcount=0"][..], "insertcount is 0"),
            (&["recordcount=18446744073709551615"][..], "(from recordcount 18446744073709551615, --records)"),
            (&["recordcount=9223372036854775808"][..], "choose among at most 2^63 - 1 keys"),
            (
                &["requestdistribution=zipfian", "operationcount=1000", "insertproportion=1e300", "recordcount=10"][..],
                "spans insertcount 10 + 1 + 2 x operationcount 1000 x insertproportion",
            ),
            (
                &["recordcount=9223372036854775807", "requestdistribution=zipfian"][..],
                "spans insertcount 9223372036854775807 (from recordcount 9223372036854775807, --records) + 1 keys",
            ),
        ] {
            let e = CoreWorkload::new(&spec('b', overrides)).unwrap_err().to_string();
            assert!(e.contains(needle), "{overrides:?}: {e}");
            // Only a count too large is blamed on the record count.
            assert_eq!(e.contains("--records"), overrides[0].starts_with("recordcount"), "{overrides:?}: {e}");
        }
    }

    #[test]
    fn op_mix_follows_proportions() {
        let w = CoreWorkload::new(&spec('b', &[])).unwrap();
        let mut s = w.stream(1, 0);
        let n = 20_000;
        let reads = (0..n).filter(|_| s.next_op().kind == OpKind::Read).count();
        // p = 0.95, sd = 31: 6 sd.
        assert!((18_810..=19_190).contains(&reads), "{reads}");
        assert_eq!(w.config().op_mix(), vec![(0.95, OpKind::Read), (0.05, OpKind::Update)]);
    }

    #[test]
    fn streams_are_reproducible_per_seed_and_thread() {
        let w = CoreWorkload::new(&spec('a', &["boomkv.valuesize=32..16k"])).unwrap();
        let a: Vec<Op> = w.stream(7, 0).dry_run(50).unwrap();
        let b: Vec<Op> = w.stream(7, 0).dry_run(50).unwrap();
        let c: Vec<Op> = w.stream(7, 1).dry_run(50).unwrap();
        let d: Vec<Op> = w.stream(8, 0).dry_run(50).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert!(a.iter().all(|op| op.key.starts_with("user")));
        assert!(a.iter().filter(|op| op.kind == OpKind::Update).all(|op| (32..=16384).contains(&op.value_len)));
    }

    #[test]
    fn workload_a_hot_key_is_ycsbs() {
        // Workload A: YCSB builds ScrambledZipfianGenerator(0, 0 + 1000 + 0), an inclusive
        // max, so it folds over 1001 key numbers: rank 0 -> fnv(0) % 1001; draws of 1000
        // (not loaded) are redrawn.
        let w = CoreWorkload::new(&spec('a', &[])).unwrap();
        let mut s = w.stream(3, 0);
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for _ in 0..50_000 {
            *counts.entry(s.next_op().keynum).or_default() += 1;
        }
        let (&hot, _) = counts.iter().max_by_key(|(_, c)| **c).unwrap();
        assert_eq!(hot, (fnvhash64(0) % 1001) as u64);
        assert_eq!(hot, 144);
        assert!(counts.keys().all(|&k| k < 1000));
        assert_eq!(w.key_name(hot), format!("user{}", fnvhash64(hot as i64)));
    }

    #[test]
    fn load_phase_hands_out_each_key_once_across_threads() {
        let w = CoreWorkload::new(&spec('c', &["recordcount=3000", "insertstart=1000", "insertcount=2000"])).unwrap();
        let mut all: Vec<u64> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..3)
                .map(|t| {
                    let mut s = w.stream(1, t);
                    sc.spawn(move || {
                        let mut v = Vec::new();
                        while let Some(op) = s.next_load_op() {
                            assert_eq!(op.value_len, 1000);
                            assert_eq!(op.phase, Phase::Load);
                            v.push(op.keynum);
                        }
                        v
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        all.sort_unstable();
        assert_eq!(all, (1000..3000).collect::<Vec<u64>>());
    }

    #[test]
    fn inserts_advance_the_latest_distribution_only_when_completed() {
        let w = CoreWorkload::new(&spec('d', &["readproportion=0.5", "insertproportion=0.5"])).unwrap();
        let mut s = w.stream(11, 0);
        let mut pending = Vec::new();
        for _ in 0..200 {
            let op = s.next_op();
            if op.kind == OpKind::Insert {
                assert!(op.keynum >= 1000);
                pending.push(op);
            } else {
                // Nothing acknowledged yet: reads stay below recordcount.
                assert!(op.keynum < 1000, "{op:?}");
            }
        }
        for op in &pending {
            s.complete(op).unwrap();
        }
        assert_eq!(w.inserts().limit(), 1000 + pending.len() as u64);
        let newest = 1000 + pending.len() as u64 - 1;
        let hits = (0..2000).map(|_| s.next_op()).filter(|op| op.kind == OpKind::Read && op.keynum == newest).count();
        assert!(hits > 50, "latest favours the newest key: {hits}");
        assert!(s.complete(&pending[0]).is_err(), "double acknowledgement");
    }

    #[test]
    fn scans_and_rmw() {
        let w = CoreWorkload::new(&spec('e', &[])).unwrap();
        let ops = w.stream(5, 0).dry_run(500).unwrap();
        for op in &ops {
            match op.kind {
                OpKind::Scan => assert!((1..=100).contains(&op.scan_len)),
                OpKind::Insert => assert_eq!(op.value_len, 1000),
                k => panic!("unexpected {k}"),
            }
        }
        let w = CoreWorkload::new(&spec('f', &["boomkv.valuesize=2k"])).unwrap();
        let ops = w.stream(5, 0).dry_run(200).unwrap();
        assert!(ops.iter().any(|op| op.kind == OpKind::ReadModifyWrite && op.value_len == 2048));
        assert!(ops.iter().filter(|op| op.kind == OpKind::Read).all(|op| op.value_len == 0));
    }

    #[test]
    fn every_request_distribution_stays_in_range() {
        for dist in ["uniform", "zipfian", "latest", "hotspot", "sequential", "exponential"] {
            let w = CoreWorkload::new(&spec('a', &[&format!("requestdistribution={dist}")])).unwrap();
            let mut s = w.stream(1, 0);
            for _ in 0..2000 {
                let op = s.next_op();
                assert!(op.keynum < 1000, "{dist}: {op:?}");
            }
        }
        let w = CoreWorkload::new(&spec('a', &["requestdistribution=sequential"])).unwrap();
        let ks: Vec<u64> = w.stream(1, 0).dry_run(3).unwrap().iter().map(|o| o.keynum).collect();
        assert_eq!(ks, [0, 1, 2]);
    }

    #[test]
    fn theta_changes_the_skew() {
        let hot_share = |theta: &str| {
            let w = CoreWorkload::new(&spec('c', &[&format!("boomkv.theta={theta}")])).unwrap();
            let mut s = w.stream(2, 0);
            let mut counts = vec![0u32; 1000];
            for _ in 0..20_000 {
                counts[s.next_op().keynum as usize] += 1;
            }
            counts.sort_unstable();
            counts.iter().rev().take(10).sum::<u32>() as f64 / 20_000.0
        };
        let (low, mid, high) = (hot_share("0.5"), hot_share("0.99"), hot_share("1.2"));
        assert!(low < mid && mid < high, "{low} {mid} {high}");
        // theta 0.99 over 1000 keys: the top 10 ranks hold zeta(10)/zeta(1000) = 38% (5-ish sd margin).
        assert!((mid - 2.9561075165103636 / 7.728953217284729).abs() < 0.03, "{mid}");
    }

    #[test]
    fn op_lines() {
        let op = Op {
            kind: OpKind::Update,
            phase: Phase::Run,
            keynum: 0,
            key: "user1".into(),
            value_len: 2048,
            scan_len: 0,
        };
        assert_eq!(format_op(&op), "UPDATE            user1 value_size=2048");
        let op = Op { kind: OpKind::Scan, scan_len: 37, value_len: 0, ..op };
        assert_eq!(op.to_string(), "SCAN              user1 scan_length=37");
        let op = Op { kind: OpKind::Read, scan_len: 0, ..op };
        assert_eq!(op.to_string(), "READ              user1");
    }
}
