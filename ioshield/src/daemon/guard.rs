//! Which disks carry a backlog guard (`max_dirty`) and how large: the cap each disk's policy asks
//! for at the speed writers are judged against, set through the actuator when it first applies,
//! moved when that speed moves a lot, lifted when the policy drops it.
use std::collections::{HashMap, HashSet};

use crate::{
    act::Actuator,
    display::show_bytes,
    system::devices::{self, DevId, Disk},
};

/// A cap is moved only when the speed it comes from moved by more than this: every write of
/// `max_bytes` makes the kernel recompute the disk's dirty limits.
const MOVE_AT: f64 = 0.2;

#[derive(Default)]
pub struct BacklogGuards {
    /// The machine's whole disks, looked up again now and then (a USB stick plugged in).
    disks: Vec<Disk>,
    applied: HashMap<DevId, u64>,
    /// Disks the guard could not be set on, said once per configuration.
    refused: HashSet<DevId>,
}

/// What a disk's policy asks for: the cap, and how it came about, for the log.
pub struct Wanted {
    pub bytes: u64,
    pub why: String,
}

impl BacklogGuards {
    pub fn rescan(&mut self) {
        self.disks = devices::whole_disks();
    }

    pub fn disks(&self) -> &[Disk] {
        &self.disks
    }

    /// A new configuration: refusals are said again, caps recomputed.
    pub fn reconfigured(&mut self) {
        self.refused.clear();
    }

    pub fn any_applied(&self) -> bool {
        !self.applied.is_empty()
    }

    pub fn applied(&self, dev: DevId) -> Option<u64> {
        self.applied.get(&dev).copied()
    }

    /// Sets, moves or lifts the guard on `disk` to what is `wanted` (or why there is none).
    pub fn update(&mut self, disk: &Disk, wanted: Result<Wanted, &str>, actuator: &mut Actuator) {
        let current = self.applied.get(&disk.id).copied();
        match (wanted, current) {
            (Err(_), None) => {}
            (Err(why), Some(_)) => {
                self.applied.remove(&disk.id);
                let report = actuator.unguard_backlog(disk.id);
                for e in &report.errors {
                    tracing::warn!(
                        "{}: lifting the backlog guard: {e} (tried again later)",
                        disk.label()
                    );
                }
                for k in &report.kept {
                    tracing::info!("{}: {k}", disk.label());
                }
                if report.restored > 0 {
                    tracing::info!(
                        "{}: backlog guard lifted ({why}), dirty limits restored",
                        disk.label()
                    );
                }
            }
            (Ok(w), Some(now)) if (w.bytes as f64 / now as f64 - 1.0).abs() <= MOVE_AT => {}
            (Ok(w), _) => {
                if self.refused.contains(&disk.id) {
                    return;
                }
                match actuator.guard_backlog(disk.id, w.bytes) {
                    Ok(()) => {
                        tracing::info!(
                            "{}: backlog guard: the disk's dirty data capped at {} ({})",
                            disk.label(),
                            show_bytes(w.bytes),
                            w.why
                        );
                        self.applied.insert(disk.id, w.bytes);
                    }
                    Err(e) => {
                        tracing::warn!("{}: max_dirty not applied: {e:#}", disk.label());
                        self.refused.insert(disk.id);
                    }
                }
            }
        }
    }
}
