//! Read-only facts about the running kernel: where its tracepoints are, their record layouts, and
//! struct offsets from its BTF. Nothing here changes the system except mounting tracefs if absent.
pub mod btf;
pub mod privileges;
pub mod tracefs;

/// Names a test can hide to exercise the paths taken on kernels that lack them. Set through the
/// undocumented `IOSHIELD_TEST_HIDE` variable, e.g. `tracepoint:writeback_dirty_folio,btf`.
pub fn hidden(feature: &str) -> bool {
    std::env::var("IOSHIELD_TEST_HIDE")
        .map(|v| v.split(',').any(|f| f.trim() == feature))
        .unwrap_or(false)
}

/// A smaller counter map for tests that fill it (`IOSHIELD_TEST_COUNTER_ENTRIES`, undocumented).
pub fn test_counter_entries() -> Option<u32> {
    std::env::var("IOSHIELD_TEST_COUNTER_ENTRIES")
        .ok()?
        .parse()
        .ok()
}

/// A smaller lifecycle ring buffer for tests of lost events (`IOSHIELD_TEST_LIFECYCLE_BYTES`,
/// undocumented; a power of two, at least a page).
pub fn test_lifecycle_bytes() -> Option<u32> {
    std::env::var("IOSHIELD_TEST_LIFECYCLE_BYTES")
        .ok()?
        .parse()
        .ok()
}
