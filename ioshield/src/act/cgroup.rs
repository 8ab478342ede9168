//! cgroup v2 through cgroupfs, for hosts where no systemd owns the tree (containers, embedded,
//! the test bed). On a systemd host this backend refuses: systemd's cgroups are its own.
use std::{
    io,
    path::{Path, PathBuf},
};

use crate::system::devices::DevId;

/// Name of the cgroup ioshield creates under the root to hold restricted offenders.
pub const PARENT: &str = "ioshield";

#[derive(Clone, Debug)]
pub struct Cgroupfs {
    pub root: PathBuf,
}

impl Cgroupfs {
    /// Finds a usable cgroup v2 hierarchy, or says why there is none.
    pub fn detect() -> Result<Cgroupfs, String> {
        if Path::new("/run/systemd/system").exists() {
            return Err(
                "systemd manages the cgroup tree on this host and ioshield does not \
                        write systemd's cgroups"
                    .into(),
            );
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let root = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
            })
            .next()
            .ok_or("no cgroup v2 hierarchy is mounted")?;
        let controllers =
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "io") {
            return Err(format!(
                "the cgroup v2 hierarchy at {} has no io controller (it is bound to cgroup v1 \
                 here)",
                root.display()
            ));
        }
        Ok(Cgroupfs { root })
    }

    /// A process's cgroup, as the path below the root (`/` for the root itself).
    pub fn cgroup_of(pid: u32) -> Option<PathBuf> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(PathBuf::from)
    }

    pub fn abs(&self, rel: &Path) -> PathBuf {
        self.root.join(rel.strip_prefix("/").unwrap_or(rel))
    }

    pub fn exists(&self, rel: &Path) -> bool {
        self.abs(rel).is_dir()
    }

    pub fn controller_enabled(&self, rel: &Path, controller: &str) -> bool {
        std::fs::read_to_string(self.abs(rel).join("cgroup.subtree_control"))
            .map(|s| s.split_whitespace().any(|c| c == controller))
            .unwrap_or(false)
    }

    pub fn set_controller(&self, rel: &Path, controller: &str, on: bool) -> io::Result<()> {
        let sign = if on { '+' } else { '-' };
        write(
            &self.abs(rel).join("cgroup.subtree_control"),
            &format!("{sign}{controller}"),
        )
    }

    pub fn create(&self, rel: &Path) -> io::Result<()> {
        std::fs::create_dir(self.abs(rel))
    }

    pub fn remove(&self, rel: &Path) -> io::Result<()> {
        match std::fs::remove_dir(self.abs(rel)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    pub fn procs(&self, rel: &Path) -> Vec<u32> {
        std::fs::read_to_string(self.abs(rel).join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    pub fn move_process(&self, pid: u32, to: &Path) -> io::Result<()> {
        write(&self.abs(to).join("cgroup.procs"), &pid.to_string())
    }

    pub fn write_file(&self, rel: &Path, file: &str, value: &str) -> io::Result<()> {
        write(&self.abs(rel).join(file), value)
    }

    /// True when iocost is on for `dev` (root `io.cost.qos` says `enable=1`): then `io.weight`
    /// works for it; otherwise only `io.max` limits writeback.
    pub fn iocost_enabled(&self, dev: DevId) -> bool {
        let qos = std::fs::read_to_string(self.root.join("io.cost.qos")).unwrap_or_default();
        let prefix = format!("{dev} ");
        qos.lines()
            .any(|l| l.starts_with(&prefix) && l.contains("enable=1"))
    }

    /// The nearest existing cgroup at or above `rel` (a process's old cgroup may be gone).
    pub fn nearest_existing(&self, rel: &Path) -> PathBuf {
        let mut p = rel.to_path_buf();
        while !self.exists(&p) {
            if !p.pop() {
                return PathBuf::from("/");
            }
        }
        p
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing `{value}` to {}: {e}", path.display()),
        )
    })
}
