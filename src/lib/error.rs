//! The library's error type.
//!
//! Every fallible library call returns [`Error`]; the binary adds context (which
//! command, which path, which server) and prints one line.

use std::path::PathBuf;

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A path could not be used as a pool.
    #[error("{}: {problem}", path.display())]
    Path {
        /// The path the user gave.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The pool's media does not hold a valid BOOM-KV pool.
    #[error("{}: {problem}", path.display())]
    BadPool {
        /// The pool file.
        path: PathBuf,
        /// What is wrong with its content.
        problem: String,
    },
    /// An access outside a mapping or region.
    #[error("access of {len} bytes at offset {offset} is outside the {limit}-byte range")]
    OutOfBounds {
        /// Start of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the range.
        limit: u64,
    },
    /// Bytes that do not decode (wire message or media record).
    #[error("corrupt {what}: {problem}")]
    Corrupt {
        /// What was being decoded.
        what: &'static str,
        /// Why it was rejected.
        problem: String,
    },
    /// An argument or configuration the library cannot accept.
    #[error("{0}")]
    Invalid(String),
    /// The pool has no free segment left for this use (the last free ones are kept for
    /// the cleaner and the tombstone log).
    #[error("pool full: no free segment (pool has {} of {segment_size} bytes{})", segments_of(*.segments), kept_note(*.kept))]
    PoolFull {
        /// Segments in the pool.
        segments: u64,
        /// Bytes per segment.
        segment_size: u64,
        /// Free segments there are but this use may not take: kept for the cleaner (so a
        /// full pool can be compacted) and for DELETEs.
        kept: usize,
    },
    /// The pool has free segments, but not the run of consecutive ones a cell table or
    /// an arena needs.
    #[error("pool full: {0}")]
    NoRoom(String),
    /// A key or value is over its limit.
    #[error("{what} of {len} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// "key" or "value".
        what: &'static str,
        /// Its length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// A transport-level failure (connection, completion error, timeout).
    #[error("transport: {0}")]
    Transport(String),
    /// A client found nothing to connect to at its server's address (refused,
    /// unreachable, no such socket): typed, so a program can suggest starting a server.
    #[error("cannot connect to {addr}: {why}")]
    Unreachable {
        /// The address as the user gave it.
        addr: String,
        /// What the operating system (or the client library) said.
        why: String,
    },
    /// The peer violated the protocol.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The server refused a request and said why.
    #[error("server: {message}")]
    Server {
        /// The kind of refusal (a client decides what to do by this).
        code: ErrorCode,
        /// The server's explanation.
        message: String,
    },
    /// The connection broke while a request was outstanding.
    #[error("connection lost during {during}: {why}")]
    ConnectionLost {
        /// The request that was waiting.
        during: &'static str,
        /// What the transport said.
        why: String,
    },
    /// The operation is not available with this protocol or configuration.
    #[error("{0}")]
    Unsupported(String),
    /// A benchmark phase (YCSB's load or run) failed.
    // Not a #[source]: the message already carries it, and the binary prints the chain.
    #[error("{phase} phase: {error}")]
    Phase {
        /// `load` or `run`.
        phase: &'static str,
        /// What failed.
        error: Box<Error>,
    },
    /// A benchmark's clients stopped at an error no retry gets past ([`Error::is_fatal`];
    /// the first of them, which several threads may have met).
    #[error("{message}")]
    Stopped {
        /// What kind of error it was ([`Error::refusal_code`]).
        code: ErrorCode,
        /// The error.
        message: String,
    },
    /// An operation did not complete in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, &'static str),
    /// The pool's version counter reached its limit: no PUT or DELETE can be ordered
    /// after the existing ones any more (versions never wrap).
    #[error("version counter exhausted: the pool has used every version below {limit}; copy its data to a new pool")]
    VersionsExhausted {
        /// The first version that cannot be assigned.
        limit: u64,
    },
}

/// Why a server refused a request (carried in its error replies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ErrorCode {
    /// The entry failed validation (bounds, lengths, checksum, placement).
    InvalidEntry,
    /// No free segment: the pool is full.
    PoolFull,
    /// Key or value over the limit.
    TooLarge,
    /// The request does not decode or is not allowed in this protocol/state.
    BadRequest,
    /// The client has used its segment quota.
    Quota,
    /// The server failed (media error).
    Internal,
    /// Scans need the ordered index.
    NoScan,
    /// The server cannot do this with its pool (an older format, read-only media).
    Unsupported,
}

impl Error {
    /// Whether retrying the same operation on the same connection cannot succeed: the
    /// connection is gone, the pool is full, or the server or protocol does not do it.
    pub fn is_fatal(&self) -> bool {
        match self {
            Error::ConnectionLost { .. }
            | Error::Unreachable { .. }
            | Error::Unsupported(_)
            | Error::PoolFull { .. }
            | Error::NoRoom(_)
            | Error::Stopped { .. } => true,
            Error::Server { code, .. } => {
                matches!(code, ErrorCode::PoolFull | ErrorCode::NoScan | ErrorCode::Unsupported)
            }
            _ => false,
        }
    }

    /// The code a server refuses a request with when this error stops it: typed, so a
    /// client can tell a full pool from one that cannot hold what it asked for.
    pub fn refusal_code(&self) -> ErrorCode {
        match self {
            Error::PoolFull { .. } | Error::NoRoom(_) => ErrorCode::PoolFull,
            Error::Server { code, .. } | Error::Stopped { code, .. } => *code,
            Error::Unsupported(_) => ErrorCode::Unsupported,
            Error::TooLarge { .. } => ErrorCode::TooLarge,
            Error::Invalid(_) => ErrorCode::BadRequest,
            _ => ErrorCode::Internal,
        }
    }

    /// Whether the server could not be reached ([`Error::Unreachable`]), also as the
    /// cause of a failed YCSB phase.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Phase { error, .. } => error.is_unreachable(),
            _ => false,
        }
    }

    /// Whether this is the pool running out of room, directly, in a server's refusal,
    /// in a benchmark's stop or inside a YCSB phase.
    pub fn is_pool_full(&self) -> bool {
        match self {
            Error::PoolFull { .. } | Error::NoRoom(_) => true,
            Error::Server { code, .. } | Error::Stopped { code, .. } => *code == ErrorCode::PoolFull,
            Error::Phase { error, .. } => error.is_pool_full(),
            _ => false,
        }
    }

    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::Invalid(msg.into())
    }

    /// Shorthand for [`Error::Corrupt`].
    pub fn corrupt(what: &'static str, problem: impl Into<String>) -> Error {
        Error::Corrupt { what, problem: problem.into() }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}

/// `1 segment`, `4 segments` (`units::count`, which this bottom layer may not use).
fn segments_of(n: u64) -> String {
    if n == 1 {
        "1 segment".into()
    } else {
        format!("{n} segments")
    }
}

/// The end of [`Error::PoolFull`]'s message: the free segments kept back, if any.
fn kept_note(kept: usize) -> String {
    match kept {
        0 => String::new(),
        1 => "; its last free segment is kept for the cleaner".into(),
        n => format!("; its last {n} free segments are kept for the cleaner and DELETEs"),
    }
}
