//! THE WIRE FORMAT: every byte the client and server exchange, for every protocol.
//!
//! Little-endian, fixed-width integers; variable fields carry their length first.
//! Every decoder checks lengths against the buffer and the limits below before it
//! allocates, so no field from a peer can cause an out-of-bounds read, a panic or an
//! unbounded allocation.
//!
//! ## Connection handshake (transport private data)
//!
//! Client -> server, [`Hello`]:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `BOOMWIRE` |
//! | 8 | 2 | wire version ([`WIRE_VERSION`]) |
//! | 10 | 1 | protocol: 0 boom, 1 rdmp, 2 rpc, 3 rdmp-cc, 4 herd, 5 rfp, 6 pdpm-direct, 7 clover |
//! | 11 | 1 | reserved |
//! | 12 | 4 | client receive-buffer size (largest message it can receive) |
//! | 16 | 20 | the client's response region ([`RegionDesc`]) |
//!
//! Server -> client, [`Welcome`]:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `BOOMWIRE` |
//! | 8 | 2 | wire version |
//! | 10 | 1 | status: 0 accepted, 1 refused |
//! | 11 | 1 | protocol |
//! | 12 | 8 | client id (accepted) |
//! | 20 | 8 | segment size |
//! | 28 | 4 | max key bytes |
//! | 32 | 4 | max value bytes |
//! | 36 | 4 | server receive-buffer size (largest request it accepts) |
//! | 40 | 2 | the server worker that serves the connection, from 0 (accepted) |
//! | 42 | 2 | reason length `n` (refused) |
//! | 44 | n | reason, UTF-8 |
//!
//! ## Messages (SEND payloads)
//!
//! Every message starts with an 8-byte header: opcode (1), flags (1), reserved (2),
//! request id (4). The body follows; see [`Msg`] for each opcode's fields in order.
//!
//! ## Polled slots (herd, rfp)
//!
//! HERD and RFP requests are WRITTEN into a request region the server polls, and RFP's
//! results are left in a result region the client READs ([`slot`]): a 16-byte header
//! (sequence number, payload length, a protocol word, CRC-32C), then the payload, a
//! message as above. The reader believes a slot only when the sequence number is the
//! one it waits for and the CRC verifies, so a torn or forged slot is never served.
//!
//! ## Immediates
//!
//! - BOOM PUT (`WRITE_WITH_IMM` into the client's segment): [`PutImm`] =
//!   `offset / 8 << 1 | in_place`.
//! - Server -> client data (`WRITE_WITH_IMM` into the client's response region, BOOM
//!   GET and SCAN): [`DataImm`] = `status << 30 | length` (status 0 ok, 1 not found,
//!   2 buffer too small with `length` = bytes needed, 3 error).

use crate::error::{Error, Result};

/// Handshake magic.
pub const WIRE_MAGIC: [u8; 8] = *b"BOOMWIRE";
/// Wire format version; both sides must match.
pub const WIRE_VERSION: u16 = 2;
/// Bytes of a message header.
pub const MSG_HEADER: usize = 8;
/// The largest message either side may send (RPC PUT of the largest value).
pub const MAX_MESSAGE: usize = (1 << 20) + 4096;

/// How long a server keeps the segment of an entry whose place it named (RDMP-KV's
/// `Located`) from being freed and granted anew. A client takes a READ of it that
/// completes [`READ_LEASE`]` / 2` or more after it asked as late, and asks again: by
/// then the place may hold another client's entry.
pub const READ_LEASE: std::time::Duration = std::time::Duration::from_secs(2);

/// The most bytes of GET replies a server keeps in flight to one client whose largest
/// value is `max_value`: room for two of the largest values, and at least 4 MiB. So no
/// single reply is longer; a client believes no longer one (an entry written under a
/// larger limit before a restart is still served, up to this).
pub fn max_get_bytes(max_value: u32) -> u64 {
    (2 * max_value as u64 + (64 << 10)).max(4 << 20)
}

/// Which protocol a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// BOOM: one round trip, client-written segments, server-written GETs.
    Boom,
    /// RDMP-KV: two phases, metadata RPC then one-sided WRITE/READ.
    Rdmp,
    /// RDMA-KV: NVM-oblivious RPC, data copied through server DRAM.
    Rpc,
    /// RDMP-KV's client-centric mode (RDMP-CC): an allocation RPC, then the client
    /// WRITEs the entry and makes it durable itself with a one-sided FLUSH.
    #[serde(rename = "rdmp-cc")]
    RdmpCc,
    /// HERD-style RPC: requests WRITTEN into a region the server polls, replies SENT.
    Herd,
    /// Remote fetching (RFP, Jakiro): requests WRITTEN into a region the server polls,
    /// results left in server memory and READ by the client.
    Rfp,
    /// pDPM-Direct: passive memory, the client locks a key's cell with a
    /// compare-and-swap and writes both of its slots itself; the server's CPU is never
    /// on the data path.
    #[serde(rename = "pdpm-direct")]
    PdpmDirect,
    /// Clover: passive data, versions written out of place into chunks a metadata
    /// server hands out, linked by compare-and-swap of the previous version's pointer.
    Clover,
}

impl Protocol {
    /// All protocols, BOOM first.
    pub const ALL: [Protocol; 8] = [
        Protocol::Boom,
        Protocol::Rdmp,
        Protocol::Rpc,
        Protocol::RdmpCc,
        Protocol::Herd,
        Protocol::Rfp,
        Protocol::PdpmDirect,
        Protocol::Clover,
    ];

    /// The on-wire code.
    pub fn code(self) -> u8 {
        match self {
            Protocol::Boom => 0,
            Protocol::Rdmp => 1,
            Protocol::Rpc => 2,
            Protocol::RdmpCc => 3,
            Protocol::Herd => 4,
            Protocol::Rfp => 5,
            Protocol::PdpmDirect => 6,
            Protocol::Clover => 7,
        }
    }

    /// Decodes the on-wire code.
    pub fn from_code(c: u8) -> Result<Protocol> {
        match c {
            0 => Ok(Protocol::Boom),
            1 => Ok(Protocol::Rdmp),
            2 => Ok(Protocol::Rpc),
            3 => Ok(Protocol::RdmpCc),
            4 => Ok(Protocol::Herd),
            5 => Ok(Protocol::Rfp),
            6 => Ok(Protocol::PdpmDirect),
            7 => Ok(Protocol::Clover),
            o => Err(Error::corrupt("handshake", format!("unknown protocol {o}"))),
        }
    }

    /// Whether the client makes a PUT durable itself (one-sided FLUSHes), with no
    /// server CPU on the way: RDMP-CC, pDPM-Direct, Clover.
    pub fn durable_by_client(self) -> bool {
        matches!(self, Protocol::RdmpCc | Protocol::PdpmDirect | Protocol::Clover)
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Boom => "boom",
            Protocol::Rdmp => "rdmp",
            Protocol::Rpc => "rpc",
            Protocol::RdmpCc => "rdmp-cc",
            Protocol::Herd => "herd",
            Protocol::Rfp => "rfp",
            Protocol::PdpmDirect => "pdpm-direct",
            Protocol::Clover => "clover",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "boom" => Ok(Protocol::Boom),
            "rdmp" | "rdmp-kv" => Ok(Protocol::Rdmp),
            "rpc" | "rdma-kv" => Ok(Protocol::Rpc),
            "rdmp-cc" | "rdmpcc" => Ok(Protocol::RdmpCc),
            "herd" => Ok(Protocol::Herd),
            "rfp" | "jakiro" => Ok(Protocol::Rfp),
            "pdpm-direct" | "pdpm" => Ok(Protocol::PdpmDirect),
            "clover" => Ok(Protocol::Clover),
            o => {
                let names: Vec<&str> = Protocol::ALL.iter().map(|p| p.name()).collect();
                Err(format!("unknown protocol '{o}' (expected one of {})", names.join(", ")))
            }
        }
    }
}

/// A remotely accessible region as carried on the wire: `addr` (u64), `len` (u64),
/// `rkey` (u32), 20 bytes.
pub type RegionDesc = crate::transport::RemoteRegion;

/// Bytes of an encoded [`RegionDesc`].
pub const REGION_DESC_LEN: usize = 20;

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn utf8_prefix(s: &str, max: usize) -> &str {
    let mut n = s.len().min(max);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

/// Appends little-endian fields to a buffer.
#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn region(&mut self, r: &RegionDesc) -> &mut Self {
        self.u64(r.addr).u64(r.len).u32(r.rkey)
    }
    fn bytes16(&mut self, b: &[u8]) -> &mut Self {
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
        self
    }
    fn bytes32(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

/// Reads little-endian fields from a peer's bytes, never past the end.
struct R<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(Error::corrupt(self.what, format!("truncated: wanted {n} more bytes, have {}", self.b.len())));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn region(&mut self) -> Result<RegionDesc> {
        Ok(RegionDesc { addr: self.u64()?, len: self.u64()?, rkey: self.u32()? })
    }
    fn bytes16(&mut self, max: usize) -> Result<&'a [u8]> {
        let n = self.u16()? as usize;
        if n > max {
            return Err(Error::corrupt(self.what, format!("field of {n} bytes over the limit of {max}")));
        }
        self.take(n)
    }
    fn bytes32(&mut self, max: usize) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(Error::corrupt(self.what, format!("field of {n} bytes over the limit of {max}")));
        }
        self.take(n)
    }
    /// A message's header: its opcode and request id.
    fn message_header(&mut self) -> Result<(u8, u32)> {
        let opc = self.u8()?;
        let (flags, reserved) = (self.u8()?, self.u16()?);
        if flags != 0 || reserved != 0 {
            return Err(Error::corrupt("message", format!("flags {flags:#x} / reserved {reserved:#x} must be zero")));
        }
        Ok((opc, self.u32()?))
    }

    fn done(&self) -> Result<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(Error::corrupt(self.what, format!("{} trailing bytes", self.b.len())))
        }
    }
}

/// The client's half of the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Protocol the client speaks.
    pub protocol: Protocol,
    /// Largest message the client can receive.
    pub recv_size: u32,
    /// The client's registered response region (server-written GET data lands here).
    pub response: RegionDesc,
}

impl Hello {
    /// Encodes the hello.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W::default();
        w.0.extend_from_slice(&WIRE_MAGIC);
        w.u16(WIRE_VERSION).u8(self.protocol.code()).u8(0).u32(self.recv_size).region(&self.response);
        w.0
    }

    /// Decodes and version-checks a hello.
    pub fn decode(b: &[u8]) -> Result<Hello> {
        let mut r = R { b, what: "hello" };
        if r.take(8)? != WIRE_MAGIC {
            return Err(Error::corrupt("hello", "not a boomkv client (bad magic)"));
        }
        let v = r.u16()?;
        if v != WIRE_VERSION {
            return Err(Error::corrupt("hello", format!("client speaks wire version {v}, server {WIRE_VERSION}")));
        }
        let protocol = Protocol::from_code(r.u8()?)?;
        if r.u8()? != 0 {
            return Err(Error::corrupt("hello", "reserved byte must be zero"));
        }
        let h = Hello { protocol, recv_size: r.u32()?, response: r.region()? };
        r.done()?;
        Ok(h)
    }
}

/// The server's half of the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Welcome {
    /// The connection is accepted.
    Accepted {
        /// Protocol the server will speak (the client's).
        protocol: Protocol,
        /// The client's id (owner of its log).
        client_id: u64,
        /// Bytes per granted segment.
        segment_size: u64,
        /// Longest key.
        max_key: u32,
        /// Longest value.
        max_value: u32,
        /// Largest request the server receives.
        recv_size: u32,
        /// The server worker (thread) that serves this connection, numbered from 0: a
        /// benchmark that runs its client threads beside the workers they talk to
        /// ([`crate::cpus::Layout`], colocated) places each by it.
        worker: u16,
    },
    /// The server refuses the connection.
    Refused {
        /// Why, for the user.
        reason: String,
    },
}

impl Welcome {
    /// Encodes the welcome.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W::default();
        w.0.extend_from_slice(&WIRE_MAGIC);
        w.u16(WIRE_VERSION);
        match self {
            Welcome::Accepted { protocol, client_id, segment_size, max_key, max_value, recv_size, worker } => {
                w.u8(0).u8(protocol.code()).u64(*client_id).u64(*segment_size).u32(*max_key).u32(*max_value);
                w.u32(*recv_size).u16(*worker).bytes16(&[]);
            }
            Welcome::Refused { reason } => {
                w.u8(1).u8(0).u64(0).u64(0).u32(0).u32(0).u32(0).u16(0).bytes16(utf8_prefix(reason, 1024).as_bytes());
            }
        }
        w.0
    }

    /// Decodes and version-checks a welcome.
    pub fn decode(b: &[u8]) -> Result<Welcome> {
        let mut r = R { b, what: "welcome" };
        if r.take(8)? != WIRE_MAGIC {
            return Err(Error::corrupt("welcome", "not a boomkv server (bad magic)"));
        }
        let v = r.u16()?;
        if v != WIRE_VERSION {
            return Err(Error::corrupt("welcome", format!("server speaks wire version {v}, client {WIRE_VERSION}")));
        }
        let status = r.u8()?;
        let proto = r.u8()?;
        let (client_id, segment_size, max_key, max_value, recv_size, worker) =
            (r.u64()?, r.u64()?, r.u32()?, r.u32()?, r.u32()?, r.u16()?);
        let reason = r.bytes16(1024)?;
        r.done()?;
        match status {
            0 => Ok(Welcome::Accepted {
                protocol: Protocol::from_code(proto)?,
                client_id,
                segment_size,
                max_key,
                max_value,
                recv_size,
                worker,
            }),
            1 => Ok(Welcome::Refused {
                reason: std::str::from_utf8(reason)
                    .map_err(|_| Error::corrupt("welcome", "reason is not UTF-8"))?
                    .to_string(),
            }),
            s => Err(Error::corrupt("welcome", format!("unknown status {s}"))),
        }
    }
}

/// Error codes in [`Msg::Error`] replies: the kinds are the library's
/// ([`crate::error::ErrorCode`], so a client returns them typed); their numbers on the
/// wire are this module's.
pub use crate::error::ErrorCode;

fn error_code_to_u16(c: ErrorCode) -> u16 {
    match c {
        ErrorCode::InvalidEntry => 1,
        ErrorCode::PoolFull => 2,
        ErrorCode::TooLarge => 3,
        ErrorCode::BadRequest => 4,
        ErrorCode::Quota => 5,
        ErrorCode::Internal => 6,
        ErrorCode::NoScan => 7,
        ErrorCode::Unsupported => 8,
    }
}

fn error_code_from_u16(v: u16) -> Result<ErrorCode> {
    Ok(match v {
        1 => ErrorCode::InvalidEntry,
        2 => ErrorCode::PoolFull,
        3 => ErrorCode::TooLarge,
        4 => ErrorCode::BadRequest,
        5 => ErrorCode::Quota,
        6 => ErrorCode::Internal,
        7 => ErrorCode::NoScan,
        8 => ErrorCode::Unsupported,
        o => return Err(Error::corrupt("message", format!("unknown error code {o}"))),
    })
}

/// Every message of every protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Client: grant me a (new) segment. BOOM, RDMP.
    GrantSegment,
    /// Server: your segment (a region of its own).
    SegmentGranted {
        /// Segment id.
        segment: u64,
        /// The segment's region.
        region: RegionDesc,
    },
    /// Server: a PUT/DELETE is durable and indexed.
    PutOk {
        /// Version assigned.
        version: u64,
        /// Smallest version any in-flight GET of the key reads (`u64::MAX` if none).
        min_get_version: u64,
    },
    /// Client (BOOM): key, and where to write the entry.
    Get {
        /// Key.
        key: Vec<u8>,
        /// The client buffer to write into.
        buf: RegionDesc,
    },
    /// Client (BOOM, ordered index only): up to `count` live entries from `start`.
    Scan {
        /// First key.
        start: Vec<u8>,
        /// Most entries.
        count: u32,
        /// The client buffer to write into.
        buf: RegionDesc,
    },
    /// Client: server statistics (JSON).
    StatsReq,
    /// Server: statistics, JSON text.
    Stats {
        /// JSON document.
        json: Vec<u8>,
    },
    /// Client (RDMP phase 1): allocate an object for an entry of `len` bytes.
    Alloc {
        /// Entry length.
        len: u32,
    },
    /// Server (RDMP): write the entry here, then WRITE_WITH_IMM(imm = `token`).
    Allocated {
        /// Where to write.
        addr: u64,
        /// Region key.
        rkey: u32,
        /// Token to put in the immediate.
        token: u32,
    },
    /// Client (RDMP phase 1 of GET): where is `key`'s entry?
    Locate {
        /// Key.
        key: Vec<u8>,
    },
    /// Server (RDMP): READ the entry here.
    Located {
        /// Address of the entry.
        addr: u64,
        /// Region key.
        rkey: u32,
        /// Entry length.
        len: u32,
    },
    /// Client (RPC): store this entry (already encoded, version 0).
    RpcPut {
        /// The encoded entry.
        entry: Vec<u8>,
    },
    /// Client (RPC): send me `key`'s entry.
    RpcGet {
        /// Key.
        key: Vec<u8>,
    },
    /// Server (RPC): the entry.
    RpcValue {
        /// The encoded entry.
        entry: Vec<u8>,
    },
    /// Client (RDMP-CC phase 1): place and seal an entry of `key` whose value has
    /// `value_len` bytes and CRC-32C `value_crc` (the server never sees the value).
    CcAlloc {
        /// Key.
        key: Vec<u8>,
        /// Bytes of the value (0 for a DELETE).
        value_len: u32,
        /// CRC-32C of the value alone.
        value_crc: u32,
        /// A DELETE (tombstone entry).
        tomb: bool,
    },
    /// Server (RDMP-CC): WRITE the entry, with this version and seal, at segment offset
    /// `offset` (address `addr` under `rkey`), then FLUSH it.
    CcPlaced {
        /// Where to write.
        addr: u64,
        /// Region key.
        rkey: u32,
        /// The slot's segment offset (the entry's `next_offset` is this plus its slot size).
        offset: u64,
        /// The version the server assigned.
        version: u64,
        /// The server's seal over the slot, version, header and key.
        seal: u64,
    },
    /// Client (HERD, RFP): where do I WRITE requests (and READ results)?
    RingsReq,
    /// Server (HERD, RFP): the client's request region (it WRITEs [`slot`]s there) and,
    /// for RFP, its result region (it READs them there); `res_len` 0 for HERD.
    Rings {
        /// Request region address.
        req_addr: u64,
        /// Request region key.
        req_rkey: u32,
        /// Request region bytes (header and largest request).
        req_len: u32,
        /// Result region address.
        res_addr: u64,
        /// Result region key.
        res_rkey: u32,
        /// Result region bytes.
        res_len: u32,
    },
    /// Client (pDPM-Direct): where is the cell table? Create it with `cells` cells for
    /// values of up to `value_max` bytes if the pool has none.
    CellsReq {
        /// Cells wanted.
        cells: u64,
        /// Largest value wanted.
        value_max: u32,
    },
    /// Server (pDPM-Direct): the cell table (read, written and locked by the client)
    /// and the client's holder tag for its lock words.
    Cells {
        /// Address of the table's first byte.
        addr: u64,
        /// Region key.
        rkey: u32,
        /// Cells in the table.
        cells: u64,
        /// Bytes of each slot.
        slot_size: u64,
        /// The client's holder tag.
        tag: u16,
    },
    /// Client (Clover): where is the arena? Create it with `heads` head records and
    /// `data` bytes of chunks for values of up to `value_max` bytes if the pool has none.
    CloverReq {
        /// Head records wanted.
        heads: u64,
        /// Bytes of chunks wanted.
        data: u64,
        /// Largest value wanted.
        value_max: u32,
    },
    /// Server (Clover): the arena (read, written and linked by the client).
    CloverArena {
        /// Address of the arena's first byte.
        addr: u64,
        /// Region key.
        rkey: u32,
        /// Head records.
        heads: u64,
        /// Bytes per chunk.
        chunk_size: u64,
        /// Chunks.
        chunks: u64,
    },
    /// Client (Clover): a chunk to write versions into (the previous one is full).
    ChunkReq,
    /// Server (Clover): chunk `chunk` is this client's.
    Chunk {
        /// The chunk's number.
        chunk: u64,
    },
    /// Server: no live entry for the key.
    NotFound,
    /// Server: the request failed.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// Details for the user.
        message: String,
    },
}

mod op {
    pub const GRANT: u8 = 1;
    pub const GRANTED: u8 = 2;
    pub const PUT_OK: u8 = 3;
    pub const GET: u8 = 4;
    pub const SCAN: u8 = 5;
    pub const STATS_REQ: u8 = 6;
    pub const STATS: u8 = 7;
    pub const ALLOC: u8 = 8;
    pub const ALLOCATED: u8 = 9;
    pub const LOCATE: u8 = 10;
    pub const LOCATED: u8 = 11;
    pub const RPC_PUT: u8 = 12;
    pub const RPC_GET: u8 = 13;
    pub const RPC_VALUE: u8 = 14;
    pub const NOT_FOUND: u8 = 15;
    pub const ERROR: u8 = 16;
    pub const CC_ALLOC: u8 = 17;
    pub const CC_PLACED: u8 = 18;
    pub const RINGS_REQ: u8 = 19;
    pub const RINGS: u8 = 20;
    pub const CELLS_REQ: u8 = 21;
    pub const CELLS: u8 = 22;
    pub const CLOVER_REQ: u8 = 23;
    pub const CLOVER_ARENA: u8 = 24;
    pub const CHUNK_REQ: u8 = 25;
    pub const CHUNK: u8 = 26;
}

const MAX_KEY: usize = crate::log::format::MAX_KEY_LEN as usize;

/// A GET's fields after the header.
fn get_body(w: &mut W, key: &[u8], buf: &RegionDesc) {
    w.bytes16(key).region(buf);
}

/// A writer over `out` (cleared) that starts with a message's header.
fn header(out: &mut Vec<u8>, opc: u8, req: u32) -> W {
    let mut w = W(std::mem::take(out));
    w.0.clear();
    w.u8(opc).u8(0).u16(0).u32(req);
    w
}

impl Msg {
    /// Encodes the message with request id `req` into `out` (cleared first).
    pub fn encode_into(&self, req: u32, out: &mut Vec<u8>) {
        let opc = match self {
            Msg::GrantSegment => op::GRANT,
            Msg::SegmentGranted { .. } => op::GRANTED,
            Msg::PutOk { .. } => op::PUT_OK,
            Msg::Get { .. } => op::GET,
            Msg::Scan { .. } => op::SCAN,
            Msg::StatsReq => op::STATS_REQ,
            Msg::Stats { .. } => op::STATS,
            Msg::Alloc { .. } => op::ALLOC,
            Msg::Allocated { .. } => op::ALLOCATED,
            Msg::Locate { .. } => op::LOCATE,
            Msg::Located { .. } => op::LOCATED,
            Msg::RpcPut { .. } => op::RPC_PUT,
            Msg::RpcGet { .. } => op::RPC_GET,
            Msg::RpcValue { .. } => op::RPC_VALUE,
            Msg::NotFound => op::NOT_FOUND,
            Msg::Error { .. } => op::ERROR,
            Msg::CcAlloc { .. } => op::CC_ALLOC,
            Msg::CcPlaced { .. } => op::CC_PLACED,
            Msg::RingsReq => op::RINGS_REQ,
            Msg::Rings { .. } => op::RINGS,
            Msg::CellsReq { .. } => op::CELLS_REQ,
            Msg::Cells { .. } => op::CELLS,
            Msg::CloverReq { .. } => op::CLOVER_REQ,
            Msg::CloverArena { .. } => op::CLOVER_ARENA,
            Msg::ChunkReq => op::CHUNK_REQ,
            Msg::Chunk { .. } => op::CHUNK,
        };
        let mut w = header(out, opc, req);
        match self {
            Msg::GrantSegment | Msg::StatsReq | Msg::NotFound | Msg::RingsReq | Msg::ChunkReq => {}
            Msg::SegmentGranted { segment, region } => {
                w.u64(*segment).region(region);
            }
            Msg::PutOk { version, min_get_version } => {
                w.u64(*version).u64(*min_get_version);
            }
            Msg::Get { key, buf } => {
                get_body(&mut w, key, buf);
            }
            Msg::Scan { start, count, buf } => {
                w.bytes16(start).u32(*count).region(buf);
            }
            Msg::Stats { json } => {
                w.bytes32(json);
            }
            Msg::Alloc { len } => {
                w.u32(*len);
            }
            Msg::Allocated { addr, rkey, token } => {
                w.u64(*addr).u32(*rkey).u32(*token);
            }
            Msg::Locate { key } | Msg::RpcGet { key } => {
                w.bytes16(key);
            }
            Msg::Located { addr, rkey, len } => {
                w.u64(*addr).u32(*rkey).u32(*len);
            }
            Msg::RpcPut { entry } | Msg::RpcValue { entry } => {
                w.bytes32(entry);
            }
            Msg::Error { code, message } => {
                w.u16(error_code_to_u16(*code)).bytes16(utf8_prefix(message, 1024).as_bytes());
            }
            Msg::CcAlloc { key, value_len, value_crc, tomb } => {
                w.bytes16(key).u32(*value_len).u32(*value_crc).u8(u8::from(*tomb));
            }
            Msg::CcPlaced { addr, rkey, offset, version, seal } => {
                w.u64(*addr).u32(*rkey).u64(*offset).u64(*version).u64(*seal);
            }
            Msg::Rings { req_addr, req_rkey, req_len, res_addr, res_rkey, res_len } => {
                w.u64(*req_addr).u32(*req_rkey).u32(*req_len).u64(*res_addr).u32(*res_rkey).u32(*res_len);
            }
            Msg::CellsReq { cells, value_max } => {
                w.u64(*cells).u32(*value_max);
            }
            Msg::Cells { addr, rkey, cells, slot_size, tag } => {
                w.u64(*addr).u32(*rkey).u64(*cells).u64(*slot_size).u16(*tag);
            }
            Msg::CloverReq { heads, data, value_max } => {
                w.u64(*heads).u64(*data).u32(*value_max);
            }
            Msg::CloverArena { addr, rkey, heads, chunk_size, chunks } => {
                w.u64(*addr).u32(*rkey).u64(*heads).u64(*chunk_size).u64(*chunks);
            }
            Msg::Chunk { chunk } => {
                w.u64(*chunk);
            }
        }
        *out = w.0;
    }

    /// Encodes a BOOM GET ([`Msg::Get`]) of a borrowed key into `out` (cleared first):
    /// the same bytes, without the message's own copy of the key, one allocation less on
    /// the client's hottest path.
    pub fn encode_get_into(req: u32, key: &[u8], buf: &RegionDesc, out: &mut Vec<u8>) {
        let mut w = header(out, op::GET, req);
        get_body(&mut w, key, buf);
        *out = w.0;
    }

    /// Encodes into a new buffer.
    pub fn encode(&self, req: u32) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode_into(req, &mut v);
        v
    }

    /// Decodes a message; returns it and its request id.
    pub fn decode(b: &[u8]) -> Result<(Msg, u32)> {
        let mut r = R { b, what: "message" };
        let (opc, req) = r.message_header()?;
        let m = match opc {
            op::GRANT => Msg::GrantSegment,
            op::GRANTED => Msg::SegmentGranted { segment: r.u64()?, region: r.region()? },
            op::PUT_OK => Msg::PutOk { version: r.u64()?, min_get_version: r.u64()? },
            op::GET => Msg::Get { key: r.bytes16(MAX_KEY)?.to_vec(), buf: r.region()? },
            op::SCAN => Msg::Scan { start: r.bytes16(MAX_KEY)?.to_vec(), count: r.u32()?, buf: r.region()? },
            op::STATS_REQ => Msg::StatsReq,
            op::STATS => Msg::Stats { json: r.bytes32(MAX_MESSAGE)?.to_vec() },
            op::ALLOC => Msg::Alloc { len: r.u32()? },
            op::ALLOCATED => Msg::Allocated { addr: r.u64()?, rkey: r.u32()?, token: r.u32()? },
            op::LOCATE => Msg::Locate { key: r.bytes16(MAX_KEY)?.to_vec() },
            op::LOCATED => Msg::Located { addr: r.u64()?, rkey: r.u32()?, len: r.u32()? },
            op::RPC_PUT => Msg::RpcPut { entry: r.bytes32(MAX_MESSAGE)?.to_vec() },
            op::RPC_GET => Msg::RpcGet { key: r.bytes16(MAX_KEY)?.to_vec() },
            op::RPC_VALUE => Msg::RpcValue { entry: r.bytes32(MAX_MESSAGE)?.to_vec() },
            op::NOT_FOUND => Msg::NotFound,
            op::CC_ALLOC => {
                let key = r.bytes16(MAX_KEY)?.to_vec();
                let (value_len, value_crc) = (r.u32()?, r.u32()?);
                let tomb = match r.u8()? {
                    0 => false,
                    1 => true,
                    o => return Err(Error::corrupt("message", format!("tombstone flag {o} is not 0 or 1"))),
                };
                Msg::CcAlloc { key, value_len, value_crc, tomb }
            }
            op::CC_PLACED => {
                Msg::CcPlaced { addr: r.u64()?, rkey: r.u32()?, offset: r.u64()?, version: r.u64()?, seal: r.u64()? }
            }
            op::RINGS_REQ => Msg::RingsReq,
            op::RINGS => Msg::Rings {
                req_addr: r.u64()?,
                req_rkey: r.u32()?,
                req_len: r.u32()?,
                res_addr: r.u64()?,
                res_rkey: r.u32()?,
                res_len: r.u32()?,
            },
            op::CELLS_REQ => Msg::CellsReq { cells: r.u64()?, value_max: r.u32()? },
            op::CELLS => {
                Msg::Cells { addr: r.u64()?, rkey: r.u32()?, cells: r.u64()?, slot_size: r.u64()?, tag: r.u16()? }
            }
            op::CLOVER_REQ => Msg::CloverReq { heads: r.u64()?, data: r.u64()?, value_max: r.u32()? },
            op::CLOVER_ARENA => Msg::CloverArena {
                addr: r.u64()?,
                rkey: r.u32()?,
                heads: r.u64()?,
                chunk_size: r.u64()?,
                chunks: r.u64()?,
            },
            op::CHUNK_REQ => Msg::ChunkReq,
            op::CHUNK => Msg::Chunk { chunk: r.u64()? },
            op::ERROR => {
                let code = error_code_from_u16(r.u16()?)?;
                let message = std::str::from_utf8(r.bytes16(1024)?)
                    .map_err(|_| Error::corrupt("message", "error text is not UTF-8"))?
                    .to_string();
                Msg::Error { code, message }
            }
            o => return Err(Error::corrupt("message", format!("unknown opcode {o}"))),
        };
        r.done()?;
        Ok((m, req))
    }
}

/// A GET request read where it landed, its key borrowed.
#[derive(Debug, PartialEq, Eq)]
pub struct GetRef<'a> {
    /// Request id.
    pub req: u32,
    /// The key.
    pub key: &'a [u8],
    /// The client's buffer for the entry.
    pub buf: RegionDesc,
}

/// `b` decoded as a GET, the key not copied (checked as [`Msg::decode`] checks it);
/// `None` if `b` is another message.
pub fn decode_get(b: &[u8]) -> Result<Option<GetRef<'_>>> {
    if b.first() != Some(&op::GET) {
        return Ok(None);
    }
    let mut r = R { b, what: "message" };
    let (_, req) = r.message_header()?;
    let key = r.bytes16(MAX_KEY)?;
    let buf = r.region()?;
    r.done()?;
    Ok(Some(GetRef { req, key, buf }))
}

/// Whether `b` is an RpcPut message (checked without decoding, so the server can copy
/// the entry straight from its receive buffer to PM).
pub fn is_rpc_put(b: &[u8]) -> bool {
    b.first() == Some(&op::RPC_PUT)
}

/// Whether `b` is an RpcValue message (checked without decoding, so a large value can
/// be used in place).
pub fn is_rpc_value(b: &[u8]) -> bool {
    b.first() == Some(&op::RPC_VALUE)
}

/// A polled slot (HERD and RFP requests, RFP results): what the writer puts in one
/// WRITE and the reader believes only when it is whole.
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | sequence number (the request's, from 1; 0 is never used) |
/// | 4 | 4 | payload length `n` |
/// | 8 | 4 | protocol word (RFP results: the server's processing time in ns) |
/// | 12 | 4 | CRC-32C of bytes 0..12 and of the covered payload |
/// | 16 | n | payload (a message) |
///
/// The covered payload is all of it, except in a result that carries an entry
/// (`RpcValue`): there the CRC covers the message header and the entry's header (with
/// the entry's own checksum and version), and the entry's checksum covers the key and the
/// value, so a reader checks both and pays for the large part once. A slot is written
/// by one WRITE (or local stores) in any byte order: a reader that sees the new
/// sequence number with old bytes anywhere fails one of the two checks and looks again.
pub mod slot {
    use super::{is_rpc_value, MSG_HEADER};
    use crate::log::format::ENTRY_HEADER_SIZE;

    /// Bytes of a slot header.
    pub const HEADER: usize = 16;

    /// What a slot header says.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Header {
        /// Sequence number.
        pub seq: u32,
        /// Payload bytes.
        pub len: u32,
        /// Protocol word.
        pub word: u32,
    }

    /// Bytes of `payload` the CRC covers (see the module doc).
    fn covered(payload: &[u8]) -> &[u8] {
        if is_rpc_value(payload) {
            &payload[..payload.len().min(MSG_HEADER + 4 + ENTRY_HEADER_SIZE as usize)]
        } else {
            payload
        }
    }

    fn crc(h: &[u8], payload: &[u8]) -> u32 {
        crate::log::format::crc32c_append(crate::log::format::crc32c(&h[..12]), covered(payload))
    }

    /// The header of a slot carrying `payload` (which follows it).
    pub fn encode(seq: u32, word: u32, payload: &[u8]) -> [u8; HEADER] {
        encode_covering(seq, word, payload.len() as u32, payload)
    }

    /// The header of a slot whose payload has `len` bytes and begins with `covered`
    /// (its covered part, see the module doc), for a writer that places the payload
    /// itself: equal to [`encode`] of the whole payload.
    pub fn encode_covering(seq: u32, word: u32, len: u32, covered_part: &[u8]) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(&seq.to_le_bytes());
        h[4..8].copy_from_slice(&len.to_le_bytes());
        h[8..12].copy_from_slice(&word.to_le_bytes());
        let c = crc(&h, covered_part);
        h[12..16].copy_from_slice(&c.to_le_bytes());
        h
    }

    /// The header at the start of `b`, unchecked (`None` if `b` is shorter than one):
    /// enough to tell the sequence number and how much to read.
    pub fn peek(b: &[u8]) -> Option<Header> {
        let w = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        (b.len() >= HEADER).then(|| Header { seq: w(0), len: w(4), word: w(8) })
    }

    /// The payload of the slot in `b` if it is whole: sequence number `seq`, a length
    /// that fits `b`, and a CRC that verifies. `None` otherwise (not yet written, torn,
    /// or forged).
    pub fn check(b: &[u8], seq: u32) -> Option<(Header, &[u8])> {
        let h = peek(b)?;
        if h.seq != seq || h.len as usize > b.len() - HEADER {
            return None;
        }
        let payload = &b[HEADER..HEADER + h.len as usize];
        let want = u32::from_le_bytes(b[12..16].try_into().ok()?);
        (crc(b, payload) == want).then_some((h, payload))
    }
}

/// The immediate of a BOOM PUT's `WRITE_WITH_IMM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutImm {
    /// Segment offset of the entry (a multiple of 8).
    pub offset: u64,
    /// Written over an older slot rather than appended.
    pub in_place: bool,
}

impl PutImm {
    /// Encodes; `None` if the offset is unaligned or too large for 31 bits of 8-byte units.
    pub fn encode(&self) -> Option<u32> {
        if self.offset % 8 != 0 || self.offset / 8 >= 1 << 31 {
            return None;
        }
        Some(((self.offset / 8) as u32) << 1 | self.in_place as u32)
    }
    /// Decodes.
    pub fn decode(imm: u32) -> PutImm {
        PutImm { offset: ((imm >> 1) as u64) * 8, in_place: imm & 1 == 1 }
    }
}

/// Status of server-written data ([`DataImm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataStatus {
    /// The data is in the buffer.
    Ok,
    /// No such key.
    NotFound,
    /// The buffer is too small; `len` is what is needed.
    TooSmall,
    /// The request failed (details in a following error message are not sent; the
    /// client reports a generic failure).
    Error,
}

/// The immediate of a server-to-client data write: status and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataImm {
    /// What happened.
    pub status: DataStatus,
    /// Bytes written (Ok) or needed (TooSmall); below 2^30.
    pub len: u32,
}

impl DataImm {
    /// Encodes.
    pub fn encode(&self) -> u32 {
        let s = match self.status {
            DataStatus::Ok => 0,
            DataStatus::NotFound => 1,
            DataStatus::TooSmall => 2,
            DataStatus::Error => 3,
        };
        s << 30 | (self.len & ((1 << 30) - 1))
    }
    /// Decodes.
    pub fn decode(imm: u32) -> DataImm {
        let status = match imm >> 30 {
            0 => DataStatus::Ok,
            1 => DataStatus::NotFound,
            2 => DataStatus::TooSmall,
            _ => DataStatus::Error,
        };
        DataImm { status, len: imm & ((1 << 30) - 1) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The borrowed-key GET encodes exactly as the message does, into a buffer that
        /// held anything before.
        #[test]
        fn a_get_encoded_from_a_borrowed_key_is_the_message(key in proptest::collection::vec(any::<u8>(), 0..1100),
                                                             req in any::<u32>(), addr in any::<u64>(),
                                                             len in any::<u64>(), rkey in any::<u32>(),
                                                             junk in proptest::collection::vec(any::<u8>(), 0..64)) {
            let buf = RegionDesc { addr, len, rkey };
            let mut out = junk;
            Msg::encode_get_into(req, &key, &buf, &mut out);
            prop_assert_eq!(&out, &Msg::Get { key, buf }.encode(req));
        }

        /// The borrowed GET decoder accepts exactly what the message decoder accepts as a
        /// GET, with the same fields, and passes on every other message.
        #[test]
        fn a_get_decoded_in_place_is_the_message(b in proptest::collection::vec(any::<u8>(), 0..128),
                                                 key in proptest::collection::vec(any::<u8>(), 0..64),
                                                 req in any::<u32>(), addr in any::<u64>(), len in any::<u64>(),
                                                 rkey in any::<u32>(), cut in 0usize..200) {
            let buf = RegionDesc { addr, len, rkey };
            let mut good = Msg::Get { key: key.clone(), buf }.encode(req);
            for bytes in [b, good.clone(), { good.truncate(cut.min(good.len())); good }] {
                match (decode_get(&bytes), Msg::decode(&bytes)) {
                    (Ok(Some(g)), Ok((Msg::Get { key, buf }, req))) => {
                        prop_assert_eq!(g, GetRef { req, key: &key, buf });
                    }
                    (Ok(None), Ok((m, _))) => prop_assert!(!matches!(m, Msg::Get { .. }), "{:?}", m),
                    (Ok(None), Err(_)) => prop_assert!(bytes.first() != Some(&op::GET)),
                    (Err(_), Err(_)) => {}
                    (g, m) => prop_assert!(false, "in place {:?}, message {:?}", g, m),
                }
            }
        }
    }

    fn all_msgs() -> Vec<Msg> {
        let r = RegionDesc { addr: 0xdead_beef, len: 4096, rkey: 77 };
        vec![
            Msg::GrantSegment,
            Msg::SegmentGranted { segment: 3, region: r },
            Msg::PutOk { version: 9, min_get_version: u64::MAX },
            Msg::Get { key: b"user1".to_vec(), buf: r },
            Msg::Scan { start: b"a".to_vec(), count: 10, buf: r },
            Msg::StatsReq,
            Msg::Stats { json: b"{}".to_vec() },
            Msg::Alloc { len: 100 },
            Msg::Allocated { addr: 1, rkey: 2, token: 3 },
            Msg::Locate { key: b"k".to_vec() },
            Msg::Located { addr: 5, rkey: 6, len: 7 },
            Msg::RpcPut { entry: vec![1, 2, 3] },
            Msg::RpcGet { key: b"k".to_vec() },
            Msg::RpcValue { entry: vec![9; 1000] },
            Msg::NotFound,
            Msg::Error { code: ErrorCode::PoolFull, message: "full".into() },
            Msg::CcAlloc { key: b"k".to_vec(), value_len: 10, value_crc: 0xabcd, tomb: false },
            Msg::CcAlloc { key: b"gone".to_vec(), value_len: 0, value_crc: 0, tomb: true },
            Msg::CcPlaced { addr: 1, rkey: 2, offset: 128, version: 4, seal: 5 },
            Msg::RingsReq,
            Msg::Rings { req_addr: 1, req_rkey: 2, req_len: 3, res_addr: 4, res_rkey: 5, res_len: 6 },
            Msg::CellsReq { cells: 1 << 20, value_max: 4096 },
            Msg::Cells { addr: 1, rkey: 2, cells: 3, slot_size: 4, tag: 5 },
            Msg::CloverReq { heads: 1, data: 2, value_max: 3 },
            Msg::CloverArena { addr: 1, rkey: 2, heads: 3, chunk_size: 4096, chunks: 5 },
            Msg::ChunkReq,
            Msg::Chunk { chunk: 7 },
        ]
    }

    #[test]
    fn slots_are_believed_only_whole() {
        let p = Msg::RpcGet { key: b"key".to_vec() }.encode(3);
        let mut b = slot::encode(7, 0, &p).to_vec();
        b.extend_from_slice(&p);
        b.resize(b.len() + 40, 0xee);
        let (h, got) = slot::check(&b, 7).unwrap();
        assert_eq!((h.seq, h.len as usize, got), (7, p.len(), &p[..]));
        assert!(slot::check(&b, 8).is_none(), "another sequence number");
        for i in 0..slot::HEADER + p.len() {
            let mut t = b.clone();
            t[i] ^= 0x10;
            assert!(slot::check(&t, 7).is_none(), "byte {i} changed");
        }
        let mut long = b.clone();
        long[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(slot::check(&long, 7).is_none(), "a length past the buffer");
        assert!(slot::check(&b[..10], 7).is_none(), "shorter than a header");
        // An entry-carrying result: the value is left to the entry's own checksum.
        let v = Msg::RpcValue { entry: vec![5; 500] }.encode(1);
        let mut b = slot::encode(2, 99, &v).to_vec();
        b.extend_from_slice(&v);
        b[slot::HEADER + 400] ^= 1;
        assert!(slot::check(&b, 2).is_some());
        b[slot::HEADER + 20] ^= 1;
        assert!(slot::check(&b, 2).is_none(), "the entry header is covered");
    }

    #[test]
    fn messages_round_trip_and_truncations_fail() {
        for m in all_msgs() {
            let b = m.encode(42);
            assert_eq!(Msg::decode(&b).unwrap(), (m.clone(), 42));
            for cut in 0..b.len() {
                assert!(Msg::decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = b.clone();
            long.push(0);
            assert!(Msg::decode(&long).is_err());
        }
        assert!(Msg::decode(&[99, 0, 0, 0, 0, 0, 0, 0]).unwrap_err().to_string().contains("unknown opcode"));
        // found by cargo-fuzz: non-zero flags or reserved bits are not a second spelling
        assert!(Msg::decode(&[6, 0, 1, 0, 0, 0, 0, 0]).is_err());
        assert!(Msg::decode(&[6, 1, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(Msg::decode(&[16, 0, 0, 0, 10, 0, 0, 0, 0, 16, 0, 0]).is_err(), "unknown error code");
        assert!(Msg::decode(&[16, 0, 0, 0, 8, 0, 0, 0, 3, 0, 1, 0, 0xff]).is_err(), "error text not UTF-8");
        let mut cc = Msg::CcAlloc { key: b"k".to_vec(), value_len: 1, value_crc: 2, tomb: true }.encode(1);
        *cc.last_mut().unwrap() = 2;
        assert!(Msg::decode(&cc).is_err(), "a tombstone flag other than 0 or 1");
        let long = Msg::Error { code: ErrorCode::Internal, message: "é".repeat(600) };
        assert!(Msg::decode(&long.encode(1)).is_ok(), "a long message is cut on a character boundary");
    }

    #[test]
    fn oversized_length_fields_are_refused_before_allocation() {
        let mut b = vec![op::RPC_PUT, 0, 0, 0, 1, 0, 0, 0];
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Msg::decode(&b).unwrap_err().to_string().contains("over the limit"));
        let mut b = vec![op::GET, 0, 0, 0, 1, 0, 0, 0];
        b.extend_from_slice(&5000u16.to_le_bytes());
        assert!(Msg::decode(&b).is_err());
    }

    #[test]
    fn handshake_round_trips_and_checks_version() {
        let h = Hello { protocol: Protocol::Rdmp, recv_size: 4096, response: RegionDesc { addr: 1, len: 2, rkey: 3 } };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        let mut bad = h.encode();
        bad[8] = 9;
        assert!(Hello::decode(&bad).unwrap_err().to_string().contains("wire version"));
        let w = Welcome::Accepted {
            protocol: Protocol::Boom,
            client_id: 5,
            segment_size: 64 << 20,
            max_key: 1024,
            max_value: 1 << 20,
            recv_size: 8192,
            worker: 3,
        };
        let b = w.encode();
        assert_eq!(Welcome::decode(&b).unwrap(), w);
        // The worker sits where the table in the module's docs says.
        assert_eq!(&b[40..42], &3u16.to_le_bytes());
        let r = Welcome::Refused { reason: "too many clients (max 64)".into() };
        assert_eq!(Welcome::decode(&r.encode()).unwrap(), r);
        assert!(Welcome::decode(b"HTTP/1.1 200 OK").is_err());
    }

    #[test]
    fn immediates_round_trip() {
        for (off, ip) in [(0u64, false), (128, true), (64 << 20, false), ((1u64 << 34) - 8, true)] {
            let i = PutImm { offset: off, in_place: ip };
            assert_eq!(PutImm::decode(i.encode().unwrap()), i);
        }
        assert!(PutImm { offset: 3, in_place: false }.encode().is_none());
        for s in [DataStatus::Ok, DataStatus::NotFound, DataStatus::TooSmall, DataStatus::Error] {
            let d = DataImm { status: s, len: 123456 };
            assert_eq!(DataImm::decode(d.encode()), d);
        }
    }

    proptest! {
        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Msg::decode(&b);
            let _ = Hello::decode(&b);
            let _ = Welcome::decode(&b);
        }
    }
}
