//! What the eBPF tests share.

/// Whether the tests run as root; says why they skip otherwise (and fails under CI).
pub fn root() -> bool {
    splicer_testkit::require_root("to load eBPF programs")
}
