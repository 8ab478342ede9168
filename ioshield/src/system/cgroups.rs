//! cgroup v2 as the kernel shows it: where the hierarchy is mounted, which cgroup a process is in,
//! and the read-only files of a cgroup. Changes go through `act::cgroup`.
use std::path::{Path, PathBuf};

use super::devices::DevId;

/// The mount point of the cgroup v2 hierarchy, if one is mounted.
pub fn v2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
    })
}

/// Controllers available in the cgroup at `dir` (an absolute path in cgroupfs).
pub fn controllers(dir: &Path) -> Vec<String> {
    read_words(&dir.join("cgroup.controllers"))
}

/// Controllers enabled for the children of the cgroup at `dir`.
pub fn subtree_controllers(dir: &Path) -> Vec<String> {
    read_words(&dir.join("cgroup.subtree_control"))
}

/// Processes directly in the cgroup at `dir`.
pub fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The controllers a running user manager (`user@UID.service`) got delegated, from the first
/// one found; `None` when no user manager runs.
pub fn user_manager_controllers() -> Option<Vec<String>> {
    let slices = v2_mount()?.join("user.slice");
    for slice in std::fs::read_dir(slices).ok()?.flatten() {
        let Ok(units) = std::fs::read_dir(slice.path()) else {
            continue;
        };
        for unit in units.flatten() {
            if unit.file_name().to_string_lossy().starts_with("user@") {
                return Some(controllers(&unit.path()));
            }
        }
    }
    None
}

/// Processes in the cgroup at `dir` and every cgroup below it.
pub fn procs_below(dir: &Path) -> Vec<u32> {
    let mut out = procs(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(procs_below(&e.path()));
            }
        }
    }
    out
}

/// The page cache charged to the cgroup at `dir` (and those below it) that is dirty or under
/// writeback, in bytes, from its `memory.stat`: what its writers left for the disks to write.
/// `None` without the memory controller there.
pub fn backlog(dir: &Path) -> Option<u64> {
    parse_backlog(&std::fs::read_to_string(dir.join("memory.stat")).ok()?)
}

/// What a cgroup (and those below it) holds in memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUse {
    /// `memory.current`: everything charged to it.
    pub current: u64,
    /// Its page cache (`file` in `memory.stat`).
    pub file: u64,
    /// The part of that page cache dirty or under writeback.
    pub backlog: u64,
    /// `memory.high` (`u64::MAX` for "max").
    pub high: u64,
}

impl MemoryUse {
    /// What it holds besides page cache: its processes' anonymous memory, the kernel's for
    /// them (inodes, dentries, page tables), shared memory.
    pub fn beside_cache(&self) -> u64 {
        self.current.saturating_sub(self.file)
    }
}

/// What the cgroup at `dir` holds in memory; `None` without the memory controller there.
pub fn memory_use(dir: &Path) -> Option<MemoryUse> {
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
    parse_memory_use(
        &read("memory.current")?,
        &read("memory.stat")?,
        &read("memory.high")?,
    )
}

fn parse_memory_use(current: &str, stat: &str, high: &str) -> Option<MemoryUse> {
    let file = stat.lines().find_map(|l| {
        l.strip_prefix("file ")
            .and_then(|v| v.trim().parse::<u64>().ok())
    })?;
    let high = match high.trim() {
        "max" => u64::MAX,
        v => v.parse().ok()?,
    };
    Some(MemoryUse {
        current: current.trim().parse().ok()?,
        file,
        backlog: parse_backlog(stat)?,
        high,
    })
}

/// A cgroup's `memory.stat`, kept open and read again for what the read does: the kernel brings
/// that cgroup's counters up to date before it shows them, among them the dirty and writeback
/// page counts its dirty throttling goes by. Kept open because the daemon reads it every few
/// milliseconds: in the emulated bench guest a read at offset 0 of the open file took 200-250 us
/// of CPU, opening, reading and closing it 650-700 us (docs/bench/dirty-counts.md).
#[derive(Debug)]
pub struct MemoryCounts {
    file: std::fs::File,
    dir: PathBuf,
}

impl MemoryCounts {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: std::fs::File::open(dir.join("memory.stat"))?,
            dir: dir.to_path_buf(),
        })
    }

    /// The cgroup whose counters this refreshes.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Has the kernel refresh the counters; an error once the cgroup is gone. Each read at
    /// offset 0 has the kernel show the file anew, so `buf` need not hold all of it.
    pub fn refresh(&self, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_at(buf, 0).map(drop)
    }
}

fn parse_backlog(stat: &str) -> Option<u64> {
    let mut found = None;
    for line in stat.lines() {
        if let Some(("file_dirty" | "file_writeback", v)) = line.split_once(' ') {
            *found.get_or_insert(0) += v.trim().parse::<u64>().ok()?;
        }
    }
    found
}

/// A disk's lines in the root cgroup's `io.cost.model` and `io.cost.qos`, without the device
/// number; a line is `None` until the kernel has set iocost up for the disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IocostLines {
    pub model: Option<String>,
    pub qos: Option<String>,
}

impl IocostLines {
    /// Whether iocost is on for the disk: then `io.weight` works for it; otherwise only
    /// `io.max` limits writeback.
    pub fn enabled(&self) -> bool {
        self.qos
            .as_deref()
            .is_some_and(|q| q.split_whitespace().any(|w| w == "enable=1"))
    }
}

/// `dev`'s iocost settings in the hierarchy mounted at `root`; `None` when the kernel has no
/// iocost (no `io.cost.qos` in the root cgroup).
pub fn iocost_lines(root: &Path, dev: DevId) -> Option<IocostLines> {
    let prefix = format!("{dev} ");
    let line = |file: &str| -> Option<Option<String>> {
        let text = std::fs::read_to_string(root.join(file)).ok()?;
        Some(
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map(|l| l.trim().to_string()),
        )
    };
    Some(IocostLines {
        qos: line("io.cost.qos")?,
        model: line("io.cost.model")?,
    })
}

/// A process's cgroup, as the path below the hierarchy's root (`/` for the root itself).
pub fn of_process(pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    parse_proc_cgroup(&text)
}

/// Whether user `uid`'s own systemd runs: its unit's cgroup exists (the user is logged in, or
/// lingers).
pub fn user_manager_running(uid: u32) -> bool {
    v2_mount().is_some_and(|root| {
        root.join(format!("user.slice/user-{uid}.slice/user@{uid}.service"))
            .is_dir()
    })
}

/// The user whose own systemd manages the cgroup (`.../user@UID.service/...`), if any.
pub fn user_manager_of(cgroup: &Path) -> Option<u32> {
    cgroup.components().find_map(|c| {
        c.as_os_str()
            .to_str()?
            .strip_prefix("user@")?
            .strip_suffix(".service")?
            .parse()
            .ok()
    })
}

/// Whether a cgroup path component is named like a systemd unit that holds processes or units.
pub fn is_unit_name(component: &str) -> bool {
    [".service", ".scope", ".slice"]
        .iter()
        .any(|s| component.ends_with(s))
}

/// The innermost service or scope a cgroup is in (`nightly-backup.service`, `session-3.scope`,
/// a user's `app-firefox@1.service`), what a person knows a process by on a systemd host.
pub fn innermost_unit(cgroup: &Path) -> Option<String> {
    cgroup
        .components()
        .rev()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| is_unit_name(c) && !c.ends_with(".slice"))
        .map(String::from)
}

fn parse_proc_cgroup(text: &str) -> Option<PathBuf> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(PathBuf::from)
}

/// The largest cgroups under `root` that hold none of the cgroups `held` (absolute paths): the
/// rest of the machine beside them, whose pressure tells what holding them costs everyone else.
/// A cgroup above a held one is not taken whole (its pressure counts the held writer's waits):
/// its other children are, a level further down.
pub fn apart_from(root: &Path, held: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect_apart(root, held, &mut out);
    out
}

fn collect_apart(dir: &Path, held: &[PathBuf], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for child in entries.flatten() {
        if !child.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let child = child.path();
        if held.contains(&child) {
            continue;
        }
        if held.iter().any(|h| h.starts_with(&child)) {
            collect_apart(&child, held, out);
        } else {
            out.push(child);
        }
    }
}

fn read_words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cgroups_apart_from_the_held_ones_are_the_largest_that_hold_none() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for d in [
            "system.slice/backup.service",
            "system.slice/db.service",
            "user.slice/user-1000.slice/session-2.scope",
            "init.scope",
            "ioshield/held-1",
            "ioshield/held-2",
        ] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("system.slice/io.pressure"), "").unwrap();
        let held = [
            r.join("system.slice/backup.service"),
            r.join("ioshield/held-1"),
        ];
        let mut apart = apart_from(r, &held);
        apart.sort();
        let want: Vec<PathBuf> = [
            "init.scope",
            "ioshield/held-2",
            "system.slice/db.service",
            "user.slice",
        ]
        .iter()
        .map(|d| r.join(d))
        .collect();
        assert_eq!(apart, want);
    }

    use super::*;

    #[test]
    fn a_user_managers_cgroups_name_the_user() {
        let of = |p: &str| user_manager_of(Path::new(p));
        assert_eq!(
            of("/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-x.scope"),
            Some(1000)
        );
        assert_eq!(of("/user.slice/user-1000.slice/session-2.scope"), None);
        assert_eq!(of("/system.slice/nightly-backup.service"), None);
        assert_eq!(
            of("/user.slice/user-1000.slice/user@x.service/a.scope"),
            None
        );
    }

    #[test]
    fn the_innermost_unit_is_what_a_person_knows() {
        let unit = |p: &str| innermost_unit(Path::new(p));
        assert_eq!(
            unit("/system.slice/nightly-backup.service").as_deref(),
            Some("nightly-backup.service")
        );
        assert_eq!(
            unit("/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope").as_deref(),
            Some("run-r1.scope")
        );
        assert_eq!(
            unit("/system.slice/docker-ab.scope/sub").as_deref(),
            Some("docker-ab.scope")
        );
        assert_eq!(unit("/user.slice"), None);
        assert_eq!(unit("/ioshield/r1"), None);
    }

    #[test]
    fn the_unified_line_names_the_cgroup() {
        let hybrid = "12:blkio:/user.slice\n0::/user.slice/session-2.scope\n";
        assert_eq!(
            parse_proc_cgroup(hybrid),
            Some(PathBuf::from("/user.slice/session-2.scope"))
        );
        assert_eq!(parse_proc_cgroup("12:blkio:/x\n"), None);
    }

    #[test]
    fn the_backlog_is_dirty_and_writeback_page_cache() {
        let stat = "anon 4096\nfile 900000\nfile_dirty 12288\nfile_writeback 4096\n\
                    shmem 0\nfile_mapped 0\n";
        assert_eq!(parse_backlog(stat), Some(16384));
        assert_eq!(parse_backlog("anon 1\nfile 2\n"), None);
        assert_eq!(parse_backlog("file_dirty x\n"), None);
    }

    #[test]
    fn memory_use_sets_page_cache_apart_from_the_rest() {
        let stat = "anon 300000000\nfile 8000000\nkernel 2000000\nfile_dirty 3000000\n\
                    file_writeback 1000000\n";
        let used = parse_memory_use("310000000\n", stat, "max\n").unwrap();
        assert_eq!(
            used,
            MemoryUse {
                current: 310_000_000,
                file: 8_000_000,
                backlog: 4_000_000,
                high: u64::MAX,
            }
        );
        assert_eq!(used.beside_cache(), 302_000_000);
        assert_eq!(
            parse_memory_use("10\n", stat, "8388608\n").map(|u| u.high),
            Some(8 << 20)
        );
        // A counter the kernel reads back larger than the total (they are flushed apart).
        assert_eq!(
            parse_memory_use("1000\n", stat, "max\n").map(|u| u.beside_cache()),
            Some(0)
        );
        assert_eq!(parse_memory_use("x\n", stat, "max\n"), None);
        assert_eq!(parse_memory_use("10\n", "anon 1\n", "max\n"), None);
    }

    #[test]
    fn reads_a_cgroup_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu io memory\n").unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "12\n34\n").unwrap();
        std::fs::write(
            dir.path().join("io.cost.qos"),
            "254:16 enable=1 ctrl=user\n8:0 enable=0 ctrl=auto\n",
        )
        .unwrap();
        assert_eq!(controllers(dir.path()), ["cpu", "io", "memory"]);
        assert!(subtree_controllers(dir.path()).is_empty());
        assert_eq!(procs(dir.path()), [12, 34]);
        let dev = |major, minor| DevId { major, minor };
        assert_eq!(
            iocost_lines(dir.path(), dev(254, 16)),
            None,
            "no io.cost.model"
        );
        std::fs::write(
            dir.path().join("io.cost.model"),
            "254:16 ctrl=auto model=linear rbps=1\n",
        )
        .unwrap();
        let vdb = iocost_lines(dir.path(), dev(254, 16)).unwrap();
        assert!(vdb.enabled());
        assert_eq!(vdb.qos.as_deref(), Some("enable=1 ctrl=user"));
        assert_eq!(vdb.model.as_deref(), Some("ctrl=auto model=linear rbps=1"));
        let sda = iocost_lines(dir.path(), dev(8, 0)).unwrap();
        assert!(!sda.enabled());
        assert_eq!(sda.model, None);
        // A disk the kernel has not set iocost up for has no line yet.
        assert_eq!(
            iocost_lines(dir.path(), dev(254, 1)).unwrap(),
            IocostLines::default()
        );
    }
}
