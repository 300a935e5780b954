//! The floor of a GET over shared memory: what any request/response key-value store
//! with a polling server thread and synchronous client threads costs on this machine,
//! before a single line of boomkv runs.
//!
//! Each client thread has one request in flight, as a YCSB client thread has. It writes
//! a sequence number into its request line; the server thread, polling every client's
//! line, copies a value of `--size` bytes into that client's response buffer (where a
//! NIC's one-sided WRITE, or boomkv's shm emulation of it, puts an entry) and publishes
//! the sequence number; the client waits for it and copies the value out, as a GET's
//! caller needs it. Nothing else: no index, no checksum, no key, no workload
//! generator, no latency measurement, no transport, no log. A real GET does all of this
//! and more, so the throughput here bounds from above what it can reach with the same
//! threads on the same CPUs.
//!
//! It runs every combination of placement (`split`: the server thread alone on the last
//! allowed CPU and the clients on the others, as `boomctl --pin auto`; `none`: where the
//! scheduler puts them) and of waiting (`yield`: poll, then `sched_yield` between
//! polls; `spin`: poll only), interleaved over `--repeats` rounds, and prints the median
//! and range of each.
//!
//! ```text
//! cargo run --release --example shm_floor -- --threads 1,2,4,8,16 --seconds 2 --repeats 3
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boomkv::cpus::CpuList;
use boomkv::pmem::Mapping;

/// Per client, in one shared mapping: its request line, its response line (each a
/// line of its own, 128 bytes against adjacent-line prefetch) and its response buffer.
const RESPONSE: u64 = 128;
const VALUE: u64 = 256;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Place {
    Split,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wait {
    Yield,
    Spin,
}

fn run(threads: usize, size: usize, place: Place, wait: Wait, for_: Duration) -> f64 {
    let allowed = CpuList::allowed().expect("this system names the allowed CPUs");
    let cpus = allowed.cpus().to_vec();
    let (server_cpu, client_cpus) = match (place, cpus.len()) {
        (Place::Split, n) if n >= 2 => (Some(cpus[n - 1]), CpuList::from_cpus(cpus[..n - 1].to_vec())),
        _ => (None, None),
    };
    let stride = (VALUE + size as u64).next_multiple_of(128);
    let shared = Arc::new(Mapping::anonymous(threads * stride as usize).expect("map the shared buffers"));
    fn line(m: &Mapping, stride: u64, i: usize, at: u64) -> &std::sync::atomic::AtomicU64 {
        m.atomic_u64(i as u64 * stride + at).expect("an aligned line")
    }
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            if let Some(c) = server_cpu {
                CpuList::from_cpus(vec![c]).unwrap().pin_current_thread().expect("pin the server thread");
            }
            let source = vec![7u8; size];
            let mut served = vec![0u64; threads];
            while !stop.load(Ordering::Relaxed) {
                for (i, s) in served.iter_mut().enumerate() {
                    let r = line(&shared, stride, i, 0).load(Ordering::Acquire);
                    if r != *s {
                        // The one-sided WRITE of the entry into the client's buffer.
                        shared.write(i as u64 * stride + VALUE, &source).expect("inside the mapping");
                        line(&shared, stride, i, RESPONSE).store(r, Ordering::Release);
                        *s = r;
                    }
                }
                std::hint::spin_loop();
            }
        })
    };
    let start = Instant::now();
    let deadline = start + for_;
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (shared, client_cpus) = (shared.clone(), client_cpus.clone());
            std::thread::spawn(move || {
                if let Some(l) = client_cpus {
                    l.pin_current_thread().expect("pin a client thread");
                }
                let (request, response) = (line(&shared, stride, i, 0), line(&shared, stride, i, RESPONSE));
                let mut out = vec![0u8; size];
                let mut n = 0u64;
                loop {
                    n += 1;
                    request.store(n, Ordering::Release);
                    while response.load(Ordering::Acquire) != n {
                        match wait {
                            Wait::Yield => std::thread::yield_now(),
                            Wait::Spin => std::hint::spin_loop(),
                        }
                    }
                    // The caller's copy of the value.
                    shared.read(i as u64 * stride + VALUE, &mut out).expect("inside the mapping");
                    std::hint::black_box(&out);
                    if n % 64 == 0 && Instant::now() >= deadline {
                        return n;
                    }
                }
            })
        })
        .collect();
    let ops: u64 = handles.into_iter().map(|h| h.join().expect("a client thread")).sum();
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    server.join().expect("the server thread");
    ops as f64 / took.as_secs_f64()
}

fn main() {
    let mut threads = vec![1usize, 2, 4, 8, 16];
    let (mut seconds, mut repeats, mut size) = (2.0f64, 3usize, 2048usize);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    let usage = "usage: shm_floor [--threads LIST] [--seconds S] [--repeats N] [--size BYTES]";
    let fail = |why: String| -> ! {
        eprintln!("shm_floor: {why}\n{usage}");
        std::process::exit(2)
    };
    while let Some(a) = it.next() {
        let v = it.next().unwrap_or_else(|| fail(format!("{a} needs a value")));
        let bad = || -> ! { fail(format!("{a}: {v:?} is not a number")) };
        match a.as_str() {
            "--threads" => threads = v.split(',').map(|t| t.parse().unwrap_or_else(|_| bad())).collect(),
            "--seconds" => seconds = v.parse().unwrap_or_else(|_| bad()),
            "--repeats" => repeats = v.parse().unwrap_or_else(|_| bad()),
            "--size" => size = v.parse().unwrap_or_else(|_| bad()),
            _ => fail(format!("unknown argument {a}")),
        }
    }
    if threads.is_empty() || threads.contains(&0) || repeats == 0 || !seconds.is_finite() || seconds <= 0.0 {
        fail("threads, repeats and seconds must be positive".into());
    }
    let combos = [
        (Place::Split, Wait::Yield),
        (Place::Split, Wait::Spin),
        (Place::None, Wait::Yield),
        (Place::None, Wait::Spin),
    ];
    println!("threads,place,wait,median_ops_per_s,min,max");
    for &t in &threads {
        let mut got: Vec<Vec<f64>> = vec![Vec::new(); combos.len()];
        for _ in 0..repeats {
            for (k, &(p, w)) in combos.iter().enumerate() {
                got[k].push(run(t, size, p, w, Duration::from_secs_f64(seconds)));
            }
        }
        for (k, &(p, w)) in combos.iter().enumerate() {
            let mut v = got[k].clone();
            v.sort_by(f64::total_cmp);
            println!("{t},{p:?},{w:?},{:.0},{:.0},{:.0}", v[v.len() / 2], v[0], v[v.len() - 1]);
        }
    }
}
