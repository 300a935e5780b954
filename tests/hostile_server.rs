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
    MAX_MESSAGE,
};
use boomkv::wire::{max_get_bytes, DataImm, DataStatus, Msg, Protocol, Welcome};

/// The largest value the fake server announces.
const MAX_VALUE: u32 = 1 << 20;

/// What the fake server answers a request with.
enum Reply {
    /// A data immediate written to the buffer a GET or SCAN named.
    Imm(DataImm),
    /// Messages, one after the other.
    Msgs(Vec<Msg>),
    /// Messages, after a pause (the server's thread sleeps: later requests wait).
    Later(Duration, Vec<Msg>),
}

/// A fake server's welcome: `protocol`, segments of `segment_size` bytes, values up
/// to `max_value` bytes.
fn welcome(protocol: Protocol, segment_size: u64, max_value: u32) -> Welcome {
    // A worker number no server has: the client only reports it, and a colocated run
    // picks a CPU from its own list with it, round the list (`CpuList::pick`).
    Welcome::Accepted {
        protocol,
        client_id: 1,
        segment_size,
        max_key: 1024,
        max_value,
        recv_size: 4096,
        worker: u16::MAX,
    }
}

/// Listens in `dir` and, on a thread of its own, accepts one client with `welcome`
/// and hands the connection to `serve`.
fn one_client(
    dir: &std::path::Path,
    welcome: Welcome,
    serve: impl FnOnce(&ShmTransport, &<ShmTransport as Transport>::Cq, <ShmTransport as Transport>::Qp) + Send + 'static,
) -> Endpoint {
    let t = ShmTransport::new().unwrap();
    let l = t.listen(&Endpoint::Shm(dir.join("fake.sock"))).unwrap();
    let ep = l.endpoint();
    std::thread::spawn(move || {
        let cq = t.create_cq().unwrap();
        let qp = l.accept(&cq, &cq, Duration::from_secs(10), |_| Ok(welcome.encode())).unwrap();
        serve(&t, &cq, qp);
    });
    ep
}

/// Starts a fake server speaking `protocol` that answers every request `m` with
/// `answer(m)` (nothing for `None`) until the client leaves.
fn fake_server(
    dir: &std::path::Path,
    protocol: Protocol,
    max_value: u32,
    answer: fn(&Msg) -> Option<Reply>,
) -> Endpoint {
    one_client(dir, welcome(protocol, 1 << 20, max_value), move |t, cq, qp| {
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
                (Some(Reply::Later(pause, rs)), _) => {
                    std::thread::sleep(pause);
                    rs.iter().try_for_each(|r| {
                        wr += 1;
                        qp.post_send_bytes(wr, &r.encode(req))
                    })
                }
                (Some(Reply::Msgs(rs)), _) => rs.iter().try_for_each(|r| {
                    wr += 1;
                    qp.post_send_bytes(wr, &r.encode(req))
                }),
                _ => continue,
            };
            if posted.is_err() {
                return;
            }
        }
    })
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
    ask_within(protocol, Duration::from_secs(5), MAX_VALUE, answer, ask)
}

/// [`ask_of`] with the client's `timeout`.
fn ask_within<R: Send + 'static>(
    protocol: Protocol,
    timeout: Duration,
    max_value: u32,
    answer: fn(&Msg) -> Option<Reply>,
    ask: fn(&mut Client<ShmTransport>) -> R,
) -> R {
    let dir = tempfile::tempdir().unwrap();
    let ep = fake_server(dir.path(), protocol, max_value, answer);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let opts = ClientOptions { protocol, timeout, ..Default::default() };
        let mut c = Client::connect(&ShmTransport::new().unwrap(), &ep, opts).unwrap();
        let _ = tx.send(ask(&mut c));
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("the client never came back: it kept asking the server")
}

/// A split GET of `key`, polled until it is answered.
fn split_get(c: &mut Client<ShmTransport>, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
    let mut out = Vec::new();
    let mut found = c.get_start(key, &mut out)?;
    while found.is_none() {
        found = c.get_poll(key, &mut out)?;
    }
    Ok(found.unwrap_or(false).then_some(out))
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
    let r = ask(|m| too_small(m, |have| have as u32), |c| split_get(c, b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
    let r = ask(|m| too_small(m, |have| have as u32), |c| c.scan(b"a", 10));
    assert!(is_protocol_error(&r), "{r:?}");
}

#[test]
fn a_server_that_asks_for_more_room_than_its_limits_allow_is_not_believed() {
    // One byte over the longest GET reply the announced largest value allows: refused
    // before any buffer grows; just under 1 GiB (the most an immediate says) for a SCAN
    // of 10 entries, too.
    let r = ask(|m| too_small(m, |_| max_get_bytes(MAX_VALUE) as u32 + 1), |c| c.get(b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
    let r = ask(|m| too_small(m, |_| (1 << 30) - 1), |c| c.scan(b"a", 10));
    assert!(is_protocol_error(&r), "{r:?}");
    // A request the limits allow grows the buffer once, and a server that then finds it
    // too small again is not asked a third time.
    let r = ask(|m| too_small(m, |have| if have < 1 << 20 { 1 << 20 } else { have as u32 }), |c| c.get(b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
}

#[test]
fn a_server_that_announces_4_gib_values_cannot_size_a_get_buffer_past_one_transfer() {
    // Believing the announced largest value, a GET's buffer could grow to 8 GiB (and
    // over verbs be pinned). No GET reply is longer than one transfer carries.
    let huge = |protocol, answer, ask| ask_within(protocol, Duration::from_secs(5), u32::MAX, answer, ask);
    // Refused for being past one transfer, not for anything else (a buffer grown to
    // what the server asked, then found too small again, is a protocol error too).
    let past_one_transfer = |r: &Result<_, Error>| matches!(r, Err(Error::Protocol(m)) if m.ends_with(&format!("its limits allow {MAX_MESSAGE}")));
    let r = huge(Protocol::Boom, |m| too_small(m, |_| MAX_MESSAGE + 1), |c| c.get(b"k").map(|_| ()));
    assert!(past_one_transfer(&r), "{r:?}");
    let r = huge(Protocol::Boom, |m| too_small(m, |_| (1 << 30) - 1), |c| split_get(c, b"k").map(|_| ()));
    assert!(past_one_transfer(&r), "{r:?}");
    fn located(m: &Msg) -> Option<Reply> {
        let len = MAX_MESSAGE + 1;
        matches!(m, Msg::Locate { .. }).then_some(Reply::Msgs(vec![Msg::Located { addr: 4096, rkey: 7, len }]))
    }
    let r = huge(Protocol::Rdmp, located, |c| c.get(b"k").map(|_| ()));
    assert!(past_one_transfer(&r), "{r:?}");
    // Up to one transfer it is believed: the buffer grows to it, and a server that then
    // finds it too small again is not asked a third time.
    let r = huge(
        Protocol::Boom,
        |m| too_small(m, |have| if have < 1 << 24 { 1 << 24 } else { have as u32 }),
        |c| c.get(b"k").map(|_| ()),
    );
    let grown = format!("found the {MAX_MESSAGE}-byte response buffer too small");
    assert!(matches!(&r, Err(Error::Protocol(m)) if m.contains(&grown)), "{r:?}");
}

#[test]
fn an_rdmp_server_that_locates_an_entry_larger_than_its_limits_is_not_believed() {
    // An RDMP GET READs the entry the server located: one over the longest GET reply
    // the announced largest value allows is refused before any buffer grows, split or
    // whole.
    fn huge(m: &Msg) -> Option<Reply> {
        let len = max_get_bytes(MAX_VALUE) as u32 + 1;
        matches!(m, Msg::Locate { .. }).then_some(Reply::Msgs(vec![Msg::Located { addr: 4096, rkey: 7, len }]))
    }
    let r = ask_of(Protocol::Rdmp, huge, |c| c.get(b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
    let r = ask_of(Protocol::Rdmp, huge, |c| split_get(c, b"k"));
    assert!(is_protocol_error(&r), "{r:?}");
}

#[test]
fn a_message_that_comes_while_a_read_is_out_is_an_error_not_lost() {
    // The server answers a Locate and at once sends a message nobody asked for. The
    // client's READ (of a region the server never registered) is out when the message
    // is polled: it is a protocol error, its receive slot back in the ring. Before, it
    // was dropped with its slot, and the READ's failure came instead.
    fn two(m: &Msg) -> Option<Reply> {
        let located = Msg::Located { addr: 4096, rkey: 7, len: 100 };
        matches!(m, Msg::Locate { .. }).then_some(Reply::Msgs(vec![located, Msg::NotFound]))
    }
    let r = ask_of(Protocol::Rdmp, two, |c| {
        let mut out = Vec::new();
        c.get_start(b"k", &mut out)?;
        // Both messages are in before the first poll, so before the READ is posted.
        std::thread::sleep(Duration::from_millis(200));
        loop {
            if let Some(found) = c.get_poll(b"k", &mut out)? {
                return Ok(found);
            }
        }
    });
    assert!(is_protocol_error(&r), "{r:?}");
}

/// An RDMA-KV server that answers a GET of "slow" only after 1.5 s (NotFound), and one
/// of any other key at once (its value is "v").
fn slow_then_quick(m: &Msg) -> Option<Reply> {
    let Msg::RpcGet { key } = m else { return None };
    if key.as_slice() == b"slow" {
        return Some(Reply::Later(Duration::from_millis(1500), vec![Msg::NotFound]));
    }
    let mut entry = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len() + 1];
    boomkv::log::format::encode_entry(&mut entry, key, b"v", false, 0).unwrap();
    Some(Reply::Msgs(vec![Msg::RpcValue { entry }]))
}

#[test]
fn the_late_reply_to_a_request_that_timed_out_answers_no_later_request() {
    // The GET of "slow" times out (1 s); its NotFound comes at 1.5 s, before the
    // answer to the next GET. Taken for that answer, it said "absent" for a key the
    // server has: it is dropped instead, whole or split.
    let timeout = Duration::from_secs(1);
    let (slow, quick, abandoned) = ask_within(Protocol::Rpc, timeout, MAX_VALUE, slow_then_quick, |c| {
        (c.get(b"slow"), c.get(b"quick"), c.counters().abandoned)
    });
    assert!(matches!(slow, Err(Error::Timeout(..))), "{slow:?}");
    assert_eq!(quick.unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(abandoned, 1);
    // A split GET that timed out is over: polling it again is an error (it would take
    // the next request's reply for its own), not a second give-up.
    let (slow, again, quick, abandoned) = ask_within(Protocol::Rpc, timeout, MAX_VALUE, slow_then_quick, |c| {
        let slow = split_get(c, b"slow");
        let again = c.get_poll(b"slow", &mut Vec::new());
        (slow, again, split_get(c, b"quick"), c.counters().abandoned)
    });
    assert!(matches!(slow, Err(Error::Timeout(..))), "{slow:?}");
    assert!(matches!(again, Err(Error::Invalid(_))), "{again:?}");
    assert_eq!(quick.unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(abandoned, 1);
}

/// Bytes of the fake server's request and result regions (HERD, RFP).
const REGION: usize = 64 << 10;

/// Starts a fake HERD or RFP server (`protocol`) that sets up its one client's request
/// region (and result region), then takes its first look at the request region only
/// `stall` later (a server busy elsewhere), and from then on serves requests as the
/// real server does: the slot that carries the next sequence number and verifies. A
/// GET is answered with the value "v" by SEND (HERD, RFP's server-reply) or in the
/// result region (RFP's fetching).
fn fake_polled_server(dir: &std::path::Path, protocol: Protocol, stall: Duration) -> Endpoint {
    use boomkv::wire::slot;
    // Values larger than a request slot holds (a server with big segments may allow
    // them): such a PUT fails at the client.
    one_client(dir, welcome(protocol, 16 << 20, 4 << 20), move |t, cq, qp| {
        let recv = t.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
        qp.post_recv(0, &recv, 0, 4096).unwrap();
        let req_mr = t.alloc_mr(REGION, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        let res_mr = t.alloc_mr(REGION, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
        // The setup: one RingsReq, answered at once.
        let Ok(c) = cq.wait(Duration::from_secs(10)) else { return };
        let mut b = vec![0u8; c.byte_len as usize];
        recv.read(0, &mut b).unwrap();
        let (Msg::RingsReq, req) = Msg::decode(&b).unwrap() else { panic!("expected the setup") };
        let (q, r) = (req_mr.remote(), res_mr.remote());
        let rings = Msg::Rings {
            req_addr: q.addr,
            req_rkey: q.rkey,
            req_len: REGION as u32,
            res_addr: r.addr,
            res_rkey: r.rkey,
            res_len: if protocol == Protocol::Rfp { REGION as u32 } else { 0 },
        };
        qp.post_send_bytes(1, &rings.encode(req)).unwrap();
        std::thread::sleep(stall);
        let (mut next, mut wr) = (1u32, 10u64);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut slot_buf = vec![0u8; REGION];
        while std::time::Instant::now() < deadline && !qp.is_error() {
            let mut comps = Vec::new();
            cq.poll(&mut comps, 16);
            req_mr.read(0, &mut slot_buf).unwrap();
            let Some((hd, payload)) = slot::check(&slot_buf, next) else {
                std::thread::sleep(Duration::from_micros(100));
                continue;
            };
            next += 1;
            let Ok((Msg::RpcGet { key }, req)) = Msg::decode(payload) else { continue };
            let mut entry = vec![0u8; ENTRY_HEADER_SIZE as usize + key.len() + 1];
            boomkv::log::format::encode_entry(&mut entry, &key, b"v", false, 0).unwrap();
            let reply = Msg::RpcValue { entry }.encode(req);
            wr += 1;
            // RFP's protocol word 0 asks for the result to be fetched; HERD's is 0 too,
            // but HERD always SENDs.
            if protocol == Protocol::Rfp && hd.word == 0 {
                res_mr.write(slot::HEADER as u64, &reply).unwrap();
                res_mr.write(0, &slot::encode(hd.seq, 0, &reply)).unwrap();
            } else if qp.post_send_bytes(wr, &reply).is_err() {
                return;
            }
        }
    })
}

#[test]
fn a_request_that_fails_before_it_is_written_uses_up_no_sequence_number() {
    // A PUT too large for the request slot fails at the client, before anything is
    // written: the next request must carry the number the server waits for.
    use boomkv::proto::rfp::ResultMode;
    for (protocol, rfp_mode) in
        [(Protocol::Herd, ResultMode::Hybrid), (Protocol::Rfp, ResultMode::Fetch), (Protocol::Rfp, ResultMode::Reply)]
    {
        let dir = tempfile::tempdir().unwrap();
        let ep = fake_polled_server(dir.path(), protocol, Duration::ZERO);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let opts = ClientOptions { protocol, timeout: Duration::from_secs(2), rfp_mode, ..Default::default() };
            let mut c = Client::connect(&ShmTransport::new().unwrap(), &ep, opts).unwrap();
            let before = c.get(b"first");
            let big = c.put(b"big", &vec![7u8; 1_500_000]);
            let _ = tx.send((before, big, c.get(b"after")));
        });
        let (before, big, after) = rx.recv_timeout(Duration::from_secs(20)).expect("the client never came back");
        let case = format!("{protocol} {rfp_mode:?}");
        assert_eq!(before.unwrap().as_deref(), Some(&b"v"[..]), "{case}");
        assert!(matches!(big, Err(Error::TooLarge { .. })), "{case}: {big:?}");
        assert_eq!(after.unwrap().as_deref(), Some(&b"v"[..]), "{case}");
    }
}

#[test]
fn a_request_after_one_that_timed_out_waits_for_its_reply_instead_of_overwriting_it() {
    // HERD and RFP clients WRITE every request into one slot in server memory, which
    // the server reads in sequence. The first GET times out (1 s) before the server
    // has looked at the slot (1.5 s): the next request must not overwrite it, or the
    // server waits for the lost one's number for ever and every later request of the
    // client times out. It waits for the late reply (dropped) and goes on.
    use boomkv::proto::rfp::ResultMode;
    let timeout = Duration::from_secs(1);
    for (protocol, rfp_mode) in
        [(Protocol::Herd, ResultMode::Hybrid), (Protocol::Rfp, ResultMode::Fetch), (Protocol::Rfp, ResultMode::Reply)]
    {
        for split in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let ep = fake_polled_server(dir.path(), protocol, Duration::from_millis(1500));
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let opts = ClientOptions { protocol, timeout, rfp_mode, ..Default::default() };
                let mut c = Client::connect(&ShmTransport::new().unwrap(), &ep, opts).unwrap();
                let get = |c: &mut Client<ShmTransport>, k: &[u8]| if split { split_get(c, k) } else { c.get(k) };
                let first = get(&mut c, b"first");
                let _ = tx.send((first, get(&mut c, b"second"), get(&mut c, b"third")));
            });
            let (first, second, third) = rx.recv_timeout(Duration::from_secs(20)).expect("the client never came back");
            let case = format!("{protocol} {rfp_mode:?} split {split}");
            assert!(matches!(first, Err(Error::Timeout(..))), "{case}: {first:?}");
            assert_eq!(second.unwrap().as_deref(), Some(&b"v"[..]), "{case}");
            assert_eq!(third.unwrap().as_deref(), Some(&b"v"[..]), "{case}");
        }
    }
}
