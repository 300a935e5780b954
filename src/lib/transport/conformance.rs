//! The conformance suite: one set of generic tests that every backend must pass.
//!
//! Each backend's test module invokes [`conformance_suite!`](crate::conformance_suite)
//! with a constructor for a fresh transport (a fresh protection domain) and a fresh
//! listening endpoint; the macro expands to one `#[test]` per case below. Servers bind
//! loopback or a temporary Unix socket, and every wait is bounded.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// Bound for waits that must succeed.
pub const T: Duration = Duration::from_secs(5);
/// Region size of each side.
pub const REGION: usize = 64 << 10;

/// The configuration the suite runs with: a short RNR timeout keeps the RNR cases fast.
pub fn test_config() -> TransportConfig {
    TransportConfig { rnr_timeout: Duration::from_millis(100), spin: Duration::from_micros(20), ..Default::default() }
}

/// Expands to one test per conformance case for a backend. An optional leading
/// attribute goes on every case, e.g. `#[ignore = "needs a device"]` for backends whose
/// tests need hardware.
#[macro_export]
#[doc(hidden)]
macro_rules! conformance_suite {
    ($make:path, $ep:path) => {
        $crate::conformance_suite!(#[cfg(all())] $make, $ep);
    };
    (#[$attr:meta] $make:path, $ep:path) => {
        $crate::conformance_suite!(@cases $attr, $make, $ep;
            handshake_private_data_and_qp_numbers,
            write_then_read_roundtrip,
            batched_posts,
            write_imm_and_send_consume_receives,
            completions_in_order_and_unsignaled_writes,
            unsignaled_sends_complete_only_when_they_fail,
            eager_write_imm_is_done_at_the_post_or_completes,
            remote_access_errors_leave_other_qps_working,
            local_protection_errors,
            rnr_without_receive_fails_bounded,
            rnr_retry_succeeds_when_receive_arrives,
            rnr_never_blocks_the_poster_and_keeps_order,
            rnr_waits_in_a_bounded_send_queue,
            rnr_timeout_counts_from_the_head,
            message_longer_than_receive,
            close_flushes_both_sides,
            shared_recv_cq_tells_clients_apart,
            wait_times_out,
            stats_count_posted_operations,
            server_callback_can_refuse,
            try_accept_does_not_block,
            qp_and_cq_work_from_worker_threads,
            large_transfers,
            deregistration_during_traffic,
            peer_process_killed,
            atomics_compare_swap_and_fetch_add,
            atomics_are_atomic_across_connections,
            atomic_errors,
            flush_after_writes,
        );
        #[test]
        #[ignore = "helper: run by peer_process_killed as a child process"]
        fn conformance_child_peer() {
            $crate::transport::conformance::child_peer($make);
        }
    };
    (@cases $attr:meta, $make:path, $ep:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            #[$attr]
            fn $case() {
                $crate::transport::conformance::$case($make, $ep, module_path!());
            }
        )*
    };
}

/// A connected pair of queue pairs in two protection domains, each with a 64 KiB
/// region (all access rights) whose descriptor went to the peer as private data.
pub struct Pair<Tr: Transport> {
    pub st: Tr,
    pub ct: Tr,
    pub listener: Tr::Listener,
    pub s_send: Tr::Cq,
    pub s_recv: Tr::Cq,
    pub c_send: Tr::Cq,
    pub c_recv: Tr::Cq,
    pub sqp: Tr::Qp,
    pub cqp: Tr::Qp,
    pub smr: Tr::Mr,
    pub cmr: Tr::Mr,
    /// The server's region as the client knows it.
    pub s_remote: RemoteRegion,
    /// The client's region as the server knows it.
    pub c_remote: RemoteRegion,
}

/// Connects a client of `ct` to `listener`, accepting on the server's queues.
#[allow(clippy::too_many_arguments)]
pub fn connect_one<Tr: Transport>(
    ct: &Tr,
    listener: &Tr::Listener,
    s_send: &Tr::Cq,
    s_recv: &Tr::Cq,
    c_send: &Tr::Cq,
    c_recv: &Tr::Cq,
    client_private: &[u8],
    server_private: &[u8],
) -> (Tr::Qp, Tr::Qp, Vec<u8>, Vec<u8>) {
    let ep = listener.endpoint();
    std::thread::scope(|s| {
        let h = s.spawn(|| ct.connect(&ep, c_send, c_recv, client_private, T));
        let mut got = Vec::new();
        let sqp = listener
            .accept(s_send, s_recv, T, |p| {
                got = p.to_vec();
                Ok(server_private.to_vec())
            })
            .expect("accept");
        let (cqp, reply) = h.join().expect("client thread").expect("connect");
        (sqp, cqp, got, reply)
    })
}

/// Builds a [`Pair`].
pub fn pair<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint) -> Pair<Tr> {
    let (st, ct) = (make(), make());
    let listener = st.listen(&ep()).expect("listen");
    let (s_send, s_recv) = (st.create_cq().unwrap(), st.create_cq().unwrap());
    let (c_send, c_recv) = (ct.create_cq().unwrap(), ct.create_cq().unwrap());
    let smr = st.alloc_mr(REGION, Access::ALL).unwrap();
    let cmr = ct.alloc_mr(REGION, Access::ALL).unwrap();
    let (sqp, cqp, got, reply) = connect_one(
        &ct,
        &listener,
        &s_send,
        &s_recv,
        &c_send,
        &c_recv,
        &cmr.remote().to_bytes(),
        &smr.remote().to_bytes(),
    );
    let c_remote = RemoteRegion::from_bytes(&got).unwrap();
    let s_remote = RemoteRegion::from_bytes(&reply).unwrap();
    Pair { st, ct, listener, s_send, s_recv, c_send, c_recv, sqp, cqp, smr, cmr, s_remote, c_remote }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn ok<C: CompletionQueue>(cq: &C, what: &str) -> Completion {
    cq.wait(T).unwrap_or_else(|e| panic!("{what}: {e}")).ok(what).unwrap()
}

fn expect_status<C: CompletionQueue>(cq: &C, status: WcStatus, what: &str) -> Completion {
    let c = cq.wait(T).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(c.status, status, "{what}: {c:?}");
    c
}

/// Like [`expect_status`] where the InfiniBand specification lets a conforming device
/// report any of `allowed` (each case says why).
fn expect_status_in<C: CompletionQueue>(cq: &C, allowed: &[WcStatus], what: &str) -> Completion {
    let c = cq.wait(T).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(allowed.contains(&c.status), "{what}: expected one of {allowed:?}, got {c:?}");
    c
}

fn assert_quiet<C: CompletionQueue>(cq: &C, what: &str) {
    match cq.wait(Duration::from_millis(30)) {
        Err(Error::Timeout(..)) => {}
        other => panic!("{what}: expected no completion, got {other:?}"),
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A full SEND round trip on a healthy pair (proves the pair works).
fn ping<Tr: Transport>(p: &Pair<Tr>, tag: u8) {
    p.sqp.post_recv(900, &p.smr, 60_000, 64).unwrap();
    p.cqp.post_send_bytes(901, &[tag; 8]).unwrap();
    let r = ok(&p.s_recv, "ping recv");
    assert_eq!((r.wr_id, r.byte_len, r.qp_num), (900, 8, p.sqp.qp_num()));
    let mut b = [0u8; 8];
    p.smr.read(60_000, &mut b).unwrap();
    assert_eq!(b, [tag; 8]);
    assert_eq!(ok(&p.c_send, "ping send").wr_id, 901);
}

pub fn handshake_private_data_and_qp_numbers<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    assert_eq!(p.s_remote, p.smr.remote());
    assert_eq!(p.c_remote, p.cmr.remote());
    assert_eq!(p.sqp.peer_qp_num(), p.cqp.qp_num());
    assert_eq!(p.cqp.peer_qp_num(), p.sqp.qp_num());
    assert!(!p.sqp.is_error() && !p.cqp.is_error());
    assert_eq!(p.listener.endpoint().backend(), p.st.backend());
    ping(&p, 1);
}

pub fn write_then_read_roundtrip<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let data = pattern(1000, 7);
    p.cmr.write(0, &data).unwrap();
    p.cqp.post_write(1, &p.cmr, 0, 1000, p.s_remote.at(5000), p.s_remote.rkey, true).unwrap();
    let c = ok(&p.c_send, "write");
    assert_eq!((c.wr_id, c.opcode, c.byte_len, c.qp_num), (1, WcOpcode::Write, 1000, p.cqp.qp_num()));
    let mut got = vec![0u8; 1000];
    p.smr.read(5000, &mut got).unwrap();
    assert_eq!(got, data, "WRITE must land in the server's region");
    p.cqp.post_read(2, &p.cmr, 10_000, 1000, p.s_remote.at(5000), p.s_remote.rkey).unwrap();
    let c = ok(&p.c_send, "read");
    assert_eq!((c.wr_id, c.opcode, c.byte_len), (2, WcOpcode::Read, 1000));
    p.cmr.read(10_000, &mut got).unwrap();
    assert_eq!(got, data);
    // The server also READs and WRITEs the client's memory.
    p.smr.write(100, b"from server").unwrap();
    p.sqp.post_write(3, &p.smr, 100, 11, p.c_remote.at(40_000), p.c_remote.rkey, true).unwrap();
    ok(&p.s_send, "server write");
    let mut b = [0u8; 11];
    p.cmr.read(40_000, &mut b).unwrap();
    assert_eq!(&b, b"from server");
    // One-sided operations complete nothing at the target.
    assert_quiet(&p.s_recv, "server recv cq after one-sided ops");
    assert_quiet(&p.c_recv, "client recv cq after one-sided ops");
}

/// WRITEs posted as one batch (small ones inline where a backend inlines, one large)
/// land like single ones, only the signaled one completes, and a bad one in a batch
/// fails the batch's connection; receives posted as one batch complete in order.
pub fn batched_posts<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let data = pattern(9000, 3);
    p.cmr.write(0, &data).unwrap();
    let r = p.s_remote;
    let wrs = [
        WriteWr { wr_id: 1, off: 0, len: 8, remote_addr: r.at(20_000), rkey: r.rkey, signaled: false },
        WriteWr { wr_id: 2, off: 8, len: 100, remote_addr: r.at(20_008), rkey: r.rkey, signaled: false },
        WriteWr { wr_id: 3, off: 108, len: 8892, remote_addr: r.at(20_108), rkey: r.rkey, signaled: true },
    ];
    p.cqp.post_write_batch(&p.cmr, &wrs).unwrap();
    let c = ok(&p.c_send, "batch of writes");
    assert_eq!((c.wr_id, c.opcode, c.byte_len), (3, WcOpcode::Write, 8892));
    assert_quiet(&p.c_send, "unsignaled writes of the batch");
    let mut got = vec![0u8; 9000];
    p.smr.read(20_000, &mut got).unwrap();
    assert_eq!(got, data, "every WRITE of the batch lands");
    // Receives as one batch, consumed in order.
    p.sqp.post_recv_batch(&p.smr, &[(11, 0, 64), (12, 64, 64), (13, 128, 64)]).unwrap();
    for i in 0..3u8 {
        p.cqp.post_send_bytes(100 + i as u64, &[i; 5]).unwrap();
    }
    for i in 0..3u8 {
        let c = ok(&p.s_recv, "batched receive");
        assert_eq!((c.wr_id, c.byte_len), (11 + i as u64, 5));
        let mut b = [0u8; 5];
        p.smr.read(64 * i as u64, &mut b).unwrap();
        assert_eq!(b, [i; 5]);
        ok(&p.c_send, "send");
    }
    // A batch with a WRITE outside the target region fails that connection only.
    let bad = [
        WriteWr { wr_id: 21, off: 0, len: 8, remote_addr: r.at(0), rkey: r.rkey, signaled: true },
        WriteWr { wr_id: 22, off: 0, len: 8, remote_addr: r.at(r.len - 4), rkey: r.rkey, signaled: true },
    ];
    p.cqp.post_write_batch(&p.cmr, &bad).unwrap();
    assert_eq!(ok(&p.c_send, "good write of the bad batch").wr_id, 21);
    let c = expect_status(&p.c_send, WcStatus::RemoteAccessError, "bad write of the batch");
    assert_eq!(c.wr_id, 22);
    assert!(p.cqp.is_error());
    assert!(p.cqp.post_write_batch(&p.cmr, &wrs).is_err(), "posts fail after the error");
}

pub fn write_imm_and_send_consume_receives<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    for i in 0..4 {
        p.sqp.post_recv(100 + i, &p.smr, 50_000 + i * 100, 100).unwrap();
    }
    let data = pattern(300, 3);
    p.cmr.write(0, &data).unwrap();
    p.cqp.post_write_imm(1, &p.cmr, 0, 300, p.s_remote.at(2000), p.s_remote.rkey, 0xfeed).unwrap();
    let r = ok(&p.s_recv, "write_imm recv");
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm, r.qp_num),
        (100, WcOpcode::RecvWithImm, 300, Some(0xfeed), p.sqp.qp_num())
    );
    let mut got = vec![0u8; 300];
    p.smr.read(2000, &mut got).unwrap();
    assert_eq!(got, data, "the data is in place when the immediate arrives");
    p.cqp.post_send_bytes(2, b"hello").unwrap();
    let r = ok(&p.s_recv, "send recv");
    assert_eq!((r.wr_id, r.opcode, r.byte_len, r.imm), (101, WcOpcode::Recv, 5, None));
    let mut b = [0u8; 5];
    p.smr.read(50_100, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    p.cqp.post_send(3, &p.cmr, 10, 20).unwrap();
    let r = ok(&p.s_recv, "post_send recv");
    assert_eq!((r.wr_id, r.byte_len), (102, 20));
    let mut b = [0u8; 20];
    p.smr.read(50_200, &mut b).unwrap();
    assert_eq!(&b[..], &data[10..30]);
    // Zero-length WRITE_WITH_IMM: a pure notification.
    p.cqp.post_write_imm(4, &p.cmr, 0, 0, p.s_remote.addr, p.s_remote.rkey, 9).unwrap();
    let r = ok(&p.s_recv, "zero-length write_imm");
    assert_eq!((r.wr_id, r.byte_len, r.imm), (103, 0, Some(9)));
    let ids: Vec<u64> = (0..4).map(|_| ok(&p.c_send, "client send cq").wr_id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    let c = p.c_send.poll_one();
    assert!(c.is_none(), "{c:?}");
    assert_quiet(&p.c_recv, "client recv cq");
}

pub fn completions_in_order_and_unsignaled_writes<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let r = p.s_remote;
    let mut expected = Vec::new();
    for i in 0..60u64 {
        // Each WRITE has a source block of its own: a source belongs to the transport
        // until its work request is known to be done (a backend may run it later, e.g.
        // behind the first use of the rkey).
        let off = i * 512;
        p.cmr.write(off, &pattern(512, i as u8)).unwrap();
        match i % 3 {
            0 => p.cqp.post_write(i, &p.cmr, off, 512, r.at(off), r.rkey, false).unwrap(),
            1 => {
                p.cqp.post_write(i, &p.cmr, off, 512, r.at(off), r.rkey, true).unwrap();
                expected.push(i);
            }
            _ => {
                // Reads the block the unsignaled write just before it put there.
                let prev = (i - 2) * 512;
                p.cqp.post_read(i, &p.cmr, 32_768 + (i / 3) * 512, 512, r.at(prev), r.rkey).unwrap();
                expected.push(i);
            }
        }
    }
    let got: Vec<u64> = expected.iter().map(|_| ok(&p.c_send, "ordered").wr_id).collect();
    assert_eq!(got, expected, "completions must arrive in posting order");
    assert!(p.c_send.poll_one().is_none(), "unsignaled writes complete nothing");
    for i in (2..60u64).step_by(3) {
        let mut b = vec![0u8; 512];
        p.cmr.read(32_768 + (i / 3) * 512, &mut b).unwrap();
        assert_eq!(b, pattern(512, (i - 2) as u8), "READ {i} must see the unsignaled WRITE before it");
    }
}

/// An unsignaled SEND delivers like a signaled one and completes nothing at the sender,
/// in order with the signaled requests around it; when it fails (a receive too small,
/// no receive within the RNR timeout) it completes with its error, as verbs completes
/// a failed work request whether it was signaled or not.
pub fn unsignaled_sends_complete_only_when_they_fail<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    for i in 0..3 {
        p.sqp.post_recv(100 + i, &p.smr, i * 64, 64).unwrap();
    }
    p.cmr.write(0, b"written").unwrap();
    p.cqp.post_send_bytes_unsignaled(1, b"one").unwrap();
    p.cqp.post_send_bytes(2, b"second").unwrap();
    p.cqp.post_send_bytes_unsignaled(3, b"the third").unwrap();
    p.cqp.post_write(4, &p.cmr, 0, 7, p.s_remote.at(4096), p.s_remote.rkey, true).unwrap();
    let got: Vec<(u64, u32)> = (0..3)
        .map(|_| {
            let r = ok(&p.s_recv, "a SEND");
            (r.wr_id, r.byte_len)
        })
        .collect();
    assert_eq!(got, vec![(100, 3), (101, 6), (102, 9)]);
    for (off, want) in [(0u64, &b"one"[..]), (64, b"second"), (128, b"the third")] {
        let mut b = vec![0u8; want.len()];
        p.smr.read(off, &mut b).unwrap();
        assert_eq!(b, want, "the SEND at {off} landed whole");
    }
    let ids: Vec<u64> = (0..2).map(|_| ok(&p.c_send, "a signaled request").wr_id).collect();
    assert_eq!(ids, vec![2, 4], "only the signaled requests complete, in posting order");
    let mut b = [0u8; 7];
    p.smr.read(4096, &mut b).unwrap();
    assert_eq!(&b, b"written");
    assert_quiet(&p.c_send, "unsignaled SENDs that were delivered");
    // Longer than the receive: the sender's error completes it.
    p.sqp.post_recv(103, &p.smr, 256, 4).unwrap();
    p.cqp.post_send_bytes_unsignaled(5, b"ten bytes!").unwrap();
    let c = expect_status(&p.c_send, WcStatus::RemoteInvalidRequest, "an unsignaled SEND too long for its receive");
    assert_eq!(c.wr_id, 5);
    // No receive at all: the RNR timeout's error completes it.
    let p = pair(make, ep);
    p.cqp.post_send_bytes_unsignaled(6, b"nobody listens").unwrap();
    let c = expect_status(&p.c_send, WcStatus::RnrRetryExceeded, "an unsignaled SEND without a receive");
    assert_eq!(c.wr_id, 6);
    // Waiting for a receive when its queue pair closes: flushed, with a completion.
    let p = pair(make, ep);
    p.cqp.post_send_bytes_unsignaled(7, b"nobody listens yet").unwrap();
    p.cqp.close();
    let c = expect_status(&p.c_send, WcStatus::WrFlushError, "an unsignaled SEND its queue pair's close flushed");
    assert_eq!(c.wr_id, 7);
}

/// [`QueuePair::post_write_imm_eager`]: a write the backend did at the post
/// ([`Finished::Now`]) has its data in place and its receive consumed, and completes
/// nothing at the sender; any other ([`Finished::Later`]) completes as a
/// WRITE_WITH_IMM does. One that waits for a receive, or behind a request that waits,
/// is always `Later` and lands after it; one that fails completes with its error.
pub fn eager_write_imm_is_done_at_the_post_or_completes<Tr: Transport>(
    make: fn() -> Tr,
    ep: fn() -> Endpoint,
    _: &str,
) {
    let p = pair(make, ep);
    // The rkey known first (its first use may wait for a look-up).
    p.cqp.post_write(10, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, true).unwrap();
    assert_eq!(ok(&p.c_send, "a first WRITE").wr_id, 10);
    let data = pattern(300, 9);
    p.cmr.write(0, &data).unwrap();
    p.sqp.post_recv(100, &p.smr, 50_000, 64).unwrap();
    let f = p.cqp.post_write_imm_eager(1, &p.cmr, 0, 300, p.s_remote.at(2000), p.s_remote.rkey, 7).unwrap();
    let r = ok(&p.s_recv, "the eager write's receive");
    assert_eq!((r.wr_id, r.opcode, r.byte_len, r.imm), (100, WcOpcode::RecvWithImm, 300, Some(7)));
    let mut got = vec![0u8; 300];
    p.smr.read(2000, &mut got).unwrap();
    assert_eq!(got, data);
    match f {
        Finished::Now => assert_quiet(&p.c_send, "a write done at the post"),
        Finished::Later => assert_eq!(ok(&p.c_send, "a write done later").wr_id, 1),
    }
    // No receive yet: it waits, and completes when one comes.
    let f = p.cqp.post_write_imm_eager(2, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, 8).unwrap();
    assert_eq!(f, Finished::Later, "a write that waits for a receive is not done at the post");
    p.sqp.post_recv(101, &p.smr, 50_064, 64).unwrap();
    assert_eq!(ok(&p.c_send, "the write that waited").wr_id, 2);
    assert_eq!(ok(&p.s_recv, "its receive").imm, Some(8));
    // Behind a SEND that waits for a receive: it waits too, and lands second.
    p.cqp.post_send_bytes(3, b"first").unwrap();
    let f = p.cqp.post_write_imm_eager(4, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, 10).unwrap();
    assert_eq!(f, Finished::Later, "a write behind a waiting SEND is not done at the post");
    p.sqp.post_recv(102, &p.smr, 50_128, 64).unwrap();
    p.sqp.post_recv(103, &p.smr, 50_192, 64).unwrap();
    let (a, b) = (ok(&p.s_recv, "the SEND's receive"), ok(&p.s_recv, "the write's receive"));
    assert_eq!((a.wr_id, a.opcode, b.wr_id, b.imm), (102, WcOpcode::Recv, 103, Some(10)), "in posting order");
    let ids: Vec<u64> = (0..2).map(|_| ok(&p.c_send, "the SEND, then the write").wr_id).collect();
    assert_eq!(ids, vec![3, 4]);
    // Past the peer's region: the error completes it.
    p.sqp.post_recv(104, &p.smr, 50_256, 64).unwrap();
    let past = p.s_remote.addr + p.s_remote.len;
    let f = p.cqp.post_write_imm_eager(5, &p.cmr, 0, 8, past, p.s_remote.rkey, 9).unwrap();
    assert_eq!(f, Finished::Later);
    let c = expect_status(&p.c_send, WcStatus::RemoteAccessError, "an eager write past the region");
    assert_eq!(c.wr_id, 5);
}

/// What a misbehaving client does in [`remote_access_errors_leave_other_qps_working`].
#[derive(Debug, Clone, Copy)]
enum Violation {
    WriteOutOfBounds,
    UnsignaledWriteOutOfBounds,
    ReadOutOfBounds,
    WriteBeforeRegion,
    WrongRkey,
    AfterDeregistration,
    WriteToReadOnly,
    ReadFromWriteOnly,
    WriteImmOutOfBounds,
}

pub fn remote_access_errors_leave_other_qps_working<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    use Violation::*;
    let st = make();
    let listener = st.listen(&ep()).unwrap();
    let (s_send, s_recv) = (st.create_cq().unwrap(), st.create_cq().unwrap());
    let ro = st.alloc_mr(4096, Access::REMOTE_READ).unwrap();
    let wo = st.alloc_mr(4096, Access::REMOTE_WRITE).unwrap();
    let smr = st.alloc_mr(REGION, Access::ALL).unwrap();
    // A bystander client that must keep working throughout.
    let bt = make();
    let (b_send, b_recv) = (bt.create_cq().unwrap(), bt.create_cq().unwrap());
    let bmr = bt.alloc_mr(4096, Access::ALL).unwrap();
    let (b_sqp, b_qp, _, _) = connect_one(&bt, &listener, &s_send, &s_recv, &b_send, &b_recv, b"", b"");
    for (n, v) in [
        WriteOutOfBounds,
        UnsignaledWriteOutOfBounds,
        ReadOutOfBounds,
        WriteBeforeRegion,
        WrongRkey,
        AfterDeregistration,
        WriteToReadOnly,
        ReadFromWriteOnly,
        WriteImmOutOfBounds,
    ]
    .into_iter()
    .enumerate()
    {
        let ct = make();
        let (c_send, c_recv) = (ct.create_cq().unwrap(), ct.create_cq().unwrap());
        let cmr = ct.alloc_mr(REGION, Access::ALL).unwrap();
        let (sqp, cqp, _, _) = connect_one(&ct, &listener, &s_send, &s_recv, &c_send, &c_recv, b"", b"");
        sqp.post_recv(7, &smr, 0, 64).unwrap();
        let r = smr.remote();
        let doomed = st.alloc_mr(4096, Access::ALL).unwrap();
        let wr = 1000 + n as u64;
        match v {
            WriteOutOfBounds => cqp.post_write(wr, &cmr, 0, 16, r.at(r.len - 8), r.rkey, true),
            UnsignaledWriteOutOfBounds => cqp.post_write(wr, &cmr, 0, 16, r.at(r.len), r.rkey, false),
            ReadOutOfBounds => cqp.post_read(wr, &cmr, 0, 16, r.at(r.len - 1), r.rkey),
            WriteBeforeRegion => cqp.post_write(wr, &cmr, 0, 16, r.addr.wrapping_sub(16), r.rkey, true),
            WrongRkey => cqp.post_write(wr, &cmr, 0, 16, r.addr, r.rkey ^ 0x10000, true),
            AfterDeregistration => {
                let d = doomed.remote();
                // The region works, then stops working the moment it is deregistered.
                cqp.post_write(wr - 500, &cmr, 0, 16, d.addr, d.rkey, true).unwrap();
                ok(&c_send, "write before deregistration");
                doomed.deregister();
                cqp.post_write(wr, &cmr, 0, 16, d.addr, d.rkey, true)
            }
            WriteToReadOnly => cqp.post_write(wr, &cmr, 0, 16, ro.remote().addr, ro.remote().rkey, true),
            ReadFromWriteOnly => cqp.post_read(wr, &cmr, 0, 16, wo.remote().addr, wo.remote().rkey),
            WriteImmOutOfBounds => cqp.post_write_imm(wr, &cmr, 0, 16, r.at(r.len - 1), r.rkey, 1),
        }
        .unwrap();
        let c = expect_status(&c_send, WcStatus::RemoteAccessError, &format!("{v:?}"));
        assert_eq!(c.wr_id, wr, "{v:?}");
        assert!(cqp.is_error(), "{v:?}: the violating qp goes to the error state");
        assert!(cqp.post_send_bytes(1, b"x").is_err(), "{v:?}: posts fail after the error");
        // The server's side of that connection is torn down too; its receive is flushed.
        // A WRITE_WITH_IMM consumes that receive before the responder finds the bad
        // address, and the IB specification's list of completion statuses ("Local
        // Access Error: a protection error on a local data buffer during the processing
        // of an RDMA Write with Immediate Data received from the remote node") lets the
        // device complete the consumed receive with that error (IBV_WC_LOC_ACCESS_ERR,
        // mapped to LocalProtectionError) before the queue pair enters the error state,
        // or flush it with the rest. rxe reports IBV_WC_REM_ACCESS_ERR there (the status
        // of the NAK it sends). Every other violation consumes no receive, so that
        // receive can only be flushed.
        let allowed: &[WcStatus] = match v {
            WriteImmOutOfBounds => {
                &[WcStatus::WrFlushError, WcStatus::LocalProtectionError, WcStatus::RemoteAccessError]
            }
            _ => &[WcStatus::WrFlushError],
        };
        let f = expect_status_in(&s_recv, allowed, &format!("{v:?} server flush"));
        assert_eq!((f.wr_id, f.qp_num), (7, sqp.qp_num()), "{v:?}");
        wait_until("server qp in error", || sqp.is_error());
        // The bystander is unaffected.
        b_sqp.post_recv(8, &smr, 100, 64).unwrap();
        bmr.write(0, &[n as u8; 4]).unwrap();
        b_qp.post_write_imm(9, &bmr, 0, 4, r.at(200), r.rkey, n as u32).unwrap();
        let got = ok(&s_recv, "bystander");
        assert_eq!((got.wr_id, got.imm, got.qp_num), (8, Some(n as u32), b_sqp.qp_num()), "{v:?}");
        ok(&b_send, "bystander send cq");
        assert!(!b_qp.is_error() && !b_sqp.is_error());
        drop(doomed);
    }
    // Nothing changed outside the bounds the violations aimed at.
    let mut b = [0u8; 8];
    smr.read(r_len(&smr) - 8, &mut b).unwrap();
    assert_eq!(b, [0u8; 8]);
}

fn r_len<M: MemoryRegion>(m: &M) -> u64 {
    m.len()
}

pub fn local_protection_errors<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    // READ into a region without LOCAL_WRITE.
    let p = pair(make, ep);
    let ro_local = p.ct.alloc_mr(4096, Access::NONE).unwrap();
    p.cqp.post_read(1, &ro_local, 0, 16, p.s_remote.addr, p.s_remote.rkey).unwrap();
    let c = expect_status(&p.c_send, WcStatus::LocalProtectionError, "read into read-only");
    assert_eq!((c.wr_id, c.opcode), (1, WcOpcode::Read));
    assert!(p.cqp.is_error());
    // A source beyond the local region.
    let p = pair(make, ep);
    p.cqp.post_write(2, &p.cmr, REGION as u64 - 4, 16, p.s_remote.addr, p.s_remote.rkey, false).unwrap();
    let c = expect_status(&p.c_send, WcStatus::LocalProtectionError, "source out of bounds");
    assert_eq!(c.wr_id, 2);
    // A region of another protection domain.
    let p = pair(make, ep);
    let foreign = make().alloc_mr(4096, Access::ALL).unwrap();
    p.cqp.post_send(3, &foreign, 0, 8).unwrap();
    let c = expect_status(&p.c_send, WcStatus::LocalProtectionError, "foreign region");
    assert_eq!(c.wr_id, 3);
    // A receive buffer without LOCAL_WRITE.
    let p = pair(make, ep);
    let ro = p.st.alloc_mr(4096, Access::REMOTE_READ).unwrap();
    p.sqp.post_recv(4, &ro, 0, 64).unwrap();
    let c = expect_status(&p.s_recv, WcStatus::LocalProtectionError, "recv into read-only");
    assert_eq!(c.wr_id, 4);
}

pub fn rnr_without_receive_fails_bounded<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let t0 = Instant::now();
    p.cqp.post_send_bytes(1, b"nobody listens").unwrap();
    let c = expect_status(&p.c_send, WcStatus::RnrRetryExceeded, "send without recv");
    let took = t0.elapsed();
    assert_eq!(c.wr_id, 1);
    assert!(took >= test_config().rnr_timeout / 2, "gave up after {took:?}, before the RNR timeout");
    assert!(took < T, "RNR took {took:?}");
    assert!(p.cqp.is_error());
    // WRITE_WITH_IMM needs a receive as well.
    let p = pair(make, ep);
    p.cqp.post_write_imm(2, &p.cmr, 0, 8, p.s_remote.addr, p.s_remote.rkey, 1).unwrap();
    let c = expect_status(&p.c_send, WcStatus::RnrRetryExceeded, "write_imm without recv");
    assert_eq!(c.wr_id, 2);
}

pub fn rnr_retry_succeeds_when_receive_arrives<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(10));
            p.sqp.post_recv(5, &p.smr, 0, 64).unwrap();
        });
        p.cqp.post_send_bytes(1, b"late receiver").unwrap();
        let c = ok(&p.c_send, "send retried until the receive arrived");
        assert_eq!(c.wr_id, 1);
    });
    let r = ok(&p.s_recv, "late recv");
    assert_eq!((r.wr_id, r.byte_len), (5, 13));
}

/// A SEND that finds no receive waits in its queue pair, not in the thread that posted
/// it (as a NIC retries on its own): the poster goes on at once, here to post the very
/// receive the SEND needs. Work requests posted behind it on the same queue pair wait
/// too, in order: a WRITE posted after the stalled SEND does not land before it, and the
/// completions come in posting order. A poster that waited for the receive could not
/// post it, and would see the RNR error instead. (On a server, such a wait let one
/// client that posts no receives hold a worker, and every client it serves, for the
/// whole RNR timeout.)
pub fn rnr_never_blocks_the_poster_and_keeps_order<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let marker = b"after the SEND";
    p.cmr.write(1024, marker).unwrap();
    p.smr.write(2048, &[0u8; 14]).unwrap();
    p.cqp.post_send_bytes(1, b"early sender").unwrap();
    p.cqp.post_write(2, &p.cmr, 1024, marker.len() as u32, p.s_remote.addr + 2048, p.s_remote.rkey, true).unwrap();
    // Nothing of either may be visible before the receive exists.
    let mut seen = [0u8; 14];
    p.smr.read(2048, &mut seen).unwrap();
    assert_eq!(seen, [0u8; 14], "the WRITE overtook the SEND it was posted behind");
    p.sqp.post_recv(5, &p.smr, 0, 64).unwrap();
    let r = ok(&p.s_recv, "the receive posted after the SEND");
    assert_eq!((r.wr_id, r.byte_len), (5, 12));
    let mut got = [0u8; 12];
    p.smr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"early sender");
    let a = ok(&p.c_send, "the stalled SEND");
    let b = ok(&p.c_send, "the WRITE behind it");
    assert_eq!((a.wr_id, b.wr_id), (1, 2), "completions in posting order");
    p.smr.read(2048, &mut seen).unwrap();
    assert_eq!(&seen, marker);
    assert!(!p.cqp.is_error() && !p.sqp.is_error());
}

/// Work requests that wait for a receive the peer never posts fill the send queue, and
/// a full send queue refuses the next post (as verbs does) instead of holding more: a
/// peer that posts no receives costs bounded memory. At the RNR timeout the head fails
/// and the connection goes to the error state.
pub fn rnr_waits_in_a_bounded_send_queue<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let depth = test_config().sq_depth as u64;
    let refused = (0..=depth).find(|&i| p.cqp.post_send_bytes(i, b"nobody listens").is_err());
    assert!(refused.is_some(), "{} SENDs without a receive were all taken", depth + 1);
    let c = expect_status(&p.c_send, WcStatus::RnrRetryExceeded, "the head of a full send queue");
    assert_eq!(c.wr_id, 0);
    assert!(p.cqp.is_error());
}

/// A SEND queued behind another that waits for a receive gets the whole RNR timeout
/// from when it reaches the head, as a NIC counts retries from the first time it sends
/// the message: here the second SEND waits longer than the timeout in all, but less of
/// it at the head, and succeeds.
pub fn rnr_timeout_counts_from_the_head<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let rnr = test_config().rnr_timeout;
    p.cqp.post_send_bytes(1, b"first").unwrap();
    p.cqp.post_send_bytes(2, b"second").unwrap();
    std::thread::sleep(rnr * 6 / 10);
    p.sqp.post_recv(5, &p.smr, 0, 64).unwrap();
    std::thread::sleep(rnr * 6 / 10);
    p.sqp.post_recv(6, &p.smr, 64, 64).unwrap();
    let a = ok(&p.c_send, "the first SEND, its receive posted within the timeout");
    assert_eq!(a.wr_id, 1);
    let b = ok(&p.c_send, "the second SEND: its time at the head was within the timeout");
    assert_eq!(b.wr_id, 2);
    assert_eq!(ok(&p.s_recv, "first").wr_id, 5);
    assert_eq!(ok(&p.s_recv, "second").wr_id, 6);
}

pub fn message_longer_than_receive<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    p.sqp.post_recv(5, &p.smr, 0, 4).unwrap();
    p.cqp.post_send_bytes(1, b"ten bytes!").unwrap();
    let c = expect_status(&p.c_send, WcStatus::RemoteInvalidRequest, "sender of oversized message");
    assert_eq!(c.wr_id, 1);
    // The IB specification names Local Length Error for a receive buffer too small for
    // the incoming message (the requester sees the Invalid Request NAK above). A device
    // that finds the overrun while checking the scatter list against the buffer's memory
    // region reports it as a protection error instead: rxe completes the receive with
    // IBV_WC_LOC_PROT_ERR. Both say the message did not fit; what matters here is that
    // the receive fails and nothing lands past the buffer (checked below).
    let r = expect_status_in(
        &p.s_recv,
        &[WcStatus::LocalLengthError, WcStatus::LocalProtectionError],
        "receiver of oversized message",
    );
    assert_eq!(r.wr_id, 5);
    let mut b = [0u8; 8];
    p.smr.read(4, &mut b).unwrap();
    assert_eq!(b, [0u8; 8], "nothing written past the receive buffer");
}

pub fn close_flushes_both_sides<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    ping(&p, 3);
    for i in 0..3 {
        p.sqp.post_recv(10 + i, &p.smr, i * 64, 64).unwrap();
    }
    p.cqp.post_recv(20, &p.cmr, 0, 64).unwrap();
    p.cqp.close();
    assert!(p.cqp.is_error());
    assert!(p.cqp.post_send_bytes(1, b"x").is_err());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let c = expect_status(&p.s_recv, WcStatus::WrFlushError, "server flush after client close");
        assert_eq!((c.qp_num, c.opcode), (p.sqp.qp_num(), WcOpcode::Recv));
        ids.push(c.wr_id);
    }
    assert_eq!(ids, vec![10, 11, 12]);
    let c = expect_status(&p.c_recv, WcStatus::WrFlushError, "client's own receive flushed");
    assert_eq!(c.wr_id, 20);
    wait_until("server qp in error", || p.sqp.is_error());
    assert!(p.sqp.post_send_bytes(1, b"x").is_err());
}

pub fn shared_recv_cq_tells_clients_apart<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    const N: usize = 4;
    let st = make();
    let listener = st.listen(&ep()).unwrap();
    let (s_send, s_recv) = (st.create_cq().unwrap(), st.create_cq().unwrap());
    let smr = st.alloc_mr(N * 64, Access::ALL).unwrap();
    let mut clients = Vec::new();
    let mut server_qps = Vec::new();
    for i in 0..N {
        let ct = make();
        let (c_send, c_recv) = (ct.create_cq().unwrap(), ct.create_cq().unwrap());
        let cmr = ct.alloc_mr(64, Access::ALL).unwrap();
        let (sqp, cqp, got, _) = connect_one(&ct, &listener, &s_send, &s_recv, &c_send, &c_recv, &[i as u8], b"");
        assert_eq!(got, vec![i as u8]);
        sqp.post_recv(i as u64, &smr, i as u64 * 64, 64).unwrap();
        cqp.post_recv(0, &cmr, 0, 64).unwrap();
        server_qps.push(sqp);
        clients.push((ct, c_send, c_recv, cmr, cqp));
    }
    // One worker thread serves every client from the shared receive queue.
    let worker = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut seen = Vec::new();
            for _ in 0..N {
                let c = ok(&s_recv, "shared recv cq");
                let qp = server_qps.iter().find(|q| q.qp_num() == c.qp_num).expect("qp_num names an accepted qp");
                let mut b = [0u8; 1];
                smr.read(c.wr_id * 64, &mut b).unwrap();
                assert_eq!(b[0] as u64, c.wr_id + 100);
                qp.post_send_bytes(c.wr_id, &[b[0] + 1]).unwrap();
                seen.push(c.qp_num);
            }
            seen
        });
        for (i, (_, _, _, _, cqp)) in clients.iter().enumerate().rev() {
            cqp.post_send_bytes(1, &[i as u8 + 100]).unwrap();
        }
        h.join().unwrap()
    });
    let mut distinct = worker.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), N);
    for (i, (_, c_send, c_recv, cmr, _)) in clients.iter().enumerate() {
        ok(c_recv, "reply");
        let mut b = [0u8; 1];
        cmr.read(0, &mut b).unwrap();
        assert_eq!(b[0], i as u8 + 101);
        ok(c_send, "request send");
    }
    let mut drained = Vec::new();
    while drained.len() < N {
        ok(&s_send, "server replies");
        drained.push(());
    }
}

pub fn wait_times_out<Tr: Transport>(make: fn() -> Tr, _ep: fn() -> Endpoint, _: &str) {
    let t = make();
    let cq = t.create_cq().unwrap();
    let t0 = Instant::now();
    match cq.wait(Duration::from_millis(30)) {
        Err(Error::Timeout(..)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(25) && took < Duration::from_secs(2), "{took:?}");
    assert!(cq.poll_one().is_none());
}

pub fn stats_count_posted_operations<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    p.sqp.post_recv(1, &p.smr, 0, 64).unwrap();
    p.sqp.post_recv(2, &p.smr, 64, 64).unwrap();
    let r = p.s_remote;
    p.cqp.post_write(1, &p.cmr, 0, 8, r.at(1024), r.rkey, false).unwrap();
    p.cqp.post_write(2, &p.cmr, 0, 8, r.at(1024), r.rkey, true).unwrap();
    p.cqp.post_write_imm(3, &p.cmr, 0, 8, r.at(1024), r.rkey, 0).unwrap();
    p.cqp.post_read(4, &p.cmr, 0, 8, r.at(1024), r.rkey).unwrap();
    p.cqp.post_send_bytes(5, b"x").unwrap();
    for _ in 0..4 {
        ok(&p.c_send, "stats ops");
    }
    let s = p.cqp.stats();
    assert_eq!(s, QpStats { sends: 1, writes: 2, writes_imm: 1, reads: 1, ..Default::default() });
    assert_eq!(s.network_ops(), 5);
    assert_eq!(p.sqp.stats(), QpStats { recvs: 2, ..Default::default() });
}

pub fn server_callback_can_refuse<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let st = make();
    let listener = st.listen(&ep()).unwrap();
    let cq = st.create_cq().unwrap();
    let ct = make();
    let ccq = ct.create_cq().unwrap();
    let lep = listener.endpoint();
    std::thread::scope(|s| {
        let h = s.spawn(|| ct.connect(&lep, &ccq, &ccq, b"let me in", T).map(|_| ()));
        let e = listener.accept(&cq, &cq, T, |p| {
            assert_eq!(p, b"let me in");
            Err(Error::Protocol("unknown client id 42".into()))
        });
        assert!(matches!(e, Err(Error::Protocol(_))), "{e:?}");
        let ce = h.join().unwrap().expect_err("refused client must fail to connect");
        assert!(ce.to_string().contains("unknown client id 42"), "{ce}");
    });
    // The listener keeps serving.
    let (sqp, cqp, _, reply) = connect_one(&ct, &listener, &cq, &cq, &ccq, &ccq, b"", b"ok");
    assert_eq!(reply, b"ok");
    assert!(!sqp.is_error() && !cqp.is_error());
}

pub fn try_accept_does_not_block<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let st = make();
    let listener = st.listen(&ep()).unwrap();
    let cq = st.create_cq().unwrap();
    let t0 = Instant::now();
    assert!(listener.try_accept(&cq, &cq, |_| Ok(vec![])).unwrap().is_none());
    assert!(t0.elapsed() < Duration::from_millis(500));
    let ct = make();
    let ccq = ct.create_cq().unwrap();
    let lep = listener.endpoint();
    std::thread::scope(|s| {
        let h = s.spawn(|| ct.connect(&lep, &ccq, &ccq, b"", T));
        let end = Instant::now() + T;
        let qp = loop {
            if let Some(qp) = listener.try_accept(&cq, &cq, |_| Ok(b"hi".to_vec())).unwrap() {
                break qp;
            }
            assert!(Instant::now() < end, "try_accept never saw the client");
            std::thread::sleep(Duration::from_millis(1));
        };
        let (cqp, reply) = h.join().unwrap().unwrap();
        assert_eq!(reply, b"hi");
        assert!(!qp.is_error() && !cqp.is_error());
    });
}

pub fn qp_and_cq_work_from_worker_threads<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let Pair { sqp, cqp, smr, cmr, s_recv, c_send, c_recv, s_send, s_remote, .. } = p;
    let server = std::thread::spawn(move || {
        for i in 0..100u64 {
            sqp.post_recv(i, &smr, 0, 64).unwrap();
            let c = s_recv.wait(T).unwrap().ok("worker recv").unwrap();
            assert_eq!(c.imm, Some(i as u32));
            sqp.post_send_bytes(i, &i.to_le_bytes()).unwrap();
            ok(&s_send, "worker send");
        }
    });
    let client = std::thread::spawn(move || {
        for i in 0..100u64 {
            cqp.post_recv(i, &cmr, 100, 64).unwrap();
            cqp.post_write_imm(i, &cmr, 0, 8, s_remote.addr, s_remote.rkey, i as u32).unwrap();
            let c = c_recv.wait(T).unwrap().ok("client recv").unwrap();
            assert_eq!(c.wr_id, i);
            let mut b = [0u8; 8];
            cmr.read(100, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), i);
            ok(&c_send, "client send");
        }
    });
    server.join().unwrap();
    client.join().unwrap();
}

pub fn large_transfers<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    const BIG: usize = 4 << 20;
    let src = p.ct.alloc_mr(BIG, Access::ALL).unwrap();
    let dst = p.st.alloc_mr(BIG, Access::ALL).unwrap();
    let data = pattern(BIG, 11);
    src.write(0, &data).unwrap();
    let d = dst.remote();
    p.cqp.post_write(1, &src, 0, BIG as u32, d.addr, d.rkey, true).unwrap();
    ok(&p.c_send, "big write");
    let mut got = vec![0u8; BIG];
    dst.read(0, &mut got).unwrap();
    assert!(got == data, "4 MiB WRITE landed intact");
    src.write(0, &vec![0u8; BIG]).unwrap();
    p.cqp.post_read(2, &src, 0, BIG as u32, d.addr, d.rkey).unwrap();
    ok(&p.c_send, "big read");
    src.read(0, &mut got).unwrap();
    assert!(got == data, "4 MiB READ came back intact");
    p.sqp.post_recv(3, &dst, 0, BIG as u32).unwrap();
    p.cqp.post_send(3, &src, 0, (BIG / 2) as u32).unwrap();
    let r = ok(&p.s_recv, "big send");
    assert_eq!(r.byte_len as usize, BIG / 2);
    assert!(p.cqp.post_send_bytes(4, &vec![0u8; MAX_MESSAGE as usize + 1]).is_err(), "over MAX_MESSAGE");
}

pub fn deregistration_during_traffic<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    // A stream of writes into a region that is deregistered midway: every write that
    // completed successfully landed before deregistration returned, and the first
    // failure is a remote access error.
    let p = pair(make, ep);
    let target = p.st.alloc_mr(4096, Access::ALL).unwrap();
    let r = target.remote();
    p.cmr.write(0, &[0xab; 64]).unwrap();
    let mut results = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(5));
            target.deregister();
            // Nothing lands after deregistration returned.
            target.write(0, &[0u8; 64]).unwrap();
        });
        for i in 0..100_000u64 {
            if p.cqp.post_write(i, &p.cmr, 0, 64, r.addr, r.rkey, true).is_err() {
                break;
            }
            let c = p.c_send.wait(T).unwrap();
            results.push(c.status);
            if c.status != WcStatus::Success {
                break;
            }
        }
    });
    assert_eq!(results.last(), Some(&WcStatus::RemoteAccessError), "writes must start failing");
    std::thread::sleep(Duration::from_millis(20));
    let mut b = [1u8; 64];
    target.read(0, &mut b).unwrap();
    assert_eq!(b, [0u8; 64], "no write landed after deregistration returned");
}

/// Environment variable that makes [`child_peer`] act.
const CHILD_ENV: &str = "BOOMKV_CONFORMANCE_CHILD_EP";

/// Child side of [`peer_process_killed`]: connects, announces itself, then waits to be
/// killed (bounded, in case the parent dies first).
pub fn child_peer<Tr: Transport>(make: fn() -> Tr) {
    let Ok(ep) = std::env::var(CHILD_ENV) else { return };
    let t = make();
    let cq = t.create_cq().unwrap();
    let mr = t.alloc_mr(4096, Access::ALL).unwrap();
    mr.write(0, b"child memory").unwrap();
    let (qp, _) = t.connect(&Endpoint::parse(&ep).unwrap(), &cq, &cq, &mr.remote().to_bytes(), T).unwrap();
    qp.post_recv(1, &mr, 1024, 64).unwrap();
    qp.post_send_bytes(2, b"ready").unwrap();
    std::thread::sleep(Duration::from_secs(20));
}

pub fn peer_process_killed<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, module: &str) {
    let st = make();
    let listener = st.listen(&ep()).unwrap();
    let (s_send, s_recv) = (st.create_cq().unwrap(), st.create_cq().unwrap());
    let smr = st.alloc_mr(4096, Access::ALL).unwrap();
    let test_name = format!("{}::conformance_child_peer", module.split_once("::").map_or(module, |(_, rest)| rest));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name, "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, listener.endpoint().to_string())
        .env("BOOMKV_QUIET_TRANSPORT", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child_region = Vec::new();
    let sqp = listener
        .accept(&s_send, &s_recv, Duration::from_secs(20), |p| {
            child_region = p.to_vec();
            Ok(vec![])
        })
        .unwrap();
    let cr = RemoteRegion::from_bytes(&child_region).unwrap();
    sqp.post_recv(1, &smr, 0, 64).unwrap();
    let r = ok(&s_recv, "child's hello");
    assert_eq!(r.byte_len, 5);
    // The child is alive: its memory answers one-sided READs.
    sqp.post_read(2, &smr, 100, 12, cr.addr, cr.rkey).unwrap();
    ok(&s_send, "read from the child");
    let mut b = [0u8; 12];
    smr.read(100, &mut b).unwrap();
    assert_eq!(&b, b"child memory");
    // Mid-operation: the server waits for a message that never comes; the child dies.
    sqp.post_recv(3, &smr, 0, 64).unwrap();
    sqp.post_recv(4, &smr, 64, 64).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    child.kill().unwrap();
    let _ = child.wait();
    let t0 = Instant::now();
    let a = expect_status(&s_recv, WcStatus::WrFlushError, "receive flushed after the peer died");
    let b = expect_status(&s_recv, WcStatus::WrFlushError, "second receive flushed");
    assert_eq!((a.wr_id, b.wr_id), (3, 4));
    assert!(t0.elapsed() < T);
    wait_until("qp in error after peer death", || sqp.is_error());
    assert!(sqp.post_read(5, &smr, 0, 8, cr.addr, cr.rkey).is_err());
    // The survivor keeps serving new clients.
    let ct = make();
    let ccq = ct.create_cq().unwrap();
    let (sqp2, cqp2, _, _) = connect_one(&ct, &listener, &s_send, &s_recv, &ccq, &ccq, b"", b"");
    sqp2.post_recv(6, &smr, 0, 64).unwrap();
    cqp2.post_send_bytes(7, b"alive").unwrap();
    assert_eq!(ok(&s_recv, "new client after a death").wr_id, 6);
}

fn word<M: MemoryRegion>(m: &M, off: u64) -> u64 {
    let mut b = [0u8; 8];
    m.read(off, &mut b).unwrap();
    u64::from_le_bytes(b)
}

/// Compare-and-swap swaps only on a match and returns the previous value either way;
/// fetch-and-add adds (wrapping) and returns the previous value; both complete with
/// their own opcodes and 8 bytes, and count as atomics.
pub fn atomics_compare_swap_and_fetch_add<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let r = p.s_remote;
    p.smr.write(4096, &10u64.to_le_bytes()).unwrap();
    p.cqp.post_compare_swap(1, &p.cmr, 0, r.at(4096), r.rkey, 10, 20).unwrap();
    let c = ok(&p.c_send, "matching compare-and-swap");
    assert_eq!((c.wr_id, c.opcode, c.byte_len), (1, WcOpcode::CompareSwap, 8));
    assert_eq!((word(&p.cmr, 0), word(&p.smr, 4096)), (10, 20), "swapped, the old value returned");
    p.cqp.post_compare_swap(2, &p.cmr, 8, r.at(4096), r.rkey, 10, 30).unwrap();
    ok(&p.c_send, "failing compare-and-swap");
    assert_eq!((word(&p.cmr, 8), word(&p.smr, 4096)), (20, 20), "no swap, the current value returned");
    p.cqp.post_fetch_add(3, &p.cmr, 16, r.at(4096), r.rkey, 5).unwrap();
    let c = ok(&p.c_send, "fetch-and-add");
    assert_eq!((c.wr_id, c.opcode, c.byte_len), (3, WcOpcode::FetchAdd, 8));
    assert_eq!((word(&p.cmr, 16), word(&p.smr, 4096)), (20, 25));
    p.cqp.post_fetch_add(4, &p.cmr, 24, r.at(4096), r.rkey, u64::MAX).unwrap();
    ok(&p.c_send, "fetch-and-add wraps");
    assert_eq!((word(&p.cmr, 24), word(&p.smr, 4096)), (25, 24));
    // The server runs atomics on the client's memory too.
    p.cmr.write(32, &7u64.to_le_bytes()).unwrap();
    p.sqp.post_fetch_add(5, &p.smr, 0, p.c_remote.at(32), p.c_remote.rkey, 1).unwrap();
    ok(&p.s_send, "server fetch-and-add");
    assert_eq!((word(&p.smr, 0), word(&p.cmr, 32)), (7, 8));
    assert_eq!(p.cqp.stats().atomics, 4);
    assert_eq!(p.cqp.stats().network_ops(), 4);
    assert_quiet(&p.s_recv, "atomics complete nothing at the target");
    ping(&p, 2);
}

/// Fetch-and-adds from two connections in two threads on one word lose no update, and
/// compare-and-swap used as a lock admits one holder at a time.
pub fn atomics_are_atomic_across_connections<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    const N: u64 = 200;
    let p = pair(make, ep);
    let r = p.s_remote;
    let ct2 = make();
    let (c2_send, c2_recv) = (ct2.create_cq().unwrap(), ct2.create_cq().unwrap());
    let (_sqp2, cqp2, _, _) = connect_one(&ct2, &p.listener, &p.s_send, &p.s_recv, &c2_send, &c2_recv, b"", b"");
    let cmr2 = ct2.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    p.smr.write(8192, &0u64.to_le_bytes()).unwrap();
    fn adds<Q: QueuePair, C: CompletionQueue>(qp: &Q, mr: &Q::Mr, cq: &C, r: RemoteRegion, n: u64) {
        for i in 0..n {
            qp.post_fetch_add(i, mr, 0, r.at(8192), r.rkey, 1).unwrap();
            ok(cq, "concurrent fetch-and-add");
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| adds(&p.cqp, &p.cmr, &p.c_send, r, N));
        s.spawn(|| adds(&cqp2, &cmr2, &c2_send, r, N));
    });
    assert_eq!(word(&p.smr, 8192), 2 * N, "no fetch-and-add may be lost");
    // A lock word: 0 free, else the holder's id.
    p.smr.write(8200, &0u64.to_le_bytes()).unwrap();
    p.cqp.post_compare_swap(10, &p.cmr, 0, r.at(8200), r.rkey, 0, 1).unwrap();
    ok(&p.c_send, "take the lock");
    cqp2.post_compare_swap(11, &cmr2, 0, r.at(8200), r.rkey, 0, 2).unwrap();
    ok(&c2_send, "try the taken lock");
    assert_eq!((word(&p.cmr, 0), word(&cmr2, 0), word(&p.smr, 8200)), (0, 1, 1), "one holder");
}

/// An atomic on a misaligned word is refused at the post; one on a region without
/// REMOTE_ATOMIC, or with a result buffer that is not locally writable, fails that
/// connection only.
pub fn atomic_errors<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let r = p.s_remote;
    // Refused at the post, as verbs providers do (nothing reaches the peer).
    assert!(p.cqp.post_fetch_add(1, &p.cmr, 0, r.at(4100), r.rkey, 1).is_err(), "misaligned fetch-and-add");
    assert!(p.cqp.post_compare_swap(1, &p.cmr, 0, r.at(4099), r.rkey, 0, 1).is_err(), "misaligned compare-and-swap");
    assert!(!p.cqp.is_error());
    assert_quiet(&p.c_send, "a refused post completes nothing");
    ping(&p, 4);

    let p = pair(make, ep);
    let no_atomics = p.st.alloc_mr(4096, Access::REMOTE_READ | Access::REMOTE_WRITE).unwrap();
    no_atomics.write(0, &5u64.to_le_bytes()).unwrap();
    let nr = no_atomics.remote();
    p.cqp.post_compare_swap(2, &p.cmr, 0, nr.at(0), nr.rkey, 5, 6).unwrap();
    let c = expect_status(&p.c_send, WcStatus::RemoteAccessError, "compare-and-swap without REMOTE_ATOMIC");
    assert_eq!((c.wr_id, c.opcode), (2, WcOpcode::CompareSwap));
    assert_eq!(word(&no_atomics, 0), 5, "nothing changed");
    // The result buffer must be locally writable.
    let p = pair(make, ep);
    let ro = p.ct.alloc_mr(4096, Access::NONE).unwrap();
    p.cqp.post_fetch_add(3, &ro, 0, p.s_remote.at(0), p.s_remote.rkey, 1).unwrap();
    expect_status(&p.c_send, WcStatus::LocalProtectionError, "atomic result into read-only memory");
}

/// A FLUSH after WRITEs completes after them, with its own opcode, and leaves the
/// written data in place.
pub fn flush_after_writes<Tr: Transport>(make: fn() -> Tr, ep: fn() -> Endpoint, _: &str) {
    let p = pair(make, ep);
    let r = p.s_remote;
    let data = pattern(3000, 9);
    p.cmr.write(0, &data).unwrap();
    p.cqp.post_write(1, &p.cmr, 0, 1000, r.at(16_384), r.rkey, false).unwrap();
    p.cqp.post_write(2, &p.cmr, 1000, 2000, r.at(17_384), r.rkey, false).unwrap();
    p.cqp.post_flush(3, r.at(16_384), r.rkey, 3000).unwrap();
    let c = ok(&p.c_send, "flush");
    assert_eq!((c.wr_id, c.opcode), (3, WcOpcode::Flush));
    let mut got = vec![0u8; 3000];
    p.smr.read(16_384, &mut got).unwrap();
    assert_eq!(got, data);
    assert_eq!(p.cqp.stats().flushes, 1);
    assert_quiet(&p.c_send, "unsignaled writes before the flush");
    ping(&p, 3);
}
