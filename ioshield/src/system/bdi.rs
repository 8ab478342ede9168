//! Per-device (BDI) knobs of the kernel's dirty-page accounting, `/sys/class/bdi/M:m/`.
use std::path::{Path, PathBuf};

use super::devices::DevId;

/// Where the kernel shows each BDI's knobs.
pub const SYSFS: &str = "/sys/class/bdi";

/// Whether the kernel offers per-BDI byte limits (`max_bytes`, `strict_limit`: 6.2 and later).
pub fn has_byte_limits(dev: DevId) -> bool {
    knobs_dir(Path::new(SYSFS), dev).join("max_bytes").exists()
}

pub fn knobs_dir(root: &Path, dev: DevId) -> PathBuf {
    root.join(dev.to_string())
}

/// The knobs a backlog guard changes, as exact values: `max_bytes` reads back as a share of the
/// global dirty threshold that moves with free memory, `max_ratio_fine` (millionths) does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirtyLimits {
    pub strict_limit: bool,
    pub max_ratio_fine: u64,
}

/// A BDI's limits under `root` (normally [`SYSFS`]); `None` where it has no byte limits (before
/// 6.2) or is gone.
pub fn dirty_limits(root: &Path, dev: DevId) -> Option<DirtyLimits> {
    let dir = knobs_dir(root, dev);
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    dir.join("max_bytes").exists().then_some(())?;
    Some(DirtyLimits {
        strict_limit: read("strict_limit")? != 0,
        max_ratio_fine: read("max_ratio_fine")?,
    })
}
