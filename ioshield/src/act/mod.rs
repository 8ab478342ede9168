//! Actions: the only module that changes the system. Every change is recorded in the journal
//! before it is made, and undone on release, on exit, and by the next instance after a crash.
pub mod cgroup;
pub mod identity;
pub mod ioprio;
pub mod method;
pub mod placement;
pub mod systemd;
mod undo;
mod units;

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
};

use anyhow::{Result, anyhow};

use crate::{
    journal::{Change, Identity, Journal},
    system::{cgroups, procfs},
};
use cgroup::Cgroupfs;
use identity::PidFd;
pub use method::{CgroupAction, CgroupLimits, Method, ScopeLimits};
use systemd::Systemd;

/// Restriction id 0 holds the shared set-up (ioshield's parent cgroup, enabled controllers),
/// undone only when the daemon stops.
const SHARED: u64 = 0;

/// A restriction made: its id, and what was done, for the decision's log line.
pub struct Restricted {
    pub id: u64,
    pub how: String,
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

/// An undo that failed, waiting for its next try.
struct Pending {
    change: Change,
    next_try: std::time::Instant,
    tries: u32,
}

/// Back-off between tries of a failed undo: 1 s, 2 s, 4 s, ... up to 5 minutes.
fn backoff(tries: u32) -> std::time::Duration {
    std::time::Duration::from_secs(1u64 << tries.min(8)).min(std::time::Duration::from_secs(300))
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
    /// The root's own ioprio before restriction: what threads that inherited idle return to.
    root_previous: Option<u16>,
}

pub struct Actuator {
    journal: Journal,
    cgroupfs: Option<Cgroupfs>,
    systemd: Option<Systemd>,
    active: HashMap<u64, Active>,
    /// Undos that failed; never forgotten, retried with back-off (`retry_pending`).
    pending: Vec<Pending>,
    next_id: u64,
    /// Makes scope names unique across restarts: systemd keeps a released scope until its
    /// processes exit, and a restarted daemon counts restrictions from 1 again.
    instance: u64,
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
        }
    }

    /// Undoes what a previous instance left in the journal (it crashed or was killed).
    pub fn recover(&mut self, leftovers: Vec<Change>) -> UndoReport {
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
        let mut report = self.undo(&leftovers);
        self.settle(&leftovers, &mut report);
        report
    }

    /// After undoing `changes`: forgets those that were undone, keeps those that failed in the
    /// journal and queues them to be tried again.
    fn settle(&mut self, changes: &[Change], report: &mut UndoReport) {
        let failed = report.failed.clone();
        if let Err(e) = self
            .journal
            .forget(|c| changes.contains(c) && !failed.contains(c))
        {
            report
                .errors
                .push(format!("updating the state file: {e:#}"));
        }
        for change in failed {
            if !self.pending.iter().any(|p| p.change == change) {
                self.pending.push(Pending {
                    change,
                    next_try: std::time::Instant::now() + backoff(0),
                    tries: 1,
                });
            }
        }
    }

    /// Tries failed undos again whose back-off has passed. Returns what this attempt did.
    pub fn retry_pending(&mut self) -> UndoReport {
        let now = std::time::Instant::now();
        let due: Vec<Change> = self
            .pending
            .iter()
            .filter(|p| p.next_try <= now)
            .map(|p| p.change.clone())
            .collect();
        let mut total = UndoReport::default();
        for change in due {
            let mut report = self.undo(std::slice::from_ref(&change));
            if report.failed.is_empty() {
                self.pending.retain(|p| p.change != change);
                if let Err(e) = self.journal.forget(|c| *c == change) {
                    report
                        .errors
                        .push(format!("updating the state file: {e:#}"));
                }
            } else if let Some(p) = self.pending.iter_mut().find(|p| p.change == change) {
                p.next_try = now + backoff(p.tries);
                p.tries += 1;
            }
            total.merge(report);
        }
        total
    }

    /// Undos that failed and wait for another try.
    pub fn pending_undos(&self) -> usize {
        self.pending.len()
    }

    /// Restricts the subtree `members` (root first). Returns the restriction's id.
    pub fn restrict(&mut self, root: u32, members: &[u32], method: &Method) -> Result<Restricted> {
        let id = self.next_id;
        self.next_id += 1;
        let mut active = Active {
            method: method.clone(),
            home: None,
            cgroup: None,
            unit: None,
            unit_cgroup: None,
            root_previous: None,
        };
        let mut how = method.describe();
        match method {
            Method::DryRun => {}
            Method::Ioprio => self.demote_all(id, root, members, &mut active)?,
            Method::Cgroup(limits) => {
                let fs = self
                    .cgroupfs
                    .clone()
                    .ok_or_else(|| anyhow!("the cgroup action is not available on this host"))?;
                active.home = cgroups::of_process(root);
                let cg = self.create_cgroup(&fs, id, root, limits)?;
                for &pid in members {
                    self.move_into(&fs, id, pid, &cg)?;
                }
                active.cgroup = Some(cg);
            }
            Method::SystemdScope(limits) => match self.restrict_unit(id, root, members, limits)? {
                units::Done::Unit(unit, cgroup, what) => {
                    active.unit = Some(unit);
                    active.unit_cgroup = Some(cgroup);
                    how = what;
                }
                units::Done::Refused(why) => {
                    // What remains when the subtree is not ours to move or limit.
                    active.method = Method::Ioprio;
                    self.demote_all(id, root, members, &mut active)?;
                    how = format!("{} instead: {why}", Method::Ioprio.describe());
                }
            },
        }
        self.active.insert(id, active);
        Ok(Restricted { id, how })
    }

    fn demote_all(
        &mut self,
        id: u64,
        root: u32,
        members: &[u32],
        active: &mut Active,
    ) -> Result<()> {
        active.root_previous = ioprio::get(root).ok();
        for &pid in members {
            self.demote_process(id, pid)?;
        }
        Ok(())
    }

    /// The processes (for ioprio: threads) that still live inside a restriction, whoever started
    /// them: a restriction is judged by what lives in it, not by whether its first process is
    /// still there. `None` when it cannot tell (a dry run changes nothing to look at).
    pub fn live_members(&self, id: u64) -> Option<Vec<u32>> {
        let active = self.active.get(&id)?;
        if let (Some(fs), Some(cg)) = (&self.cgroupfs, &active.cgroup) {
            return Some(cgroups::procs_below(&fs.abs(cg)));
        }
        if let Some(cg) = &active.unit_cgroup {
            let mount = cgroups::v2_mount()?;
            return Some(cgroups::procs_below(
                &mount.join(cg.strip_prefix("/").unwrap_or(cg)),
            ));
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

    /// Keeps a restriction complete as its subtree changes: threads and children born since
    /// inherited the idle class, so record them to be restored too.
    pub fn sweep(&mut self, id: u64, members: &[u32]) -> Result<()> {
        let Some(active) = self.active.get(&id) else {
            return Ok(());
        };
        if active.method != Method::Ioprio {
            return Ok(());
        }
        let previous = active.root_previous.unwrap_or(0);
        let known: HashSet<Identity> = self
            .journal
            .changes()
            .iter()
            .filter_map(|c| match c {
                Change::Ioprio {
                    restriction,
                    thread,
                    ..
                } if *restriction == id => Some(*thread),
                _ => None,
            })
            .collect();
        let mut born = Vec::new();
        for &pid in members {
            for tid in procfs::threads(pid) {
                let Some(thread) = identity::of_thread(tid) else {
                    continue;
                };
                if known.contains(&thread) || ioprio::get(tid).ok() != Some(ioprio::IDLE) {
                    continue;
                }
                born.push(Change::Ioprio {
                    restriction: id,
                    thread,
                    previous,
                    applied: ioprio::IDLE,
                });
            }
        }
        self.journal.record_all(born)
    }

    pub fn release(&mut self, id: u64) -> UndoReport {
        let Some(active) = self.active.remove(&id) else {
            return UndoReport::default();
        };
        let mut report = UndoReport::default();
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
        let changes: Vec<Change> = self
            .journal
            .changes()
            .iter()
            .filter(|c| c.restriction() == Some(id))
            .cloned()
            .collect();
        report.merge(self.undo(&changes));
        self.settle(&changes, &mut report);
        report
    }

    /// Undoes everything, shared set-up included: on exit.
    pub fn release_all(&mut self) -> UndoReport {
        let ids: Vec<u64> = self.active.keys().copied().collect();
        let mut report = UndoReport::default();
        for id in ids {
            report.merge(self.release(id));
        }
        // The shared set-up, and undos that failed before: one more try each. What still fails
        // stays in the state file for the next start.
        let rest: Vec<Change> = self.journal.changes().to_vec();
        let mut last = self.undo(&rest);
        self.settle(&rest, &mut last);
        report.merge(last);
        report
    }

    fn demote_process(&mut self, id: u64, pid: u32) -> Result<()> {
        let pidfd = PidFd::open(pid);
        let mut planned = Vec::new();
        for tid in procfs::threads(pid) {
            let (Some(thread), Ok(previous)) = (identity::of_thread(tid), ioprio::get(tid)) else {
                continue;
            };
            // A thread with an explicit class got it from someone (an admin's ionice, the
            // program itself): not ours to change.
            if ioprio::class(previous) != ioprio::CLASS_NONE {
                if tid == pid {
                    tracing::info!(
                        "pid {pid} thread {tid}: I/O priority {} was set by hand, left as is",
                        ioprio::describe(previous)
                    );
                }
                continue;
            }
            planned.push(Change::Ioprio {
                restriction: id,
                thread,
                previous,
                applied: ioprio::IDLE,
            });
        }
        // One write of the state file for all threads, before any of them changes.
        self.journal.record_all(planned.iter().cloned())?;
        let mut not_done = Vec::new();
        for change in planned {
            if let Change::Ioprio { thread, .. } = &change
                && let Err(e) = ioprio::set(thread.id, ioprio::IDLE)
            {
                tracing::debug!("ioprio_set({}): {e}", thread.id);
                not_done.push(change);
            }
        }
        if !not_done.is_empty() {
            self.journal.forget(|c| not_done.contains(c))?;
        }
        if pidfd.is_some_and(|fd| !fd.alive()) {
            // It exited while we worked; a recycled thread id could have been hit. The journal
            // identity (with start time) keeps release from touching an unrelated thread.
            tracing::debug!("pid {pid} exited while being restricted");
        }
        Ok(())
    }

    /// Sets a held restriction's limits to `method`'s, e.g. once the disk's speed is measured.
    /// Only limits of ioshield's own cgroup or scope change, which removing that cgroup or
    /// lifting the scope's limits undoes, so there is nothing new to journal. Returns whether
    /// anything was changed.
    pub fn retune(&mut self, id: u64, method: &Method) -> Result<bool> {
        let Some(active) = self.active.get_mut(&id) else {
            return Ok(false);
        };
        if active.method == *method {
            return Ok(false);
        }
        match (&active.method, method, &active.cgroup, &active.unit) {
            (Method::Cgroup(_), Method::Cgroup(l), Some(cg), _) => {
                let fs = self
                    .cgroupfs
                    .as_ref()
                    .ok_or_else(|| anyhow!("the cgroup action is not available on this host"))?;
                write_limits(fs, cg, l)?;
            }
            (Method::SystemdScope(_), Method::SystemdScope(l), _, Some(unit)) => {
                let systemd = self
                    .systemd
                    .as_ref()
                    .ok_or_else(|| anyhow!("systemd is not reachable"))?;
                systemd.set_limits(unit, &l.device, l.wbps, l.memory_high)?;
            }
            // A different kind of action (the configuration changed): kept until release.
            _ => return Ok(false),
        }
        active.method = method.clone();
        Ok(true)
    }

    fn create_cgroup(
        &mut self,
        fs: &Cgroupfs,
        id: u64,
        root: u32,
        limits: &CgroupLimits,
    ) -> Result<PathBuf> {
        let parent = PathBuf::from("/").join(cgroup::PARENT);
        let mut controllers = vec!["io"];
        if limits.memory_high.is_some() {
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
        let cg = parent.join(format!("r{id}-{root}"));
        self.journal.record(Change::CgroupCreated {
            restriction: id,
            path: cg.clone(),
        })?;
        fs.create(&cg)?;
        write_limits(fs, &cg, limits)?;
        Ok(cg)
    }

    fn move_into(&mut self, fs: &Cgroupfs, id: u64, pid: u32, to: &Path) -> Result<()> {
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

fn write_limits(fs: &Cgroupfs, cg: &Path, limits: &CgroupLimits) -> Result<()> {
    match limits.weight {
        Some(w) => fs.write_file(cg, "io.weight", &format!("default {w}"))?,
        None => fs.write_file(
            cg,
            "io.max",
            &format!("{} wbps={}", limits.dev, limits.wbps),
        )?,
    }
    if let Some(m) = limits.memory_high {
        fs.write_file(cg, "memory.high", &m.to_string())?;
    }
    Ok(())
}
