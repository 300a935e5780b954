//! A hostile server: the client believes nothing a server says that would make it loop
//! for ever or let the server size its memory. A fake server (shm) accepts one client
//! and answers its requests as each test chooses.

use std::sync::mpsc;
use std::time::Duration;

use boomkv::client::{Client, ClientOptions};
use boomkv::error::Error;
use boomkv::log::format::ENTRY_HEADER_SIZE;
use boomkv::transport::{
    Access, CompletionQueue, Endpoint, Listener, MemoryRegion, QueuePair, ShmTransport, Transport, WcOpcode,
};
use boomkv::wire::{DataImm, DataStatus, Msg, Protocol, Welcome};

/// The largest value the fake server announces.
const MAX_VALUE: u32 = 1 << 20;

/// What the fake server answers a request with.
enum Reply {
    /// A data immediate written to the buffer a GET or SCAN named.
    Imm(DataImm),
    /// A message.
    Msg(Msg),
}

/// Starts a fake server speaking `protocol` that answers every request `m` with
/// `answer(m)` (nothing for `None`) until the client leaves.
fn fake_server(dir: &std::path::Path, protocol: Protocol, answer: fn(&Msg) -> Option<Reply>) -> Endpoint {
    let t = ShmTransport::new().unwrap();
    let ep = Endpoint::Shm(dir.join("liar.sock"));
    let l = t.listen(&ep).unwrap();
    let ep = l.endpoint();
    std::thread::spawn(move || {
        let cq = t.create_cq().unwrap();
        let welcome = Welcome::Accepted {
            protocol,
            client_id: 1,
            segment_size: 1 << 20,
            max_key: 1024,
            max_value: MAX_VALUE,
            recv_size: 4096,
        };
        let qp = l.accept(&cq, &cq, Duration::from_secs(10), |_| Ok(welcome.encode())).unwrap();
        let recv = t.alloc_mr(8 * 4096, Access::LOCAL_WRITE).unwrap();
        for i in 0..8u64 {
            qp.post_recv(i, &recv, i * 4096, 4096).unwrap();
        }
        let mut wr = 100;
        // Bounded: the test's client gives up long before.
        for _ in 0..1_000_000 {
            let Ok(c) = cq.wait(Duration::from_secs(10)) else { return };
            if !c.status.is_ok() {
                return;
            }
            if c.opcode != WcOpcode::Recv {
                continue;
            }
            let mut b = vec![0u8; c.byte_len as usize];
            recv.read(c.wr_id * 4096, &mut b).unwrap();
            qp.post_recv(c.wr_id, &recv, c.wr_id * 4096, 4096).unwrap();
            let Ok((m, req)) = Msg::decode(&b) else { continue };
            wr += 1;
            let posted = match (answer(&m), &m) {
                (Some(Reply::Imm(imm)), Msg::Get { buf, .. } | Msg::Scan { buf, .. }) => {
                    qp.post_write_imm(wr, &recv, 0, 0, buf.addr, buf.rkey, imm.encode())
                }
                (Some(Reply::Msg(r)), _) => qp.post_send_bytes(wr, &r.encode(req)),
                _ => continue,
            };
            if posted.is_err() {
                return;
            }
        }
    });
    ep
}

/// A "too small" for `len(bytes the buffer has)` to a GET or SCAN `m`.
fn too_small(m: &Msg, len: impl Fn(u64) -> u32) -> Option<Reply> {
    match m {
        Msg::Get { buf, .. } | Msg::Scan { buf, .. } => {
            Some(Reply::Imm(DataImm { status: DataStatus::TooSmall, len: len(buf.len) }))
        }
        _ => None,
    }
}

/// [`ask_of`] a BOOM client.
fn ask<R: Send + 'static>(answer: fn(&Msg) -> Option<Reply>, ask: fn(&mut Client<ShmTransport>) -> R) -> R {
    ask_of(Protocol::Boom, answer, ask)
}

/// What `ask` did to a client (speaking `protocol`) of a fake server answering with
/// `answer`, or a panic if it did not come back within 20 seconds (the client looping
/// for ever).
fn ask_of<R: Send + 'static>(
    protocol: Protocol,
    answer: fn(&Msg) -> Option<Reply>,
    ask: fn(&mut Client<ShmTransport>) -> R,
) -> R {
    let dir = tempfile::tempdir().unwrap();
    let ep = fake_server(dir.path(), protocol, answer);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let opts = ClientOptions { protocol, timeout: Duration::from_secs(5), ..Default::default() };
        let mut c = Client::connect(&ShmTransport::new().unwrap(), &ep, opts).unwrap();
        let _ = tx.send(ask(&mut c));
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("the client never came back: it kept asking the server")
}

fn is_protocol_error<T: std::fmt::Debug>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::Protocol(_)))
}

#[test]
fn a_server_that_finds_every_buffer_too_small_fails_the_get_instead_of_looping() {
    // "Too small" for exactly the bytes the buffer has: growing changes nothing.
    let r = ask(|m| too_small(m, |have| have as u32), |c| c.get(b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
    // The split GET (several clients per thread) takes the same way.
    let r = ask(
        |m| too_small(m, |have| have as u32),
        |c| {
            let mut out = Vec::new();
            c.get_start(b"k", &mut out)?;
            loop {
                if let Some(found) = c.get_poll(b"k", &mut out)? {
                    return Ok(found);
                }
            }
        },
    );
    assert!(is_protocol_error(&r), "{r:?}");
    let r = ask(|m| too_small(m, |have| have as u32), |c| c.scan(b"a", 10));
    assert!(is_protocol_error(&r), "{r:?}");
}

#[test]
fn a_server_that_asks_for_more_room_than_its_limits_allow_is_not_believed() {
    // One byte over a 1-byte key's entry with the announced largest value: refused
    // before any buffer grows; just under 1 GiB (the most an immediate says) for a SCAN
    // of 10 entries, too.
    let r = ask(|m| too_small(m, |_| ENTRY_HEADER_SIZE as u32 + 1 + MAX_VALUE + 1), |c| c.get(b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
    let r = ask(|m| too_small(m, |_| (1 << 30) - 1), |c| c.scan(b"a", 10));
    assert!(is_protocol_error(&r), "{r:?}");
    // A request the limits allow grows the buffer once, and a server that then finds it
    // too small again is not asked a third time.
    let r = ask(|m| too_small(m, |have| if have < 1 << 20 { 1 << 20 } else { have as u32 }), |c| c.get(b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
}

#[test]
fn an_rdmp_server_that_locates_an_entry_larger_than_its_limits_is_not_believed() {
    // An RDMP GET READs the entry the server located: one over the largest the key and
    // the announced value allow is refused before any buffer grows, split or whole.
    fn huge(m: &Msg) -> Option<Reply> {
        let len = ENTRY_HEADER_SIZE as u32 + 1 + MAX_VALUE + 1;
        matches!(m, Msg::Locate { .. }).then_some(Reply::Msg(Msg::Located { addr: 4096, rkey: 7, len }))
    }
    let r = ask_of(Protocol::Rdmp, huge, |c| c.get(b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
    let r = ask_of(Protocol::Rdmp, huge, |c| {
        let mut out = Vec::new();
        c.get_start(b"k", &mut out)?;
        loop {
            if let Some(found) = c.get_poll(b"k", &mut out)? {
                return Ok(found);
            }
        }
    });
    assert!(is_protocol_error(&r), "{r:?}");
}
