//! The on-media decoders and recovery on arbitrary pool images: no panic, and whatever
//! recovery accepts passes its checksum.
#![no_main]

use boomkv::log::format::{check_entry, entry_checksum, PoolHeader, SegmentHeader};
use boomkv::log::Pool;
use boomkv::pmem::{FlushKind, Media};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = PoolHeader::decode(data, data.len() as u64);
    let _ = SegmentHeader::decode(data);
    let _ = check_entry(data, 128, 1 << 16);
    // A pool image: a valid 64 KiB-segment header followed by the fuzzer's bytes.
    let size = 4096 + 2 * 65536;
    let mut img = vec![0u8; size];
    let h = PoolHeader::new(size as u64, 65536, [1; 16], 0).unwrap();
    img[..80].copy_from_slice(&h.encode());
    let n = data.len().min(size - 4096);
    img[4096..4096 + n].copy_from_slice(&data[..n]);
    if let Ok(media) = Media::simulated_from(&img, FlushKind::None) {
        if let Ok((pool, _)) = Pool::from_media(media, Default::default()) {
            pool.index().for_each(|l| {
                let e = pool.read_entry(l).unwrap();
                assert_eq!(entry_checksum(&e), u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
            });
        }
    }
});
