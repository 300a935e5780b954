//! Primitives for memory shared between processes: sealed shared-memory files, read-only
//! views of a peer's words, and futex parking on words inside a [`Mapping`].
//!
//! The `shm` transport builds its rings, doorbells and region tables from these, and is
//! their only user; they live here, not in the transport, because `unsafe` code lives
//! only in `pmem` and the verbs FFI (the read-only word view needs it). They are safe
//! wrappers: the system calls go through `rustix`, whose `futex` and `memfd`
//! functions take references and owned descriptors; only the read-only mapping of
//! [`ReadOnlyWords`] needs `unsafe`, each block with its reason.
//!
//! Futex calls use the shared (not process-private) variant: the word may live in a
//! mapping of a file that another process maps too, and the kernel keys the wait queue
//! on the file page, so a wake from either process reaches a waiter in the other.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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

/// Like [`sealed_memfd`], but only the creator can ever write it: after the creator's
/// own writable mapping is made, the file is sealed with `F_SEAL_FUTURE_WRITE`, so a
/// peer that receives it can map it only read-only (and `write(2)` fails). For words the
/// creator publishes and peers only read, such as a region table.
pub fn owner_writable_memfd(name: &str, len: usize) -> Result<(File, Mapping)> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| Error::io("memfd_create", e.into()))?;
    let file = File::from(fd);
    file.set_len(len as u64).map_err(|e| Error::io("memfd set_len", e))?;
    let map = Mapping::map_file(&file, 0, len.max(1), false)?;
    rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::FUTURE_WRITE | SealFlags::SEAL)
        .map_err(|e| Error::io("memfd add seals", e.into()))?;
    Ok((file, map))
}

/// A read-only shared mapping of `8 * n` bytes of a peer's file: its aligned 8-byte
/// words can be loaded atomically, never stored. For memory the peer owns and we only
/// observe (its region table).
pub struct ReadOnlyWords {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain read-only memory; loads go through atomics.
unsafe impl Send for ReadOnlyWords {}
// SAFETY: as above.
unsafe impl Sync for ReadOnlyWords {}

impl std::fmt::Debug for ReadOnlyWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyWords").field("len", &self.len).finish()
    }
}

impl ReadOnlyWords {
    /// Maps the first `len` bytes of `file` shared and read-only. The caller has checked
    /// that the file is at least `len` bytes long and sealed against shrinking.
    pub fn map(file: &File, len: usize) -> Result<ReadOnlyWords> {
        if len == 0 {
            return Err(Error::invalid("cannot map zero bytes"));
        }
        // SAFETY: a fresh read-only mapping at a kernel-chosen address; the fd is open.
        let p =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(Error::io("mmap (read-only)", std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| Error::invalid("mmap returned null"))?;
        Ok(ReadOnlyWords { ptr, len })
    }

    /// Loads the aligned word at byte offset `off`; `None` when out of bounds or unaligned.
    pub fn load(&self, off: u64, order: Ordering) -> Option<u64> {
        if off % 8 != 0 || off.checked_add(8)? > self.len as u64 {
            return None;
        }
        #[allow(clippy::cast_ptr_alignment)] // the caller's offset is checked aligned, the base is a page
        // SAFETY: in bounds and aligned (the mapping is page aligned); AtomicU64 has the
        // layout of u64; only `load` is called on it, which a read-only page allows.
        let w = unsafe { &*(self.ptr.as_ptr().add(off as usize) as *const AtomicU64) };
        Some(w.load(order))
    }
}

impl Drop for ReadOnlyWords {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned; nothing borrows it past `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len) };
    }
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
