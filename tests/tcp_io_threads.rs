//! The tcp backend serves many connections from a fixed number of I/O threads, on both
//! sides: 48 connections (48 client transports, one server transport) add no thread per
//! connection, and every one of them still carries traffic. Its own test binary: it
//! counts the threads of its process.

use std::time::Duration;

use boomkv::transport::{CompletionQueue, Endpoint, Listener, QueuePair, TcpTransport, Transport, WcStatus};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map(Iterator::count).unwrap_or(0)
}

#[test]
fn many_connections_share_a_fixed_set_of_io_threads() {
    const N: usize = 48;
    let server = TcpTransport::new().unwrap();
    let listener = server.listen(&Endpoint::Tcp("127.0.0.1:0".into())).unwrap();
    let ep = listener.endpoint();
    let (s_send, s_recv) = (server.create_cq().unwrap(), server.create_cq().unwrap());
    let s_mr = server.alloc_mr(64 * N, boomkv::transport::Access::LOCAL_WRITE).unwrap();
    // One connection first, so the process's I/O threads exist before the count.
    let warm = TcpTransport::new().unwrap();
    let (w_send, w_recv) = (warm.create_cq().unwrap(), warm.create_cq().unwrap());
    let acceptor = std::thread::scope(|sc| {
        let h = sc.spawn(|| listener.accept(&s_send, &s_recv, Duration::from_secs(10), |_| Ok(Vec::new())).unwrap());
        let c = warm.connect(&ep, &w_send, &w_recv, b"", Duration::from_secs(10)).unwrap().0;
        (h.join().unwrap(), c)
    });
    let before = threads();
    let mut clients = Vec::new();
    let mut accepted = Vec::new();
    std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            (0..N)
                .map(|_| listener.accept(&s_send, &s_recv, Duration::from_secs(10), |_| Ok(Vec::new())).unwrap())
                .collect::<Vec<_>>()
        });
        for _ in 0..N {
            let t = TcpTransport::new().unwrap();
            let (cs, cr) = (t.create_cq().unwrap(), t.create_cq().unwrap());
            let qp = t.connect(&ep, &cs, &cr, b"", Duration::from_secs(10)).unwrap().0;
            clients.push((t, cs, cr, qp));
        }
        accepted = h.join().unwrap();
    });
    let after = threads();
    assert!(
        after <= before + 2,
        "{N} more connections took {} more threads ({before} -> {after}): a thread per connection?",
        after - before
    );
    // Every connection carries a message to the server.
    for (i, qp) in accepted.iter().enumerate() {
        qp.post_recv(i as u64, &s_mr, (64 * i) as u64, 64).unwrap();
    }
    for (i, (_, cs, _, qp)) in clients.iter().enumerate() {
        qp.post_send_bytes(1000 + i as u64, &(i as u64).to_le_bytes()).unwrap();
        let c = cs.wait(Duration::from_secs(10)).unwrap();
        assert_eq!((c.wr_id, c.status), (1000 + i as u64, WcStatus::Success));
    }
    let mut got = [false; N];
    for _ in 0..N {
        let c = s_recv.wait(Duration::from_secs(10)).unwrap();
        assert_eq!(c.status, WcStatus::Success);
        got[c.wr_id as usize] = true;
    }
    assert!(got.iter().all(|&g| g), "every connection delivered its message");
    drop(acceptor);
}
