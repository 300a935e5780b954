//! Every wire decoder on arbitrary bytes: no panic, no out-of-bounds access, no
//! allocation driven by a length field beyond the limits.
#![no_main]

use boomkv::wire::{Hello, Msg, Welcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((m, req)) = Msg::decode(data) {
        // What decodes re-encodes to the same bytes.
        assert_eq!(m.encode(req), data);
    }
    let _ = Hello::decode(data);
    let _ = Welcome::decode(data);
});
