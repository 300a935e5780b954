//! YCSB-compatible workloads: generators, key names, value sizes, property files and
//! the per-thread operation stream.
//!
//! # Using it from a runner
//!
//! ```
//! use boomkv::workload::{CoreWorkload, OpKind, WorkloadSpec};
//!
//! // --mix b (or WorkloadSpec::from_file(path) for -P), then -p overrides and flags.
//! let mut spec = WorkloadSpec::from_mix('b')?;
//! spec.set_override("recordcount=10000")?;       // -p recordcount=10000
//! spec.set("boomkv.valuesize", "2k")?;           // --size 2k
//! spec.set("boomkv.theta", "0.99")?;             // --theta 0.99
//! for w in spec.warnings() {
//!     eprintln!("warning: {w}");
//! }
//! let workload = CoreWorkload::new(&spec)?;      // validates; shared by all threads
//!
//! // In each client thread t (seed from --seed):
//! let mut ops = workload.stream(42, 0);
//! while let Some(op) = ops.next_load_op() { /* PUT op.key with op.value_len bytes */ }
//! let op = ops.next_op();                         // run phase
//! match op.kind {
//!     OpKind::Read => { /* GET op.key */ }
//!     OpKind::Update | OpKind::Insert => { /* PUT op.key, op.value_len bytes */ }
//!     OpKind::Scan => { /* ordered scan from op.key, op.scan_len records */ }
//!     OpKind::ReadModifyWrite => { /* GET then PUT */ }
//! }
//! ops.complete(&op)?;                             // after executing: acknowledges inserts
//!
//! // --dry-run --print-ops 5
//! for op in workload.stream(42, 0).dry_run(5)? {
//!     println!("{op}");
//! }
//! # Ok::<(), boomkv::Error>(())
//! ```
//!
//! # What is YCSB's and what differs
//!
//! Same as YCSB (`site.ycsb.workloads.CoreWorkload` and `site.ycsb.generator`):
//! - the built-in workloads A-F are YCSB's `workloads/workloada`..`workloadf`
//!   ([`BUILTIN_WORKLOADS`]); every CoreWorkload property and default;
//! - the op chooser (proportions read/update/insert/scan/readmodifywrite, normalised,
//!   walked in that order); key names `"user" + fnvhash64(keynum)` (or the plain
//!   number with `insertorder=ordered`), zero-padded to `zeropadding` digits;
//! - the key choosers: `uniform`, `zipfian` (scrambled, 10^10 items, zetan
//!   26.46902820178302, FNV-64 fold, over the key numbers `insertstart ..=
//!   insertstart + insertcount + (int)(operationcount * insertproportion * 2)`),
//!   `latest` (skewed over the acknowledged insert counter), `hotspot`, `sequential`,
//!   `exponential`; draws at or above the acknowledged insert limit are redrawn;
//! - run-phase insert keys from a shared counter starting at `recordcount`, each
//!   acknowledged after its insert, at most 2^20 outstanding;
//! - scan lengths `uniform` or `zipfian` over `minscanlength..=maxscanlength`.
//!
//! Different, on purpose:
//! - streams are seeded ([`WorkloadRng`], ChaCha8) and reproducible, where YCSB's
//!   `ThreadLocalRandom` is not; so the sequences differ from any YCSB run while the
//!   distributions are the same;
//! - `boomkv.theta` (`--theta`) sets the Zipfian constant of `zipfian` and `latest`.
//!   It switches to a true Zipf law (`rand_distr::Zipf`, exact for any theta >= 0,
//!   including 1): for `zipfian` over the real key span, ranks scattered by a fixed
//!   bijection, instead of YCSB's 10^10-item generator folded modulo the key count;
//!   see [`ScrambledZipfianGenerator::with_theta`]. Without it, YCSB's generators run
//!   bit for bit (Gray et al.'s approximation, theta 0.99);
//! - a value is one byte string: `boomkv.valuesize` (`--size 2k`, `--size 32..16k`)
//!   sets its size; otherwise it is YCSB's record size, `fieldcount` draws of
//!   `fieldlength` (1000 bytes by default). Updates write whole values of that size
//!   (YCSB's `writeallfields=false` would rewrite one field of the record);
//! - key numbers stay 64-bit where YCSB truncates them to `int`;
//! - bad values (hotspot fractions outside [0, 1], an unknown distribution) are errors
//!   naming the property and where it was set, not silent fallbacks.

pub mod core;
pub mod generator;
pub mod keys;
pub mod properties;
pub mod rng;
pub mod size;

pub use self::core::{format_op, CoreConfig, CoreWorkload, Op, OpKind, OpStream, Phase, RequestDistribution};
pub use self::generator::{
    fnvhash64, zeta, AcknowledgedCounter, ScrambledZipfianGenerator, ZipfianGenerator, YCSB_ZETAN, ZIPFIAN_CONSTANT,
};
pub use self::keys::{InsertOrder, KeyNamer};
pub use self::properties::{builtin_text, names, Origin, WorkloadSpec, BUILTIN_WORKLOADS};
pub use self::rng::WorkloadRng;
pub use self::size::ValueSize;
