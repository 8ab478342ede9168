//! Undoing recorded changes, in an order that works: processes out of ioshield's cgroups before
//! the cgroups are removed, children before parents, priorities, a disk's iocost and dirty
//! limits, then the shared set-up.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use super::{
    Actuator, UndoReport,
    cgroup::Cgroupfs,
    identity, ioprio,
    systemd::{Restored, Systemd},
};
use crate::{
    journal::{Change, Identity},
    system::cgroups,
};

impl Actuator {
    pub(super) async fn undo_scope(
        &self,
        change: &Change,
        unit: &str,
        device: &str,
        members: &[Identity],
        user: Option<u32>,
        r: &mut UndoReport,
    ) {
        let Some(systemd) = &self.systemd else {
            r.fail(
                change,
                format!("cannot reach systemd to lift the limits of {unit}"),
            );
            return;
        };
        let mut alive = Vec::new();
        for p in members {
            match identity::check(p) {
                Ok(true) => alive.push(p.id),
                Ok(false) => {}
                Err(e) => return r.fail(change, e),
            }
        }
        r.vanished += members.len() - alive.len();
        // The user logged out: their manager and its units are gone, limits too.
        if alive.is_empty() || Systemd::manager_gone(user) {
            return;
        }
        match systemd.exists(user, unit).await {
            // systemd removed the scope with its last process (or never started it): nothing
            // left to lift.
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => return r.fail(change, format!("{e:#}")),
        }
        match systemd.lift(user, unit, device).await {
            Ok(()) => {
                r.restored += alive.len();
                tracing::info!(
                    "limits of {unit} lifted; pids {alive:?} stay in it until they exit (systemd \
                     does not move processes back into non-delegated units)"
                );
            }
            Err(e) => r.fail(change, format!("{e:#}")),
        }
    }

    /// Undoes `changes` in dependency order: processes out of our cgroups, then the cgroups,
    /// then priorities, then the shared set-up.
    pub(super) async fn undo(&self, changes: &[Change]) -> UndoReport {
        let mut r = UndoReport::default();
        for c in changes {
            match c {
                Change::SystemdScope {
                    unit,
                    device,
                    members,
                    user,
                    ..
                } => {
                    self.undo_scope(c, unit, device, members, *user, &mut r)
                        .await
                }
                Change::UnitLimits {
                    unit,
                    previous,
                    user,
                    ..
                } => match &self.systemd {
                    // The user logged out: their manager and its units are gone, limits too.
                    Some(_) if Systemd::manager_gone(*user) => r.vanished += 1,
                    Some(systemd) => match systemd.restore_unit_limits(*user, unit, previous).await
                    {
                        Ok(Restored::Yes) => r.restored += 1,
                        Ok(Restored::UnitGone) => r.vanished += 1,
                        Err(e) => r.fail(c, format!("{e:#}")),
                    },
                    None => r.fail(
                        c,
                        format!("cannot reach systemd to restore the limits of {unit}"),
                    ),
                },
                _ => {}
            }
        }
        let fs = self.cgroupfs.as_ref();
        let mut homes: HashMap<u64, PathBuf> = HashMap::new();
        for c in changes {
            if let Change::CgroupMove {
                restriction,
                process,
                from,
                to,
            } = c
            {
                homes.entry(*restriction).or_insert_with(|| from.clone());
                let Some(fs) = fs else { continue };
                let current = match identity::check(process) {
                    Ok(current) => current,
                    Err(e) => {
                        r.fail(c, e);
                        continue;
                    }
                };
                if !current {
                    r.vanished += 1;
                } else if cgroups::of_process(process.id).as_deref() != Some(to.as_path()) {
                    r.kept.push(format!(
                        "pid {} was moved out of {} by someone else",
                        process.id,
                        to.display()
                    ));
                } else {
                    match fs.move_process(process.id, &fs.nearest_existing(from)) {
                        Ok(()) => r.restored += 1,
                        Err(e) => r.fail(c, e.to_string()),
                    }
                }
            }
        }
        let mut created: Vec<(&Change, u64, &PathBuf)> = changes
            .iter()
            .filter_map(|c| match c {
                Change::CgroupCreated { restriction, path } => Some((c, *restriction, path)),
                _ => None,
            })
            .collect();
        // Children before parents.
        created.sort_by_key(|(_, _, p)| std::cmp::Reverse(p.components().count()));
        for (c, restriction, path) in created {
            let Some(fs) = fs else { continue };
            let home = fs.nearest_existing(homes.get(&restriction).map_or(Path::new("/"), |p| p));
            for pid in fs.procs(path) {
                if let Err(e) = fs.move_process(pid, &home) {
                    r.errors.push(e.to_string());
                }
            }
            if let Err(e) = remove_cgroup(fs, path) {
                r.fail(c, format!("removing cgroup {}: {e}", path.display()));
            }
        }
        for c in changes {
            if let Change::Ioprio {
                thread,
                previous,
                applied,
                ..
            } = c
            {
                match identity::check(thread) {
                    Ok(true) => {}
                    Ok(false) => {
                        r.vanished += 1;
                        continue;
                    }
                    Err(e) => {
                        r.fail(c, e);
                        continue;
                    }
                }
                match ioprio::get(thread.id) {
                    Ok(now) if now == *applied => match ioprio::set(thread.id, *previous) {
                        Ok(()) => r.restored += 1,
                        Err(e) => r.fail(c, format!("ioprio of thread {}: {e}", thread.id)),
                    },
                    Ok(now) => r.kept.push(format!(
                        "thread {}: ioprio set to {} by someone else, left as is",
                        thread.id,
                        ioprio::describe(now)
                    )),
                    Err(_) => r.vanished += 1,
                }
            }
        }
        for c in changes {
            match c {
                Change::Iocost { .. } => self.undo_iocost(c, &mut r),
                Change::BacklogGuard { .. } => self.undo_backlog_guard(c, &mut r),
                _ => {}
            }
        }
        for c in changes {
            if let (Change::ControllerEnabled { path, controller }, Some(fs)) = (c, fs) {
                // Fails harmlessly while other cgroups still use the controller.
                if let Err(e) = fs.set_controller(path, controller, false) {
                    tracing::debug!("leaving {controller} enabled in {}: {e}", path.display());
                }
            }
        }
        r
    }
}

/// rmdir of a cgroup fails with EBUSY for a moment after its last process left (zombies).
fn remove_cgroup(fs: &Cgroupfs, path: &Path) -> std::io::Result<()> {
    let mut last = Ok(());
    for _ in 0..20 {
        last = fs.remove(path);
        if last.is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Journal;

    /// A cgroupfs stand-in: directories without the kernel's files, so a cgroup can only be
    /// removed once its children are, as in the real hierarchy.
    fn setup() -> (tempfile::TempDir, Actuator) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cgroup");
        std::fs::create_dir_all(root.join("ioshield/r1-42")).unwrap();
        std::fs::create_dir_all(root.join("ioshield/r2-43")).unwrap();
        std::fs::write(root.join("cgroup.subtree_control"), "io memory").unwrap();
        let (journal, _) = Journal::open(&dir.path().join("state.json")).unwrap();
        let fs = Cgroupfs { root };
        (dir, Actuator::new(journal, Some(fs), None))
    }

    #[tokio::test]
    async fn children_are_removed_before_parents_and_the_controller_last() {
        let (dir, mut actuator) = setup();
        let root = dir.path().join("cgroup");
        // Recorded in the order they were made: parent, controller, children.
        let changes = vec![
            Change::CgroupCreated {
                restriction: 0,
                path: "/ioshield".into(),
            },
            Change::ControllerEnabled {
                path: "/".into(),
                controller: "io".into(),
            },
            Change::CgroupCreated {
                restriction: 1,
                path: "/ioshield/r1-42".into(),
            },
            Change::CgroupCreated {
                restriction: 2,
                path: "/ioshield/r2-43".into(),
            },
            // A moved process that has exited since: nothing to move back.
            Change::CgroupMove {
                restriction: 1,
                process: Identity {
                    id: u32::MAX - 1,
                    start_time: 1,
                },
                from: "/user.slice".into(),
                to: "/ioshield/r1-42".into(),
            },
        ];
        let report = actuator.recover(changes).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.vanished, 1);
        assert!(!root.join("ioshield").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
            "-io"
        );
    }

    #[tokio::test]
    async fn a_cgroup_that_cannot_be_removed_is_reported() {
        let (dir, mut actuator) = setup();
        let root = dir.path().join("cgroup");
        // Someone else's cgroup below ours keeps it from being removed.
        std::fs::create_dir(root.join("ioshield/r1-42/foreign")).unwrap();
        // As a restarted daemon finds it: in the state file, and handed over as a leftover.
        let change = Change::CgroupCreated {
            restriction: 1,
            path: "/ioshield/r1-42".into(),
        };
        actuator.journal.record(change.clone()).unwrap();
        let report = actuator.recover(vec![change]).await;
        assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
        assert!(report.errors[0].contains("r1-42"));
        assert!(root.join("ioshield/r1-42").exists());
        // Not forgotten: still in the state file, and tried again once the obstacle is gone.
        assert_eq!(actuator.pending_undos(), 1);
        let (_, left) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(
            actuator.retry_pending().await,
            UndoReport::default(),
            "not due yet"
        );
        std::fs::remove_dir(root.join("ioshield/r1-42/foreign")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let again = actuator.retry_pending().await;
        assert!(again.errors.is_empty(), "{:?}", again.errors);
        assert!(!root.join("ioshield/r1-42").exists());
        assert_eq!(actuator.pending_undos(), 0);
        let (_, left) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
}
