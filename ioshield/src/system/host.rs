//! Who manages this host: whether systemd is PID 1 (then it owns the cgroup tree).
use std::path::Path;

/// systemd's own test (`sd_booted()`): the directory exists only when systemd is the init system.
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").exists()
}
