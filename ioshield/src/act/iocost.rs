//! iocost on a disk for as long as a restriction there needs it. With iocost on, the offender's
//! cgroup gets `io.weight` 1 instead of an `io.max` limit: it is held back only while others
//! want the disk, and otherwise writes as fast as its `memory.high` lets it: alone, the weight
//! without `memory.high` wrote at the model on 6.12, 80-108% of it on 6.1 (docs/bench/
//! candidates-6.12.md, lone-writer.md).
//! iocost needs a model of what the disk can do. Once the disk's speed is measured, ioshield
//! writes a linear model of it and pins the virtual rate at 100% of it, the setting the bench
//! measured. Before that, the model is the assumed slow disk's and the kernel's latency control
//! moves the rate (50 ms at the 95th percentile) up to the model, until the probe forces it up
//! (`daemon::speed_probe`): on the 6.12 bed that held the committing load's longest pause to
//! 0.49 (0.46-0.74) s from the first restriction, buffered writers' to 0.31-0.32 s, where `io.max`
//! from the assumed speed left 1-3 s (docs/bench/iocost-adaptive.md, iocost-ceiling.md). The disk's
//! previous settings are journaled first; its previous `io.cost.qos` is written back after the
//! release (`LINGER_MAX`), the model set up ahead staying for the next restriction, and both on
//! exit and after a crash.
use anyhow::{Result, anyhow};
use tokio::sync::oneshot::error::TryRecvError;

use super::{
    Actuator, UndoReport, WriteControl,
    cgroup::Cgroupfs,
    iocost_writer::{IocostWrites, Made},
};
use crate::{
    journal::Change,
    system::{
        cgroups::{self, IocostLines},
        devices::DevId,
    },
};

/// The `io.cost.qos` ioshield writes for a measured disk, as the kernel prints it back: on,
/// user-set, the virtual rate pinned at 100% of the model. Also how a restarted daemon or the
/// undo recognises the setting as ioshield's.
pub const QOS: &str =
    "enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=100.00 max=100.00";
/// The latency targets of [`QOS`], also those of a disk not yet measured while its rate is held
/// ([`Vrate::Held`]). They set how often iocost hands out budgets (twice the target: 10 ms):
/// cgroups issue in short slices, and the disk's queue stays short. On the 6.12 bed (30 MB/s
/// disk, a writer held at the assumed 25 MB/s) the committing load's longest pause while held
/// was 0.30-0.32 s under these targets against 0.43-0.86 s (median 0.51 s, 11 runs) under the
/// rate control's 50 ms ones, whose 100 ms slices let the writer burst
/// (docs/bench/speed-probe.md, stop 27).
const HELD_QOS: &str = "enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000";

/// The `io.cost.qos` for a disk not yet measured, up to the range of rates (`min=`, `max=`): the
/// kernel lowers the virtual rate while more than 5% of reads or writes take over 50 ms on the
/// disk (a queue building up), and raises it while cgroups wait for vtime and the disk keeps
/// within that. 50 ms is a few large writes on a slow disk.
const ADAPTIVE_QOS: &str = "enable=1 ctrl=user rpct=95.00 rlat=50000 wpct=95.00 wlat=50000";
/// The lowest rate the latency control may choose, in percent of the model: a disk four times
/// slower than the assumed one (a cheap USB stick) is still reached.
const ADAPTIVE_MIN_PCT: u32 = 25;
/// The kernel's own bounds of the rate, in percent.
const VRATE_RANGE: (u32, u32) = (1, 10_000);

/// How ioshield's iocost sets the disk's virtual rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vrate {
    /// At 100% of a model of the disk's measured speed.
    Pinned,
    /// A disk not yet measured: the rate held at `pct`% of the model (the assumed speed, or a
    /// lower bound), under the latency targets of a measured disk.
    Held { pct: u32 },
    /// Left to the kernel's latency control, between `min_pct`% and `max_pct`% of the model.
    Adaptive { min_pct: u32, max_pct: u32 },
}

/// The iocost ioshield turns on for a disk: a linear model of `wbps` bytes per second and how
/// the rate follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    pub wbps: u64,
    pub vrate: Vrate,
}

impl Model {
    pub fn pinned(wbps: u64) -> Model {
        Model {
            wbps,
            vrate: Vrate::Pinned,
        }
    }

    /// A disk not yet measured, its rate held at the model.
    pub fn held(wbps: u64) -> Model {
        Model {
            wbps,
            vrate: Vrate::Held { pct: 100 },
        }
    }

    pub fn adaptive(wbps: u64, min_pct: u32, max_pct: u32) -> Model {
        let min_pct = min_pct.clamp(VRATE_RANGE.0, VRATE_RANGE.1);
        Model {
            wbps,
            vrate: Vrate::Adaptive {
                min_pct,
                max_pct: max_pct.clamp(min_pct, VRATE_RANGE.1),
            },
        }
    }

    /// The fastest the disk is let write: the model, or the highest rate the kernel may
    /// choose.
    pub fn rate(&self) -> u64 {
        match self.vrate {
            Vrate::Pinned => self.wbps,
            Vrate::Held { pct } => self.share(pct),
            Vrate::Adaptive { max_pct, .. } => self.share(max_pct),
        }
    }

    /// The lowest and highest rate the kernel may choose, on a disk not yet measured.
    pub fn range(&self) -> Option<(u64, u64)> {
        match self.vrate {
            Vrate::Pinned => None,
            Vrate::Held { pct } => Some((self.share(pct), self.share(pct))),
            Vrate::Adaptive { min_pct, max_pct } => {
                Some((self.share(min_pct), self.share(max_pct)))
            }
        }
    }

    fn share(&self, pct: u32) -> u64 {
        (u128::from(self.wbps) * u128::from(pct) / 100).min(u128::from(u64::MAX)) as u64
    }

    fn pct(&self, wbps: u64) -> u32 {
        let pct = u128::from(wbps) * 100 / u128::from(self.wbps.max(1));
        pct.min(u128::from(VRATE_RANGE.1)) as u32
    }

    /// The same model whose rate may not fall below `wbps` (a lower bound of the disk's speed)
    /// nor, then, stay capped under it; a pinned rate stays as it is.
    pub fn at_least(self, wbps: u64) -> Model {
        match self.vrate {
            Vrate::Pinned => self,
            Vrate::Held { pct } => Model {
                vrate: Vrate::Held {
                    pct: pct.max(self.pct(wbps)),
                },
                ..self
            },
            Vrate::Adaptive { max_pct, .. } => {
                let min_pct = self.pct(wbps);
                Model::adaptive(self.wbps, min_pct, max_pct.max(min_pct))
            }
        }
    }

    /// The same model whose rate may rise to `wbps` (never under its lowest rate); a pinned
    /// or held rate stays as it is.
    pub fn up_to(self, wbps: u64) -> Model {
        match self.vrate {
            Vrate::Pinned | Vrate::Held { .. } => self,
            Vrate::Adaptive { min_pct, .. } => Model::adaptive(self.wbps, min_pct, self.pct(wbps)),
        }
    }

    /// A held rate handed to the kernel's latency control, up to the rate it was held at: its
    /// longer slices let the writer burst, and how long the disk then keeps writes in flight
    /// shows whether it has room (`daemon::speed_probe`). Other models as they are.
    ///
    /// Not above the held rate: left to rise as the kernel saw fit (up to its own 10000%), the
    /// rate went past the bed's 30 MB/s disk while the writer waited and the innocents paused
    /// longer: on 6.12, 3 runs of preset iocost with the 25 MB/s model, the committing load's
    /// longest pause was 0.37 (0.30-0.55) s with `max=100` against 0.48 (0.43-0.76) s with
    /// `max=10000`, the writer 0.73x against 0.77x of its unmitigated speed
    /// (docs/bench/iocost-ceiling.md). The probe raises it from what the disk has shown.
    pub fn listening(self) -> Model {
        match self.vrate {
            Vrate::Held { pct } => Model::adaptive(self.wbps, ADAPTIVE_MIN_PCT.min(pct), pct),
            _ => self,
        }
    }

    /// A rate left to the kernel's latency control (a probe's window) held again at the top
    /// of its range; `None` for any other model (a forced rate has no range).
    pub fn closed(self) -> Option<Model> {
        match self.vrate {
            Vrate::Adaptive { min_pct, max_pct } if min_pct < max_pct => Some(Model {
                vrate: Vrate::Held { pct: max_pct },
                ..self
            }),
            _ => None,
        }
    }

    /// The `io.cost.qos` line (without the device), as the kernel prints it.
    pub fn qos_line(&self) -> String {
        match self.vrate {
            Vrate::Pinned => QOS.to_string(),
            Vrate::Held { pct } => format!("{HELD_QOS} min={pct}.00 max={pct}.00"),
            Vrate::Adaptive { min_pct, max_pct } => {
                format!("{ADAPTIVE_QOS} min={min_pct}.00 max={max_pct}.00")
            }
        }
    }

    /// How the model reads in logs: "disk modelled at 25.0MB/s".
    pub fn describe(&self, show: impl Fn(u64) -> String) -> String {
        match self.vrate {
            Vrate::Pinned => format!("disk modelled at {}", show(self.wbps)),
            Vrate::Held { pct } => format!(
                "disk not measured: modelled at {}, the rate held at {}",
                show(self.wbps),
                show(self.share(pct))
            ),
            Vrate::Adaptive { min_pct, max_pct } if min_pct == max_pct => format!(
                "disk not measured: modelled at {}, the rate held at {}",
                show(self.wbps),
                show(self.share(min_pct))
            ),
            Vrate::Adaptive { min_pct, max_pct } => format!(
                "disk not measured: modelled at {}, the kernel's latency control setting the rate \
                 between {} and {}",
                show(self.wbps),
                show(self.share(min_pct)),
                show(self.share(max_pct))
            ),
        }
    }
}

/// How long iocost stays on for a disk after the restriction that turned it on ended, at most,
/// waiting for the released writer's backlog to be written (`daemon::engine` says when):
/// turning iocost off freezes the disk's request queue until every request in flight completes,
/// and lets the writer's last pages, held in iocost's queue until then, go at full speed (the
/// worst 6.12 bench runs paused 0.7-1.2 s right at the release; docs/bench/iocost-adaptive.md).
pub const LINGER_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// The range of write speeds a model is written with (a configured `bandwidth` may lie outside
/// it); the kernel needs at least one page per second.
const MODEL_MIN_BPS: u64 = 1_000_000;
const MODEL_MAX_BPS: u64 = 1_000_000_000_000;
/// Reads are not what ioshield is about: a model made from the disk's write speed must not slow
/// them, so they are costed as a fast disk's.
const READ_BPS: u64 = 1_000_000_000;
const READ_IOPS: u64 = 100_000;

/// The `io.cost.model` line (without the device) for a disk that writes `wbps` bytes per
/// second: a 4 KiB write costs as much per I/O as per byte, as a hand-made model for the test
/// bed's disk did (wbps 25 MB/s, 6000 IOPS).
pub fn model_line(wbps: u64) -> String {
    let wbps = wbps.clamp(MODEL_MIN_BPS, MODEL_MAX_BPS);
    let wiops = (wbps / 4096).max(1);
    format!(
        "ctrl=user model=linear rbps={} rseqiops={} rrandiops={} wbps={wbps} wseqiops={wiops} \
         wrandiops={wiops}",
        READ_BPS.max(wbps),
        READ_IOPS.max(wiops),
        READ_IOPS.max(wiops)
    )
}

/// A disk's iocost as ioshield finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The kernel has no iocost.
    Unavailable,
    Off,
    /// Turned on by ioshield (its [`QOS`]).
    Ours,
    /// Turned on by someone else (an administrator, systemd's udev helper): used as it is.
    Foreign,
}

pub fn state(root: &std::path::Path, dev: DevId) -> State {
    match cgroups::iocost_lines(root, dev) {
        None => State::Unavailable,
        Some(l) if !l.enabled() => State::Off,
        Some(l) if l.qos.as_deref().is_some_and(is_ours) => State::Ours,
        Some(_) => State::Foreign,
    }
}

/// Whether `qos` is a line [`Model::qos_line`] writes: the pinned one, a held rate, or the rate
/// control's with whatever range of rates the probe had reached.
fn is_ours(qos: &str) -> bool {
    let line = normalised(qos);
    let percent = |field: &str, key: &str| {
        field
            .strip_prefix(key)
            .and_then(|v| v.strip_suffix(".00"))
            .is_some_and(|v| v.parse::<u32>().is_ok())
    };
    // The pinned line is the held one at 100%.
    line.strip_prefix(ADAPTIVE_QOS)
        .or_else(|| line.strip_prefix(HELD_QOS))
        .and_then(|rest| rest.strip_prefix(' '))
        .and_then(|rest| rest.split_once(' '))
        .is_some_and(|(min, max)| percent(min, "min=") && percent(max, "max="))
}

impl Actuator {
    /// Sets iocost up on `dev`, off, with the model a restriction there would turn it on with,
    /// so that the restriction only has to turn it on. Each `io.cost.*` write freezes the disk's
    /// queue until its writes in flight complete: on 6.12 the model took 36-59 ms and the
    /// `io.cost.qos` that turns iocost on 38-52 ms, while the first offender's pages were being
    /// written (docs/bench/apply.md); the first write of a disk also makes the kernel set
    /// iocost up (71-84 ms). Off, the model changes nothing: the kernel reads it only while
    /// iocost is on. Journaled like the rest and put back at exit (a release only turns iocost
    /// off again, [`Actuator::settle_lingering`]). A disk whose iocost is on, or has a model of
    /// someone else's, is left as it is; so is one ioshield has set up already.
    pub fn prepare_iocost(&mut self, dev: DevId, model: Model) {
        let Some(fs) = self.iocost_root() else {
            return;
        };
        let device = dev.to_string();
        let Some(before) = cgroups::iocost_lines(&fs.root, dev) else {
            return;
        };
        let automatic = before.model.as_deref().is_none_or(is_auto);
        if self.iocost_journaled(&device) || before.enabled() || !automatic {
            return;
        }
        let change = iocost_entry(super::SHARED, &device, &before);
        if let Err(e) = self.journal.record(change.clone()) {
            tracing::warn!("{dev}: iocost not set up ahead: {e:#}");
            return;
        }
        let line = format!("{device} {}", model_line(model.wbps));
        match fs.write_file(std::path::Path::new("/"), "io.cost.model", &line) {
            Ok(()) => tracing::info!(
                "{dev}: iocost set up, off, modelled at {}, ahead of a restriction there",
                crate::display::show_rate(model.wbps as f64)
            ),
            Err(e) => {
                tracing::debug!("{dev}: setting iocost up: {e}");
                if let Err(e) = self.journal.forget(|c| *c == change) {
                    tracing::warn!("updating the state file: {e:#}");
                }
            }
        }
    }

    /// Moves the model of the iocost ioshield set up, off ([`Actuator::prepare_iocost`]), to
    /// `model` when the disk's speed has moved more than [`KEPT_MODEL_SLACK`] from it, so that
    /// the next restriction finds the model in place. The caller does this while the disk is
    /// quiet: the write freezes the disk's queue until its writes in flight complete, which at
    /// a restriction of the e2e's user unit took 1557 ms on a busy disk whose measured speed
    /// had fallen from 26.3 to 18.2 MB/s since the set-up. Nothing moves while a restriction
    /// holds iocost there, while iocost is on, or when the model is not ioshield's.
    pub fn refresh_iocost_model(&mut self, dev: DevId, model: Model) {
        let Some(fs) = self.iocost_root() else {
            return;
        };
        let device = dev.to_string();
        let Some(before) = cgroups::iocost_lines(&fs.root, dev) else {
            return;
        };
        let held = self.journal.changes().iter().any(|c| {
            matches!(c, Change::Iocost { device: d, restriction, .. }
                if *d == device && *restriction != super::SHARED)
        });
        if held || before.enabled() {
            return;
        }
        let Some(have) = before.model.as_deref().and_then(our_model_wbps) else {
            return;
        };
        if close_enough(have, model.wbps) || !self.iocost_journaled(&device) {
            return;
        }
        let line = format!("{device} {}", model_line(model.wbps));
        match fs.write_file(std::path::Path::new("/"), "io.cost.model", &line) {
            Ok(()) => tracing::info!(
                "{dev}: iocost's model moved from {} to {}, off, for the next restriction there",
                crate::display::show_rate(have as f64),
                crate::display::show_rate(model.wbps as f64)
            ),
            Err(e) => tracing::debug!("{dev}: moving iocost's model: {e}"),
        }
    }

    /// Turns iocost on for `dev` with `model`, or moves the model and rate control of the iocost
    /// ioshield turned on. The disk's settings are journaled before the first write. Returns
    /// the model in place (see [`kept_model`]), or `None`, changing nothing, when iocost on the
    /// disk is someone else's. What a restriction does in two halves (`begin_hold`,
    /// `finish_hold`), in one call for the tests.
    #[cfg(test)]
    pub(super) fn set_iocost(
        &mut self,
        fs: &Cgroupfs,
        id: u64,
        dev: DevId,
        model: Model,
    ) -> Result<Option<Model>> {
        let Some((writes, model)) = self.plan_iocost(fs, id, dev, model)? else {
            return Ok(None);
        };
        writes.make(&mut self.stopwatch)?;
        Ok(Some(model))
    }

    /// What [`Actuator::set_iocost`] writes, journaled and not yet written: `None` when iocost
    /// on the disk is someone else's.
    fn plan_iocost(
        &mut self,
        fs: &Cgroupfs,
        id: u64,
        dev: DevId,
        model: Model,
    ) -> Result<Option<(IocostWrites, Model)>> {
        let device = dev.to_string();
        let before = cgroups::iocost_lines(&fs.root, dev)
            .ok_or_else(|| anyhow!("the kernel has no iocost"))?;
        // One restriction per disk at a time; a restriction that failed half-way leaves its
        // entry until exit, and the next one on the disk goes on with it.
        let recorded = self.iocost_journaled(&device);
        if before.enabled() && !(recorded && before.qos.as_deref().is_some_and(is_ours)) {
            // Someone else's, even when set as ioshield would set it or turned on over what
            // ioshield had set up.
            return Ok(None);
        }
        if recorded {
            // Set up ahead, or left on by an earlier restriction (`keep_iocost_on`): this one
            // takes it over and puts it back at its own release.
            self.lingering.remove(&device);
            self.journal.update(|c| match c {
                Change::Iocost {
                    restriction,
                    device: d,
                    ..
                } if *d == device && *restriction != id => {
                    *restriction = id;
                    true
                }
                _ => false,
            })?;
        } else {
            self.journal.record(iocost_entry(id, &device, &before))?;
        }
        let model = if before.enabled() {
            model
        } else {
            kept_model(before.model.as_deref(), model)
        };
        let line = model_line(model.wbps);
        // Also from the assumed speed's rate control to the measured speed's pinned rate.
        let qos = model.qos_line();
        let writes = IocostWrites {
            fs: fs.clone(),
            model: (before.model.as_deref().map(normalised) != Some(line.clone()))
                .then(|| format!("{device} {line}")),
            qos: (before.qos.as_deref() != Some(qos.as_str())).then(|| format!("{device} {qos}")),
        };
        Ok(Some((writes, model)))
    }

    /// Whether the journal holds ioshield's iocost set-up of `device`.
    fn iocost_journaled(&self, device: &str) -> bool {
        self.journal
            .changes()
            .iter()
            .any(|c| matches!(c, Change::Iocost { device: d, .. } if d == device))
    }

    /// Keeps the iocost a released restriction had turned on (its journal entries) until the
    /// disk is quiet (`settle_lingering`): the entries pass to the shared set-up, which exit and
    /// the next start after a crash put back like the rest.
    pub(super) fn keep_iocost_on(&mut self, entries: &[Change]) -> Result<()> {
        self.hand_iocost_to(entries, super::SHARED)?;
        for e in entries {
            if let Change::Iocost { device, .. } = e {
                self.lingering
                    .entry(device.clone())
                    .or_insert_with(std::time::Instant::now);
            }
        }
        Ok(())
    }

    /// Passes the iocost a released restriction held (its journal entries) to `heir`: another
    /// restriction of the same disk, which puts it back (or keeps it on) at its own release, or
    /// the shared set-up.
    pub(super) fn hand_iocost_to(&mut self, entries: &[Change], heir: u64) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.journal.update(|c| {
            if !entries.contains(c) {
                return false;
            }
            match c {
                Change::Iocost { restriction, .. } => {
                    *restriction = heir;
                    true
                }
                _ => false,
            }
        })
    }

    /// Turns iocost off again on disks no restriction holds any more, once `quiet` says the
    /// disk is (its writer's backlog written, about nothing in flight), or after
    /// [`LINGER_MAX`]. The model stays, so that the next restriction there only turns iocost on
    /// ([`Actuator::prepare_iocost`]); exit puts it back with the rest. iocost that someone
    /// else changed meanwhile is put back (or left) as any change.
    pub async fn settle_lingering(&mut self, quiet: impl Fn(DevId) -> bool) -> UndoReport {
        let due: Vec<String> = self
            .lingering
            .iter()
            .filter(|(device, since)| {
                since.elapsed() >= LINGER_MAX || DevId::parse(device).is_none_or(&quiet)
            })
            .map(|(device, _)| device.clone())
            .collect();
        if due.is_empty() {
            return UndoReport::default();
        }
        for d in &due {
            self.lingering.remove(d);
        }
        let changes: Vec<Change> = self
            .journal
            .changes()
            .iter()
            .filter(|c| matches!(c, Change::Iocost { device, .. } if due.contains(device)))
            .cloned()
            .collect();
        let mut report = UndoReport::default();
        let not_ours: Vec<Change> = changes
            .into_iter()
            .filter(|c| !self.turn_iocost_off(c, &mut report))
            .collect();
        // A turn-off that failed is tried again as a full undo; its entry stays until then.
        self.settle(&[], &mut report);
        let mut rest = self.undo(&not_ours).await;
        self.settle(&not_ours, &mut rest);
        report.merge(rest);
        report
    }

    /// Writes back the `io.cost.qos` from before `change` turned iocost on, where iocost is on
    /// with ioshield's settings, and keeps the entry: the disk's model stays set up. Returns
    /// false, writing nothing, where the disk's iocost is not as ioshield left it.
    fn turn_iocost_off(&self, change: &Change, r: &mut UndoReport) -> bool {
        let Change::Iocost { device, qos, .. } = change else {
            return false;
        };
        let (Some(fs), Some(dev)) = (self.iocost_root(), DevId::parse(device)) else {
            return false;
        };
        let now = cgroups::iocost_lines(&fs.root, dev).unwrap_or_default();
        if !now.qos.as_deref().is_some_and(is_ours)
            || !now.model.as_deref().is_some_and(is_our_model)
        {
            return false;
        }
        let line = format!("{device} {}", restoring_qos(qos.as_deref()));
        match fs.write_file(std::path::Path::new("/"), "io.cost.qos", &line) {
            Ok(()) => r.restored += 1,
            Err(e) => r.fail(change, format!("turning iocost off on {device}: {e}")),
        }
        true
    }

    /// `write` as it can be carried out on `dev`, begun: unchanged, with no model where the
    /// disk's iocost is someone else's, else iocost's settings journaled, and written by the
    /// [`IocostWriter`](super::iocost_writer::IocostWriter)'s thread while the caller places the
    /// offender; [`Actuator::finish_hold`] ends it (the fallback write limit where the writes
    /// fail). One after the other, turning iocost on (its `io.cost.qos` write freezes the disk's queue
    /// until the writes in flight complete: 48-60 ms on the 6.12 bench, 40-434 ms on the e2e's
    /// busy disk) and the move (a cgroup migration waits for an RCU grace period: 22-33 ms) or
    /// systemd's scope were most of the time a restriction took, while the offender dirtied
    /// on. Until the offender is in its cgroup, iocost on weighs nobody down: every other
    /// cgroup keeps its weight.
    pub(super) fn begin_hold(
        &mut self,
        fs: &Cgroupfs,
        id: u64,
        dev: DevId,
        write: WriteControl,
    ) -> PendingHold {
        let WriteControl::Weight {
            weight,
            model: Some(m),
            fallback,
        } = write
        else {
            return PendingHold::Ready(write);
        };
        let (writes, model) = match self.plan_iocost(fs, id, dev, m) {
            Ok(Some(planned)) => planned,
            Ok(None) => {
                return PendingHold::Ready(WriteControl::Weight {
                    weight,
                    model: None,
                    fallback,
                });
            }
            Err(e) => return PendingHold::Ready(cannot_turn_on(dev, &e, fallback)),
        };
        let held = WriteControl::Weight {
            weight,
            model: Some(model),
            fallback,
        };
        if writes.is_empty() {
            return PendingHold::Ready(held);
        }
        let task = match self.iocost_writer.hand_over(writes) {
            Ok(task) => task,
            Err(writes) => {
                return match writes.make(&mut self.stopwatch) {
                    Ok(()) => PendingHold::Ready(held),
                    Err(e) => PendingHold::Ready(cannot_turn_on(dev, &e, fallback)),
                };
            }
        };
        PendingHold::Writing {
            dev,
            held,
            fallback,
            task,
        }
    }

    /// The write control a [`Actuator::begin_hold`] ended with: as planned once iocost's writes
    /// are made, the fallback write limit where they failed. The wait for them is lapped as
    /// `iocost wait`, their own steps shown as done alongside.
    pub(super) async fn finish_hold(&mut self, pending: PendingHold) -> WriteControl {
        match pending {
            PendingHold::Ready(write) => write,
            PendingHold::Writing {
                dev,
                held,
                fallback,
                task,
            } => {
                let outcome = task.await.ok();
                self.held_after(dev, held, fallback, outcome, "iocost wait")
            }
        }
    }

    /// [`Actuator::finish_hold`] without waiting: `Err` gives `pending` back while its writes
    /// are still being made. The time since they were handed over is lapped as `step`.
    pub(super) fn try_finish_hold(
        &mut self,
        pending: PendingHold,
        step: &'static str,
    ) -> std::result::Result<WriteControl, PendingHold> {
        match pending {
            PendingHold::Ready(write) => Ok(write),
            PendingHold::Writing {
                dev,
                held,
                fallback,
                mut task,
            } => {
                let outcome = match task.try_recv() {
                    Ok(made) => Some(made),
                    Err(TryRecvError::Empty) => {
                        return Err(PendingHold::Writing {
                            dev,
                            held,
                            fallback,
                            task,
                        });
                    }
                    Err(TryRecvError::Closed) => None,
                };
                Ok(self.held_after(dev, held, fallback, outcome, step))
            }
        }
    }

    /// What the writes of a hold came to (`None`: their thread is gone).
    fn held_after(
        &mut self,
        dev: DevId,
        held: WriteControl,
        fallback: u64,
        outcome: Option<Made>,
        step: &'static str,
    ) -> WriteControl {
        self.stopwatch.lap(step);
        let Some((made, laps)) = outcome else {
            return cannot_turn_on(dev, &anyhow!("the iocost writer thread is gone"), fallback);
        };
        self.stopwatch.alongside(laps);
        match made {
            Ok(()) => held,
            Err(e) => cannot_turn_on(dev, &e, fallback),
        }
    }

    /// A restriction that failed after [`Actuator::begin_hold`] (its cgroup, move, unit or
    /// scope): once its writes are made, the iocost it turned on lingers as a released
    /// restriction's does, turned off when the disk is quiet with its model kept set up
    /// ([`Actuator::settle_lingering`]), so that no disk stays held for a restriction that
    /// never was. Undoing it at once would write the qos while the offender's backlog is being
    /// written (the write waits for the writes in flight) and throw away a model set up ahead
    /// or taken over from a release's linger, which the next restriction would then write
    /// again: 36-59 ms on the 6.12 bench, 1557 ms once on the e2e's busy disk.
    pub(super) async fn abandon_hold(&mut self, id: u64, pending: PendingHold) {
        self.finish_hold(pending).await;
        let ours: Vec<Change> = self
            .journal
            .changes()
            .iter()
            .filter(|c| matches!(c, Change::Iocost { restriction, .. } if *restriction == id))
            .cloned()
            .collect();
        if ours.is_empty() {
            return;
        }
        let Err(e) = self.keep_iocost_on(&ours) else {
            return;
        };
        tracing::warn!("updating the state file: {e:#}; putting iocost back at once");
        let mut report = self.undo(&ours).await;
        self.settle(&ours, &mut report);
        for e in &report.errors {
            tracing::warn!("putting iocost back after a failed restriction: {e}");
        }
    }

    /// The cgroup hierarchy whose root holds `io.cost.*`. On a systemd host too: those files
    /// exist on the root cgroup only, no unit owns them and systemd (PID 1) never writes them
    /// (from version 254 its udev helper may, at boot: that shows as someone else's iocost,
    /// used as it is). They are the one cgroup file ioshield writes itself there.
    pub(super) fn iocost_root(&self) -> Option<Cgroupfs> {
        self.cgroupfs
            .clone()
            .or_else(|| self.systemd.as_ref().map(super::Systemd::hierarchy))
    }

    /// Writes back a disk's iocost settings from before ioshield turned iocost on, unless
    /// someone changed them since.
    pub(super) fn undo_iocost(&self, change: &Change, r: &mut UndoReport) {
        let Change::Iocost {
            device, model, qos, ..
        } = change
        else {
            return;
        };
        let Some(fs) = &self.iocost_root() else {
            return r.fail(
                change,
                format!("no cgroup hierarchy to restore iocost on {device}"),
            );
        };
        let Some(dev) = DevId::parse(device) else {
            return r.fail(change, format!("`{device}` is not a device number"));
        };
        let now = cgroups::iocost_lines(&fs.root, dev).unwrap_or_default();
        let qos_ours = now.qos.as_deref().is_some_and(is_ours);
        // Off with ioshield's model: set up ahead, or turned off again after a release.
        let set_up = !now.enabled() && now.model.as_deref().is_some_and(is_our_model);
        if !qos_ours && !set_up {
            if now
                != (IocostLines {
                    model: model.clone(),
                    qos: qos.clone(),
                })
            {
                r.kept.push(format!(
                    "iocost on {device} was changed by someone else, left as is"
                ));
            }
            return;
        }
        let root = std::path::Path::new("/");
        let qos = restoring_qos(qos.as_deref());
        let model = restoring_model(model.as_deref());
        let result = if qos_ours {
            fs.write_file(root, "io.cost.qos", &format!("{device} {qos}"))
        } else {
            Ok(())
        }
        .and_then(|()| fs.write_file(root, "io.cost.model", &format!("{device} {model}")));
        match result {
            Ok(()) => r.restored += 1,
            Err(e) => r.fail(change, format!("restoring iocost on {device}: {e}")),
        }
    }
}

/// The journal entry of restriction `id`'s iocost on `device`, whose lines were `before`.
/// A hold by weight that cannot be: iocost would not turn on.
fn cannot_turn_on(dev: DevId, e: &anyhow::Error, fallback: u64) -> WriteControl {
    tracing::warn!("{dev}: cannot turn iocost on ({e:#}): a write limit instead");
    WriteControl::Limit(fallback)
}

/// A restriction's hold by iocost weight, its `io.cost.*` writes perhaps still being made.
pub(super) enum PendingHold {
    /// Nothing (more) to write.
    Ready(WriteControl),
    /// The writes handed to the [`IocostWriter`](super::iocost_writer::IocostWriter); `held` once they are made, `fallback` if they
    /// fail.
    Writing {
        dev: DevId,
        held: WriteControl,
        fallback: u64,
        task: tokio::sync::oneshot::Receiver<Made>,
    },
}

fn iocost_entry(id: u64, device: &str, before: &IocostLines) -> Change {
    Change::Iocost {
        restriction: id,
        device: device.to_string(),
        model: before.model.clone(),
        qos: before.qos.clone(),
    }
}

/// What to write to put back a disk's `io.cost.qos` line as it was. The kernel prints the
/// parameters of an automatic setting too, but takes any parameter written as a user setting
/// (seen in the e2e: writing back "enable=0 ctrl=auto rpct=0.00 ..." left "ctrl=user"), so an
/// automatic one is written as just that. A disk iocost had not been set up for (no line) gets
/// the kernel's defaults: off, automatic.
fn restoring_qos(previous: Option<&str>) -> String {
    match previous {
        Some(line) if !is_auto(line) => line.to_string(),
        Some(line) => {
            let enable = line
                .split_whitespace()
                .find(|w| w.starts_with("enable="))
                .unwrap_or("enable=0");
            format!("{enable} ctrl=auto")
        }
        None => "enable=0 ctrl=auto".into(),
    }
}

/// The same for `io.cost.model`: a user's model as it was, else the kernel's own.
fn restoring_model(previous: Option<&str>) -> String {
    match previous {
        Some(line) if !is_auto(line) => line.to_string(),
        _ => "ctrl=auto".into(),
    }
}

/// How far from the wanted speed a model set up ahead may be and still turn iocost on. Each
/// model write freezes the disk's queue until the writes in flight complete: in the e2e a
/// restriction of a user unit waited 1394 ms for one, its model set up at 23.8 MB/s and wanted
/// at 24.3 (the measured speed moves a little between backlogs). A restriction's retune
/// (`daemon::disk`) leaves a model for up to 20%; a restriction starts closer to the speed.
pub const KEPT_MODEL_SLACK: f64 = 0.05;

/// The model to turn iocost on with, given the disk's `io.cost.model` line: ioshield's own pinned
/// model (set up ahead, or left by the last restriction) where it is within [`KEPT_MODEL_SLACK`]
/// of `wanted`'s speed, else `wanted`. A rate held on a disk not yet measured is relative to its
/// model, so only a pinned model is kept.
fn kept_model(line: Option<&str>, wanted: Model) -> Model {
    match line.and_then(our_model_wbps) {
        Some(have) if wanted.vrate == Vrate::Pinned && close_enough(have, wanted.wbps) => {
            Model::pinned(have)
        }
        _ => wanted,
    }
}

/// Whether a model of `have` bytes per second may stand for `wanted` ([`KEPT_MODEL_SLACK`]).
fn close_enough(have: u64, wanted: u64) -> bool {
    (have as f64 - wanted as f64).abs() <= KEPT_MODEL_SLACK * wanted as f64
}

/// A line with single spaces, as [`model_line`] and [`Model::qos_line`] write it.
fn normalised(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `model` is a line [`model_line`] writes.
fn is_our_model(model: &str) -> bool {
    our_model_wbps(model).is_some()
}

/// The speed of a model line [`model_line`] wrote; `None` for any other line.
fn our_model_wbps(model: &str) -> Option<u64> {
    let model = normalised(model);
    let wbps = model
        .split_whitespace()
        .find_map(|w| w.strip_prefix("wbps="))?
        .parse::<u64>()
        .ok()?;
    (model_line(wbps) == model).then_some(wbps)
}

fn is_auto(line: &str) -> bool {
    line.split_whitespace().any(|w| w == "ctrl=auto")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Journal;

    #[test]
    fn the_model_follows_the_disk_and_leaves_reads_alone() {
        assert_eq!(
            model_line(25_000_000),
            "ctrl=user model=linear rbps=1000000000 rseqiops=100000 rrandiops=100000 \
             wbps=25000000 wseqiops=6103 wrandiops=6103"
        );
        // Out of range (a configured bandwidth): still a model the kernel takes.
        assert!(model_line(u64::MAX).contains(" wbps=1000000000000 "));
        assert!(model_line(0).contains(" wbps=1000000 "));
    }

    fn bed() -> (
        tempfile::TempDir,
        Actuator,
        DevId,
        std::path::PathBuf,
        Cgroupfs,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cgroup");
        std::fs::create_dir_all(&root).unwrap();
        // As a kernel that has not set iocost up for the disk yet shows it.
        std::fs::write(root.join("io.cost.qos"), "").unwrap();
        std::fs::write(root.join("io.cost.model"), "").unwrap();
        let (journal, _) = Journal::open(&dir.path().join("state.json")).unwrap();
        let fs = Cgroupfs { root: root.clone() };
        let actuator = Actuator::new(journal, Some(fs.clone()), None);
        let dev = DevId {
            major: 254,
            minor: 16,
        };
        (dir, actuator, dev, root, fs)
    }

    #[test]
    fn iocost_is_journaled_before_it_is_turned_on_and_put_back_after() {
        let (dir, mut actuator, dev, root, fs) = bed();
        assert_eq!(state(&root, dev), State::Off);
        assert!(
            actuator
                .set_iocost(&fs, 3, dev, Model::pinned(25_000_000))
                .unwrap()
                .is_some()
        );
        // The stand-in files hold what was written last, as the kernel would print it.
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.qos")).unwrap(),
            format!("254:16 {QOS}")
        );
        assert_eq!(state(&root, dev), State::Ours);
        let (_, left) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert_eq!(
            left,
            [Change::Iocost {
                restriction: 3,
                device: "254:16".into(),
                model: None,
                qos: None
            }]
        );
        // A new speed moves the model, without a second entry.
        actuator
            .set_iocost(&fs, 3, dev, Model::pinned(40_000_000))
            .unwrap();
        assert!(
            std::fs::read_to_string(root.join("io.cost.model"))
                .unwrap()
                .contains(" wbps=40000000 ")
        );
        assert_eq!(actuator.journal.changes().len(), 1);

        let mut r = UndoReport::default();
        actuator.undo_iocost(&left[0], &mut r);
        assert_eq!((r.restored, r.errors.len()), (1, 0), "{r:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.qos")).unwrap(),
            "254:16 enable=0 ctrl=auto"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.model")).unwrap(),
            "254:16 ctrl=auto"
        );
    }

    /// A disk not yet measured: the rate held at the model, left to the kernel, raised by the
    /// probe, then pinned to the measured speed; all one journal entry, recognised as
    /// ioshield's throughout.
    #[test]
    fn the_rate_control_of_an_unmeasured_disk_gives_way_to_the_measured_model() {
        let (_dir, mut actuator, dev, root, fs) = bed();
        let qos = || std::fs::read_to_string(root.join("io.cost.qos")).unwrap();
        let model = || std::fs::read_to_string(root.join("io.cost.model")).unwrap();
        let held = Model::held(25_000_000);
        assert!(actuator.set_iocost(&fs, 1, dev, held).unwrap().is_some());
        assert_eq!(qos(), format!("254:16 {QOS}"));
        assert!(model().contains(" wbps=25000000 "));
        actuator
            .set_iocost(&fs, 1, dev, held.at_least(30_000_000))
            .unwrap();
        assert_eq!(
            qos(),
            "254:16 enable=1 ctrl=user rpct=95.00 rlat=5000 wpct=95.00 wlat=5000 min=120.00 \
             max=120.00"
        );
        assert_eq!(state(&root, dev), State::Ours);
        let adaptive = held.listening();
        assert!(
            actuator
                .set_iocost(&fs, 1, dev, adaptive)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            qos(),
            "254:16 enable=1 ctrl=user rpct=95.00 rlat=50000 wpct=95.00 wlat=50000 min=25.00 \
             max=100.00"
        );
        assert!(model().contains(" wbps=25000000 "));
        assert_eq!(state(&root, dev), State::Ours);
        actuator
            .set_iocost(&fs, 1, dev, adaptive.up_to(31_250_000))
            .unwrap();
        assert!(qos().contains(" min=25.00 max=125.00"), "{}", qos());
        assert_eq!(state(&root, dev), State::Ours);
        actuator
            .set_iocost(&fs, 1, dev, adaptive.at_least(50_000_000))
            .unwrap();
        assert!(qos().contains(" min=200.00 max=200.00"), "{}", qos());
        assert_eq!(state(&root, dev), State::Ours);
        actuator
            .set_iocost(&fs, 1, dev, Model::pinned(30_000_000))
            .unwrap();
        assert_eq!(qos(), format!("254:16 {QOS}"));
        assert!(model().contains(" wbps=30000000 "));
        assert_eq!(actuator.journal.changes().len(), 1);
        // Someone else's latency targets are not ioshield's, even with a `max` like its own.
        assert!(!is_ours(
            "enable=1 ctrl=user rpct=90.00 rlat=50000 wpct=95.00 wlat=50000 min=25.00 \
             max=10000.00"
        ));
        let change = actuator.journal.changes()[0].clone();
        let mut r = UndoReport::default();
        actuator.undo_iocost(&change, &mut r);
        assert_eq!((r.restored, r.errors.len()), (1, 0), "{r:?}");
        assert_eq!(qos(), "254:16 enable=0 ctrl=auto");
    }

    /// After its restriction, iocost stays on until the disk is quiet; a restriction that comes
    /// meanwhile takes it over, and puts it back itself.
    #[tokio::test]
    async fn iocost_outlives_its_restriction_until_the_disk_is_quiet() {
        let (dir, mut actuator, dev, root, fs) = bed();
        let qos = || std::fs::read_to_string(root.join("io.cost.qos")).unwrap();
        let owner = |a: &Actuator| match a.journal.changes() {
            [Change::Iocost { restriction, .. }] => *restriction,
            other => panic!("{other:?}"),
        };
        actuator
            .set_iocost(&fs, 1, dev, Model::pinned(30_000_000))
            .unwrap();
        let entries = actuator.journal.changes().to_vec();
        actuator.keep_iocost_on(&entries).unwrap();
        assert_eq!((owner(&actuator), actuator.lingering.len()), (0, 1));
        // Still busy: stays on, journaled (a crash now leaves it to the next start).
        let r = actuator.settle_lingering(|_| false).await;
        assert_eq!(r, UndoReport::default());
        assert_eq!(qos(), format!("254:16 {QOS}"));
        let (_, left) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert_eq!(left.len(), 1);
        // The next restriction on the disk takes it over: no longer lingering, its own to undo.
        actuator
            .set_iocost(&fs, 2, dev, Model::pinned(30_000_000))
            .unwrap();
        assert_eq!((owner(&actuator), actuator.lingering.len()), (2, 0));
        assert_eq!(
            actuator.settle_lingering(|_| true).await,
            UndoReport::default()
        );
        assert_eq!(qos(), format!("254:16 {QOS}"));
        // Released again, and the disk quiet: off again, its model and entry kept for the next
        // restriction, all put back at exit.
        let entries = actuator.journal.changes().to_vec();
        actuator.keep_iocost_on(&entries).unwrap();
        let r = actuator.settle_lingering(|d| d == dev).await;
        assert_eq!((r.restored, r.errors.len()), (1, 0), "{r:?}");
        assert_eq!(qos(), "254:16 enable=0 ctrl=auto");
        let model = || std::fs::read_to_string(root.join("io.cost.model")).unwrap();
        assert!(model().contains(" wbps=30000000 "), "{}", model());
        assert_eq!(state(&root, dev), State::Off);
        assert_eq!((owner(&actuator), actuator.lingering.len()), (0, 0));
        let (_, left) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert_eq!(left.len(), 1);
        // The next restriction only turns it on, with the model kept though the measured speed
        // moved a little since.
        actuator.stopwatch = super::super::Stopwatch::start();
        assert_eq!(
            actuator
                .set_iocost(&fs, 3, dev, Model::pinned(31_000_000))
                .unwrap(),
            Some(Model::pinned(30_000_000))
        );
        assert_eq!(actuator.stopwatch.steps(), ["iocost qos"]);
        assert_eq!(qos(), format!("254:16 {QOS}"));
        let entries = actuator.journal.changes().to_vec();
        actuator.keep_iocost_on(&entries).unwrap();
        actuator.settle_lingering(|_| true).await;
        let r = actuator.release_all().await;
        assert_eq!((r.restored, r.errors.len()), (1, 0), "{r:?}");
        assert_eq!(qos(), "254:16 enable=0 ctrl=auto");
        assert_eq!(model(), "254:16 ctrl=auto");
        assert!(actuator.journal.changes().is_empty());
    }

    /// A restriction released while another holds the same disk under iocost (one set apart
    /// while its backlog is written) leaves iocost to it, not to linger: a linger ends after
    /// [`LINGER_MAX`] and would leave that backlog unweighed.
    #[tokio::test]
    async fn iocost_stays_with_the_disks_other_restriction() {
        let (_dir, mut actuator, dev, root, fs) = bed();
        let model = Model::pinned(25_000_000);
        let held = super::super::Method::Cgroup(super::super::CgroupLimits {
            dev,
            write: weight(Some(model)),
            memory_high: None,
        });
        let owner = |a: &Actuator| match a.journal.changes() {
            [Change::Iocost { restriction, .. }] => *restriction,
            other => panic!("{other:?}"),
        };
        for id in [1, 2] {
            let pending = actuator.begin_hold(&fs, id, dev, weight(Some(model)));
            actuator.finish_hold(pending).await;
            actuator
                .active
                .insert(id, super::super::Active::new(held.clone()));
        }
        assert_eq!(owner(&actuator), 2, "the newer restriction took it over");
        let r = actuator.release(2).await;
        assert!(r.errors.is_empty(), "{r:?}");
        assert_eq!((owner(&actuator), actuator.lingering.len()), (1, 0));
        assert_eq!(
            actuator.settle_lingering(|_| true).await,
            UndoReport::default()
        );
        assert_eq!(state(&root, dev), State::Ours);
        // The last one's release leaves it to linger as usual.
        let r = actuator.release(1).await;
        assert!(r.errors.is_empty(), "{r:?}");
        assert_eq!(
            (owner(&actuator), actuator.lingering.len()),
            (crate::act::SHARED, 1)
        );
        actuator.settle_lingering(|_| true).await;
        assert_eq!(state(&root, dev), State::Off);
    }

    /// Set up ahead, a disk's iocost is off with the model a restriction would turn it on
    /// with, journaled; the restriction then only turns it on, and exit puts the disk back. A
    /// disk with someone else's model, or iocost on, is left as is.
    #[tokio::test]
    async fn iocost_is_set_up_off_ahead_of_a_restriction() {
        let (dir, mut actuator, dev, root, fs) = bed();
        let model = || std::fs::read_to_string(root.join("io.cost.model")).unwrap();
        let qos = || std::fs::read_to_string(root.join("io.cost.qos")).unwrap();
        actuator.prepare_iocost(dev, Model::held(25_000_000));
        assert_eq!(model(), format!("254:16 {}", model_line(25_000_000)));
        assert_eq!(qos(), "");
        assert_eq!(state(&root, dev), State::Off);
        let (_, left) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert_eq!(
            left,
            [Change::Iocost {
                restriction: crate::act::SHARED,
                device: "254:16".into(),
                model: None,
                qos: None
            }]
        );
        // Once is enough.
        actuator.prepare_iocost(dev, Model::held(40_000_000));
        assert_eq!(model(), format!("254:16 {}", model_line(25_000_000)));
        assert_eq!(actuator.journal.changes().len(), 1);

        actuator.stopwatch = super::super::Stopwatch::start();
        assert!(
            actuator
                .set_iocost(&fs, 1, dev, Model::held(25_000_000))
                .unwrap()
                .is_some()
        );
        assert_eq!(actuator.stopwatch.steps(), ["iocost qos"]);
        assert_eq!(qos(), format!("254:16 {QOS}"));
        assert_eq!(actuator.journal.changes().len(), 1);
        // A speed measured since: the model moves too.
        actuator.stopwatch = super::super::Stopwatch::start();
        actuator
            .set_iocost(&fs, 1, dev, Model::pinned(30_000_000))
            .unwrap();
        assert_eq!(actuator.stopwatch.steps(), ["iocost model"]);

        // Killed now, the next start puts the disk back (off as it was, automatic model).
        drop(actuator);
        let (journal, leftovers) = Journal::open(&dir.path().join("state.json")).unwrap();
        let mut next = Actuator::new(journal, Some(fs.clone()), None);
        let r = next.recover(leftovers).await;
        assert_eq!((r.restored, r.errors.len()), (1, 0), "{r:?}");
        assert_eq!(qos(), "254:16 enable=0 ctrl=auto");
        assert_eq!(model(), "254:16 ctrl=auto");
        // Set up again, never turned on, and put back at exit.
        next.prepare_iocost(dev, Model::pinned(30_000_000));
        assert!(model().contains(" wbps=30000000 "), "{}", model());
        let r = next.release_all().await;
        assert_eq!((r.restored, r.errors.len()), (1, 0), "{r:?}");
        assert_eq!(model(), "254:16 ctrl=auto");
        assert_eq!(qos(), "254:16 enable=0 ctrl=auto");
        assert!(next.journal.changes().is_empty());

        let (_dir, mut actuator, dev, root, _fs) = bed();
        let model = || std::fs::read_to_string(root.join("io.cost.model")).unwrap();
        let foreign = "254:16 ctrl=user model=linear rbps=1 rseqiops=1 rrandiops=1 wbps=1 \
                       wseqiops=1 wrandiops=1";
        std::fs::write(root.join("io.cost.model"), foreign).unwrap();
        actuator.prepare_iocost(dev, Model::held(25_000_000));
        assert_eq!(model(), foreign);
        std::fs::write(root.join("io.cost.model"), "").unwrap();
        std::fs::write(root.join("io.cost.qos"), "254:16 enable=1 ctrl=user").unwrap();
        actuator.prepare_iocost(dev, Model::held(25_000_000));
        assert_eq!(model(), "");
        assert!(actuator.journal.changes().is_empty());
    }

    /// The model set up ahead follows the disk's speed while iocost is off and no restriction
    /// holds it, and only when the speed moved more than the slack; never someone else's.
    #[tokio::test]
    async fn the_model_set_up_ahead_follows_the_disks_speed() {
        let (_dir, mut actuator, dev, root, fs) = bed();
        let model = || std::fs::read_to_string(root.join("io.cost.model")).unwrap();
        actuator.prepare_iocost(dev, Model::pinned(26_300_000));
        actuator.refresh_iocost_model(dev, Model::pinned(25_500_000));
        assert!(model().contains(" wbps=26300000 "), "{}", model());
        actuator.refresh_iocost_model(dev, Model::pinned(18_200_000));
        assert!(model().contains(" wbps=18200000 "), "{}", model());
        assert_eq!(actuator.journal.changes().len(), 1);
        // The slack is the restriction's (kept_model): a model 5.25% above the speed is moved,
        // else the next restriction writes one (e2e: 28.4 MB/s left, the disk at 27.0).
        actuator.refresh_iocost_model(dev, Model::pinned(19_100_000));
        assert!(model().contains(" wbps=18200000 "), "{}", model());
        actuator.refresh_iocost_model(dev, Model::pinned(17_290_000));
        assert!(model().contains(" wbps=17290000 "), "{}", model());
        assert_eq!(
            kept_model(Some(&model()), Model::pinned(16_430_000)).wbps,
            16_430_000
        );

        // A restriction holds it: its model is the restriction's.
        actuator
            .set_iocost(&fs, 1, dev, Model::pinned(17_290_000))
            .unwrap();
        actuator.refresh_iocost_model(dev, Model::pinned(30_000_000));
        assert!(model().contains(" wbps=17290000 "), "{}", model());
        let r = actuator.release_all().await;
        assert_eq!((r.restored, r.errors.len()), (1, 0), "{r:?}");

        // Not set up by ioshield, or someone else's model: left alone.
        actuator.refresh_iocost_model(dev, Model::pinned(30_000_000));
        assert_eq!(model(), "254:16 ctrl=auto");
        actuator.prepare_iocost(dev, Model::pinned(20_000_000));
        let foreign = "254:16 ctrl=user model=linear rbps=1 rseqiops=1 rrandiops=1 wbps=1 \
                       wseqiops=1 wrandiops=1";
        std::fs::write(root.join("io.cost.model"), foreign).unwrap();
        actuator.refresh_iocost_model(dev, Model::pinned(30_000_000));
        assert_eq!(model(), foreign);
    }

    /// An administrator who turns iocost on over the model set up ahead keeps it: neither
    /// line is put back under them.
    #[tokio::test]
    async fn iocost_turned_on_by_someone_over_the_set_up_is_left_to_them() {
        let (_dir, mut actuator, dev, root, fs) = bed();
        actuator.prepare_iocost(dev, Model::held(25_000_000));
        std::fs::write(root.join("io.cost.qos"), "254:16 enable=1 ctrl=auto").unwrap();
        // Not taken over by a restriction either.
        assert!(
            actuator
                .set_iocost(&fs, 1, dev, Model::held(25_000_000))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.qos")).unwrap(),
            "254:16 enable=1 ctrl=auto"
        );
        let r = actuator.release_all().await;
        assert_eq!(
            (r.restored, r.kept.len(), r.errors.len()),
            (0, 1, 0),
            "{r:?}"
        );
        assert!(
            std::fs::read_to_string(root.join("io.cost.model"))
                .unwrap()
                .contains(" wbps=25000000 ")
        );
    }

    #[test]
    fn a_model_set_up_close_to_the_speed_is_kept() {
        let line = model_line(23_800_000);
        assert_eq!(
            kept_model(Some(&line), Model::pinned(24_300_000)),
            Model::pinned(23_800_000)
        );
        // Too far, someone else's, none, or a rate held relative to the assumed disk's model.
        assert_eq!(
            kept_model(Some(&line), Model::pinned(30_000_000)),
            Model::pinned(30_000_000)
        );
        let foreign = "ctrl=user model=linear rbps=1 rseqiops=1 rrandiops=1 wbps=24000000 \
                       wseqiops=1 wrandiops=1";
        assert_eq!(
            kept_model(Some(foreign), Model::pinned(24_300_000)),
            Model::pinned(24_300_000)
        );
        assert_eq!(
            kept_model(None, Model::pinned(24_300_000)),
            Model::pinned(24_300_000)
        );
        assert_eq!(
            kept_model(Some(&line), Model::held(25_000_000)),
            Model::held(25_000_000)
        );
    }

    #[test]
    fn a_model_bounds_the_rate_it_lets_the_disk_have() {
        // Held: at the model, or at a lower bound above it; a cap does not move it.
        let held = Model::held(25_000_000);
        assert_eq!(held.rate(), 25_000_000);
        assert_eq!(held.range(), Some((25_000_000, 25_000_000)));
        assert_eq!(held.at_least(40_000_000).rate(), 40_000_000);
        assert_eq!(held.at_least(20_000_000), held);
        assert_eq!(held.up_to(40_000_000), held);
        assert_eq!(
            held.at_least(40_000_000).listening().range(),
            Some((6_250_000, 40_000_000))
        );
        let m = Model::held(25_000_000).listening();
        assert_eq!(m.rate(), 25_000_000);
        assert_eq!(
            m.vrate,
            Vrate::Adaptive {
                min_pct: 25,
                max_pct: 100
            }
        );
        // A lower bound lifts the cap with it; a cap never goes under the lower bound.
        assert_eq!(m.at_least(100_000_000).rate(), 100_000_000);
        assert_eq!(m.up_to(39_000_000).rate(), 39_000_000);
        assert_eq!(
            m.at_least(50_000_000).up_to(40_000_000).vrate,
            Vrate::Adaptive {
                min_pct: 200,
                max_pct: 200
            }
        );
        assert_eq!(
            m.up_to(75_000_000).at_least(50_000_000).vrate,
            Vrate::Adaptive {
                min_pct: 200,
                max_pct: 300
            }
        );
        // Never beyond what the kernel takes.
        assert_eq!(
            m.at_least(u64::MAX).vrate,
            Vrate::Adaptive {
                min_pct: 10_000,
                max_pct: 10_000
            }
        );
        assert_eq!(
            Model::pinned(30_000_000).at_least(90_000_000).rate(),
            30_000_000
        );
        assert_eq!(
            Model::pinned(30_000_000).up_to(90_000_000).rate(),
            30_000_000
        );
    }

    #[test]
    fn a_restarted_daemon_knows_its_rate_control_by_its_latency_targets() {
        assert_eq!(Model::held(25_000_000).qos_line(), QOS);
        assert!(is_ours(
            &Model::held(25_000_000).at_least(40_000_000).qos_line()
        ));
        let m = Model::held(25_000_000).listening();
        assert!(is_ours(&m.qos_line()));
        assert!(is_ours(&m.up_to(39_000_000).qos_line()));
        // What the build before the cap wrote, left in a state file by a crash.
        assert!(is_ours(
            "enable=1 ctrl=user rpct=95.00 rlat=50000 wpct=95.00 wlat=50000 min=25.00 \
             max=10000.00"
        ));
        assert!(is_ours(QOS));
        assert!(!is_ours(
            "enable=1 ctrl=user rpct=95.00 rlat=50000 wpct=95.00 wlat=50000 min=25.50 \
             max=100.00"
        ));
        assert!(!is_ours("enable=1 ctrl=auto"));
    }

    fn weight(model: Option<Model>) -> WriteControl {
        WriteControl::Weight {
            weight: 1,
            model,
            fallback: 18_750_000,
        }
    }

    /// The hold begun before the offender is placed: journaled at once, written on a thread
    /// of its own, its write shown as done alongside.
    #[tokio::test]
    async fn iocost_is_journaled_at_once_and_turned_on_alongside_the_move() {
        let (dir, mut actuator, dev, root, fs) = bed();
        let model = Model::pinned(25_000_000);
        let pending = actuator.begin_hold(&fs, 4, dev, weight(Some(model)));
        let (_, recorded) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert!(
            matches!(recorded[..], [Change::Iocost { restriction: 4, .. }]),
            "{recorded:?}"
        );
        assert!(matches!(pending, PendingHold::Writing { .. }));
        assert_eq!(actuator.finish_hold(pending).await, weight(Some(model)));
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.qos")).unwrap(),
            format!("254:16 {QOS}")
        );
        assert_eq!(actuator.stopwatch.steps(), ["iocost wait"]);
        assert_eq!(
            actuator.stopwatch.steps_alongside(),
            ["iocost model", "iocost qos"]
        );
        // Already on as wanted: nothing to write, nothing to wait for.
        let again = actuator.begin_hold(&fs, 4, dev, weight(Some(model)));
        assert!(matches!(again, PendingHold::Ready(w) if w == weight(Some(model))));
    }

    /// A restriction that fails after turning iocost on (its move, its unit): no restriction
    /// holds the disk any more, iocost lingers as after a release and goes off when the disk
    /// is quiet, its model kept for the next restriction.
    #[tokio::test]
    async fn a_failed_restriction_leaves_the_iocost_it_turned_on_to_linger() {
        let (_dir, mut actuator, dev, root, fs) = bed();
        let model = Model::pinned(25_000_000);
        let pending = actuator.begin_hold(&fs, 7, dev, weight(Some(model)));
        actuator.abandon_hold(7, pending).await;
        assert!(
            matches!(
                actuator.journal.changes(),
                [Change::Iocost { restriction, .. }] if *restriction == crate::act::SHARED
            ),
            "{:?}",
            actuator.journal.changes()
        );
        let report = actuator.settle_lingering(|_| false).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(state(&root, dev), State::Ours, "not quiet yet: still on");
        let report = actuator.settle_lingering(|d| d == dev).await;
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(state(&root, dev), State::Off);
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.model")).unwrap(),
            format!("254:16 {}", model_line(model.wbps)),
            "the model stays set up"
        );
        assert!(matches!(
            actuator.journal.changes(),
            [Change::Iocost { restriction, .. }] if *restriction == crate::act::SHARED
        ));
        // The next restriction there only turns iocost on.
        actuator.stopwatch = super::super::Stopwatch::start();
        let next = actuator.begin_hold(&fs, 8, dev, weight(Some(model)));
        assert_eq!(actuator.finish_hold(next).await, weight(Some(model)));
        assert_eq!(actuator.stopwatch.steps_alongside(), ["iocost qos"]);
    }

    /// The writes fail (here: a file that is read but refuses writes, as the kernel refuses a
    /// line): the fallback limit, the journal entry kept so that whatever was written is put
    /// back.
    #[tokio::test]
    async fn a_hold_whose_iocost_write_fails_falls_back_to_a_limit() {
        let (_dir, mut actuator, dev, root, fs) = bed();
        std::fs::remove_file(root.join("io.cost.qos")).unwrap();
        std::os::unix::fs::symlink("/proc/version", root.join("io.cost.qos")).unwrap();
        let pending = actuator.begin_hold(&fs, 5, dev, weight(Some(Model::pinned(25_000_000))));
        assert!(matches!(pending, PendingHold::Writing { .. }));
        assert_eq!(
            actuator.finish_hold(pending).await,
            WriteControl::Limit(18_750_000)
        );
        assert!(matches!(
            actuator.journal.changes(),
            [Change::Iocost { restriction: 5, .. }]
        ));
        // A write limit to begin with is left as it is.
        let limit = WriteControl::Limit(9_000_000);
        assert!(matches!(
            actuator.begin_hold(&fs, 6, dev, limit),
            PendingHold::Ready(w) if w == limit
        ));
    }

    #[tokio::test]
    async fn someone_elses_iocost_is_neither_taken_over_nor_undone() {
        let (_dir, mut actuator, dev, root, fs) = bed();
        let theirs = "254:16 enable=1 ctrl=user rpct=90.00 rlat=10000 wpct=90.00 wlat=10000 \
                      min=50.00 max=150.00";
        std::fs::write(root.join("io.cost.qos"), theirs).unwrap();
        assert_eq!(state(&root, dev), State::Foreign);
        assert!(
            actuator
                .set_iocost(&fs, 1, dev, Model::pinned(25_000_000))
                .unwrap()
                .is_none()
        );
        assert!(actuator.journal.changes().is_empty());
        // Even when set just as ioshield sets it: not in ioshield's journal, not ioshield's.
        std::fs::write(root.join("io.cost.qos"), format!("254:16 {QOS}")).unwrap();
        let pending = actuator.begin_hold(&fs, 1, dev, weight(Some(Model::pinned(25_000_000))));
        assert_eq!(
            actuator.finish_hold(pending).await,
            WriteControl::Weight {
                weight: 1,
                model: None,
                fallback: 18_750_000
            }
        );
        assert!(actuator.journal.changes().is_empty());

        // Turned on by ioshield, then changed by an administrator: theirs stays.
        std::fs::write(root.join("io.cost.qos"), "").unwrap();
        actuator
            .set_iocost(&fs, 2, dev, Model::pinned(25_000_000))
            .unwrap();
        std::fs::write(root.join("io.cost.qos"), theirs).unwrap();
        let change = actuator.journal.changes()[0].clone();
        let mut r = UndoReport::default();
        actuator.undo_iocost(&change, &mut r);
        assert_eq!(r.restored, 0);
        assert_eq!(r.kept.len(), 1, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.qos")).unwrap(),
            theirs
        );
    }

    #[test]
    fn automatic_settings_are_put_back_as_automatic() {
        let auto_qos = "enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 \
                        min=1.00 max=10000.00";
        assert_eq!(restoring_qos(Some(auto_qos)), "enable=0 ctrl=auto");
        assert_eq!(
            restoring_qos(Some(&auto_qos.replace("enable=0", "enable=1"))),
            "enable=1 ctrl=auto"
        );
        let user_qos = "enable=1 ctrl=user rpct=90.00 rlat=10000 wpct=90.00 wlat=10000 \
                        min=50.00 max=150.00";
        assert_eq!(restoring_qos(Some(user_qos)), user_qos);
        assert_eq!(restoring_qos(None), "enable=0 ctrl=auto");
        let auto_model = "ctrl=auto model=linear rbps=174019176 rseqiops=41708 rrandiops=370 \
                          wbps=178075866 wseqiops=42705 wrandiops=378";
        assert_eq!(restoring_model(Some(auto_model)), "ctrl=auto");
        let user_model = model_line(25_000_000);
        assert_eq!(restoring_model(Some(&user_model)), user_model);
        assert_eq!(restoring_model(None), "ctrl=auto");
    }

    #[tokio::test]
    async fn the_next_start_after_a_crash_puts_the_disk_back() {
        let (dir, mut actuator, dev, root, fs) = bed();
        let before = "254:16 enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 \
                      min=1.00 max=10000.00";
        std::fs::write(root.join("io.cost.qos"), before).unwrap();
        assert!(
            actuator
                .set_iocost(&fs, 1, dev, Model::pinned(25_000_000))
                .unwrap()
                .is_some()
        );
        // Killed here: the next instance finds the entry in the state file.
        drop(actuator);
        let (journal, leftovers) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
        let mut next = Actuator::new(journal, Some(fs), None);
        let report = next.recover(leftovers).await;
        assert_eq!((report.restored, report.errors.len()), (1, 0), "{report:?}");
        // Off and automatic again, as it was (the kernel fills in its automatic parameters).
        assert_eq!(
            std::fs::read_to_string(root.join("io.cost.qos")).unwrap(),
            "254:16 enable=0 ctrl=auto"
        );
        assert_eq!(next.pending_undos(), 0);
        let (_, left) = Journal::open(&dir.path().join("state.json")).unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
}
