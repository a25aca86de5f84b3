#![no_main]
//! Greeting parser: never panics; whatever parses re-encodes to the bytes it consumed.
use libfuzzer_sys::fuzz_target;
use splicer_wire::socks5::Greeting;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((g, n))) = Greeting::parse(data) {
        let mut out = Vec::new();
        g.encode(&mut out);
        assert_eq!(out, &data[..n]);
    }
});
