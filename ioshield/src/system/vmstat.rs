//! Global dirty and writeback memory against the kernel's thresholds, from /proc/vmstat.
use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct DirtyState {
    pub dirty_bytes: u64,
    pub writeback_bytes: u64,
    pub background_threshold_bytes: u64,
    pub dirty_threshold_bytes: u64,
}

pub fn dirty_state() -> DirtyState {
    let text = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    parse(&text, page_size())
}

/// How long the kernel may leave a dirty page unwritten while the dirty memory stays under the
/// background threshold: its age limit (`dirty_expire_centisecs`, 30 s by default) and the
/// flusher's period (`dirty_writeback_centisecs`, 5 s). Defaults where the files cannot be read.
pub fn writeback_delay() -> std::time::Duration {
    let centisecs = |name: &str, default: u64| {
        std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(default)
    };
    std::time::Duration::from_millis(
        10 * (centisecs("dirty_expire_centisecs", 3000)
            + centisecs("dirty_writeback_centisecs", 500)),
    )
}

pub fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map(|v| v as u64)
        .unwrap_or(4096)
}

fn parse(text: &str, page: u64) -> DirtyState {
    let mut s = DirtyState::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let Ok(pages) = value.trim().parse::<u64>() else {
            continue;
        };
        let slot = match key {
            "nr_dirty" => &mut s.dirty_bytes,
            "nr_writeback" => &mut s.writeback_bytes,
            "nr_dirty_background_threshold" => &mut s.background_threshold_bytes,
            "nr_dirty_threshold" => &mut s.dirty_threshold_bytes,
            _ => continue,
        };
        *slot = pages * page;
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn converts_pages_to_bytes() {
        let s = super::parse(
            "nr_dirty 10\nnr_writeback 2\nnr_dirty_threshold 400\nnr_dirty_background_threshold 200\n",
            4096,
        );
        assert_eq!(s.dirty_bytes, 40960);
        assert_eq!(s.writeback_bytes, 8192);
        assert_eq!(s.dirty_threshold_bytes, 400 * 4096);
        assert_eq!(s.background_threshold_bytes, 200 * 4096);
    }
}
