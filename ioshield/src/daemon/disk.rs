//! One disk's runtime in the daemon: its hysteresis state, the restriction it holds, and carrying
//! out a decision to restrict or release through the actuator.
use std::time::{Instant, SystemTime};

use anyhow::Result;

use super::{
    decisions::DecisionLog,
    metrics::Metrics,
    ratelimit::RateLimit,
    speed_probe::{NoRoom, SpeedProbe},
};
use crate::{
    act::{Actuator, Method, Restricted, Retune},
    config::DevicePolicy,
    detect::{
        bandwidth::Estimate,
        drain::{self, Drain, Verdict},
        policy::{Candidate, DiskState, Trigger},
        pressure::OthersStall,
    },
    display::show_rate,
    model::tree::ProcessTree,
    system::{devices::Disk, diskstats::DiskCounters},
};

pub struct Offender {
    pub pid: u32,
    pub comm: String,
    pub since: Instant,
    pub action: String,
    /// The unit or cgroup holding the limits (`Restricted::place`).
    pub place: Option<String>,
    /// The limits are on the writer's own unit, nothing moved
    /// ([`crate::act::Actuator::holds_in_place`]), as far as it matters: only asked for a
    /// write limit on a disk not measured.
    pub in_place: bool,
}

#[derive(Default)]
pub struct DiskRuntime {
    pub state: DiskState,
    pub restriction: Option<u64>,
    pub offender: Option<Offender>,
    pub method: Option<Method>,
    pub bandwidth: Option<Estimate>,
    pub bandwidth_logged: Option<f64>,
    /// The disk's busiest writers at the last tick, for `status` and `explain`.
    pub writers: Vec<crate::daemon::status::WriterStatus>,
    /// Why the held restriction's retune that waits for iocost's writes was made, for its
    /// log line once they are made.
    pub retune_why: Option<String>,
    /// The held restriction's probe of the disk's speed.
    pub speed_probe: SpeedProbe,
    /// The rate at which a probe's window showed the disk without room to spare, and when:
    /// kept across restrictions (and restarts, in the speeds file) until the disk shows more,
    /// standing for [`super::speed_probe::NO_ROOM_KEPT`].
    pub no_room: Option<NoRoom>,
    /// A release waiting for the backlog the restriction's writers left.
    pub drain: Option<Drain>,
    /// Restrictions of this disk whose processes are all gone, kept until the backlog they left
    /// is written, apart from the one held restriction: the disk's next writer is judged and
    /// held meanwhile.
    pub draining: Vec<Draining>,
    /// When iocost's model set up ahead was last matched to the disk's speed; `None` where
    /// none was set up.
    pub model_looked_at: Option<Instant>,
    /// How long the cgroups beside the restriction waited on I/O, heard while its speed probe
    /// asks ([`SpeedProbe::hears_others`]).
    pub others: OthersStall,
    /// The disk's counters at the last reading heard with the others, and when.
    pub heard_disk: Option<(Instant, DiskCounters)>,
    /// The disk's part of the backlog at the last step that measured its growth, and when
    /// (`detect::backlog::seconds_until_over`).
    pub backlog_seen: Option<(Instant, f64)>,
    /// When that growth puts its backlog over `max_flush_seconds` before the next tick: a
    /// step is taken then.
    pub backlog_due: Option<Instant>,
    /// How many room steps the others' waits took back on this disk since the daemon started:
    /// "no room" from one is kept only from the [`super::speed_probe::TAKE_BACKS_KEPT`]th.
    pub take_backs: u32,
}

/// A restriction whose processes are all gone, kept at its limits until the backlog they left
/// is written: released with it, the backlog would take the disk from everyone else at their
/// weight (`detect::drain`). Kept apart from the disk's held restriction, a writer that starts
/// meanwhile is restricted at its first report instead of writing unheld until the backlog is
/// written (4 s in a `vm ci` run, up to the kernel's 30 s expiry; docs/bench/newcomer.md).
/// It holds only pages: no process is left demoted that the daemon does not track, and the
/// actuator's journal undoes it at exit like any restriction.
pub struct Draining {
    pub id: u64,
    pub root: u32,
    pub comm: String,
    pub place: Option<String>,
    /// The kind of action, for its release line.
    pub method: &'static str,
    pub drain: Drain,
}

/// What carrying out a decision touches besides the disk itself.
pub struct Effects<'a> {
    pub actuator: &'a mut Actuator,
    pub metrics: &'a mut Metrics,
    pub log: &'a mut DecisionLog,
    pub limit: &'a mut RateLimit,
}

/// A restriction about to be made: whom, how, and why (for its log line).
pub struct Plan<'a> {
    pub offender: Candidate,
    pub members: &'a [u32],
    pub method: &'a Method,
    pub policy: &'a DevicePolicy,
    pub bandwidth: f64,
    pub trigger: Trigger,
    /// The offender's weight after the restriction's onset, when `method` is the onset's
    /// ([`crate::act::Method::at_onset`]).
    pub after_onset: Option<u16>,
    /// The restriction goes on the writer's own unit ([`Offender::in_place`]).
    pub in_place: bool,
}

impl DiskRuntime {
    /// Uses `method` from now on, saying so when it changes (with `note` when it is a fallback).
    pub fn use_method(&mut self, disk: &Disk, method: &Method, note: Option<String>) {
        if self.method.as_ref().map(std::mem::discriminant) != Some(std::mem::discriminant(method))
        {
            match note {
                Some(n) => tracing::warn!("{}: {n}", disk.label()),
                None => tracing::info!("{}: action {}", disk.label(), method.describe()),
            }
        }
        self.method = Some(method.clone());
    }

    pub async fn restrict(
        &mut self,
        disk: &Disk,
        plan: Plan<'_>,
        tree: &ProcessTree,
        fx: &mut Effects<'_>,
    ) {
        let Plan {
            offender,
            members,
            method,
            policy,
            bandwidth: bw,
            trigger,
            after_onset,
            in_place,
        } = plan;
        let comm = tree
            .get(offender.pid)
            .map_or("?".into(), |n| crate::display::printable(&n.comm));
        let why = match trigger {
            Trigger::Rate => format!(
                "tree {} on {} > {:.0}% of {}",
                show_rate(offender.score),
                disk.label(),
                policy.restrict_at * 100.0,
                show_rate(bw)
            ),
            Trigger::FlushTime { seconds, rate } => format!(
                "tree {} on {}, whose dirty backlog would take {seconds:.1}s to flush > {}s",
                show_rate(rate),
                disk.label(),
                policy.max_flush_seconds
            ),
            Trigger::Burst {
                bytes,
                seconds,
                judged_after,
            } => format!(
                "dirtied {} in {:.0} ms on {}, faster than the disk's {} (judged {:.0} ms after)",
                crate::display::show_bytes(bytes),
                seconds * 1000.0,
                disk.label(),
                show_rate(bw),
                judged_after.as_secs_f64() * 1000.0
            ),
        };
        let verb = if *method == Method::DryRun {
            "would restrict"
        } else {
            "restrict"
        };
        let result = fx.actuator.restrict(offender.pid, members, method).await;
        fx.metrics
            .action("restrict", method.label(), result.is_ok());
        match result {
            Ok(Restricted {
                id,
                how,
                place,
                took,
            }) => {
                fx.metrics.restricted(method.label(), took.total());
                let onset = after_onset.map_or(String::new(), |w| {
                    format!(
                        " for its first {}s, then io.weight={w}",
                        crate::act::method::ONSET.as_secs()
                    )
                });
                let message = format!(
                    "{verb} pid {} ({comm}) {why}: {how}{onset} ({} processes, in {took})",
                    offender.pid,
                    members.len()
                );
                fx.log.decided(offender.pid, "restrict", message);
                self.state.hold(offender.pid);
                self.restriction = Some(id);
                let standing = NoRoom::standing(self.no_room, SystemTime::now());
                self.speed_probe = SpeedProbe::remembering(standing, bw);
                if let Some(r) = self
                    .speed_probe
                    .remembered()
                    .filter(|_| method.under_rate_control())
                {
                    tracing::info!(
                        "{}: no speed-probe window in this restriction: the disk showed no room \
                         at {} in an earlier one",
                        disk.label(),
                        show_rate(r)
                    );
                }
                self.offender = Some(Offender {
                    pid: offender.pid,
                    comm,
                    since: Instant::now(),
                    action: how,
                    place,
                    in_place,
                });
            }
            Err(e) => {
                if fx.limit.allow(format!("restrict {}", offender.pid)) {
                    tracing::error!("cannot restrict pid {} ({comm}) {why}: {e:#}", offender.pid);
                }
            }
        }
    }

    /// Lifts the restriction held on this disk; `why` says what calmed down.
    pub async fn release(
        &mut self,
        disk: &Disk,
        root: u32,
        why: String,
        tree: &ProcessTree,
        fx: &mut Effects<'_>,
    ) {
        self.state.clear();
        let method = self.method.as_ref().map_or("?", Method::label);
        let comm = self.comm_of(root, tree);
        self.offender = None;
        self.speed_probe = SpeedProbe::default();
        let Some(id) = self.restriction.take() else {
            return;
        };
        lift(disk, id, root, &comm, method, why, fx).await;
    }

    /// A released root's name: a release that waited for its backlog comes after the tree
    /// forgot the exited root.
    fn comm_of(&mut self, root: u32, tree: &ProcessTree) -> String {
        tree.get(root)
            .map(|n| n.comm.clone())
            .or_else(|| self.offender.take().map(|o| o.comm))
            .map_or("?".into(), |c| crate::display::printable(&c))
    }

    /// Sets the held restriction, whose processes are all gone and whose release waits for
    /// their backlog (`self.drain`), apart as [`Draining`]: the disk holds no writer now.
    pub fn linger(&mut self, root: u32, tree: &ProcessTree) {
        let Some(drain) = self.drain.take() else {
            return;
        };
        let method = self.method.as_ref().map_or("?", Method::label);
        let Some(id) = self.restriction.take() else {
            return;
        };
        self.state.clear();
        self.speed_probe = SpeedProbe::default();
        let place = self.offender.as_ref().and_then(|o| o.place.clone());
        let comm = self.comm_of(root, tree);
        self.offender = None;
        self.draining.push(Draining {
            id,
            root,
            comm,
            place,
            method,
            drain,
        });
    }

    /// Releases each restriction set apart whose backlog is written, or whose wait gave up, or
    /// which a process entered again (a service of the same unit started anew): that process
    /// would be held without the daemon judging it.
    pub async fn finish_drains(&mut self, disk: &Disk, now: Instant, fx: &mut Effects<'_>) {
        for d in std::mem::take(&mut self.draining) {
            if let Some(pid) = fx
                .actuator
                .live_members(d.id)
                .and_then(|p| p.first().copied())
            {
                let why = format!("pid {pid} entered it while its backlog was written");
                lift(disk, d.id, d.root, &d.comm, d.method, why, fx).await;
                continue;
            }
            let backlog = fx.actuator.backlog(d.id);
            let mut wait = Some(d.drain);
            let delay = crate::system::vmstat::writeback_delay;
            match (drain::judge(backlog, delay, now, &mut wait), wait) {
                (Verdict::Wait { .. }, Some(drain)) => self.draining.push(Draining { drain, ..d }),
                (verdict, _) => {
                    let why = format!("nothing of it is left{}", verdict.said());
                    lift(disk, d.id, d.root, &d.comm, d.method, why, fx).await;
                }
            }
        }
    }

    /// Moves a held restriction's limits to `method`, when its write limit (or the speed its
    /// iocost model assumes) changed by more than a fifth, or it moves between `io.max`, the
    /// rate control of a disk not yet measured and a pinned model: a restriction made while the
    /// disk was not yet measured would otherwise keep a limit made from a guess.
    pub async fn retune(&mut self, disk: &Disk, method: Method, why: &str, fx: &mut Effects<'_>) {
        let (Some(id), Some(old), Some(new)) = (
            self.restriction,
            self.method.as_ref().and_then(Method::write_limit),
            method.write_limit(),
        ) else {
            return;
        };
        // The next one is judged against the limits that one sets, once they are set.
        if fx.actuator.retuning(id) {
            return;
        }
        // io.max, a held rate or the rate control of a disk not yet measured, or a pinned
        // model: each move between them is made at once.
        let kind = |m: &Method| {
            (
                m.uses_iocost(),
                m.vrate().map(|v| std::mem::discriminant(&v)),
            )
        };
        let same_kind = self.method.as_ref().map(kind) == Some(kind(&method));
        // A write limit follows a speed estimate that moves by itself: not for every 20%. The
        // rate control's range follows what the disk has shown, which only rises, and a cap 20%
        // short would stop a disk that keeps up a little under it; but each write of
        // io.cost.qos freezes the disk's queue, so not for every 5% either.
        let close = |a: u64, b: u64, slack: f64| (a as f64 - b as f64).abs() <= slack * b as f64;
        let unchanged = match (
            self.method.as_ref().and_then(Method::rate_range),
            method.rate_range(),
        ) {
            (Some((old_min, old_max)), Some((min, max))) => {
                close(min, old_min, 0.05) && close(max, old_max, 0.05)
            }
            _ => close(new, old, 0.2),
        };
        // memory.high moves between two sizes, as others start or stop writing beside it.
        let same_memory =
            self.method.as_ref().and_then(Method::memory_high) == method.memory_high();
        let same_weight = self.method.as_ref().and_then(Method::weight) == method.weight();
        if same_kind && unchanged && same_memory && same_weight {
            return;
        }
        let retuned = fx.actuator.retune(id, &method).await;
        self.retuned(disk, retuned, why.to_string(), fx);
    }

    /// Ends a retune whose iocost writes were made apart ([`Actuator::finish_retunes`]).
    pub fn finish_retune(&mut self, disk: &Disk, retuned: Result<Retune>, fx: &mut Effects<'_>) {
        let why = self.retune_why.take().unwrap_or_default();
        self.retuned(disk, retuned, why, fx);
    }

    fn retuned(&mut self, disk: &Disk, retuned: Result<Retune>, why: String, fx: &mut Effects<'_>) {
        match retuned {
            Ok(Retune::Done(method, took)) => {
                let pid = self.offender.as_ref().map_or(0, |o| o.pid);
                let id = self.restriction.unwrap_or_default();
                let lifted = if fx.actuator.memory_lifted(id) {
                    " (its memory.high left lifted for its processes' own memory)"
                } else {
                    ""
                };
                let message = format!(
                    "retune pid {pid} on {}: {}{lifted} ({why}) (in {took})",
                    disk.label(),
                    method.describe()
                );
                fx.log.decided(pid, "retune", message);
                if let Some(o) = &mut self.offender {
                    o.action = method.describe();
                }
                self.method = Some(method);
            }
            // Said when its writes are made.
            Ok(Retune::Waiting) => self.retune_why = Some(why),
            Ok(Retune::Unchanged) => {}
            Err(e) => {
                if fx.limit.allow(format!("retune {}", disk.label())) {
                    tracing::warn!("cannot change the limits on {}: {e:#}", disk.label());
                }
            }
        }
    }

    /// Keeps the held restriction complete as its subtree changes.
    pub fn sweep(&mut self, members: &[u32], fx: &mut Effects<'_>) {
        if let (Some(held), Some(id)) = (&self.state.held, self.restriction) {
            let root = held.root;
            if let Err(e) = fx.actuator.sweep(id, members)
                && fx.limit.allow(format!("sweep {root}"))
            {
                tracing::warn!("keeping pid {root}'s restriction complete: {e:#}");
            }
        }
    }
}

/// Undoes restriction `id` and logs it as the release of `root`.
async fn lift(
    disk: &Disk,
    id: u64,
    root: u32,
    comm: &str,
    method: &str,
    why: String,
    fx: &mut Effects<'_>,
) {
    let r = fx.actuator.release(id).await;
    let verb = if method == "dry-run" {
        "would release"
    } else {
        "release"
    };
    let message = format!(
        "{verb} pid {root} ({comm}) on {}: {why}; {} restored, {} kept as changed by someone \
         else, {} gone",
        disk.label(),
        r.restored,
        r.kept.len(),
        r.vanished
    );
    fx.log.decided(root, "release", message);
    fx.metrics.undone_changes.inc_by(r.restored as u64);
    fx.metrics.action("release", method, r.errors.is_empty());
    for k in &r.kept {
        tracing::info!("{k}");
    }
    for e in &r.errors {
        tracing::warn!("release pid {root}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A restriction whose writers are gone and whose release waits for their backlog leaves
    /// the disk free for the next writer, and is kept apart with what its release line needs.
    #[test]
    fn a_gone_writers_restriction_waits_apart() {
        let now = Instant::now();
        let mut rt = DiskRuntime {
            restriction: Some(3),
            method: Some(Method::DryRun),
            offender: Some(Offender {
                pid: 140,
                comm: "cp".into(),
                since: now,
                action: "io.weight=1".into(),
                place: Some("/ioshield.slice/r3".into()),
                in_place: false,
            }),
            ..Default::default()
        };
        rt.state.hold(140);
        let verdict = drain::judge(
            Some(64 << 20),
            || Duration::from_secs(35),
            now,
            &mut rt.drain,
        );
        assert_eq!(verdict, Verdict::Wait { started: true });
        rt.linger(140, &ProcessTree::default());
        assert!(rt.state.held.is_none(), "the disk holds no writer now");
        assert_eq!(
            (rt.restriction, rt.drain, rt.offender.is_none()),
            (None, None, true)
        );
        assert_eq!(
            rt.method,
            Some(Method::DryRun),
            "the disk's action stays known"
        );
        let [apart] = &rt.draining[..] else {
            panic!("{} kept apart", rt.draining.len());
        };
        assert_eq!(
            (
                apart.id,
                apart.root,
                apart.comm.as_str(),
                apart.place.as_deref()
            ),
            (3, 140, "cp", Some("/ioshield.slice/r3"))
        );
        assert_eq!(apart.drain.since, now);
        // Nothing waits: nothing is set apart.
        rt.linger(141, &ProcessTree::default());
        assert_eq!(rt.draining.len(), 1);
    }

    /// A restriction set apart stays while its backlog is written, and goes at once when a
    /// process enters its cgroup again (a unit's service started anew): nothing is held that
    /// the daemon does not judge.
    #[tokio::test]
    async fn a_restriction_set_apart_goes_when_a_process_enters_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cgroup");
        let cg = std::path::Path::new("/ioshield.slice/r1");
        let abs = root.join("ioshield.slice/r1");
        std::fs::create_dir_all(&abs).unwrap();
        std::fs::write(abs.join("cgroup.procs"), "").unwrap();
        std::fs::write(
            abs.join("memory.stat"),
            "file_dirty 67108864\nfile_writeback 0\n",
        )
        .unwrap();
        let (journal, _) = crate::journal::Journal::open(&dir.path().join("state.json")).unwrap();
        let held = Method::Cgroup(crate::act::CgroupLimits {
            dev: Default::default(),
            write: crate::act::WriteControl::Limit(25_000_000),
            memory_high: Some(32 << 20),
        });
        let (mut actuator, id) = Actuator::holding_cgroup(journal, &root, cg, held);
        let mut metrics = Metrics::new();
        let mut log = DecisionLog::default();
        let mut limit = RateLimit::new(Duration::from_secs(60));
        let now = Instant::now();
        let mut drain = None;
        drain::judge(Some(64 << 20), || Duration::from_secs(35), now, &mut drain);
        let mut rt = DiskRuntime {
            draining: vec![Draining {
                id,
                root: 140,
                comm: "cp".into(),
                place: None,
                method: "cgroup",
                drain: drain.unwrap(),
            }],
            ..Default::default()
        };
        let disk = Disk {
            id: Default::default(),
            name: Some("vdb".into()),
        };
        let mut fx = Effects {
            actuator: &mut actuator,
            metrics: &mut metrics,
            log: &mut log,
            limit: &mut limit,
        };
        rt.finish_drains(&disk, now + Duration::from_secs(1), &mut fx)
            .await;
        assert_eq!(rt.draining.len(), 1, "its backlog is still there");
        std::fs::write(abs.join("cgroup.procs"), "4242\n").unwrap();
        rt.finish_drains(&disk, now + Duration::from_secs(2), &mut fx)
            .await;
        assert!(rt.draining.is_empty());
        let said = log.recent();
        assert!(
            said.iter().any(|r| r.message.contains(
                "release pid 140 (cp) on /dev/vdb: pid 4242 entered it while its backlog was written"
            )),
            "{said:?}"
        );
    }
}
