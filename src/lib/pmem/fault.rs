//! A clear last word when a mapped file shrinks under the process.
//!
//! The pool is a file mapped into memory; another process (or a full or failing
//! storage) can truncate it while a server runs. The next access past the new end
//! raises SIGBUS, and the process died with the shell's bare "Bus error". Nothing can
//! make that access succeed: the pages are gone. [`report_bus_errors`] installs a
//! handler that writes one line saying what happened, then lets the signal's default
//! action end the process as before (the exit status still says SIGBUS).
//!
//! The shm transport's own files cannot shrink under it (their size is sealed; see
//! [`super::shared`]), so a SIGBUS here is a pool, a crash image, or a file some other
//! part of the program mapped.
//!
//! May import: `error`.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// What the line starts with (the program's name), set once.
static PREFIX: OnceLock<&'static str> = OnceLock::new();

/// The line's text after the address.
const WHAT: &str = ": a memory-mapped file is shorter than its mapping: another process truncated the pool \
                    file, or its storage failed. Stopping here; `boomctl recover` checks what the pool still holds.\n";

/// Installs the SIGBUS handler (once per process; later calls change nothing).
/// `program` starts the line it writes, as in "boomctl: bus error at 0x...".
pub fn report_bus_errors(program: &'static str) -> Result<()> {
    if PREFIX.set(program).is_err() {
        return Ok(());
    }
    // SAFETY: `sa` is a zeroed `sigaction` filled in field by field (an empty mask, a
    // handler with the three-argument signature SA_SIGINFO calls); sigaction(2) only
    // reads it, and the old action is not asked for.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(Error::io("install a SIGBUS handler", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The handler: async-signal-safe work only (a stack buffer, one write(2)). SA_RESETHAND
/// has put back the default action, so when it returns the access faults again and the
/// process ends as an unhandled SIGBUS would end it.
extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let addr = if info.is_null() {
        0
    } else {
        // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; si_addr
        // is defined for SIGBUS.
        unsafe { (*info).si_addr() as usize }
    };
    let mut buf = [0u8; 512];
    let n = compose(&mut buf, PREFIX.get().copied().unwrap_or("boomkv"), addr);
    // SAFETY: write(2) is async-signal-safe; `buf[..n]` is initialised and in bounds.
    unsafe {
        libc::write(libc::STDERR_FILENO, buf.as_ptr().cast(), n);
    }
}

/// Writes "PREFIX: bus error at 0xADDR" and [`WHAT`] into `buf` (cut at its end),
/// without allocating; returns the length.
fn compose(buf: &mut [u8], prefix: &str, addr: usize) -> usize {
    let mut n = 0;
    let mut put = |b: &[u8], n: &mut usize| {
        let take = b.len().min(buf.len() - *n);
        buf[*n..*n + take].copy_from_slice(&b[..take]);
        *n += take;
    };
    put(prefix.as_bytes(), &mut n);
    put(b": bus error at 0x", &mut n);
    let mut hex = [0u8; 16];
    let mut digits = 0;
    let mut a = addr;
    loop {
        hex[15 - digits] = b"0123456789abcdef"[a & 0xf];
        digits += 1;
        a >>= 4;
        if a == 0 || digits == 16 {
            break;
        }
    }
    put(&hex[16 - digits..], &mut n);
    put(WHAT.as_bytes(), &mut n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_address_and_the_cause() {
        let mut buf = [0u8; 512];
        let n = compose(&mut buf, "boomctl", 0x7f00_dead_b000);
        let s = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(s.starts_with("boomctl: bus error at 0x7f00deadb000: a memory-mapped file"), "{s}");
        assert!(s.ends_with("pool still holds.\n"), "{s}");
        let n = compose(&mut buf, "p", 0);
        assert!(std::str::from_utf8(&buf[..n]).unwrap().starts_with("p: bus error at 0x0: "));
        // A buffer too short is filled, not overrun.
        let mut short = [0u8; 10];
        assert_eq!(compose(&mut short, "boomctl", usize::MAX), 10);
    }
}
