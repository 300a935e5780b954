//! Primitives for memory shared between processes: sealed shared-memory files and
//! futex parking on words inside a [`Mapping`].
//!
//! The `shm` transport builds its rings, doorbells and region tables from these. They
//! are safe wrappers: the system calls go through `rustix`, whose `futex` and `memfd`
//! functions take references and owned descriptors, so no `unsafe` is needed here.
//!
//! Futex calls use the shared (not process-private) variant: the word may live in a
//! mapping of a file that another process maps too, and the kernel keys the wait queue
//! on the file page, so a wake from either process reaches a waiter in the other.

use std::fs::File;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::thread::futex;

use crate::error::{Error, Result};
use crate::pmem::map::Mapping;

/// Creates a shared-memory file of `len` bytes that cannot shrink (sealed with
/// `F_SEAL_SHRINK`), and maps it. A peer that receives the file can map it without the
/// risk that the creator truncates it under the peer's mapping (which would raise
/// `SIGBUS` in the peer).
///
/// The mapping reports [`crate::pmem::MapMode::PageCache`]; the memory is volatile.
pub fn sealed_memfd(name: &str, len: usize) -> Result<(File, Mapping)> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| Error::io("memfd_create", e.into()))?;
    let file = File::from(fd);
    file.set_len(len as u64).map_err(|e| Error::io("memfd set_len", e))?;
    rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::SEAL)
        .map_err(|e| Error::io("memfd add seals", e.into()))?;
    let map = Mapping::map_file(&file, 0, len.max(1), false)?;
    Ok((file, map))
}

/// True when `file` is a sealed shared-memory file that can no longer shrink.
pub fn is_shrink_sealed(file: &File) -> bool {
    rustix::fs::fcntl_get_seals(file).map(|s| s.contains(SealFlags::SHRINK)).unwrap_or(false)
}

/// Size of `file` in bytes.
pub fn file_len(file: &File) -> Result<u64> {
    file.metadata().map(|m| m.len()).map_err(|e| Error::io("fstat", e))
}

/// Blocks while `word` holds `expected`, for at most `timeout`. Returns early on a
/// [`futex_wake`], a signal, a spurious wake-up, or when the word already differs; the
/// caller re-checks its condition in every case.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // EAGAIN (value changed), EINTR and ETIMEDOUT are all "go and look again".
    let _ = futex::wait(word, futex::Flags::empty(), expected, Some(&ts));
}

/// Wakes up to `n` threads (in any process) blocked in [`futex_wait`] on `word`.
pub fn futex_wake(word: &AtomicU32, n: u32) {
    let _ = futex::wake(word, futex::Flags::empty(), n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn sealed_memfd_cannot_shrink_and_is_shared() {
        let (f, m) = sealed_memfd("t", 8192).unwrap();
        assert!(is_shrink_sealed(&f));
        assert!(f.set_len(4096).is_err());
        let peer = Mapping::map_file(&f, 0, 8192, false).unwrap();
        m.write(100, b"abc").unwrap();
        assert_eq!(peer.view(100, 3).unwrap(), b"abc");
        let (plain, _) = Mapping::memfd("p", 4096).unwrap();
        assert!(!is_shrink_sealed(&plain));
    }

    #[test]
    fn futex_wait_times_out_and_wakes() {
        let m = Arc::new(Mapping::anonymous(4096).unwrap());
        let t = Instant::now();
        futex_wait(m.atomic_u32(0).unwrap(), 0, Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(10));
        // Wrong expected value returns at once.
        let t = Instant::now();
        futex_wait(m.atomic_u32(0).unwrap(), 1, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1));
        let m2 = m.clone();
        let h = std::thread::spawn(move || {
            let w = m2.atomic_u32(0).unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while w.load(Ordering::Acquire) == 0 && Instant::now() < deadline {
                futex_wait(w, 0, Duration::from_secs(1));
            }
            w.load(Ordering::Acquire)
        });
        std::thread::sleep(Duration::from_millis(10));
        let w = m.atomic_u32(0).unwrap();
        w.store(1, Ordering::Release);
        futex_wake(w, 1);
        assert_eq!(h.join().unwrap(), 1);
    }
}
