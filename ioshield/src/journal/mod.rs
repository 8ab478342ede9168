//! The journal of changes: every change ioshield makes to the system is written here *before* it
//! is made, with what to restore and an identity that survives pid reuse. A restarted daemon reads
//! what a crashed (or SIGKILLed) one left and undoes it.
mod trust;

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

/// A process or thread as it was when we changed it: the id plus its start time (clock ticks
/// since boot), so a recycled id is never mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    pub id: u32,
    pub start_time: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A thread's I/O priority was set to `applied`; restore `previous` unless someone else changed
    /// it meanwhile.
    Ioprio {
        restriction: u64,
        thread: Identity,
        previous: u16,
        applied: u16,
    },
    /// A cgroup ioshield created (and must remove).
    CgroupCreated { restriction: u64, path: PathBuf },
    /// A controller ioshield enabled in a cgroup's `cgroup.subtree_control`.
    ControllerEnabled { path: PathBuf, controller: String },
    /// Processes moved into a transient systemd scope: a held scope's others, unlimited (older
    /// versions also split a writer off its unit, with write limits on `device`, which the undo
    /// of their journals still lifts).
    SystemdScope {
        restriction: u64,
        unit: String,
        device: String,
        members: Vec<Identity>,
        /// The user whose systemd holds the scope; none: PID 1.
        #[serde(default)]
        user: Option<u32>,
    },
    /// A unit's write limits were changed in place (through systemd); put back `previous`.
    UnitLimits {
        restriction: u64,
        unit: String,
        previous: crate::act::systemd::UnitLimits,
        /// The user whose systemd owns the unit; none: PID 1.
        #[serde(default)]
        user: Option<u32>,
    },
    /// iocost turned on for a disk (`major:minor`) with ioshield's model and QoS; put back the
    /// disk's `io.cost.model` and `io.cost.qos` lines as they were (`None`: the kernel had not
    /// set iocost up for the disk: off, the kernel's own model).
    Iocost {
        restriction: u64,
        device: String,
        model: Option<String>,
        qos: Option<String>,
    },
    /// The disk's (`major:minor`) dirty data capped by its BDI's `max_bytes` with `strict_limit`
    /// for as long as the daemon runs; put back `strict_limit` and `max_ratio_fine`.
    BacklogGuard {
        device: String,
        strict_limit: bool,
        max_ratio_fine: u64,
    },
    /// A process moved from cgroup `from` into `to`.
    CgroupMove {
        restriction: u64,
        process: Identity,
        from: PathBuf,
        to: PathBuf,
    },
}

impl Change {
    pub fn restriction(&self) -> Option<u64> {
        match self {
            Change::Ioprio { restriction, .. }
            | Change::CgroupCreated { restriction, .. }
            | Change::SystemdScope { restriction, .. }
            | Change::UnitLimits { restriction, .. }
            | Change::Iocost { restriction, .. }
            | Change::CgroupMove { restriction, .. } => Some(*restriction),
            Change::ControllerEnabled { .. } | Change::BacklogGuard { .. } => None,
        }
    }
}

/// Bumped when `Change` changes shape; entries of other versions are read one by one and
/// those that no longer parse are dropped with a warning.
pub(super) const VERSION: u32 = 2;

#[derive(Default, Serialize, Deserialize)]
struct State {
    #[serde(default)]
    version: u32,
    /// The boot the changes were made in: after a reboot there is nothing left to undo.
    #[serde(default)]
    boot_id: String,
    changes: Vec<Change>,
}

pub struct Journal {
    path: PathBuf,
    state: State,
}

impl Journal {
    /// Opens the journal at `path`, returning it plus whatever a previous instance left that
    /// ioshield itself could have made. A file that cannot be read as a state file is moved
    /// aside (and the log says where) instead of stopping the daemon: a start-up that fails on
    /// it would loop under Restart= and never undo anything.
    pub fn open(path: &Path) -> Result<(Journal, Vec<Change>)> {
        let boot_id = crate::system::host::boot_id();
        let leftovers = match std::fs::read(path) {
            Ok(bytes) => match trust::leftovers(&bytes, &boot_id, path) {
                Ok(changes) => changes,
                Err(e) => {
                    trust::quarantine(path, &e);
                    Vec::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating state directory {}", dir.display()))?;
        }
        let journal = Journal {
            path: path.to_path_buf(),
            // Keep the leftovers on disk until they are undone: a crash during recovery must not
            // forget them.
            state: State {
                version: VERSION,
                boot_id,
                changes: leftovers.clone(),
            },
        };
        Ok((journal, leftovers))
    }

    pub fn changes(&self) -> &[Change] {
        &self.state.changes
    }

    /// Records `change` durably; only then may the caller make it.
    pub fn record(&mut self, change: Change) -> Result<()> {
        self.state.changes.push(change);
        self.persist()
    }

    /// Forgets changes that were undone (or never happened).
    pub fn forget(&mut self, undone: impl Fn(&Change) -> bool) -> Result<()> {
        let before = self.state.changes.len();
        self.state.changes.retain(|c| !undone(c));
        if self.state.changes.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Changes recorded entries in place (`change` says whether it changed one), durably.
    pub fn update(&mut self, mut change: impl FnMut(&mut Change) -> bool) -> Result<()> {
        let mut changed = false;
        for c in &mut self.state.changes {
            changed |= change(c);
        }
        if changed {
            self.persist()?;
        }
        Ok(())
    }

    /// Records several changes with one write of the state file (a writer with thousands of
    /// threads must not cost thousands of rewrites); only then may the caller make them.
    pub fn record_all(&mut self, changes: impl IntoIterator<Item = Change>) -> Result<()> {
        let before = self.state.changes.len();
        self.state.changes.extend(changes);
        if self.state.changes.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    fn persist(&self) -> Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("writing state file {}", tmp.display()))?;
        f.write_all(serde_json::to_string_pretty(&self.state)?.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("replacing state file {}", self.path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_survive_a_restart_until_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/state.json");
        let (mut j, left) = Journal::open(&path).unwrap();
        assert!(left.is_empty());
        let change = Change::Ioprio {
            restriction: 1,
            thread: Identity {
                id: 42,
                start_time: 7,
            },
            previous: 0,
            applied: 3 << 13,
        };
        j.record(change.clone()).unwrap();
        drop(j);
        let (mut j, left) = Journal::open(&path).unwrap();
        assert_eq!(left, vec![change]);
        j.forget(|c| c.restriction() == Some(1)).unwrap();
        let (_, left) = Journal::open(&path).unwrap();
        assert!(left.is_empty());
    }

    #[test]
    fn a_corrupt_state_file_is_moved_aside_and_start_up_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{not json").unwrap();
        let (mut j, left) = Journal::open(&path).unwrap();
        assert!(left.is_empty());
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("state.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1, "kept for a person to look at");
        // Truncated in the middle of an entry: the same.
        j.record(Change::ControllerEnabled {
            path: "/".into(),
            controller: "io".into(),
        })
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        let (_, left) = Journal::open(&path).unwrap();
        assert!(left.is_empty());
    }
}
