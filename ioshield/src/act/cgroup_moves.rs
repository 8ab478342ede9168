//! The cgroup action through cgroupfs (hosts without systemd): ioshield's own cgroup with the
//! limits, and the subtree moved into it, every step journaled first.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{
    Actuator, CgroupLimits, Method, SHARED, WriteControl, cgroup,
    cgroup::Cgroupfs,
    identity, memory_headroom,
    method::{NO_WRITE_LIMIT, OFFENDER_WEIGHT},
};
use crate::{journal::Change, system::cgroups};

impl Actuator {
    /// Makes the shared set-up (ioshield's parent cgroup, the controllers its restrictions need)
    /// before any restriction. Made at the first one it took 28-76 ms in the bench, while the
    /// offender went on dirtying pages charged to its old cgroup, which no limit reaches.
    pub fn prepare_cgroups(&mut self, memory: bool) -> Result<()> {
        let fs = self
            .cgroupfs
            .clone()
            .ok_or_else(|| anyhow::anyhow!("the cgroup action is not available on this host"))?;
        self.shared_setup(&fs, memory).map(|_| ())
    }

    /// ioshield's parent cgroup, with `io` (and `memory`) enabled down to it; recorded as the
    /// shared set-up, undone when the daemon stops.
    fn shared_setup(&mut self, fs: &Cgroupfs, memory: bool) -> Result<PathBuf> {
        let parent = PathBuf::from("/").join(cgroup::PARENT);
        let mut controllers = vec!["io"];
        if memory {
            controllers.push("memory");
        }
        if !fs.exists(&parent) {
            self.journal.record(Change::CgroupCreated {
                restriction: SHARED,
                path: parent.clone(),
            })?;
            fs.create(&parent)?;
        }
        for at in [PathBuf::from("/"), parent.clone()] {
            for c in &controllers {
                if !fs.controller_enabled(&at, c) {
                    self.journal.record(Change::ControllerEnabled {
                        path: at.clone(),
                        controller: c.to_string(),
                    })?;
                    fs.set_controller(&at, c, true)?;
                }
            }
        }
        Ok(parent)
    }

    pub(super) fn create_cgroup(
        &mut self,
        fs: &Cgroupfs,
        id: u64,
        root: u32,
        limits: &CgroupLimits,
    ) -> Result<PathBuf> {
        let parent = self.shared_setup(fs, limits.memory_high.is_some())?;
        self.stopwatch.lap("set-up");
        if let WriteControl::Weight { weight, .. } = limits.write {
            self.weigh_parent(fs, Some(weight))?;
        }
        let cg = parent.join(format!("r{id}-{root}"));
        self.journal.record(Change::CgroupCreated {
            restriction: id,
            path: cg.clone(),
        })?;
        fs.create(&cg)?;
        write_limits(fs, &cg, limits, Io::Unset)?;
        Ok(cg)
    }

    /// Gives ioshield's parent cgroup the highest weight of the restrictions held by one
    /// (`adding` one not yet among them): iocost weighs siblings against each other, and every
    /// restricted offender lives under this parent, so the parent's weight is what they get
    /// against everyone else. Its children share it by their own weights only while more than
    /// one of them writes.
    pub(super) fn weigh_parent(&self, fs: &Cgroupfs, adding: Option<u16>) -> Result<()> {
        let weight = self
            .active
            .values()
            .filter(|a| matches!(a.method, Method::Cgroup(_)))
            .filter_map(|a| a.method.weight())
            .chain(adding)
            .max()
            .unwrap_or(OFFENDER_WEIGHT);
        let parent = PathBuf::from("/").join(cgroup::PARENT);
        fs.write_file(&parent, "io.weight", &format!("default {weight}"))?;
        Ok(())
    }

    /// A new cgroup for restriction `id`, with `members` moved into it.
    pub(super) fn place_in_cgroup(
        &mut self,
        fs: &Cgroupfs,
        id: u64,
        root: u32,
        members: &[u32],
        limits: &CgroupLimits,
    ) -> Result<PathBuf> {
        let cg = self.create_cgroup(fs, id, root, limits)?;
        self.stopwatch.lap("cgroup");
        for &pid in members {
            self.move_into(fs, id, pid, &cg)?;
        }
        self.stopwatch.lap("move");
        Ok(cg)
    }

    pub(super) fn move_into(&mut self, fs: &Cgroupfs, id: u64, pid: u32, to: &Path) -> Result<()> {
        let (Some(process), Some(from)) = (identity::of_process(pid), cgroups::of_process(pid))
        else {
            return Ok(());
        };
        if from.starts_with(Path::new("/").join(cgroup::PARENT)) {
            return Ok(());
        }
        let change = Change::CgroupMove {
            restriction: id,
            process,
            from,
            to: to.to_path_buf(),
        };
        self.journal.record(change.clone())?;
        if let Err(e) = fs.move_process(pid, to) {
            tracing::debug!("moving {pid}: {e}");
            self.journal.forget(|c| *c == change)?;
        }
        Ok(())
    }
}

/// Whether a cgroup's `io.max` may hold a limit already.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Io {
    /// Made just now: no limit.
    Unset,
    /// Limited before, by a write limit that may have to be lifted.
    Set,
    /// Limited before by its weight or `memory.high` only: `io.max` is still "max", and
    /// writing it again is not free (the disk's first `io.max` write sets the kernel's
    /// throttling up, which on 6.12 waited 0.55-0.69 s for the disk's queue,
    /// tests/vm/qos-freeze.sh).
    Unlimited,
}

impl Io {
    /// How a held cgroup's `io.max` stands after `write`.
    pub(super) fn after(write: WriteControl) -> Io {
        match write {
            WriteControl::Limit(wbps) if wbps != NO_WRITE_LIMIT => Io::Set,
            _ => Io::Unlimited,
        }
    }
}

pub(super) fn write_limits(fs: &Cgroupfs, cg: &Path, limits: &CgroupLimits, io: Io) -> Result<()> {
    let wbps = match limits.write {
        WriteControl::Limit(wbps) => wbps,
        WriteControl::Weight { weight, .. } => {
            fs.write_file(cg, "io.weight", &format!("default {weight}"))?;
            // Moving from io.max to iocost (the disk got measured): the weight alone holds it.
            NO_WRITE_LIMIT
        }
    };
    // A new cgroup has no limit. Writing "max" anyway is not free: in the 6.12 bench the
    // first restriction's cgroup took 66 ms with it, 3-7 ms without (docs/bench/apply.md).
    if !(io != Io::Set && wbps == NO_WRITE_LIMIT) {
        fs.write_file(
            cg,
            "io.max",
            &format!("{} wbps={}", limits.dev, super::method::io_max_wbps(wbps)),
        )?;
    }
    match (limits.memory_high, io) {
        // The budget is page cache: what the cgroup holds besides (its writers' memory) on top.
        // A cgroup made just now holds nothing, and reading its memory.stat (6.12 flushes the
        // counters first) added 10 ms to the 6.12 bench's restrictions, before the move.
        (Some(m), io) => {
            let used = match io {
                Io::Unset => None,
                Io::Set | Io::Unlimited => cgroups::memory_use(&fs.abs(cg)),
            };
            let high = memory_headroom::memory_high_for(m, used);
            fs.write_file(cg, "memory.high", &high.to_string())?
        }
        // Lifted from a writer that turned out light (`Method::lightened`), for good: set
        // again below what the cgroup holds, the daemon would reclaim the difference itself
        // (`SpeedProbe::heavy`). A cgroup without the memory controller has no file to lift.
        (None, Io::Set | Io::Unlimited)
            if cg
                .parent()
                .is_some_and(|p| fs.controller_enabled(p, "memory")) =>
        {
            fs.write_file(cg, "memory.high", "max")?
        }
        (None, _) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        act::{Active, iocost, method::LIGHT_WRITER_WEIGHT},
        journal::Journal,
        system::devices::DevId,
    };

    const DEV: DevId = DevId {
        major: 254,
        minor: 16,
    };

    fn held(weight: u16) -> CgroupLimits {
        CgroupLimits {
            dev: DEV,
            write: WriteControl::Weight {
                weight,
                model: Some(iocost::Model::held(25_000_000)),
                fallback: 12_500_000,
            },
            memory_high: Some(32 << 20),
        }
    }

    fn active(limits: CgroupLimits) -> Active {
        Active::new(Method::Cgroup(limits))
    }

    /// A cgroupfs stand-in: directories and the files the kernel would have.
    fn setup() -> (tempfile::TempDir, Actuator, Cgroupfs) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cgroup");
        std::fs::create_dir_all(root.join("ioshield/r1-42")).unwrap();
        std::fs::write(root.join("ioshield/cgroup.subtree_control"), "io memory").unwrap();
        let (journal, _) = Journal::open(&dir.path().join("state.json")).unwrap();
        let fs = Cgroupfs { root };
        (dir, Actuator::new(journal, Some(fs.clone()), None), fs)
    }

    fn read(fs: &Cgroupfs, file: &str) -> String {
        std::fs::read_to_string(fs.abs(Path::new(file))).unwrap()
    }

    /// iocost weighs the parent against everyone else: it carries the highest weight of the
    /// restrictions under it, and goes back to 1 when the light writer's is gone.
    #[test]
    fn the_parent_carries_the_highest_weight_of_its_restrictions() {
        let (_dir, mut actuator, fs) = setup();
        actuator.weigh_parent(&fs, Some(1)).unwrap();
        assert_eq!(read(&fs, "ioshield/io.weight"), "default 1");
        actuator.active.insert(1, active(held(1)));
        actuator
            .weigh_parent(&fs, Some(LIGHT_WRITER_WEIGHT))
            .unwrap();
        assert_eq!(read(&fs, "ioshield/io.weight"), "default 10");
        actuator.active.insert(2, active(held(LIGHT_WRITER_WEIGHT)));
        actuator.weigh_parent(&fs, None).unwrap();
        assert_eq!(read(&fs, "ioshield/io.weight"), "default 10");
        actuator.active.remove(&2);
        actuator.weigh_parent(&fs, None).unwrap();
        assert_eq!(read(&fs, "ioshield/io.weight"), "default 1");
        actuator.active.clear();
        actuator.weigh_parent(&fs, None).unwrap();
        assert_eq!(read(&fs, "ioshield/io.weight"), "default 1");
    }

    /// A retune lifts memory.high where the restriction has none, where the memory
    /// controller gives the cgroup one.
    #[test]
    fn a_retune_lifts_memory_high() {
        let (_dir, _actuator, fs) = setup();
        let cg = Path::new("/ioshield/r1-42");
        let high = |fs: &Cgroupfs| read(fs, "ioshield/r1-42/memory.high");
        write_limits(&fs, cg, &held(1), Io::Unset).unwrap();
        assert_eq!(high(&fs), (32u64 << 20).to_string());
        assert_eq!(read(&fs, "ioshield/r1-42/io.weight"), "default 1");
        let light = CgroupLimits {
            memory_high: None,
            ..held(LIGHT_WRITER_WEIGHT)
        };
        write_limits(&fs, cg, &light, Io::Unlimited).unwrap();
        assert_eq!(high(&fs), "max");
        assert_eq!(read(&fs, "ioshield/r1-42/io.weight"), "default 10");
        // Without the memory controller there is no memory.high to lift.
        std::fs::write(fs.abs(Path::new("/ioshield/cgroup.subtree_control")), "io").unwrap();
        std::fs::remove_file(fs.abs(&cg.join("memory.high"))).unwrap();
        write_limits(&fs, cg, &light, Io::Set).unwrap();
        assert!(!fs.abs(&cg.join("memory.high")).exists());
    }

    /// A held cgroup's `io.max` is written only when it holds or held a limit: one only ever
    /// weighed keeps the "max" it was made with, unwritten.
    #[test]
    fn io_max_is_written_only_where_a_limit_was_or_is() {
        let (_dir, _actuator, fs) = setup();
        let cg = Path::new("/ioshield/r1-42");
        let io_max = fs.abs(&cg.join("io.max"));
        write_limits(&fs, cg, &held(1), Io::Unset).unwrap();
        assert!(!io_max.exists(), "a new cgroup's io.max is max already");
        assert_eq!(Io::after(held(1).write), Io::Unlimited);
        write_limits(&fs, cg, &held(1), Io::after(held(1).write)).unwrap();
        assert!(!io_max.exists(), "weighed before and now: nothing to lift");
        let limited = CgroupLimits {
            write: WriteControl::Limit(20_000_000),
            ..held(1)
        };
        assert_eq!(Io::after(limited.write), Io::Set);
        write_limits(&fs, cg, &limited, Io::Unlimited).unwrap();
        assert!(std::fs::read_to_string(&io_max).unwrap().contains("wbps="));
        // Weighed again after a limit: the limit is lifted.
        std::fs::write(&io_max, "").unwrap();
        write_limits(&fs, cg, &held(1), Io::after(limited.write)).unwrap();
        assert!(std::fs::read_to_string(&io_max).unwrap().contains("wbps="));
    }
}
