//! The cgroup action through cgroupfs (hosts without systemd): ioshield's own cgroup with the
//! limits, and the subtree moved into it, every step journaled first.
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{
    Actuator, CgroupLimits, SHARED, WriteControl, cgroup,
    cgroup::Cgroupfs,
    identity,
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
        if matches!(limits.write, WriteControl::Weight { .. }) {
            // iocost weighs siblings against each other: every restricted offender lives under
            // this parent, so the parent's weight is what they get against everyone else.
            fs.write_file(&parent, "io.weight", &format!("default {OFFENDER_WEIGHT}"))?;
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
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Io {
    /// Made just now: no limit.
    Unset,
    /// Limited before, by a write limit that may have to be lifted.
    Set,
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
    if !(io == Io::Unset && wbps == NO_WRITE_LIMIT) {
        fs.write_file(
            cg,
            "io.max",
            &format!("{} wbps={}", limits.dev, super::method::io_max_wbps(wbps)),
        )?;
    }
    if let Some(m) = limits.memory_high {
        fs.write_file(cg, "memory.high", &m.to_string())?;
    }
    Ok(())
}
