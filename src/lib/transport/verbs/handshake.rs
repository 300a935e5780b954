//! The verbs backend's connection handshake and control messages, exchanged over a TCP
//! socket the way perftest exchanges `{lid, qpn, psn, gid}`.
//!
//! The message layout and the sequence are documented in the module docs of
//! `transport::verbs` (section "Handshake"); this file encodes and decodes them.

use std::io::{ErrorKind, Read};

use super::attr::{mtu_bytes, PeerInfo};
use crate::transport::{MAX_PRIVATE_DATA, PROTOCOL_VERSION};

/// "BOOMKVIB", little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BOOMKVIB");
/// Header bytes.
pub const HEADER_LEN: usize = 48;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Client -> server: the client's queue pair and private data.
    Hello = 1,
    /// Server -> client: the server's queue pair and its answer.
    Accept = 2,
    /// Server -> client: refused, with a reason.
    Reject = 3,
    /// Client -> server: the client's queue pair is ready to send.
    Ready = 4,
    /// Either way after the handshake: this side's queue pair is going away.
    Bye = 5,
}

impl Kind {
    fn from_code(c: u16) -> Option<Kind> {
        Some(match c {
            1 => Kind::Hello,
            2 => Kind::Accept,
            3 => Kind::Reject,
            4 => Kind::Ready,
            5 => Kind::Bye,
            _ => return None,
        })
    }

    /// Hello and accept describe a queue pair; the other kinds do not.
    fn carries_qp(self) -> bool {
        matches!(self, Kind::Hello | Kind::Accept)
    }
}

/// One handshake or control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    /// What it is.
    pub kind: Kind,
    /// The sender's queue pair (zeros for reject, ready, bye).
    pub info: PeerInfo,
    /// Private data or reason.
    pub payload: Vec<u8>,
}

const NO_QP: PeerInfo = PeerInfo { qpn: 0, psn: 0, lid: 0, gid: [0; 16], mtu: 0, rd_atomic: 0 };

impl Msg {
    /// A hello or accept.
    pub fn qp(kind: Kind, info: PeerInfo, payload: &[u8]) -> Msg {
        Msg { kind, info, payload: payload.to_vec() }
    }

    /// A reject, ready or bye.
    pub fn bare(kind: Kind, reason: &str) -> Msg {
        Msg { kind, info: NO_QP, payload: reason.as_bytes().to_vec() }
    }

    /// The payload as a reason string.
    pub fn reason(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }

    /// The wire bytes (header and payload).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_LEN + self.payload.len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.kind as u16).to_le_bytes());
        b.extend_from_slice(&self.info.qpn.to_le_bytes());
        b.extend_from_slice(&self.info.psn.to_le_bytes());
        b.extend_from_slice(&self.info.lid.to_le_bytes());
        b.push(self.info.mtu);
        b.push(self.info.rd_atomic);
        b.extend_from_slice(&self.info.gid);
        b.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.payload);
        b
    }
}

/// Why a message could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The socket's read timeout passed.
    TimedOut,
    /// The peer closed the socket before (or in the middle of) a message.
    Closed,
    /// A socket error.
    Io(String),
    /// The peer speaks our handshake at another version: `(version, kind code)`.
    Version(u16, u16),
    /// Bytes that are not a valid message.
    Garbage(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::TimedOut => f.write_str("timed out waiting for the verbs handshake"),
            ReadError::Closed => f.write_str("the peer closed the connection"),
            ReadError::Io(e) => write!(f, "reading the verbs handshake: {e}"),
            ReadError::Version(v, _) => write!(
                f,
                "verbs transport protocol version {v} is not supported; this side speaks version {PROTOCOL_VERSION}"
            ),
            ReadError::Garbage(why) => write!(f, "malformed verbs handshake: {why}"),
        }
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// What the header says: the kind and the payload length still to read.
pub fn decode_header(h: &[u8; HEADER_LEN]) -> Result<(Kind, PeerInfo, usize), ReadError> {
    let magic = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]);
    if magic != MAGIC {
        return Err(ReadError::Garbage(format!("bad magic {magic:#018x} (not a boomkv verbs peer?)")));
    }
    let (version, kind_code) = (u16_at(h, 8), u16_at(h, 10));
    if version != PROTOCOL_VERSION {
        return Err(ReadError::Version(version, kind_code));
    }
    let kind = Kind::from_code(kind_code).ok_or_else(|| ReadError::Garbage(format!("unknown kind {kind_code}")))?;
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&h[24..40]);
    let info =
        PeerInfo { qpn: u32_at(h, 12), psn: u32_at(h, 16), lid: u16_at(h, 20), gid, mtu: h[22], rd_atomic: h[23] };
    let len = u32_at(h, 40) as usize;
    if u32_at(h, 44) != 0 {
        return Err(ReadError::Garbage("reserved field is not zero".into()));
    }
    if len > MAX_PRIVATE_DATA {
        return Err(ReadError::Garbage(format!("payload of {len} bytes is over {MAX_PRIVATE_DATA}")));
    }
    if kind.carries_qp() {
        if info.qpn > 0xff_ffff || info.psn > 0xff_ffff {
            return Err(ReadError::Garbage(format!("qpn {:#x} / psn {:#x} over 24 bits", info.qpn, info.psn)));
        }
        if mtu_bytes(info.mtu as u32).is_none() {
            return Err(ReadError::Garbage(format!("invalid MTU code {}", info.mtu)));
        }
    } else if info != NO_QP {
        return Err(ReadError::Garbage(format!("{kind:?} carries queue-pair fields")));
    }
    Ok((kind, info, len))
}

fn read_exact<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<(), ReadError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => ReadError::TimedOut,
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => ReadError::Closed,
        _ => ReadError::Io(e.to_string()),
    })
}

/// A socket read under one deadline for a whole handshake: each read waits only what is
/// left of it. A socket's read timeout is per read, so a peer that sent a byte just
/// within it each time would hold the handshake (and the acceptor behind it) for hours.
pub struct ReadBy<'a> {
    /// The handshake's socket.
    pub sock: &'a mut std::net::TcpStream,
    /// When the handshake must be done.
    pub until: std::time::Instant,
}

impl Read for ReadBy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(ErrorKind::TimedOut, "the handshake's deadline passed"));
        }
        self.sock.set_read_timeout(Some(left))?;
        self.sock.read(buf)
    }
}

/// Reads one message (blocking, under the reader's own timeout).
pub fn read_msg<R: Read>(r: &mut R) -> Result<Msg, ReadError> {
    let mut h = [0u8; HEADER_LEN];
    read_exact(r, &mut h)?;
    let (kind, info, len) = decode_header(&h)?;
    let mut payload = vec![0u8; len];
    read_exact(r, &mut payload)?;
    Ok(Msg { kind, info, payload })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn info() -> PeerInfo {
        PeerInfo {
            qpn: 0xab_cdef,
            psn: 0x12_3456,
            lid: 0x0102,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 20],
            mtu: 3,
            rd_atomic: 16,
        }
    }

    #[test]
    fn a_peer_that_drips_bytes_cannot_outlast_the_deadline() {
        // One byte every 50 ms, each within any per-read timeout: the message as a whole
        // is cut off at the deadline.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let dripper = std::thread::spawn(move || {
            use std::io::Write;
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let m = Msg::bare(Kind::Reject, &"x".repeat(200)).encode();
            for b in m {
                if c.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        let (mut s, _) = l.accept().unwrap();
        let t0 = std::time::Instant::now();
        let until = t0 + std::time::Duration::from_millis(400);
        let r = read_msg(&mut ReadBy { sock: &mut s, until });
        assert_eq!(r, Err(ReadError::TimedOut));
        assert!(t0.elapsed() < std::time::Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(s);
        dripper.join().unwrap();
    }

    #[test]
    fn roundtrip_every_kind() {
        let msgs = [
            Msg::qp(Kind::Hello, info(), b"client private data"),
            Msg::qp(Kind::Accept, PeerInfo { qpn: 1, psn: 0, ..info() }, &[]),
            Msg::qp(Kind::Hello, info(), &vec![7u8; MAX_PRIVATE_DATA]),
            Msg::bare(Kind::Reject, "unknown client id 42"),
            Msg::bare(Kind::Ready, ""),
            Msg::bare(Kind::Bye, "closed by the application"),
        ];
        let mut stream = Vec::new();
        for m in &msgs {
            let b = m.encode();
            assert_eq!(b.len(), HEADER_LEN + m.payload.len());
            stream.extend_from_slice(&b);
        }
        let mut c = Cursor::new(stream);
        for m in &msgs {
            assert_eq!(&read_msg(&mut c).unwrap(), m);
        }
        assert_eq!(read_msg(&mut c), Err(ReadError::Closed), "end of stream");
        assert_eq!(Msg::bare(Kind::Reject, "nope").reason(), "nope");
    }

    #[test]
    fn header_layout_is_fixed() {
        let b = Msg::qp(Kind::Accept, info(), b"xy").encode();
        assert_eq!(&b[0..8], b"BOOMKVIB");
        assert_eq!(u16_at(&b, 8), PROTOCOL_VERSION);
        assert_eq!(u16_at(&b, 10), 2);
        assert_eq!(u32_at(&b, 12), 0xab_cdef);
        assert_eq!(u32_at(&b, 16), 0x12_3456);
        assert_eq!(u16_at(&b, 20), 0x0102);
        assert_eq!((b[22], b[23]), (3, 16));
        assert_eq!(&b[24..40], &info().gid);
        assert_eq!(u32_at(&b, 40), 2);
        assert_eq!(u32_at(&b, 44), 0);
        assert_eq!(&b[48..], b"xy");
    }

    fn with(mut b: Vec<u8>, at: usize, bytes: &[u8]) -> Vec<u8> {
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    }

    #[test]
    fn garbage_is_rejected() {
        let good = Msg::qp(Kind::Hello, info(), b"abc").encode();
        let garbage = |b: Vec<u8>| match read_msg(&mut Cursor::new(b)) {
            Err(ReadError::Garbage(why)) => why,
            other => panic!("expected garbage, got {other:?}"),
        };
        let http = b"GET / HTTP/1.1\r\nHost: boomkv.example\r\nAccept: */*\r\n\r\n".to_vec();
        assert!(http.len() >= HEADER_LEN);
        assert!(garbage(http).contains("magic"));
        assert!(garbage(with(good.clone(), 10, &9u16.to_le_bytes())).contains("unknown kind 9"));
        assert!(garbage(with(good.clone(), 44, &[1])).contains("reserved"));
        assert!(garbage(with(good.clone(), 40, &(MAX_PRIVATE_DATA as u32 + 1).to_le_bytes())).contains("over"));
        assert!(garbage(with(good.clone(), 12, &0x100_0000u32.to_le_bytes())).contains("24 bits"));
        assert!(garbage(with(good.clone(), 16, &u32::MAX.to_le_bytes())).contains("24 bits"));
        assert!(garbage(with(good.clone(), 22, &[0])).contains("MTU"));
        assert!(garbage(with(good.clone(), 22, &[6])).contains("MTU"));
        let bye = Msg::bare(Kind::Bye, "x").encode();
        assert!(garbage(with(bye, 12, &[1])).contains("queue-pair fields"));
        // A different version is reported as such, so the server can say why it refuses.
        let v = with(good.clone(), 8, &(PROTOCOL_VERSION + 1).to_le_bytes());
        assert_eq!(read_msg(&mut Cursor::new(v)), Err(ReadError::Version(PROTOCOL_VERSION + 1, 1)));
        // Truncated anywhere: the stream ended.
        for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN, good.len() - 1] {
            assert_eq!(read_msg(&mut Cursor::new(good[..cut].to_vec())), Err(ReadError::Closed), "cut at {cut}");
        }
    }

    #[test]
    fn messages_render_readably() {
        assert!(ReadError::Version(9, 1).to_string().contains("version 9 is not supported"));
        assert!(ReadError::TimedOut.to_string().contains("timed out"));
    }
}
