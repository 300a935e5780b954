//! The crash promise, checked by simulated power failures (a short run of what
//! `boomctl crashtest` does), for every protocol.

use boomkv::crashtest::{self, CrashTestOptions};
use boomkv::transport::{Backend, ShmTransport};
use boomkv::wire::Protocol;

#[test]
fn simulated_power_failures_lose_nothing_acknowledged() {
    let t = ShmTransport::new().unwrap();
    for (i, p) in Protocol::ALL.into_iter().enumerate() {
        let o = CrashTestOptions { iterations: 12, seed: 1000 + 100 * i as u64, protocol: p, ..Default::default() };
        let r = crashtest::run(&t, Backend::Shm, &o, |_, _| {}).unwrap();
        assert_eq!(r.crashes, 12);
        assert!(r.acked_checked > 100, "{p}: the workload must acknowledge writes ({})", r.acked_checked);
        assert_eq!((r.lost, r.corrupted), (0, 0), "{p}: {:#?}", r.failures);
    }
}
