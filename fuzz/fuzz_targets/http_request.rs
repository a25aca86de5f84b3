#![no_main]
//! Request heads: never panic under tight limits; a parsed head's framing and target
//! helpers never panic either, and its encoding parses back to the same head.
use libfuzzer_sys::fuzz_target;
use splicer_wire::http::{split_absolute, Authority, Limits, RequestHead};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_head: 4096, max_headers: 32 };
    if let Ok(Some((h, _))) = RequestHead::parse(data, &limits) {
        let _ = h.body();
        let _ = h.keep_alive();
        let _ = split_absolute(&h.target);
        let _ = Authority::parse(&h.target, None);
        let mut out = Vec::new();
        h.encode(&mut out);
        let big = Limits { max_head: 1 << 20, max_headers: 32 };
        if let Ok(Some((back, _))) = RequestHead::parse(&out, &big) {
            assert_eq!(back, h);
        }
        let mut stripped = h.headers.clone();
        stripped.remove_hop_by_hop();
    }
});
