//! Test helpers shared by the integration tests that play a hostile client.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use boomkv::log::format::{encode_entry, slot_size, ENTRY_HEADER_SIZE};
use boomkv::transport::{
    Access, CompletionQueue, Endpoint, MemoryRegion, QueuePair, RemoteRegion, Transport, WcOpcode,
};
use boomkv::wire::{Hello, Msg, Protocol, PutImm, Welcome};

/// A hand-driven BOOM client: raw queue pair, its own buffers.
pub struct Raw<T: Transport> {
    pub qp: T::Qp,
    pub cq: T::Cq,
    pub buf: T::Mr,
    pub recv: T::Mr,
    pub wr: u64,
}

impl<T: Transport> Raw<T> {
    pub fn connect(t: &T, ep: &Endpoint) -> Raw<T> {
        let buf = t.alloc_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        Self::connect_with(t, ep, buf)
    }

    /// Connects with `buf` as the response region (where the server WRITEs GET data).
    pub fn connect_with(t: &T, ep: &Endpoint, buf: T::Mr) -> Raw<T> {
        Self::open(t, ep, buf, Protocol::Boom)
    }

    /// Connects speaking `protocol` (its messages, not only BOOM's).
    pub fn speaking(t: &T, ep: &Endpoint, protocol: Protocol) -> Raw<T> {
        let buf = t.alloc_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        Self::open(t, ep, buf, protocol)
    }

    fn open(t: &T, ep: &Endpoint, buf: T::Mr, protocol: Protocol) -> Raw<T> {
        let cq = t.create_cq().unwrap();
        let recv = t.alloc_mr(8 * 4096, Access::LOCAL_WRITE).unwrap();
        let hello = Hello { protocol, recv_size: 4096, response: buf.remote() };
        let (qp, w) = t.connect(ep, &cq, &cq, &hello.encode(), Duration::from_secs(5)).unwrap();
        assert!(matches!(Welcome::decode(&w).unwrap(), Welcome::Accepted { .. }));
        for i in 0..8u64 {
            qp.post_recv(i, &recv, i * 4096, 4096).unwrap();
        }
        Raw { qp, cq, buf, recv, wr: 1000 }
    }

    /// The next message (skipping send completions); None on a failed completion.
    pub fn next_msg(&mut self) -> Option<Msg> {
        loop {
            let c = self.cq.wait(Duration::from_secs(5)).ok()?;
            if !c.status.is_ok() {
                return None;
            }
            if c.opcode == WcOpcode::Recv {
                let mut b = vec![0u8; c.byte_len as usize];
                self.recv.read(c.wr_id * 4096, &mut b).unwrap();
                self.qp.post_recv(c.wr_id, &self.recv, c.wr_id * 4096, 4096).unwrap();
                return Some(Msg::decode(&b).unwrap().0);
            }
        }
    }

    pub fn grant(&mut self) -> RemoteRegion {
        self.qp.post_send_bytes(1, &Msg::GrantSegment.encode(1)).unwrap();
        match self.next_msg() {
            Some(Msg::SegmentGranted { region, .. }) => region,
            m => panic!("expected a grant, got {m:?}"),
        }
    }

    /// Writes `bytes` at `offset` of `seg` and signals it as a PUT.
    pub fn put_raw(&mut self, seg: &RemoteRegion, offset: u64, bytes: &[u8], in_place: bool) -> Option<Msg> {
        self.buf.write(0, bytes).unwrap();
        self.wr += 1;
        let imm = PutImm { offset, in_place }.encode().unwrap();
        self.qp.post_write_imm(self.wr, &self.buf, 0, bytes.len() as u32, seg.at(offset), seg.rkey, imm).unwrap();
        self.next_msg()
    }

    /// An honest PUT at `offset`; returns the version.
    pub fn put(&mut self, seg: &RemoteRegion, offset: u64, key: &[u8], value: &[u8]) -> u64 {
        match self.put_msg(seg, offset, key, value) {
            Some(Msg::PutOk { version, .. }) => version,
            m => panic!("expected PutOk, got {m:?}"),
        }
    }

    /// A PUT (append) at `offset`; returns the server's answer.
    pub fn put_msg(&mut self, seg: &RemoteRegion, offset: u64, key: &[u8], value: &[u8]) -> Option<Msg> {
        self.put_raw(seg, offset, &entry(key, value, offset + slot_size(key.len(), value.len())), false)
    }

    /// Sends `m` and returns the answer.
    pub fn call(&mut self, m: &Msg) -> Option<Msg> {
        self.qp.post_send_bytes(1, &m.encode(7)).unwrap();
        self.next_msg()
    }

    /// The completion of work request `wr`, skipping those of earlier ones: a SEND's
    /// own completion may come after the reply to it (over shm, a SEND that waited for
    /// the look-up of the peer's receive buffer completes from the control thread,
    /// which may run after the server answered), so [`Raw::next_msg`] can leave it.
    pub fn completion_of(&mut self, wr: u64) -> boomkv::transport::Completion {
        loop {
            let c = self.cq.wait(Duration::from_secs(5)).unwrap();
            if c.wr_id == wr {
                return c;
            }
        }
    }

    /// A one-sided WRITE of `bytes` at `offset` of `seg`, nothing signalled to the
    /// server; waits for it and asserts it succeeded.
    pub fn write_at(&mut self, seg: &RemoteRegion, offset: u64, bytes: &[u8]) {
        self.buf.write(0, bytes).unwrap();
        self.wr += 1;
        let wr = self.wr;
        self.qp.post_write(wr, &self.buf, 0, bytes.len() as u32, seg.at(offset), seg.rkey, true).unwrap();
        let c = self.completion_of(wr);
        assert!(c.status.is_ok(), "{:?}", c.status);
    }

    /// The Clover arena as the server describes it (asking for the smallest one: an
    /// existing arena's geometry stands): address, rkey, geometry.
    pub fn clover_arena(&mut self) -> (u64, u32, boomkv::log::clover::Arena) {
        match self.call(&Msg::CloverReq { heads: 1, data: 1, value_max: 1 }) {
            Some(Msg::CloverArena { addr, rkey, heads, chunk_size, chunks }) => {
                (addr, rkey, boomkv::log::clover::Arena { first_segment: 0, segments: 0, heads, chunk_size, chunks })
            }
            m => panic!("expected the arena, got {m:?}"),
        }
    }

    /// The pDPM-Direct cell table as the server describes it (asking for the smallest
    /// one: an existing table's geometry stands): address, rkey, geometry.
    pub fn cell_table(&mut self) -> (u64, u32, boomkv::log::cells::CellTable) {
        match self.call(&Msg::CellsReq { cells: 1, value_max: 1 }) {
            Some(Msg::Cells { addr, rkey, cells, slot_size, .. }) => {
                (addr, rkey, boomkv::log::cells::CellTable { first_segment: 0, segments: 0, cells, slot_size })
            }
            m => panic!("expected the cell table, got {m:?}"),
        }
    }

    /// Posts a signaled FLUSH of `len` bytes at `addr` and returns its completion status.
    pub fn flush(&mut self, addr: u64, rkey: u32, len: u32) -> bool {
        self.wr += 1;
        if self.qp.post_flush(self.wr, addr, rkey, len).is_err() {
            return false;
        }
        self.cq.wait(Duration::from_secs(5)).is_ok_and(|c| c.status.is_ok())
    }

    /// Posts a signaled WRITE of `len` bytes and returns its completion status.
    pub fn write(&mut self, addr: u64, rkey: u32, len: u32) -> bool {
        self.wr += 1;
        if self.qp.post_write(self.wr, &self.buf, 0, len, addr, rkey, true).is_err() {
            return false;
        }
        loop {
            match self.cq.wait(Duration::from_secs(5)) {
                Ok(c) if c.opcode == WcOpcode::Write || !c.status.is_ok() => return c.status.is_ok(),
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    }
}

/// An entry as a client encodes it (version and seal left for the server).
pub fn entry(key: &[u8], value: &[u8], next: u64) -> Vec<u8> {
    let mut b = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len() + value.len()];
    encode_entry(&mut b, key, value, false, next).unwrap();
    b
}

/// Waits until a `boomctl serve` answers `boomctl stats` on `server` (at most 20 s).
pub fn wait_for_server(server: &str) {
    let t0 = Instant::now();
    let up = || {
        Command::new(env!("CARGO_BIN_EXE_boomctl")).args(["stats", "--server", server]).output().unwrap().status.code()
            == Some(0)
    };
    while !up() {
        assert!(t0.elapsed() < Duration::from_secs(20), "server did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
}
