#![no_main]
//! A disk-cache entry's metadata, as read back at start from files that may be damaged:
//! never panic; whatever is accepted encodes back to the same bytes. The checksum is
//! fixed up first, so that the fuzzer reaches the parser behind it.
use libfuzzer_sys::fuzz_target;
use splicer_cache::disk::entry;

fuzz_target!(|data: &[u8]| {
    let mut d = data.to_vec();
    if d.len() >= entry::PREAMBLE {
        let len = u32::from_le_bytes([d[12], d[13], d[14], d[15]]) as usize;
        let end = (entry::PREAMBLE + len).min(d.len());
        let crc = crc32fast::hash(&d[entry::PREAMBLE..end]);
        d[24..28].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok((meta, body_len)) = entry::decode(&d) {
        let again = entry::encode(&meta, body_len);
        assert_eq!(entry::decode(&again), Ok((meta, body_len)));
    }
});
