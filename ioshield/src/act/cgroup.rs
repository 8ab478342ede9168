//! cgroup v2 through cgroupfs, for hosts where no systemd owns the tree (containers, embedded,
//! the test bed). On a systemd host this backend refuses: systemd's cgroups are its own.
use std::{
    io,
    path::{Path, PathBuf},
};

use crate::system::{cgroups, devices::DevId, host};

/// Name of the cgroup ioshield creates under the root to hold restricted offenders.
pub const PARENT: &str = "ioshield";

/// A cgroup v2 hierarchy mounted at `root`. Paths given to its methods are relative to the root
/// and written as /proc/PID/cgroup shows them (`/ioshield/r1-42`).
#[derive(Clone, Debug)]
pub struct Cgroupfs {
    pub root: PathBuf,
}

impl Cgroupfs {
    /// Finds a usable cgroup v2 hierarchy, or says why there is none.
    pub fn detect() -> Result<Cgroupfs, String> {
        if host::systemd_booted() {
            return Err(
                "systemd manages the cgroup tree on this host and ioshield does not \
                        write systemd's cgroups"
                    .into(),
            );
        }
        let root = cgroups::v2_mount().ok_or("no cgroup v2 hierarchy is mounted")?;
        if !cgroups::controllers(&root).iter().any(|c| c == "io") {
            return Err(format!(
                "the cgroup v2 hierarchy at {} has no io controller (it is bound to cgroup v1 \
                 here)",
                root.display()
            ));
        }
        Ok(Cgroupfs { root })
    }

    pub fn abs(&self, rel: &Path) -> PathBuf {
        self.root.join(rel.strip_prefix("/").unwrap_or(rel))
    }

    pub fn exists(&self, rel: &Path) -> bool {
        self.abs(rel).is_dir()
    }

    pub fn controller_enabled(&self, rel: &Path, controller: &str) -> bool {
        cgroups::subtree_controllers(&self.abs(rel))
            .iter()
            .any(|c| c == controller)
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
        cgroups::procs(&self.abs(rel))
    }

    pub fn move_process(&self, pid: u32, to: &Path) -> io::Result<()> {
        write(&self.abs(to).join("cgroup.procs"), &pid.to_string())
    }

    pub fn write_file(&self, rel: &Path, file: &str, value: &str) -> io::Result<()> {
        write(&self.abs(rel).join(file), value)
    }

    /// Whether iocost is on for `dev`, and whose it is.
    pub fn iocost(&self, dev: DevId) -> super::iocost::State {
        super::iocost::state(&self.root, dev)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Cgroupfs {
            root: dir.path().to_path_buf(),
        };
        let cg = Path::new("/ioshield/r1-42");
        assert_eq!(fs.abs(cg), dir.path().join("ioshield/r1-42"));
        std::fs::create_dir(dir.path().join("ioshield")).unwrap();
        fs.create(cg).unwrap();
        assert!(fs.exists(cg));
        fs.write_file(cg, "io.max", "254:16 wbps=1000").unwrap();
        assert_eq!(
            std::fs::read_to_string(fs.abs(cg).join("io.max")).unwrap(),
            "254:16 wbps=1000"
        );
        std::fs::write(
            fs.abs(Path::new("/ioshield"))
                .join("cgroup.subtree_control"),
            "io",
        )
        .unwrap();
        assert!(fs.controller_enabled(Path::new("/ioshield"), "io"));
        assert!(!fs.controller_enabled(Path::new("/ioshield"), "memory"));
        assert_eq!(
            fs.nearest_existing(Path::new("/ioshield/gone/deeper")),
            PathBuf::from("/ioshield")
        );
        assert_eq!(
            fs.nearest_existing(Path::new("/nowhere")),
            PathBuf::from("/")
        );
        // A written error names the file and the value.
        let e = fs
            .write_file(Path::new("/absent"), "io.max", "x")
            .unwrap_err();
        assert!(e.to_string().contains("io.max") && e.to_string().contains("`x`"));
    }
}
