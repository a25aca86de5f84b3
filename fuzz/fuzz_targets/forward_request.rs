#![no_main]
//! Differential: a request Splicer accepts must reach the origin as exactly one request with
//! the same method, target and body, by an independent strict parser (`differential.rs`).
use libfuzzer_sys::fuzz_target;

#[path = "differential.rs"]
mod differential;

fuzz_target!(|data: &[u8]| differential::check_request(data));
