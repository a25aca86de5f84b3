#![no_main]
//! Differential: a response Splicer accepts must reach the client as exactly one response
//! with the same status and body, by an independent strict parser (`differential.rs`).
use libfuzzer_sys::fuzz_target;

#[path = "differential.rs"]
mod differential;

fuzz_target!(|data: &[u8]| differential::check_response(data));
