//! Per-device (BDI) knobs of the kernel's dirty-page accounting, `/sys/class/bdi/M:m/`.
use super::devices::DevId;

/// Whether the kernel offers per-BDI byte limits (`max_bytes`, `strict_limit`: 6.2 and later).
pub fn has_byte_limits(dev: DevId) -> bool {
    std::path::Path::new(&format!("/sys/class/bdi/{dev}/max_bytes")).exists()
}
