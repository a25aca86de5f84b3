#![no_main]
//! RFC 1929 parser: never panics; round-trips.
use libfuzzer_sys::fuzz_target;
use splicer_wire::socks5::UserPass;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((u, n))) = UserPass::parse(data) {
        let mut out = Vec::new();
        u.encode(&mut out);
        assert_eq!(out, &data[..n]);
    }
});
