//! Cache-line write-back primitives and their run-time selection.
//!
//! `clwb` and `clflushopt` have no stable intrinsics, so they are emitted with `asm!`
//! after CPUID says the CPU has them. `clflush` and `sfence` use the stable intrinsics.

use std::fmt;
use std::str::FromStr;

/// Size of a CPU cache line, the unit of write-back.
pub const CACHE_LINE: usize = 64;

/// The instruction used to write dirty cache lines back to the media.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushKind {
    /// `clwb`: write back and keep the line cached (best, Ice Lake and later).
    Clwb,
    /// `clflushopt`: write back and evict, weakly ordered.
    Clflushopt,
    /// `clflush`: write back and evict, serialising (slowest, everywhere).
    Clflush,
    /// No write-back: the platform has eADR, or the user is measuring without it.
    None,
}

impl FlushKind {
    /// The best write-back instruction this CPU has.
    pub fn detect() -> FlushKind {
        let f = CpuFeatures::detect();
        if f.clwb {
            FlushKind::Clwb
        } else if f.clflushopt {
            FlushKind::Clflushopt
        } else if f.clflush {
            FlushKind::Clflush
        } else {
            FlushKind::None
        }
    }

    /// Whether this CPU can execute the instruction.
    pub fn supported(self) -> bool {
        let f = CpuFeatures::detect();
        match self {
            FlushKind::Clwb => f.clwb,
            FlushKind::Clflushopt => f.clflushopt,
            FlushKind::Clflush => f.clflush,
            FlushKind::None => true,
        }
    }

    /// Lower-case name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none",
        }
    }
}

impl fmt::Display for FlushKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FlushKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "clwb" => Ok(FlushKind::Clwb),
            "clflushopt" => Ok(FlushKind::Clflushopt),
            "clflush" => Ok(FlushKind::Clflush),
            "none" => Ok(FlushKind::None),
            other => Err(format!("unknown flush instruction '{other}' (expected clwb, clflushopt, clflush or none)")),
        }
    }
}

/// Cache-control features reported by CPUID.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuFeatures {
    /// CPUID.1:EDX bit 19.
    pub clflush: bool,
    /// CPUID.(7,0):EBX bit 23.
    pub clflushopt: bool,
    /// CPUID.(7,0):EBX bit 24.
    pub clwb: bool,
}

impl CpuFeatures {
    /// The CPU's features, read once (CPUID is slow in virtual machines: tens of
    /// microseconds, a VM exit each time, and [`FlushKind::supported`] runs on every
    /// write-back).
    pub fn detect() -> CpuFeatures {
        static FEATURES: std::sync::OnceLock<CpuFeatures> = std::sync::OnceLock::new();
        *FEATURES.get_or_init(CpuFeatures::read_cpuid)
    }

    /// Reads CPUID (all false off x86_64).
    fn read_cpuid() -> CpuFeatures {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__cpuid, __cpuid_count};
            // Leaf 7 is only read when leaf 0 says it exists.
            let (l1, max) = (__cpuid(1), __cpuid(0).eax);
            let ebx7 = if max >= 7 { __cpuid_count(7, 0).ebx } else { 0 };
            CpuFeatures {
                clflush: l1.edx & (1 << 19) != 0,
                clflushopt: ebx7 & (1 << 23) != 0,
                clwb: ebx7 & (1 << 24) != 0,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuFeatures::default()
        }
    }
}

/// Writes back every cache line overlapping `[addr, addr + len)` with `kind`. No fence.
///
/// # Safety
/// `addr .. addr + len` must lie inside one live mapping owned by the caller, and `kind`
/// must be supported by this CPU ([`FlushKind::supported`]).
pub(crate) unsafe fn flush_range(kind: FlushKind, addr: *const u8, len: usize) -> u64 {
    if len == 0 || kind == FlushKind::None {
        return 0;
    }
    let start = (addr as usize) & !(CACHE_LINE - 1);
    let end = addr as usize + len;
    let mut line = start;
    let mut n = 0u64;
    while line < end {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `line` is inside the caller's mapping (see the function's contract),
            // and the caller checked that the CPU has the instruction.
            unsafe {
                match kind {
                    FlushKind::Clwb => std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags)),
                    FlushKind::Clflushopt => {
                        std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags));
                    }
                    FlushKind::Clflush => std::arch::x86_64::_mm_clflush(line as *const u8),
                    FlushKind::None => {}
                }
            }
        }
        line += CACHE_LINE;
        n += 1;
    }
    n
}

/// Store fence: orders earlier write-backs before later stores.
#[inline]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no memory operands and exists on every x86_64 CPU.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for k in [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush, FlushKind::None] {
            assert_eq!(k.name().parse::<FlushKind>().unwrap(), k);
        }
        assert!("clwbx".parse::<FlushKind>().is_err());
    }

    #[test]
    fn detected_kind_is_supported_and_flushes_lines() {
        let k = FlushKind::detect();
        assert!(k.supported());
        let buf = vec![0u8; 4096];
        // SAFETY: the range is inside `buf`, and `k` is supported.
        let lines = unsafe { flush_range(k, buf.as_ptr().wrapping_add(10), 200) };
        if k != FlushKind::None {
            // bytes 10..210 of a buffer touch 4 or 5 lines depending on alignment
            assert!((4..=5).contains(&lines), "{lines}");
        }
        sfence();
    }
}
