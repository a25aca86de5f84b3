#![no_main]
//! Request and reply parsers: never panic; a parsed request re-encodes to its bytes.
use libfuzzer_sys::fuzz_target;
use splicer_wire::socks5::{Reply, Request};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((r, n))) = Request::parse(data) {
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(out, &data[..n]);
    }
    let _ = Reply::parse(data);
});
