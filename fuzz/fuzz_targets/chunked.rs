#![no_main]
//! Chunked framing: walk a whole body through the reframer the way the relay does; never
//! panic, never loop, never ask for data past what it was given.
use libfuzzer_sys::fuzz_target;
use splicer_wire::chunked::{Reframer, Step};
use splicer_wire::http::Limits;

fuzz_target!(|data: &[u8]| {
    let mut r = Reframer::new(256, Limits::default());
    let mut out = Vec::new();
    let mut rest = data;
    loop {
        let Ok((n, step)) = r.advance(rest, &mut out) else {
            return;
        };
        rest = &rest[n..];
        match step {
            Step::More | Step::Done => return,
            Step::Data(k) => {
                let Ok(k) = usize::try_from(k) else { return };
                if rest.len() < k {
                    return;
                }
                rest = &rest[k..];
            }
        }
    }
});
