//! The cgroup action on a systemd host, through the manager that owns the offender's unit:
//! limits set on the unit itself, with the processes that started the offender and (in a
//! service) its other workers held with it; in a scope holding more, the rest moved aside into
//! a new scope in the same slice, bound to the unit. Subtrees of user managers and other
//! delegated managers are not ours to touch.
use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use anyhow::{Result, anyhow};

use super::{
    Actuator, ScopeLimits, WriteControl, identity,
    iocost::PendingHold,
    memory_headroom::Writer,
    method::NO_WRITE_LIMIT,
    placement::{self, Placement},
    systemd::{Manager, manager_name},
};
use crate::{
    journal::{Change, Identity},
    system::{cgroups, procfs},
};

/// How many times the others of a scope are listed and moved aside before they are left held.
const ASIDE_TRIES: u32 = 3;

pub enum Done {
    /// The unit whose limits now hold the offender, its manager, its cgroup, what was done,
    /// and the limits as they hold (a weight falls back to a write limit where iocost cannot be
    /// turned on).
    Unit(String, Manager, PathBuf, String, ScopeLimits),
    /// Not ours to change, and why.
    Refused(String),
}

impl Actuator {
    pub(super) async fn restrict_unit(
        &mut self,
        id: u64,
        root: u32,
        members: &[u32],
        limits: &ScopeLimits,
    ) -> Result<Done> {
        let Found {
            cgroup,
            mount,
            placement,
        } = find(root, members)?;
        let user = match &placement {
            Placement::InPlace { user, .. } | Placement::Spare { user, .. } => *user,
            Placement::Foreign { .. } => None,
        };
        if let Some(uid) = user {
            if let Err(e) = self.systemd()?.reach(user).await {
                return Ok(Done::Refused(format!(
                    "user {uid}'s systemd cannot be reached ({e:#}); is dbus-user-session installed?"
                )));
            }
        }
        self.stopwatch.lap("placement");
        // What a user manager can apply: without the io controller (user@.service delegates
        // only `pids memory cpu` unless the package's drop-in is in effect), memory.high alone.
        let mut limits = limits.clone();
        let mut through = manager_name(user);
        if let Some(uid) = user.filter(|_| !io_delegated(&mount, &cgroup)) {
            if limits.memory_high.is_none() {
                return Ok(Done::Refused(format!(
                    "user {uid}'s systemd has no io controller to limit writes with, and \
                     memory_high is off"
                )));
            }
            limits.write = WriteControl::Limit(NO_WRITE_LIMIT);
            through = format!(
                "{through} (MemoryHigh only: io is not delegated to user@{uid}.service; the \
                 package's drop-in delegates it from the user's next login)"
            );
        }
        match placement {
            Placement::InPlace { unit, user, others } => {
                let limits = self
                    .hold_in_place(id, user, &unit, &cgroup, &mount, limits)
                    .await?;
                let with = if others.is_empty() {
                    String::new()
                } else {
                    format!(", its other processes {others:?} held with it")
                };
                let what = format!(
                    "{} on {unit} itself through {through}, nothing moved{with}",
                    limits.describe()
                );
                Ok(Done::Unit(unit, user, cgroup, what, limits))
            }
            Placement::Spare {
                unit,
                slice,
                user,
                others,
            } => {
                // The offender held first: starting the scope aside takes systemd 100-350 ms in
                // the e2e's guest, and a copy held only after that dirtied more meanwhile (the
                // committing service's longest pause beside a measured disk's copy 0.26 s
                // median against 0.065 held first, docs/bench/shell-scope.md). The others wait
                // under the copy's limits until moved.
                let limits = self
                    .hold_in_place(id, user, &unit, &cgroup, &mount, limits)
                    .await?;
                let aside = match self
                    .move_aside(id, user, root, members, &others, &limits, &slice, &unit)
                    .await
                {
                    Ok(Some((aside, moved))) => format!(
                        "its other processes {moved:?} moved aside to new scope {aside} in \
                         {slice}, bound to {unit}"
                    ),
                    Ok(None) => format!("its other processes {others:?} exited meanwhile"),
                    Err(e) => format!(
                        "its other processes {others:?} held with it: moving them aside failed \
                         ({e:#})"
                    ),
                };
                let what = format!(
                    "{} on {unit} itself through {through}; {aside}",
                    limits.describe()
                );
                Ok(Done::Unit(unit, user, cgroup, what, limits))
            }
            Placement::Foreign { why } => Ok(Done::Refused(why)),
        }
    }

    /// Whether restricting `root`'s subtree (`members`) by `method` sets the limits on its own
    /// unit, nothing moved, as [`Self::restrict_unit`] finds it now (false where it cannot
    /// tell). Never on cgroupfs, where the subtree moves into ioshield's cgroup.
    pub fn holds_in_place(&self, root: u32, members: &[u32], method: &super::Method) -> bool {
        matches!(method, super::Method::SystemdScope(_))
            && self.systemd.is_some()
            && find(root, members).is_ok_and(|f| {
                matches!(
                    f.placement,
                    Placement::InPlace { .. } | Placement::Spare { .. }
                )
            })
    }

    /// The heads of `others` (of `unit`, which holds `root`'s subtree `members`) moved into a
    /// new scope bound to `unit` ([`placement::heads`]), and which: one that exits between the
    /// listing and systemd's call has systemd refuse the whole call (in the e2e, a shell loop's
    /// `sleep` 0.4 s after it was listed), so the unit is listed again and the move tried again;
    /// `None` if none of them is left.
    #[allow(clippy::too_many_arguments)]
    async fn move_aside(
        &mut self,
        id: u64,
        user: Manager,
        root: u32,
        members: &[u32],
        others: &[u32],
        limits: &ScopeLimits,
        slice: &str,
        unit: &str,
    ) -> Result<Option<(String, Vec<u32>)>> {
        let parent = |p| procfs::read(p).map(|i| i.ppid);
        let mut others = placement::heads(others, parent);
        let mut attempt = 0;
        loop {
            if others.is_empty() {
                return Ok(None);
            }
            let tried = self
                .start_scope(id, user, root, &others, limits, attempt, slice, unit)
                .await;
            match tried {
                Ok(scope) => return Ok(Some((scope, others))),
                // Only that refusal is tried again: a call that timed out took 5 s already.
                Err(e) if attempt + 1 < ASIDE_TRIES && super::systemd::process_gone(&e) => {
                    tracing::debug!("moving {others:?} aside from {unit}: {e:#}; listing again");
                    match find(root, members)?.placement {
                        Placement::Spare { others: now, .. } => {
                            others = placement::heads(&now, parent)
                        }
                        _ => return Ok(None),
                    }
                }
                Err(e) => return Err(e),
            }
            attempt += 1;
        }
    }

    /// `limits` set on `unit` itself, its files' writeback started at once (the pages it
    /// dirtied before are written under them, not at the kernel's next periodic writeback).
    async fn hold_in_place(
        &mut self,
        id: u64,
        user: Manager,
        unit: &str,
        cgroup: &Path,
        mount: &Path,
        limits: ScopeLimits,
    ) -> Result<ScopeLimits> {
        let pending = self.begin_unit_hold(id, &limits)?;
        if let Err(e) = self.limit_in_place(id, user, unit, cgroup, &limits).await {
            self.abandon_hold(id, pending).await;
            return Err(e);
        }
        let limits = self.hold_unit(user, unit, cgroup, limits, pending).await?;
        super::writeback_kick::start_soon(
            unit.to_string(),
            mount.join(cgroup.strip_prefix("/").unwrap_or(cgroup)),
            limits.dev,
        );
        Ok(limits)
    }

    fn systemd(&self) -> Result<&super::Systemd> {
        self.systemd.as_ref().ok_or_else(systemd_unreachable)
    }

    /// systemd, and the stopwatch its calls lap.
    pub(super) fn systemd_timed(&mut self) -> Result<(&super::Systemd, &mut super::Stopwatch)> {
        let systemd = self.systemd.as_ref().ok_or_else(systemd_unreachable)?;
        Ok((systemd, &mut self.stopwatch))
    }

    async fn limit_in_place(
        &mut self,
        id: u64,
        user: Manager,
        unit: &str,
        cgroup: &Path,
        limits: &ScopeLimits,
    ) -> Result<()> {
        let previous = self.systemd()?.unit_limits(user, unit).await?;
        self.stopwatch.lap("unit read");
        let change = Change::UnitLimits {
            restriction: id,
            unit: unit.to_string(),
            previous,
            user,
        };
        self.journal.record(change.clone())?;
        self.stopwatch.lap("journal");
        let (systemd, laps) = self.systemd_timed()?;
        if let Err(e) = systemd
            .set_limits(user, unit, Some(cgroup), limits, Writer::Growing, laps)
            .await
        {
            // A call that timed out may still have been carried out: put the previous values
            // back (harmless if nothing changed); if that fails too, it is retried later.
            self.abandon(change).await;
            return Err(e);
        }
        Ok(())
    }

    /// A new scope in `slice` bound to `original`, unlimited, holding `members` (the others of
    /// a scope moved aside; `attempt` after the first names the retry).
    #[allow(clippy::too_many_arguments)]
    async fn start_scope(
        &mut self,
        id: u64,
        user: Manager,
        root: u32,
        members: &[u32],
        limits: &ScopeLimits,
        attempt: u32,
        slice: &str,
        original: &str,
    ) -> Result<String> {
        let unit = match attempt {
            0 => format!("ioshield-{}-r{id}-aside-{root}.scope", self.instance),
            n => format!("ioshield-{}-r{id}-aside-{root}-{n}.scope", self.instance),
        };
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
            user,
        };
        self.journal.record(change.clone())?;
        self.stopwatch.lap("journal");
        let (systemd, laps) = self.systemd_timed()?;
        if let Err(e) = systemd
            .start_scope(user, &unit, slice, original, &pids, laps)
            .await
        {
            // The job may still complete after we stopped waiting: undo it like any other
            // (nothing to do if the scope does not exist; retried later if that fails).
            self.abandon(change).await;
            return Err(e);
        }
        Ok(unit)
    }

    /// iocost turned on for `limits`' disk while systemd limits the unit or starts the scope
    /// (see [`Actuator::begin_hold`]).
    pub(super) fn begin_unit_hold(&mut self, id: u64, limits: &ScopeLimits) -> Result<PendingHold> {
        let fs = self.systemd()?.hierarchy();
        let pending = self.begin_hold(&fs, id, limits.dev, limits.write);
        self.stopwatch.lap("iocost journal");
        Ok(pending)
    }

    /// `limits`, set on `unit`, as they hold: iocost turned on for the disk (`pending`) when
    /// the unit is held by weight, or the fallback write limit set on the unit where that fails.
    pub(super) async fn hold_unit(
        &mut self,
        user: Manager,
        unit: &str,
        cgroup: &Path,
        limits: ScopeLimits,
        pending: PendingHold,
    ) -> Result<ScopeLimits> {
        let by_weight = matches!(limits.write, WriteControl::Weight { .. });
        let write = self.finish_hold(pending).await;
        let held = ScopeLimits { write, ..limits };
        if by_weight && matches!(held.write, WriteControl::Limit(_)) {
            let (systemd, laps) = self.systemd_timed()?;
            systemd
                .set_limits(user, unit, Some(cgroup), &held, Writer::Held, laps)
                .await?;
        }
        Ok(held)
    }

    /// Undoes a change whose making failed halfway, keeping it for later tries if needed.
    async fn abandon(&mut self, change: Change) {
        let changes = [change];
        let mut report = self.undo(&changes).await;
        self.settle(&changes, &mut report);
        for e in &report.errors {
            tracing::warn!("undoing a failed restriction: {e}");
        }
    }
}

/// The offender root's cgroup, the hierarchy's mount, and where a restriction goes.
struct Found {
    cgroup: PathBuf,
    mount: PathBuf,
    placement: Placement,
}

fn find(root: u32, members: &[u32]) -> Result<Found> {
    let cgroup =
        cgroups::of_process(root).ok_or_else(|| anyhow!("pid {root} has no cgroup (gone?)"))?;
    let mount = cgroups::v2_mount().ok_or_else(|| anyhow!("no cgroup v2 hierarchy"))?;
    let unit_pids = cgroups::procs_below(&mount.join(cgroup.strip_prefix("/").unwrap_or(&cgroup)));
    let member_set: HashSet<u32> = members.iter().copied().collect();
    let ancestors: HashSet<u32> = procfs::ancestors(root).collect();
    let placement = placement::place(&cgroup, &unit_pids, &member_set, &ancestors);
    Ok(Found {
        cgroup,
        mount,
        placement,
    })
}

fn systemd_unreachable() -> anyhow::Error {
    anyhow!("systemd is not reachable")
}

/// Whether the io controller reaches a user manager's units: the cgroup of `user@UID.service`
/// (the first `user@` component of `cgroup`) lists it among its controllers.
pub(super) fn io_delegated(mount: &Path, cgroup: &Path) -> bool {
    let mut dir = mount.to_path_buf();
    for part in cgroup
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|c| *c != "/")
    {
        dir.push(part);
        if part.starts_with("user@") {
            return cgroups::controllers(&dir).iter().any(|c| c == "io");
        }
    }
    false
}
