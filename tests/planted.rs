//! The planted-bug controls: with each known durability bug planted, the crash checker
//! must report a violation within 1,000 crashes. Run with `--features planted-bugs`
//! (ci/check-crash.sh does).
#![cfg(feature = "planted-bugs")]

use boomkv::crashtest::{self, CrashTestOptions};
use boomkv::log::planted::{self, Plant};
use boomkv::transport::{Backend, ShmTransport};
use boomkv::wire::Protocol;

#[test]
fn every_planted_bug_is_caught_within_1000_crashes() {
    let t = ShmTransport::new().unwrap();
    let plants = [
        (Plant::SkipWriteback, Protocol::Boom),
        (Plant::CountFirst, Protocol::Boom),
        (Plant::LateLease, Protocol::Boom),
        (Plant::CcSkipFlush, Protocol::RdmpCc),
        (Plant::HerdEarlyReply, Protocol::Herd),
        (Plant::RfpEarlyResult, Protocol::Rfp),
        (Plant::PdpmEarlyCommit, Protocol::PdpmDirect),
        (Plant::CloverSkipFlush, Protocol::Clover),
    ];
    for (plant, protocol) in plants {
        planted::set(plant);
        let o = CrashTestOptions { iterations: 1000, seed: 7, stop_on_failure: true, protocol, ..Default::default() };
        let r = crashtest::run(&t, Backend::Shm, &o, |_, _| {}).unwrap();
        planted::set(Plant::None);
        assert!(r.lost + r.corrupted > 0, "{plant:?} was not caught in {} crashes", r.crashes);
        eprintln!("{plant:?}: caught after {} crashes: {:?}", r.crashes, r.failures[0].violations[0]);
    }
}
