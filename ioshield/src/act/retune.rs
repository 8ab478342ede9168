//! Retunes: a held restriction's limits moved to new ones (the disk measured, the speed
//! probe's next step, a reload). One that turns iocost on or moves its model ends apart from the
//! daemon's loop: each `io.cost.*` write freezes the disk's queue until the writes in flight
//! complete, which took up to 484 ms for the speed probe's steps on the 6.12 bench (42 ms
//! median) and 8.3 s once on the e2e's systemd host, under a held writer's backlog. The loop
//! waited that long, and with it detection on every disk and every other restriction. The old
//! limits hold meanwhile: the new ones are set once iocost is as they need it.
use std::path::PathBuf;

use anyhow::{Result, anyhow};

use super::{
    Actuator, CgroupLimits, Method, ScopeLimits, WriteControl, cgroup::Cgroupfs, cgroup_moves,
    iocost::PendingHold, memory_headroom, method, stopwatch::Stopwatch, systemd::Manager, units,
};
use crate::system::cgroups;

/// What a retune came to.
#[derive(Debug)]
pub enum Retune {
    /// Nothing changed: the limits asked for hold already, there is no such restriction, or it
    /// is held by another kind of action (the configuration changed), kept until its release.
    Unchanged,
    /// The limits now in place (they differ from those asked for where iocost could not be
    /// turned on), and how long each step took.
    Done(Method, Stopwatch),
    /// iocost's writes for it are being made; [`Actuator::finish_retunes`] ends it, and another
    /// retune of the restriction waits until then.
    Waiting,
}

/// Where a retune's limits are set.
enum Place {
    Cgroup {
        fs: Cgroupfs,
        cg: PathBuf,
    },
    Unit {
        manager: Manager,
        unit: String,
        cgroup: Option<PathBuf>,
    },
}

/// A retune begun: iocost's writes handed over (`pending`), its limits still to set.
pub(super) struct Waiting {
    /// The method in place before it.
    before: Method,
    /// The method asked for; its write control is what the iocost writes come to.
    method: Method,
    place: Place,
    stopwatch: Stopwatch,
}

impl Actuator {
    /// Sets held restriction `id`'s limits to `method`'s, e.g. once the disk's speed is
    /// measured. Only limits of ioshield's own cgroup or scope change, which removing that cgroup
    /// or lifting the scope's limits undoes; iocost turned on for the disk meanwhile is journaled
    /// like any change.
    pub async fn retune(&mut self, id: u64, method: &Method) -> Result<Retune> {
        if self.retunes.contains_key(&id) {
            return Ok(Retune::Waiting);
        }
        // Its iocost writes lap the stopwatch too: started afresh, it holds only this retune's.
        self.stopwatch = Stopwatch::start();
        let Some(active) = self.active.get(&id) else {
            return Ok(Retune::Unchanged);
        };
        if active.method == *method {
            return Ok(Retune::Unchanged);
        }
        let before = active.method.clone();
        let (cgroup, unit, unit_cgroup, manager) = (
            active.cgroup.clone(),
            active.unit.clone(),
            active.unit_cgroup.clone(),
            active.manager,
        );
        let mut method = method.clone();
        let (place, pending) = match (&before, &mut method, cgroup, unit) {
            (Method::Cgroup(_), Method::Cgroup(l), Some(cg), _) => {
                let fs = self
                    .cgroupfs
                    .clone()
                    .ok_or_else(|| anyhow!("the cgroup action is not available on this host"))?;
                let pending = self.begin_hold(&fs, id, l.dev, l.write);
                self.stopwatch.lap("iocost journal");
                (Place::Cgroup { fs, cg }, pending)
            }
            (Method::SystemdScope(_), Method::SystemdScope(l), _, Some(unit)) => {
                // A user manager without io keeps holding memory.high alone.
                if unit_cgroup.as_deref().is_some_and(|cg| {
                    manager.is_some()
                        && cgroups::v2_mount().is_some_and(|m| !units::io_delegated(&m, cg))
                }) {
                    l.write = WriteControl::Limit(method::NO_WRITE_LIMIT);
                }
                let pending = self.begin_unit_hold(id, l)?;
                let place = Place::Unit {
                    manager,
                    unit,
                    cgroup: unit_cgroup,
                };
                (place, pending)
            }
            _ => return Ok(Retune::Unchanged),
        };
        let waiting = Waiting {
            before,
            method,
            place,
            stopwatch: std::mem::take(&mut self.stopwatch),
        };
        self.try_end_retune(id, waiting, pending).await
    }

    /// Whether restriction `id` has a retune waiting for iocost's writes.
    pub fn retuning(&self, id: u64) -> bool {
        self.retunes.contains_key(&id)
    }

    /// Ends the retunes whose iocost writes are made (see [`Actuator::iocost_made`]): their
    /// limits set, by restriction id.
    pub async fn finish_retunes(&mut self) -> Vec<(u64, Result<Retune>)> {
        let mut ids: Vec<u64> = self.retunes.keys().copied().collect();
        ids.sort_unstable();
        let mut ended = Vec::new();
        for id in ids {
            let Some((waiting, pending)) = self.retunes.remove(&id) else {
                continue;
            };
            match self.try_end_retune(id, waiting, pending).await {
                Ok(Retune::Waiting) => {}
                ended_as => ended.push((id, ended_as)),
            }
        }
        ended
    }

    /// Waits for the writes of restriction `id`'s retune, if one is begun, forgetting it: its
    /// release puts back what they change, and must come after them.
    pub(super) async fn drop_retune(&mut self, id: u64) {
        if let Some((_, pending)) = self.retunes.remove(&id) {
            self.finish_hold(pending).await;
        }
    }

    /// Sets `waiting`'s limits if its iocost writes (`pending`) are made; else keeps it for
    /// later.
    async fn try_end_retune(
        &mut self,
        id: u64,
        mut waiting: Waiting,
        pending: PendingHold,
    ) -> Result<Retune> {
        self.stopwatch = std::mem::take(&mut waiting.stopwatch);
        match self.try_finish_hold(pending, "iocost wait apart") {
            Ok(write) => self.end_retune(id, waiting, write).await,
            Err(pending) => {
                waiting.stopwatch = std::mem::take(&mut self.stopwatch);
                self.retunes.insert(id, (waiting, pending));
                Ok(Retune::Waiting)
            }
        }
    }

    /// Sets the limits of a retune whose write control came to `write`.
    async fn end_retune(
        &mut self,
        id: u64,
        waiting: Waiting,
        write: WriteControl,
    ) -> Result<Retune> {
        let Waiting {
            before,
            mut method,
            place,
            stopwatch: _,
        } = waiting;
        let Some(active) = self.active.get(&id) else {
            return Ok(Retune::Unchanged);
        };
        // A memory.high the follower lifted stays so, also when it lifted it while this retune
        // waited: set again to the budget, the next allocation of the writer's processes (a
        // build's next compiler) would sleep until the follower lifted it again, a tick later.
        // Limits written without one lift it on cgroupfs and leave a unit's MemoryHigh= as it
        // is: "max" either way.
        let memory_high = method.memory_high().filter(|_| !active.memory_lifted);
        match (&mut method, place) {
            (Method::Cgroup(l), Place::Cgroup { fs, cg }) => {
                l.write = write;
                let io = match &before {
                    Method::Cgroup(h) => cgroup_moves::Io::after(h.write),
                    _ => cgroup_moves::Io::Set,
                };
                let written = CgroupLimits {
                    memory_high,
                    ..l.clone()
                };
                cgroup_moves::write_limits(&fs, &cg, &written, io)?;
                // memory.high set under what the cgroup holds has this write reclaim it first.
                self.stopwatch.lap("limits");
            }
            (
                Method::SystemdScope(l),
                Place::Unit {
                    manager,
                    unit,
                    cgroup,
                },
            ) => {
                l.write = write;
                let written = ScopeLimits {
                    memory_high,
                    ..l.clone()
                };
                let (systemd, laps) = self.systemd_timed()?;
                systemd
                    .set_limits(
                        manager,
                        &unit,
                        cgroup.as_deref(),
                        &written,
                        memory_headroom::Writer::Held,
                        laps,
                    )
                    .await?;
            }
            _ => return Ok(Retune::Unchanged),
        }
        if let Some(active) = self.active.get_mut(&id) {
            active.method = method.clone();
        }
        if let (Some(fs), Method::Cgroup(_)) = (&self.cgroupfs, &method)
            && before.weight() != method.weight()
        {
            self.weigh_parent(fs, None)?;
        }
        Ok(Retune::Done(method, self.stopwatch.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::{path::Path, time::Duration};

    use super::*;
    use crate::{
        act::{Active, iocost::Model},
        journal::{Change, Journal},
        system::devices::DevId,
    };

    const DEV: DevId = DevId {
        major: 254,
        minor: 16,
    };
    const CG: &str = "/ioshield/r1-42";

    /// A writer held by `io.max` in its cgroup, in a cgroupfs stand-in whose disk has iocost
    /// off.
    fn held_by_limit() -> (tempfile::TempDir, Actuator, Cgroupfs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Cgroupfs {
            root: dir.path().join("cgroup"),
        };
        let cg = fs.abs(Path::new(CG));
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(fs.root.join("io.cost.qos"), "").unwrap();
        std::fs::write(fs.root.join("io.cost.model"), "").unwrap();
        std::fs::write(cg.join("io.max"), "254:16 wbps=18750000\n").unwrap();
        std::fs::write(cg.join("memory.high"), "8388608\n").unwrap();
        let (journal, _) = Journal::open(&dir.path().join("state.json")).unwrap();
        let mut actuator = Actuator::new(journal, Some(fs.clone()), None);
        let mut active = Active::new(Method::Cgroup(CgroupLimits {
            dev: DEV,
            write: WriteControl::Limit(18_750_000),
            memory_high: Some(8 << 20),
        }));
        active.cgroup = Some(CG.into());
        actuator.active.insert(1, active);
        (dir, actuator, fs)
    }

    fn by_weight() -> Method {
        Method::Cgroup(CgroupLimits {
            dev: DEV,
            write: WriteControl::Weight {
                weight: 1,
                model: Some(Model::pinned(25_000_000)),
                fallback: 18_750_000,
            },
            memory_high: Some(8 << 20),
        })
    }

    fn read(fs: &Cgroupfs, file: &str) -> String {
        std::fs::read_to_string(fs.abs(Path::new(CG)).join(file)).unwrap_or_default()
    }

    /// While iocost's writes wait for the disk's queue, the retune returns and the writer stays
    /// held by its old limit; the new limits are set once the writes are made.
    // The guard stands for the disk's frozen queue: only the writer's thread waits for it.
    #[allow(clippy::await_holding_lock)]
    #[tokio::test]
    async fn a_retune_to_iocost_keeps_the_old_limit_until_iocost_is_on() {
        let (_dir, mut actuator, fs) = held_by_limit();
        let gate = actuator.iocost_writer.gate();
        let frozen = gate.lock().unwrap();
        let made = actuator.iocost_made();
        assert!(matches!(
            actuator.retune(1, &by_weight()).await.unwrap(),
            Retune::Waiting
        ));
        assert!(actuator.retuning(1));
        // Journaled before it is made, as every change.
        assert!(matches!(
            actuator.journal.changes(),
            [Change::Iocost { restriction: 1, .. }]
        ));
        assert_eq!(read(&fs, "io.max"), "254:16 wbps=18750000\n");
        assert!(matches!(
            actuator.active[&1].method.write_limit(),
            Some(18_750_000)
        ));
        // Another retune waits for this one; nothing ends while the writes are held.
        assert!(matches!(
            actuator.retune(1, &by_weight()).await.unwrap(),
            Retune::Waiting
        ));
        assert!(actuator.finish_retunes().await.is_empty());

        drop(frozen);
        tokio::time::timeout(Duration::from_secs(10), made.notified())
            .await
            .expect("told when the writes are made");
        let ended = actuator.finish_retunes().await;
        let [(1, Ok(Retune::Done(method, took)))] = &ended[..] else {
            panic!("{ended:?}");
        };
        assert_eq!(*method, by_weight());
        assert_eq!(actuator.active[&1].method, by_weight());
        assert!(!actuator.retuning(1));
        assert_eq!(read(&fs, "io.weight"), "default 1");
        assert_eq!(read(&fs, "io.max"), "254:16 wbps=max");
        assert!(
            std::fs::read_to_string(fs.root.join("io.cost.qos"))
                .unwrap()
                .starts_with("254:16 enable=1")
        );
        assert_eq!(
            took.steps(),
            ["iocost journal", "iocost wait apart", "limits"]
        );
        assert_eq!(took.steps_alongside(), ["iocost model", "iocost qos"]);
    }

    /// A release while a retune's writes are being made waits for them, then hands their
    /// iocost on like any release's: the retune is forgotten, its limits never set.
    // The guard stands for the disk's frozen queue: only the writer's thread waits for it.
    #[allow(clippy::await_holding_lock)]
    #[tokio::test]
    async fn a_release_forgets_a_waiting_retune_after_its_writes() {
        let (_dir, mut actuator, fs) = held_by_limit();
        let gate = actuator.iocost_writer.gate();
        let frozen = gate.lock().unwrap();
        assert!(matches!(
            actuator.retune(1, &by_weight()).await.unwrap(),
            Retune::Waiting
        ));
        drop(frozen);
        let report = actuator.release(1).await;
        assert!(report.errors.is_empty(), "{report:?}");
        assert!(!actuator.retuning(1));
        assert!(actuator.finish_retunes().await.is_empty());
        assert_eq!(
            read(&fs, "io.weight"),
            "",
            "the retune's limits were never set"
        );
        // The writes were made before the release looked at iocost: it lingers, journaled.
        assert!(
            std::fs::read_to_string(fs.root.join("io.cost.qos"))
                .unwrap()
                .starts_with("254:16 enable=1")
        );
        assert!(matches!(
            actuator.journal.changes(),
            [Change::Iocost { restriction, .. }] if *restriction == crate::act::SHARED
        ));
    }

    /// Without iocost writes to make (a write limit to a write limit), a retune ends at once.
    #[tokio::test]
    async fn a_retune_without_iocost_writes_ends_at_once() {
        let (_dir, mut actuator, fs) = held_by_limit();
        let limit = Method::Cgroup(CgroupLimits {
            dev: DEV,
            write: WriteControl::Limit(30_000_000),
            memory_high: Some(8 << 20),
        });
        let retuned = actuator.retune(1, &limit).await.unwrap();
        assert!(
            matches!(&retuned, Retune::Done(m, _) if *m == limit),
            "{retuned:?}"
        );
        assert_eq!(read(&fs, "io.max"), "254:16 wbps=30000000");
        assert!(actuator.journal.changes().is_empty());
    }
}
