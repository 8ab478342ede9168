//! The idle I/O class on every thread of a subtree, recorded before it is set, and kept complete
//! as threads and children are born inside the restriction.
use std::collections::HashSet;

use anyhow::Result;

use super::{Active, Actuator, Method, identity, identity::PidFd, ioprio};
use crate::{
    journal::{Change, Identity},
    system::procfs,
};

impl Actuator {
    pub(super) fn demote_all(
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

    pub(super) fn demote_process(&mut self, id: u64, pid: u32) -> Result<()> {
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
}
