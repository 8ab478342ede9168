//! Actions: the only module that changes the system. Every change is recorded in the journal
//! before it is made, and undone on release, on exit, and by the next instance after a crash.
mod backlog_guard;
mod backlog_split;
pub mod cgroup;
mod cgroup_moves;
mod demote;
mod dirty_count_refresher;
pub mod identity;
pub mod iocost;
mod iocost_writer;
pub mod ioprio;
mod memory_follow;
mod memory_headroom;
pub mod method;
mod pending;
pub mod placement;
mod retune;
pub mod stopwatch;
pub mod systemd;
mod undo;
mod units;
mod writeback_kick;

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Result, anyhow};

use crate::{
    journal::{Change, Journal},
    system::{cgroups, procfs},
};
use cgroup::Cgroupfs;
pub use method::{CgroupAction, CgroupLimits, Method, ScopeLimits, WriteControl};
pub use retune::Retune;
use stopwatch::Stopwatch;
use systemd::Systemd;

/// Restriction id 0 holds the shared set-up (ioshield's parent cgroup, enabled controllers),
/// undone only when the daemon stops.
const SHARED: u64 = 0;

/// A restriction made: its id, and what was done, for the decision's log line.
pub struct Restricted {
    pub id: u64,
    pub how: String,
    /// Where the limits live, as a person would look it up: the offender's own systemd unit
    /// or ioshield's cgroup; `None` for per-thread I/O priorities.
    pub place: Option<String>,
    /// How long making it took, step by step.
    pub took: Stopwatch,
}

/// What undoing a restriction found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct UndoReport {
    pub restored: usize,
    /// Changed by someone else while restricted: left as they set it.
    pub kept: Vec<String>,
    /// Gone (exited) before we could restore them: nothing to do.
    pub vanished: usize,
    pub errors: Vec<String>,
    /// Changes whose undo failed: kept in the journal and tried again later.
    pub failed: Vec<Change>,
}

impl UndoReport {
    fn merge(&mut self, other: UndoReport) {
        self.restored += other.restored;
        self.kept.extend(other.kept);
        self.vanished += other.vanished;
        self.errors.extend(other.errors);
        self.failed.extend(other.failed);
    }

    fn fail(&mut self, change: &Change, error: String) {
        self.errors.push(error);
        if !self.failed.contains(change) {
            self.failed.push(change.clone());
        }
    }
}

struct Active {
    method: Method,
    /// The restricted root's cgroup before we moved it: where newcomers go back on release.
    home: Option<PathBuf>,
    cgroup: Option<PathBuf>,
    /// The unit whose limits hold the subtree on systemd hosts: its own unit (in place) or a
    /// transient scope of ioshield's.
    unit: Option<String>,
    /// That unit's cgroup (relative to the hierarchy's root).
    unit_cgroup: Option<PathBuf>,
    /// The manager of that unit: PID 1, or a user's systemd.
    manager: systemd::Manager,
    /// The root's own ioprio before restriction: what threads that inherited idle return to.
    root_previous: Option<u16>,
    /// Its `memory.high` lifted for its processes' own memory (`follow_memory`): it stays so
    /// until the release, retunes included.
    memory_lifted: bool,
}

impl Active {
    /// A restriction by `method`, before anything of it is in place.
    fn new(method: Method) -> Active {
        Active {
            method,
            home: None,
            cgroup: None,
            unit: None,
            unit_cgroup: None,
            manager: None,
            root_previous: None,
            memory_lifted: false,
        }
    }
}

pub struct Actuator {
    journal: Journal,
    cgroupfs: Option<Cgroupfs>,
    systemd: Option<Systemd>,
    active: HashMap<u64, Active>,
    /// Undos that failed; never forgotten, retried with back-off (`retry_pending`).
    pending: Vec<pending::Pending>,
    next_id: u64,
    /// Makes scope names unique across restarts: systemd keeps a released scope until its
    /// processes exit, and a restarted daemon counts restrictions from 1 again.
    instance: u64,
    /// Where the disks' BDI knobs are (`/sys/class/bdi`; a directory of files in unit tests).
    bdi_root: PathBuf,
    /// Disks whose iocost outlives the restriction that turned it on, and since when
    /// (`iocost::LINGER_MAX`).
    lingering: HashMap<String, std::time::Instant>,
    /// The steps of the restriction being made.
    stopwatch: Stopwatch,
    iocost_writer: iocost_writer::IocostWriter,
    /// Retunes waiting for iocost's writes, by restriction id, with those writes.
    retunes: HashMap<u64, (retune::Waiting, iocost::PendingHold)>,
    /// Where the cgroup v2 hierarchy is mounted, looked up once: restrictions on systemd hosts
    /// name their cgroups relative to it, and their `memory.stat` is read many times a second.
    v2_root: Option<PathBuf>,
    dirty_counts: dirty_count_refresher::DirtyCountRefresher,
    /// Restrictions made and lifted: each may have moved processes between cgroups.
    placements: u64,
}

impl Actuator {
    pub fn new(journal: Journal, cgroupfs: Option<Cgroupfs>, systemd: Option<Systemd>) -> Self {
        Self {
            journal,
            cgroupfs,
            systemd,
            active: HashMap::new(),
            pending: Vec::new(),
            next_id: 1,
            instance: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            bdi_root: PathBuf::from(crate::system::bdi::SYSFS),
            lingering: HashMap::new(),
            stopwatch: Stopwatch::start(),
            iocost_writer: iocost_writer::IocostWriter::start(),
            retunes: HashMap::new(),
            v2_root: cgroups::v2_mount(),
            dirty_counts: dirty_count_refresher::DirtyCountRefresher::start(),
            placements: 0,
        }
    }

    /// How many restrictions were made or lifted: a process's cgroup read before may have
    /// changed since this last changed.
    pub fn placements(&self) -> u64 {
        self.placements
    }

    /// Undoes what a previous instance left in the journal (it crashed or was killed).
    pub async fn recover(&mut self, leftovers: Vec<Change>) -> UndoReport {
        // ioshield never demotes kernel threads; an entry naming one is not ours.
        let (kernel, leftovers): (Vec<Change>, Vec<Change>) =
            leftovers.into_iter().partition(|c| match c {
                Change::Ioprio { thread, .. } => {
                    procfs::read(thread.id).is_some_and(|p| p.kernel_thread)
                }
                _ => false,
            });
        for c in &kernel {
            tracing::warn!("state file: ignoring an entry that names a kernel thread: {c:?}");
        }
        if let Err(e) = self.journal.forget(|c| kernel.contains(c)) {
            tracing::warn!("updating the state file: {e:#}");
        }
        let mut report = self.undo(&leftovers).await;
        self.settle(&leftovers, &mut report);
        report
    }

    /// Restricts the subtree `members` (root first). Returns the restriction's id.
    pub async fn restrict(
        &mut self,
        root: u32,
        members: &[u32],
        method: &Method,
    ) -> Result<Restricted> {
        let id = self.next_id;
        self.next_id += 1;
        self.placements += 1;
        self.stopwatch = Stopwatch::start();
        let mut active = Active::new(method.clone());
        let mut how = method.describe();
        match method {
            Method::DryRun => {}
            Method::Ioprio => {
                self.demote_all(id, root, members, &mut active)?;
                self.stopwatch.lap("ioprio");
            }
            Method::Cgroup(limits) => {
                let fs = self
                    .cgroupfs
                    .clone()
                    .ok_or_else(|| anyhow!("the cgroup action is not available on this host"))?;
                active.home = cgroups::of_process(root);
                // Before the throttle, so that the flusher meets it with short runs only.
                backlog_split::start(members.to_vec(), limits.dev);
                // iocost turned on while the cgroup is made and the offender moved.
                let pending = self.begin_hold(&fs, id, limits.dev, limits.write);
                self.stopwatch.lap("iocost journal");
                let cg = match self.place_in_cgroup(&fs, id, root, members, limits) {
                    Ok(cg) => cg,
                    Err(e) => {
                        self.abandon_hold(id, pending).await;
                        return Err(e);
                    }
                };
                let held = CgroupLimits {
                    write: self.finish_hold(pending).await,
                    ..limits.clone()
                };
                if held != *limits {
                    cgroup_moves::write_limits(&fs, &cg, &held, cgroup_moves::Io::Set)?;
                    self.stopwatch.lap("limits");
                }
                active.method = Method::Cgroup(held);
                how = active.method.describe();
                active.cgroup = Some(cg);
            }
            Method::SystemdScope(limits) => {
                match self.restrict_unit(id, root, members, limits).await? {
                    units::Done::Unit(unit, manager, cgroup, what, held) => {
                        active.method = Method::SystemdScope(held);
                        active.unit = Some(unit);
                        active.manager = manager;
                        active.unit_cgroup = Some(cgroup);
                        how = what;
                    }
                    units::Done::Refused(why) => {
                        // What remains when the subtree is not ours to move or limit.
                        active.method = Method::Ioprio;
                        self.demote_all(id, root, members, &mut active)?;
                        self.stopwatch.lap("ioprio");
                        how = format!("{} instead: {why}", Method::Ioprio.describe());
                    }
                }
            }
        }
        let place = active
            .unit
            .clone()
            .or_else(|| active.cgroup.as_ref().map(|c| c.display().to_string()));
        self.active.insert(id, active);
        Ok(Restricted {
            id,
            how,
            place,
            took: self.stopwatch.clone(),
        })
    }

    /// Reaches user `uid`'s own systemd in the background, where restrictions go through
    /// systemd (`Systemd::connect_ahead`).
    pub fn connect_ahead(&self, uid: u32) {
        if let Some(systemd) = &self.systemd {
            systemd.connect_ahead(uid);
        }
    }

    /// Told each time iocost's writes for a restriction or a retune are made: the retunes
    /// waiting for them end then ([`Actuator::finish_retunes`]).
    pub fn iocost_made(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.iocost_writer.made()
    }

    /// Whether restrictions go through systemd, whose user managers are reached ahead.
    pub fn through_systemd(&self) -> bool {
        self.systemd.is_some()
    }

    /// Whether restriction `id` holds its disk under iocost ioshield turned on (its model pins
    /// the disk's rate), as carried out: a weight that fell back to a write limit does not.
    pub fn pins_disk(&self, id: u64) -> bool {
        self.active.get(&id).is_some_and(|a| a.method.pins_disk())
    }

    /// The processes (for ioprio: threads) that still live inside a restriction, whoever started
    /// them: a restriction is judged by what lives in it, not by whether its first process is
    /// still there. `None` when it cannot tell (a dry run changes nothing to look at).
    pub fn live_members(&self, id: u64) -> Option<Vec<u32>> {
        let active = self.active.get(&id)?;
        if let Some(dir) = self.cgroup_dir(active) {
            return Some(cgroups::procs_below(&dir));
        }
        match active.method {
            Method::Ioprio => Some(
                self.journal
                    .changes()
                    .iter()
                    .filter_map(|c| match c {
                        Change::Ioprio {
                            restriction,
                            thread,
                            ..
                        } if *restriction == id && identity::is_current(thread) => Some(thread.id),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    pub async fn release(&mut self, id: u64) -> UndoReport {
        self.placements += 1;
        self.drop_retune(id).await;
        self.dirty_counts.forget(id);
        let Some(active) = self.active.remove(&id) else {
            return UndoReport::default();
        };
        let mut report = UndoReport::default();
        if let (Some(fs), Some(w)) = (&self.cgroupfs, active.method.weight())
            && matches!(active.method, Method::Cgroup(_))
            && w != method::OFFENDER_WEIGHT
            && let Err(e) = self.weigh_parent(fs, None)
        {
            report.errors.push(format!("{e:#}"));
        }
        // Processes born inside our cgroup were never recorded: send them where the root was.
        if let (Some(fs), Some(cg)) = (self.cgroupfs.clone(), active.cgroup.as_ref()) {
            let home = fs.nearest_existing(active.home.as_deref().unwrap_or(Path::new("/")));
            let recorded: HashSet<u32> = self
                .journal
                .changes()
                .iter()
                .filter_map(|c| match c {
                    Change::CgroupMove {
                        restriction,
                        process,
                        ..
                    } if *restriction == id => Some(process.id),
                    _ => None,
                })
                .collect();
            for pid in fs.procs(cg) {
                if !recorded.contains(&pid) {
                    match fs.move_process(pid, &home) {
                        Ok(()) => report.restored += 1,
                        Err(e) => report.errors.push(e.to_string()),
                    }
                }
            }
        }
        let (iocost, changes): (Vec<Change>, Vec<Change>) = self
            .journal
            .changes()
            .iter()
            .filter(|c| c.restriction() == Some(id))
            .cloned()
            .partition(|c| matches!(c, Change::Iocost { .. }));
        report.merge(self.undo(&changes).await);
        self.settle(&changes, &mut report);
        // Another restriction on the disk under the same iocost (one whose writers are gone,
        // kept while their backlog is written) needs it on until its own release.
        let heir = active.method.dev().and_then(|dev| {
            self.active
                .iter()
                .filter(|(_, a)| a.method.uses_iocost() && a.method.dev() == Some(dev))
                .map(|(other, _)| *other)
                .min()
        });
        let kept = match heir {
            Some(heir) => self.hand_iocost_to(&iocost, heir),
            None => self.keep_iocost_on(&iocost),
        };
        if let Err(e) = kept {
            // Not kept: put back now, as any change of the restriction.
            report.errors.push(format!("{e:#}"));
            report.merge(self.undo(&iocost).await);
            self.settle(&iocost, &mut report);
        }
        report
    }

    /// What restriction `id`'s writers left in its cgroup for the disk to write (dirty and
    /// writeback page cache, bytes); `None` when it cannot tell (no cgroup of its own, no
    /// memory controller there, the unit's cgroup gone with its processes).
    pub fn backlog(&self, id: u64) -> Option<u64> {
        cgroups::backlog(&self.cgroup_dir(self.active.get(&id)?)?)
    }

    /// The cgroups beside every restriction's (absolute paths): the rest of the machine, whose
    /// I/O stalls tell what the restrictions cost it. Empty without a cgroup v2 hierarchy.
    pub fn others(&self) -> Vec<PathBuf> {
        let Some(root) = self.v2_root.as_ref() else {
            return Vec::new();
        };
        let held: Vec<PathBuf> = self
            .active
            .values()
            .filter_map(|a| self.cgroup_dir(a))
            .collect();
        cgroups::apart_from(root, &held)
    }

    /// The absolute path of the cgroup a restriction holds its processes in, if any.
    fn cgroup_dir(&self, active: &Active) -> Option<PathBuf> {
        if let (Some(fs), Some(cg)) = (&self.cgroupfs, &active.cgroup) {
            return Some(fs.abs(cg));
        }
        let cg = active.unit_cgroup.as_ref()?;
        Some(
            self.v2_root
                .as_ref()?
                .join(cg.strip_prefix("/").unwrap_or(cg)),
        )
    }

    /// Has the kernel's dirty page counts of the cgroups of restrictions `ids` that hold their
    /// writer by `memory.high` refreshed every `every` from now on, and of no other
    /// (`DaemonConfig::refresh_dirty_counts` says why).
    pub fn refresh_dirty_counts(
        &mut self,
        every: Option<Duration>,
        ids: impl IntoIterator<Item = u64>,
    ) {
        let mut dirs: Vec<(u64, PathBuf)> = ids
            .into_iter()
            .filter_map(|id| {
                let a = self.active.get(&id)?;
                a.method.memory_high()?;
                Some((id, self.cgroup_dir(a)?))
            })
            .collect();
        dirs.sort();
        self.dirty_counts.set(every, &dirs);
    }

    /// Undoes everything, shared set-up included: on exit.
    pub async fn release_all(&mut self) -> UndoReport {
        let ids: Vec<u64> = self.active.keys().copied().collect();
        let mut report = UndoReport::default();
        for id in ids {
            report.merge(self.release(id).await);
        }
        // The shared set-up, and undos that failed before: one more try each. What still fails
        // stays in the state file for the next start.
        self.lingering.clear();
        let rest: Vec<Change> = self.journal.changes().to_vec();
        let mut last = self.undo(&rest).await;
        self.settle(&rest, &mut last);
        report.merge(last);
        report
    }
}

#[cfg(test)]
impl Actuator {
    /// An actuator over a stand-in cgroup hierarchy at `root` holding one restriction by
    /// `method` in its cgroup `cg` (relative to `root`), for tests of what the daemon does
    /// with a restriction it made. Returns the restriction's id.
    pub fn holding_cgroup(journal: Journal, root: &Path, cg: &Path, method: Method) -> (Self, u64) {
        let mut actuator = Actuator::new(
            journal,
            Some(Cgroupfs {
                root: root.to_path_buf(),
            }),
            None,
        );
        let id = actuator.next_id;
        actuator.next_id += 1;
        let mut active = Active::new(method);
        active.cgroup = Some(cg.to_path_buf());
        actuator.active.insert(id, active);
        (actuator, id)
    }
}
