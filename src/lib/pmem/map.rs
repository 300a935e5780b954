//! Memory mappings of files and shared memory, with bounds-checked access.
//!
//! A [`Mapping`] is memory that other parties may write at any time: a client's
//! one-sided WRITE, a peer process of the `shm` transport, or the device. It is
//! therefore never handed out as `&mut [u8]`; reads and writes copy through raw
//! pointers, and words that decide validity are accessed as atomics.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::error::{Error, Result};
use crate::pmem::flush::{self, FlushKind};

/// How a file mapping was made, which decides what write-back can promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MapMode {
    /// `MAP_SHARED_VALIDATE | MAP_SYNC` on a DAX file system: cache-line write-back is durable.
    DaxSync,
    /// An ordinary shared mapping through the page cache: durable only after `msync`.
    PageCache,
    /// Private anonymous or memfd memory: never durable.
    Volatile,
}

/// A mapped range of memory, unmapped on drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    mode: MapMode,
    /// Who unmaps it: memmap2 for every mapping it can express, `munmap` for the
    /// `MAP_SYNC` one it cannot.
    backing: Backing,
    /// The file and offset it maps, for mappings of files (see [`Mapping::origin`]).
    origin: Option<FileOrigin>,
}

/// Which file a mapping maps, and from which offset: lets a write-back made through
/// one process's mapping be attributed to the file (the crash simulator learns of a
/// one-sided FLUSH that way, [`crate::pmem::persist_remote`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileOrigin {
    /// Device of the file.
    pub dev: u64,
    /// Inode of the file.
    pub ino: u64,
    /// File offset of the mapping's first byte.
    pub offset: u64,
}

impl FileOrigin {
    /// The identity of `file` (device, inode), mapped from `offset`.
    pub fn of(file: &File, offset: u64) -> Option<FileOrigin> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata().ok()?;
        Some(FileOrigin { dev: m.dev(), ino: m.ino(), offset })
    }
}

/// The owner of a mapping's pages.
enum Backing {
    /// A raw `mmap` (`MAP_SHARED_VALIDATE | MAP_SYNC`), unmapped by hand on drop.
    Raw,
    /// A memmap2 mapping (held only to unmap it on drop; access goes through `ptr`).
    Memmap(#[allow(dead_code)] memmap2::MmapRaw),
}

impl Mapping {
    fn from_memmap(m: memmap2::MmapRaw, len: usize, mode: MapMode) -> Result<Mapping> {
        let ptr = NonNull::new(m.as_mut_ptr()).ok_or_else(|| Error::invalid("mmap returned NULL"))?;
        Ok(Mapping { ptr, len, mode, backing: Backing::Memmap(m), origin: None })
    }
}

// SAFETY: the mapping is plain memory; all access goes through raw-pointer copies and
// atomics, never through references that assume exclusive access.
unsafe impl Send for Mapping {}
// SAFETY: as above; concurrent access is the point of the type.
unsafe impl Sync for Mapping {}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping").field("len", &self.len).field("mode", &self.mode).finish()
    }
}

impl Mapping {
    /// Maps `len` bytes of `file` from `offset` (page aligned) shared and writable.
    /// With `try_sync`, first tries `MAP_SYNC` (DAX only) and falls back to an ordinary
    /// shared mapping when the file system refuses it.
    pub fn map_file(file: &File, offset: u64, len: usize, try_sync: bool) -> Result<Mapping> {
        if len == 0 {
            return Err(Error::invalid("cannot map zero bytes"));
        }
        let page = page_size() as u64;
        if offset % page != 0 {
            return Err(Error::invalid(format!("mapping offset {offset} is not page aligned")));
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        if try_sync {
            // SAFETY: a fresh mapping at an address the kernel chooses; the fd is open.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                    file.as_raw_fd(),
                    offset as libc::off_t,
                )
            };
            if p != libc::MAP_FAILED {
                return Ok(Mapping {
                    ptr: nonnull(p)?,
                    len,
                    mode: MapMode::DaxSync,
                    backing: Backing::Raw,
                    origin: FileOrigin::of(file, offset),
                });
            }
            let e = std::io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) {
                return Err(Error::Io { context: "mmap(MAP_SYNC)".into(), source: e });
            }
        }
        // A raw (pointer-only) memmap2 mapping: other parties may write the memory at any
        // time, which `Mapping` allows for by never handing out references into it.
        let m = memmap2::MmapOptions::new()
            .offset(offset)
            .len(len)
            .map_raw(file)
            .map_err(|e| Error::Io { context: "mmap".into(), source: e })?;
        let mut m = Mapping::from_memmap(m, len, MapMode::PageCache)?;
        m.origin = FileOrigin::of(file, offset);
        Ok(m)
    }

    /// Creates a shared-memory file (memfd) of `len` bytes and maps it. The file can be
    /// handed to another process, which maps the same memory.
    pub fn memfd(name: &str, len: usize) -> Result<(File, Mapping)> {
        let cname = std::ffi::CString::new(name).map_err(|_| Error::invalid("memfd name contains NUL"))?;
        // SAFETY: `cname` is a valid C string; memfd_create has no other preconditions.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Io { context: "memfd_create".into(), source: std::io::Error::last_os_error() });
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64).map_err(|e| Error::Io { context: "memfd set_len".into(), source: e })?;
        let mut m = Mapping::map_file(&file, 0, len.max(1), false)?;
        m.mode = MapMode::Volatile;
        Ok((file, m))
    }

    /// Private anonymous zeroed memory (a DRAM buffer).
    pub fn anonymous(len: usize) -> Result<Mapping> {
        let len = len.max(1);
        let m = memmap2::MmapOptions::new()
            .len(len)
            .map_anon()
            .map_err(|e| Error::Io { context: "mmap(anonymous)".into(), source: e })?;
        Mapping::from_memmap(m.into(), len, MapMode::Volatile)
    }

    /// The file and offset this mapping maps (`None` for anonymous memory).
    pub fn origin(&self) -> Option<FileOrigin> {
        self.origin
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length mappings cannot be made.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How the mapping was made.
    pub fn mode(&self) -> MapMode {
        self.mode
    }

    /// Base address, for registering the memory with a device (verbs) or printing.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Checks that `[off, off + len)` lies inside the mapping.
    #[inline]
    pub fn check(&self, off: u64, len: usize) -> Result<()> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.len as u64 => Ok(()),
            _ => Err(Error::OutOfBounds { offset: off, len: len as u64, limit: self.len as u64 }),
        }
    }

    /// Copies `buf.len()` bytes at `off` into `buf` (in chunks, see [`super::copy_bytes`]).
    #[inline]
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.check(off, buf.len())?;
        let mut done = 0;
        for chunk in buf.chunks_mut(super::COPY_CHUNK) {
            // SAFETY: `[off, off + buf.len())` is bounds-checked above and this chunk lies
            // inside it; `buf` is a distinct Rust allocation, so the ranges do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.as_ptr().add(off as usize + done),
                    chunk.as_mut_ptr(),
                    chunk.len(),
                );
            }
            done += chunk.len();
        }
        Ok(())
    }

    /// Copies `data` into the mapping at `off` (in chunks, see [`super::copy_bytes`]).
    #[inline]
    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        self.check(off, data.len())?;
        let mut done = 0;
        for chunk in data.chunks(super::COPY_CHUNK) {
            // SAFETY: `[off, off + data.len())` is bounds-checked above and this chunk lies
            // inside it; `data` is a distinct Rust allocation, so the ranges do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(chunk.as_ptr(), self.ptr.as_ptr().add(off as usize + done), chunk.len());
            }
            done += chunk.len();
        }
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte`.
    pub fn fill(&self, off: u64, len: usize, byte: u8) -> Result<()> {
        self.check(off, len)?;
        // SAFETY: bounds checked above.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off as usize), byte, len) };
        Ok(())
    }

    /// Copies `len` bytes from `self` at `src_off` to `dst` at `dst_off` (the two may be
    /// the same mapping; overlapping ranges are handled like `memmove`).
    pub fn copy_to(&self, src_off: u64, dst: &Mapping, dst_off: u64, len: usize) -> Result<()> {
        self.check(src_off, len)?;
        dst.check(dst_off, len)?;
        let (s, d) = (self.ptr.as_ptr() as usize + src_off as usize, dst.ptr.as_ptr() as usize + dst_off as usize);
        if s + len <= d || d + len <= s {
            // Disjoint (the usual case: two regions): in pieces, see `super::copy_bytes`.
            let mut done = 0;
            while done < len {
                let n = (len - done).min(super::COPY_CHUNK);
                // SAFETY: both ranges bounds-checked above and disjoint; this piece lies
                // inside both.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.ptr.as_ptr().add(src_off as usize + done),
                        dst.ptr.as_ptr().add(dst_off as usize + done),
                        n,
                    );
                }
                done += n;
            }
        } else {
            // SAFETY: both ranges bounds-checked above; `copy` allows overlap.
            unsafe {
                std::ptr::copy(self.ptr.as_ptr().add(src_off as usize), dst.ptr.as_ptr().add(dst_off as usize), len);
            }
        }
        Ok(())
    }

    /// A shared view of `len` bytes at `off`.
    ///
    /// Only for memory that no other party writes while the view lives: an offline pool,
    /// a sealed segment (its client's access revoked), the server's own buffers. Memory
    /// a peer may still write (a client's active segment) is copied out with
    /// [`Mapping::read`], each byte once, and the copy is checked and used: a `&[u8]`
    /// over it would let the code, or the compiler, read a length again after checking
    /// it. Every reader of a view validates it with the entry checksum anyway.
    pub fn view(&self, off: u64, len: usize) -> Result<&[u8]> {
        self.check(off, len)?;
        // SAFETY: bounds checked; the memory lives as long as `self`. The contract above
        // keeps writers away while the view is used.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off as usize), len) })
    }

    /// The aligned 8-byte word at `off`, for single-store updates of validity fields
    /// (`count`, `version_num`) and for lock-free rings.
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        self.check(off, 8)?;
        if off % 8 != 0 || (self.ptr.as_ptr() as usize) % 8 != 0 {
            return Err(Error::invalid(format!("offset {off} is not 8-byte aligned")));
        }
        #[allow(clippy::cast_ptr_alignment)] // alignment checked just above
        // SAFETY: in bounds and aligned; AtomicU64 has the layout of u64 and any bit
        // pattern is valid; the reference lives no longer than the mapping.
        Ok(unsafe { &*(self.ptr.as_ptr().add(off as usize) as *const AtomicU64) })
    }

    /// The aligned 4-byte word at `off`.
    pub fn atomic_u32(&self, off: u64) -> Result<&AtomicU32> {
        self.check(off, 4)?;
        if off % 4 != 0 {
            return Err(Error::invalid(format!("offset {off} is not 4-byte aligned")));
        }
        #[allow(clippy::cast_ptr_alignment)] // alignment checked just above
        // SAFETY: in bounds and aligned (mappings are page aligned); any bit pattern is a valid u32.
        Ok(unsafe { &*(self.ptr.as_ptr().add(off as usize) as *const AtomicU32) })
    }

    /// Reads a little-endian u64 at `off` (any alignment).
    pub fn read_u64(&self, off: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes back the cache lines covering `[off, off + len)` with `kind`; no fence.
    /// Returns the number of lines written back.
    pub fn flush(&self, kind: FlushKind, off: u64, len: usize) -> Result<u64> {
        self.check(off, len)?;
        if !kind.supported() {
            return Err(Error::invalid(format!("this CPU does not support {kind}")));
        }
        // SAFETY: range checked to be inside this mapping; `kind` checked supported.
        Ok(unsafe { flush::flush_range(kind, self.ptr.as_ptr().add(off as usize), len) })
    }

    /// `msync(MS_SYNC)` of the pages covering `[off, off + len)`.
    pub fn msync(&self, off: u64, len: usize) -> Result<()> {
        self.check(off, len)?;
        let page = page_size() as u64;
        let start = off / page * page;
        let end = off + len as u64;
        // SAFETY: the page-rounded range starts at or after the mapping's (page aligned) base
        // and ends inside it, since the mapping covers `end` and is page-granular.
        let r = unsafe {
            libc::msync(
                self.ptr.as_ptr().add(start as usize).cast::<libc::c_void>(),
                (end - start) as usize,
                libc::MS_SYNC,
            )
        };
        if r != 0 {
            return Err(Error::Io { context: "msync".into(), source: std::io::Error::last_os_error() });
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if matches!(self.backing, Backing::Raw) {
            // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing borrows them past `self`.
            unsafe { libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len) };
        }
        // A memmap2 backing unmaps itself when dropped with `self`.
    }
}

fn nonnull(p: *mut libc::c_void) -> Result<NonNull<u8>> {
    NonNull::new(p.cast::<u8>()).ok_or_else(|| Error::invalid("mmap returned NULL"))
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl Mapping {
    /// Maps `len` bytes of `file` privately (copy-on-write): reads see the file, writes
    /// stay in this process. Used to inspect a pool without changing it.
    pub fn map_private_file(file: &File, len: usize) -> Result<Mapping> {
        let len = len.max(1);
        // SAFETY: a private copy-on-write mapping of an open file: writes stay in this
        // process; a concurrent writer of the file is what `Mapping` allows for anyway.
        let m = unsafe { memmap2::MmapOptions::new().len(len).map_copy(file) }
            .map_err(|e| Error::Io { context: "mmap(private)".into(), source: e })?;
        Mapping::from_memmap(m.into(), len, MapMode::Volatile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_and_bounds() {
        let m = Mapping::anonymous(4096).unwrap();
        m.write(100, b"hello").unwrap();
        let mut b = [0u8; 5];
        m.read(100, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        assert!(m.write(4094, b"abc").is_err());
        assert!(m.read(u64::MAX - 1, &mut b).is_err());
        assert!(m.atomic_u64(3).is_err());
        m.atomic_u64(8).unwrap().store(7, std::sync::atomic::Ordering::Release);
        assert_eq!(m.read_u64(8).unwrap(), 7);
    }

    #[test]
    fn memfd_is_shared_between_mappings() {
        let (f, a) = Mapping::memfd("t", 8192).unwrap();
        let b = Mapping::map_file(&f, 4096, 4096, false).unwrap();
        a.write(4096 + 10, b"xy").unwrap();
        assert_eq!(b.view(10, 2).unwrap(), b"xy");
        a.copy_to(4096 + 10, &a, 0, 2).unwrap();
        assert_eq!(a.view(0, 2).unwrap(), b"xy");
    }
}
