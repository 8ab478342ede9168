//! The backlog guard: a cap on one disk's dirty data that the kernel enforces on every writer
//! from its first write (`max_bytes` with `strict_limit` in `/sys/class/bdi/M:m/`, Linux 6.2 and
//! later). Set while the daemon runs, for disks whose policy asks for it; the knobs' values from
//! before are journaled first and written back on exit, when the policy drops it, and after a
//! crash. `max_bytes` is written (the kernel turns it into a ratio of the global dirty
//! threshold), `max_ratio_fine` is what is restored: it reads back exactly.
use anyhow::{Context as _, Result, anyhow};

use super::{Actuator, UndoReport};
use crate::{
    journal::Change,
    system::{bdi, devices::DevId},
};

impl Actuator {
    /// Caps `dev`'s dirty data at `bytes`, or moves the cap the guard set before.
    pub fn guard_backlog(&mut self, dev: DevId, bytes: u64) -> Result<()> {
        let device = dev.to_string();
        let dir = bdi::knobs_dir(&self.bdi_root, dev);
        let before = bdi::dirty_limits(&self.bdi_root, dev)
            .ok_or_else(|| anyhow!("no per-disk byte limits (Linux 6.2 and later)"))?;
        if !self.guarded(&device) {
            self.journal.record(Change::BacklogGuard {
                device: device.clone(),
                strict_limit: before.strict_limit,
                max_ratio_fine: before.max_ratio_fine,
            })?;
        }
        write_knob(&dir, "max_bytes", &bytes.to_string())?;
        write_knob(&dir, "strict_limit", "1")
    }

    /// Lifts the guard from `dev` (its policy no longer asks for one).
    pub fn unguard_backlog(&mut self, dev: DevId) -> UndoReport {
        let device = dev.to_string();
        let changes: Vec<Change> = self
            .journal
            .changes()
            .iter()
            .filter(|c| matches!(c, Change::BacklogGuard { device: d, .. } if *d == device))
            .cloned()
            .collect();
        let mut report = UndoReport::default();
        for c in &changes {
            self.undo_backlog_guard(c, &mut report);
        }
        self.settle(&changes, &mut report);
        report
    }

    fn guarded(&self, device: &str) -> bool {
        self.journal
            .changes()
            .iter()
            .any(|c| matches!(c, Change::BacklogGuard { device: d, .. } if d == device))
    }

    /// Writes back a disk's dirty limits from before the guard, unless someone turned the
    /// strict limit off meanwhile (then the knobs are theirs).
    pub(super) fn undo_backlog_guard(&self, change: &Change, r: &mut UndoReport) {
        let Change::BacklogGuard {
            device,
            strict_limit,
            max_ratio_fine,
        } = change
        else {
            return;
        };
        let Some(dev) = DevId::parse(device) else {
            return r.fail(change, format!("`{device}` is not a device number"));
        };
        let dir = bdi::knobs_dir(&self.bdi_root, dev);
        let Some(now) = bdi::dirty_limits(&self.bdi_root, dev) else {
            // The disk is gone (unplugged): its knobs went with it.
            r.vanished += 1;
            return;
        };
        if !now.strict_limit {
            r.kept.push(format!(
                "{device}: strict_limit turned off by someone else, dirty limits left as they are"
            ));
            return;
        }
        let restored = write_knob(&dir, "max_ratio_fine", &max_ratio_fine.to_string())
            .and_then(|()| write_knob(&dir, "strict_limit", if *strict_limit { "1" } else { "0" }));
        match restored {
            Ok(()) => r.restored += 1,
            Err(e) => r.fail(change, format!("restoring disk {device}: {e:#}")),
        }
    }
}

fn write_knob(dir: &std::path::Path, name: &str, value: &str) -> Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Journal;

    /// A BDI as the kernel shows it before anyone touched it: no strict limit, the whole dirty
    /// threshold allowed.
    fn setup() -> (tempfile::TempDir, Actuator, DevId) {
        let dir = tempfile::tempdir().unwrap();
        let dev = DevId::parse("254:16").unwrap();
        let knobs = dir.path().join("bdi/254:16");
        std::fs::create_dir_all(&knobs).unwrap();
        for (k, v) in [
            ("max_bytes", "700000000"),
            ("max_ratio_fine", "1000000"),
            ("strict_limit", "0"),
        ] {
            std::fs::write(knobs.join(k), v).unwrap();
        }
        let (journal, _) = Journal::open(&dir.path().join("state.json")).unwrap();
        let mut actuator = Actuator::new(journal, None, None);
        actuator.bdi_root = dir.path().join("bdi");
        (dir, actuator, dev)
    }

    fn knob(dir: &tempfile::TempDir, name: &str) -> String {
        std::fs::read_to_string(dir.path().join("bdi/254:16").join(name)).unwrap()
    }

    #[tokio::test]
    async fn the_guard_is_journaled_once_and_restored_on_exit() {
        let (dir, mut actuator, dev) = setup();
        actuator.guard_backlog(dev, 8_000_000).unwrap();
        assert_eq!(knob(&dir, "max_bytes"), "8000000");
        assert_eq!(knob(&dir, "strict_limit"), "1");
        // The kernel's view of the cap afterwards, as it would show it.
        std::fs::write(dir.path().join("bdi/254:16/max_ratio_fine"), "11428").unwrap();
        actuator.guard_backlog(dev, 9_000_000).unwrap();
        assert_eq!(knob(&dir, "max_bytes"), "9000000");
        assert_eq!(
            actuator.journal.changes(),
            [Change::BacklogGuard {
                device: "254:16".into(),
                strict_limit: false,
                max_ratio_fine: 1_000_000,
            }],
            "what was there before the first write, once"
        );
        let report = actuator.release_all().await;
        assert_eq!(report.restored, 1, "{report:?}");
        assert_eq!(knob(&dir, "max_ratio_fine"), "1000000");
        assert_eq!(knob(&dir, "strict_limit"), "0");
        assert!(actuator.journal.changes().is_empty());
    }

    #[tokio::test]
    async fn a_strict_limit_turned_off_by_someone_else_is_theirs() {
        let (dir, mut actuator, dev) = setup();
        actuator.guard_backlog(dev, 8_000_000).unwrap();
        std::fs::write(dir.path().join("bdi/254:16/strict_limit"), "0").unwrap();
        std::fs::write(dir.path().join("bdi/254:16/max_ratio_fine"), "500000").unwrap();
        let report = actuator.unguard_backlog(dev);
        assert_eq!(report.kept.len(), 1, "{report:?}");
        assert_eq!(knob(&dir, "max_ratio_fine"), "500000");
        assert!(actuator.journal.changes().is_empty());
    }

    #[tokio::test]
    async fn a_crashed_daemons_guard_is_undone_and_an_unplugged_disks_is_forgotten() {
        let (dir, mut actuator, dev) = setup();
        actuator.guard_backlog(dev, 8_000_000).unwrap();
        let left = actuator.journal.changes().to_vec();
        let (journal, leftovers) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert_eq!(leftovers, left);
        let mut next = Actuator::new(journal, None, None);
        next.bdi_root = dir.path().join("bdi");
        let report = next.recover(leftovers).await;
        assert_eq!(report.restored, 1, "{report:?}");
        assert_eq!(knob(&dir, "strict_limit"), "0");
        // Guarded again, then the disk goes away: nothing to restore, nothing kept pending.
        next.guard_backlog(dev, 8_000_000).unwrap();
        std::fs::remove_dir_all(dir.path().join("bdi/254:16")).unwrap();
        let report = next.unguard_backlog(dev);
        assert_eq!(report.vanished, 1, "{report:?}");
        assert_eq!(next.pending_undos(), 0);
        assert!(next.journal.changes().is_empty());
    }

    #[test]
    fn a_kernel_without_byte_limits_is_refused_and_nothing_is_journaled() {
        let (dir, mut actuator, dev) = setup();
        std::fs::remove_file(dir.path().join("bdi/254:16/max_bytes")).unwrap();
        let e = actuator.guard_backlog(dev, 8_000_000).unwrap_err();
        assert!(e.to_string().contains("6.2"), "{e}");
        assert!(actuator.journal.changes().is_empty());
    }
}
