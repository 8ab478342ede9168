//! Facts about the host: whether systemd is PID 1 (then it owns the cgroup tree), which boot
//! this is.
use std::path::Path;

/// systemd's own test (`sd_booted()`): the directory exists only when systemd is the init system.
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").exists()
}

/// The running kernel's version, major and minor (`6.12` of `6.12.117+deb12-cloud-amd64`).
pub fn kernel_version() -> Option<(u32, u32)> {
    parse_kernel_version(&std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?)
}

fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// This boot's random id (empty if the kernel does not say).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_versions_as_distributions_name_them() {
        let v = super::parse_kernel_version;
        assert_eq!(v("6.12.117+deb12-cloud-amd64\n"), Some((6, 12)));
        assert_eq!(v("6.1.0-56-cloud-amd64"), Some((6, 1)));
        assert_eq!(v("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(v("6.8-rc1"), Some((6, 8)));
        assert_eq!(v("garbage"), None);
    }
}
