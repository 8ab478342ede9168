//! Facts about the host: whether systemd is PID 1 (then it owns the cgroup tree), which boot
//! this is.
use std::path::Path;

/// systemd's own test (`sd_booted()`): the directory exists only when systemd is the init system.
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").exists()
}

/// This boot's random id (empty if the kernel does not say).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
