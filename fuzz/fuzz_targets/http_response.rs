#![no_main]
//! Response heads: never panic; framing decisions never panic.
use libfuzzer_sys::fuzz_target;
use splicer_wire::http::{Limits, Method, ResponseHead};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_head: 4096, max_headers: 32 };
    if let Ok(Some((h, _))) = ResponseHead::parse(data, &limits) {
        let _ = h.body(&Method::Get);
        let _ = h.body(&Method::Head);
        let _ = h.keep_alive();
    }
});
