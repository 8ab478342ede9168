//! The cgroup action on a systemd host, through the manager that owns the offender's unit:
//! limits set on the unit itself when it holds nothing but the offender, or the offender's
//! subtree moved into a scope of its own in the same slice, bound to the unit. Subtrees of user
//! managers and other delegated managers are not ours to touch.
use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use anyhow::{Result, anyhow};

use super::{
    Actuator, ScopeLimits, identity,
    placement::{self, Placement},
};
use crate::{
    journal::{Change, Identity},
    system::{cgroups, procfs},
};

pub enum Done {
    /// The unit whose limits now hold the offender, its cgroup, and what was done.
    Unit(String, PathBuf, String),
    /// Not ours to change, and why.
    Refused(String),
}

impl Actuator {
    pub(super) fn restrict_unit(
        &mut self,
        id: u64,
        root: u32,
        members: &[u32],
        limits: &ScopeLimits,
    ) -> Result<Done> {
        let cgroup =
            cgroups::of_process(root).ok_or_else(|| anyhow!("pid {root} has no cgroup (gone?)"))?;
        let mount = cgroups::v2_mount().ok_or_else(|| anyhow!("no cgroup v2 hierarchy"))?;
        let unit_pids =
            cgroups::procs_below(&mount.join(cgroup.strip_prefix("/").unwrap_or(&cgroup)));
        let member_set: HashSet<u32> = members.iter().copied().collect();
        let ancestors: HashSet<u32> = procfs::ancestors(root).collect();
        match placement::place(&cgroup, &unit_pids, &member_set, &ancestors) {
            Placement::InPlace { unit } => {
                self.limit_in_place(id, &unit, limits)?;
                let what = format!("{} on {unit} itself, nothing moved", limits.describe());
                Ok(Done::Unit(unit, cgroup, what))
            }
            Placement::Split { unit, slice } => {
                let scope = self.start_scope(id, root, members, limits, &slice, &unit)?;
                let what = format!(
                    "{} on new scope {scope} in {slice}, bound to {unit}",
                    limits.describe()
                );
                // In the same slice: next to the unit it was split from.
                let at = cgroup.parent().unwrap_or(Path::new("/")).join(&scope);
                Ok(Done::Unit(scope, at, what))
            }
            Placement::Foreign { why } => Ok(Done::Refused(why)),
        }
    }

    fn systemd(&self) -> Result<&super::Systemd> {
        self.systemd
            .as_ref()
            .ok_or_else(|| anyhow!("systemd is not reachable"))
    }

    fn limit_in_place(&mut self, id: u64, unit: &str, limits: &ScopeLimits) -> Result<()> {
        let previous = self.systemd()?.unit_limits(unit)?;
        let change = Change::UnitLimits {
            restriction: id,
            unit: unit.to_string(),
            previous,
        };
        self.journal.record(change.clone())?;
        if let Err(e) =
            self.systemd()?
                .set_limits(unit, &limits.device, limits.wbps, limits.memory_high)
        {
            // A call that timed out may still have been carried out: put the previous values
            // back (harmless if nothing changed); if that fails too, it is retried later.
            self.abandon(change);
            return Err(e);
        }
        Ok(())
    }

    fn start_scope(
        &mut self,
        id: u64,
        root: u32,
        members: &[u32],
        limits: &ScopeLimits,
        slice: &str,
        original: &str,
    ) -> Result<String> {
        let unit = format!("ioshield-{}-r{id}-{root}.scope", self.instance);
        let recorded: Vec<Identity> = members
            .iter()
            .filter_map(|&pid| identity::of_process(pid))
            .collect();
        let pids: Vec<u32> = recorded.iter().map(|p| p.id).collect();
        let change = Change::SystemdScope {
            restriction: id,
            unit: unit.clone(),
            device: limits.device.clone(),
            members: recorded,
        };
        self.journal.record(change.clone())?;
        if let Err(e) = self
            .systemd()?
            .start_scope(&unit, slice, original, &pids, limits)
        {
            // The job may still complete after we stopped waiting: undo it like any other
            // (nothing to do if the scope does not exist; retried later if that fails).
            self.abandon(change);
            return Err(e);
        }
        Ok(unit)
    }

    /// Undoes a change whose making failed halfway, keeping it for later tries if needed.
    fn abandon(&mut self, change: Change) {
        let changes = [change];
        let mut report = self.undo(&changes);
        self.settle(&changes, &mut report);
        for e in &report.errors {
            tracing::warn!("undoing a failed restriction: {e}");
        }
    }
}
