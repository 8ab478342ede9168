//! Undos that failed are never forgotten: they stay in the state file and are tried again with
//! back-off until they work (or what they would undo is gone).
use std::time::{Duration, Instant};

use super::{Actuator, UndoReport};
use crate::journal::Change;

/// An undo that failed, waiting for its next try.
pub(super) struct Pending {
    change: Change,
    next_try: Instant,
    tries: u32,
}

/// Back-off between tries of a failed undo: 1 s, 2 s, 4 s, ... up to 5 minutes.
fn backoff(tries: u32) -> Duration {
    Duration::from_secs(1u64 << tries.min(8)).min(Duration::from_secs(300))
}

impl Actuator {
    /// After undoing `changes`: forgets those that were undone, keeps those that failed in the
    /// journal and queues them to be tried again.
    pub(super) fn settle(&mut self, changes: &[Change], report: &mut UndoReport) {
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
                    next_try: Instant::now() + backoff(0),
                    tries: 1,
                });
            }
        }
    }

    /// Tries failed undos again whose back-off has passed. Returns what this attempt did.
    pub async fn retry_pending(&mut self) -> UndoReport {
        let now = Instant::now();
        let due: Vec<Change> = self
            .pending
            .iter()
            .filter(|p| p.next_try <= now)
            .map(|p| p.change.clone())
            .collect();
        let mut total = UndoReport::default();
        for change in due {
            let mut report = self.undo(std::slice::from_ref(&change)).await;
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
}
