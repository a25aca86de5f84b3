#![no_main]
//! Chunked framing: walk a whole body the way the relay does; never panic, never loop.
use libfuzzer_sys::fuzz_target;
use splicer_wire::chunked::{parse_data_end, parse_size_line, parse_trailer_line};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    loop {
        let Ok(Some((size, n))) = parse_size_line(rest, 256) else { return };
        rest = &rest[n..];
        if size == 0 {
            while let Ok(Some((last, n))) = parse_trailer_line(rest, 256) {
                rest = &rest[n..];
                if last {
                    return;
                }
            }
            return;
        }
        let Ok(size) = usize::try_from(size) else { return };
        if rest.len() < size {
            return;
        }
        rest = &rest[size..];
        let Ok(Some(((), n))) = parse_data_end(rest) else { return };
        rest = &rest[n..];
    }
});
