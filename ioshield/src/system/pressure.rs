//! The kernel's pressure stall information (PSI) for I/O: how long tasks of a cgroup waited on
//! I/O, which tells whether the processes a restriction is meant to protect are hurt by it.
use std::{collections::HashMap, path::Path, path::PathBuf};

/// Microseconds in which at least one task of the cgroup at `dir` waited on I/O since it was
/// made (the "some" line's `total` of its `io.pressure`); `None` when the kernel does not keep
/// it (no PSI, or the cgroup is gone).
pub fn io_some_total(dir: &Path) -> Option<u64> {
    parse_some_total(&std::fs::read_to_string(dir.join("io.pressure")).ok()?)
}

/// The "some" totals of the cgroups `dirs`, of those that have one.
pub fn io_some_totals(dirs: &[PathBuf]) -> HashMap<PathBuf, u64> {
    dirs.iter()
        .filter_map(|d| Some((d.clone(), io_some_total(d)?)))
        .collect()
}

fn parse_some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_some_total_is_read_from_the_kernels_format() {
        let text = "some avg10=0.00 avg60=0.12 avg300=0.03 total=2264123\n\
                    full avg10=0.00 avg60=0.10 avg300=0.02 total=2000000\n";
        assert_eq!(parse_some_total(text), Some(2_264_123));
        assert_eq!(parse_some_total("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_some_total("some avg10=0.00 total=x\n"), None);
    }

    #[test]
    fn a_cgroup_without_the_file_has_no_total() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(io_some_total(dir.path()), None);
        std::fs::write(
            dir.path().join("io.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n",
        )
        .unwrap();
        assert_eq!(io_some_total(dir.path()), Some(42));
        assert_eq!(io_some_totals(&[dir.path().to_path_buf()]).len(), 1);
    }
}
