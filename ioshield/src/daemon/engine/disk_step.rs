//! One disk at one tick: what is seen of it (its speed, its writers, its restriction), the
//! decision `detect::policy` makes of that, and which of [`restrict`](super::restrict),
//! [`release`](super::release) or [`hold`](super::hold) carries it out.
use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use super::{Engine, held_speed};
use crate::{
    act::{Actuator, Method, method::method_for},
    config::DevicePolicy,
    detect::{
        backlog::{self, DiskBacklog},
        bandwidth::Estimate,
        company::{self, Company},
        offender,
        policy::{BurstReport, Candidate, Decision, Inputs},
        rates::Rates,
    },
    display::show_rate,
    model::tree::ProcessTree,
    system::devices::Disk,
};

/// What one tick saw of one disk, for whichever of restrict, release or hold acts on it.
pub(super) struct DiskTick<'a> {
    pub(super) disk: &'a Disk,
    pub(super) now: Instant,
    pub(super) tree: &'a ProcessTree,
    pub(super) policy: DevicePolicy,
    pub(super) estimate: Estimate,
    /// Processes held by restrictions on other disks: never chosen here.
    pub(super) elsewhere: HashSet<u32>,
    /// Where the held writer's dirty counts are current, a disk not measured counts as one
    /// of the judged speed while the rate is held there, and as one of a write limit's speed
    /// under it ([`held_speed`]).
    pub(super) rate_held_is_speed: bool,
}

impl DiskTick<'_> {
    pub(super) fn bw(&self) -> f64 {
        self.estimate.bytes_per_sec
    }

    /// What the others beside a restriction's processes (`inside`) make of its memory.high
    /// under `method`: read only when a restriction is made or kept. `limit_counts`: whether
    /// its write limit counts as the disk's speed yet ([`super::limit_counts`]).
    pub(super) fn company(
        &self,
        rates: &Rates,
        inside: &dyn Fn(u32) -> bool,
        method: &Method,
        limit_counts: bool,
    ) -> Company {
        // The daemon's own journal of changes, written before each, is not company.
        let me = std::process::id();
        let others = company::others_rate(&rates.on_disk(self.disk), inside, |p| {
            p != me
                && self
                    .tree
                    .get(p)
                    .is_some_and(|n| !n.kernel_thread && !n.exited)
        });
        let speed = if self.rate_held_is_speed {
            held_speed(self.estimate, method, limit_counts)
        } else {
            self.estimate
        };
        company::judge(self.policy.memory_high, speed, others)
    }
}

/// The restriction held on a disk as this tick found it.
pub(super) struct Held {
    /// Its processes as the actuator finds them now (`None`: it cannot tell).
    pub(super) live: Option<Vec<u32>>,
    /// Nothing of it lives any more.
    pub(super) gone: bool,
    /// What its processes write, bytes per second, as the held score counts them.
    pub(super) score: f64,
}

impl Engine {
    pub(super) async fn step_disk(
        &mut self,
        disk: &Disk,
        now: Instant,
        tree: &ProcessTree,
        actuator: &mut Actuator,
        backlog: DiskBacklog,
    ) {
        let policy = self.policy(disk);
        let elsewhere = self.held_elsewhere(disk);
        let burst = self
            .burst_on(disk, tree)
            .filter(|b| !elsewhere.contains(&b.offender.pid));
        let estimate = self.bandwidth.estimate(disk.id, policy.bandwidth);
        self.look_at(disk, now, &policy, estimate, actuator);
        let at = DiskTick {
            disk,
            now,
            tree,
            rate_held_is_speed: self
                .config
                .daemon
                .refresh_dirty_counts
                .counts_current(self.kernel),
            policy,
            estimate,
            elsewhere,
        };

        let scores = offender::scores(
            tree,
            &self.eligibility,
            self.rates.on_disk(disk),
            self.config.daemon.parent_factor,
        );
        let candidate = offender::choose(tree, &self.eligibility, &scores, &at.elsewhere);
        // A burst names the process that wrote; when the subtree the tick would choose holds
        // it (a shell looping over short-lived writers, a build), that subtree is the offender;
        // not a parent in another unit (a script's shell that started the writer's scope).
        let burst = burst.map(|b| match candidate {
            Some(c)
                if c.pid != b.offender.pid
                    && tree.ancestry_in_unit(b.offender.pid).any(|p| p == c.pid) =>
            {
                BurstReport {
                    offender: Candidate {
                        pid: c.pid,
                        score: c.score.max(b.offender.score),
                    },
                    ..b
                }
            }
            _ => b,
        });
        let rt = self.disks.entry(disk.clone()).or_default();
        rt.writers = Self::top_writers(&self.eligibility, tree, &scores);
        let held_root = rt.state.held.as_ref().map(|h| h.root);
        // A restriction is judged by what still lives in it: the root may exit while children it
        // started keep writing (they are no longer its descendants in the tree, but still in
        // the restriction), and children born inside it count even if no recorded member lives.
        let live = rt.restriction.and_then(|id| actuator.live_members(id));
        let gone = match &live {
            Some(pids) => pids.is_empty(),
            None => held_root.is_some_and(|r| tree.get(r).is_none_or(|n| n.exited)),
        };
        let inside: f64 = live
            .iter()
            .flatten()
            .filter_map(|p| scores.own.get(p))
            .sum();
        // The backlog trigger also needs this disk's top writer to be active (policy.rs): its
        // part of the machine's backlog is an estimate (detect/backlog.rs). Active by its last
        // second too: a writer that just began is, while its 8 s average still climbs.
        let recent = offender::scores(
            tree,
            &self.eligibility,
            self.rates.recent_on_disk(disk),
            self.config.daemon.parent_factor,
        );
        let inputs = Inputs {
            now,
            offender: candidate,
            offender_recent: candidate.map_or(0.0, |c| {
                offender::score_of(tree, &self.eligibility, &recent, c.pid)
            }),
            held_score: held_root
                .and_then(|r| scores.subtree.get(&r))
                .copied()
                .unwrap_or(0.0)
                .max(inside),
            held_gone: gone,
            bandwidth: at.bw(),
            flush_seconds: backlog.flush_seconds(&estimate),
            burst,
        };
        let held = Held {
            live,
            gone,
            score: inputs.held_score,
        };
        match rt.state.step(&inputs, &at.policy) {
            Some(Decision::Restrict { offender, trigger }) => {
                self.restrict(&at, offender, trigger, &backlog, actuator)
                    .await;
            }
            Some(Decision::Release { root, calm_for }) => {
                self.release(&at, root, calm_for, &held, actuator).await;
            }
            None => {
                rt.drain = None;
                if let Some(root) = held_root {
                    self.hold(&at, root, &held, actuator).await;
                }
            }
        }
        self.look_again_for_backlog(&at, backlog.bytes(), inputs.flush_seconds);
    }

    /// When the disk's backlog, growing as it does, will be over the limit before the next
    /// tick, a step is taken then ([`backlog::seconds_until_over`]); never while the disk
    /// holds a restriction, whose writer is held already.
    fn look_again_for_backlog(&mut self, at: &DiskTick, bytes: f64, flush_seconds: Option<f64>) {
        let tick = self.config.daemon.tick.as_secs_f64();
        let limit = at.policy.max_flush_seconds;
        let Some(rt) = self.disks.get_mut(at.disk) else {
            return;
        };
        let seen = rt.backlog_seen;
        let ago = |t: Instant| at.now.saturating_duration_since(t).as_secs_f64();
        if seen.is_some_and(|(t, _)| ago(t) < backlog::GROWTH_SPAN) {
            return;
        }
        rt.backlog_seen = Some((at.now, bytes));
        rt.backlog_due = match (seen, flush_seconds) {
            (Some((t, was)), Some(s)) if rt.state.held.is_none() && limit > 0.0 => {
                backlog::seconds_until_over((was, ago(t)), bytes, s, limit)
                    .filter(|&due| due < tick)
                    .map(|due| at.now + Duration::from_secs_f64(due))
            }
            _ => None,
        };
    }

    /// Sets a disk up the first time it is seen (its iocost model, the speed probe's answer an
    /// earlier run kept), and logs and publishes the speed it is judged against.
    fn look_at(
        &mut self,
        disk: &Disk,
        now: Instant,
        policy: &DevicePolicy,
        estimate: Estimate,
        actuator: &mut Actuator,
    ) {
        let bw = estimate.bytes_per_sec;
        let first_sight = !self.disks.contains_key(disk);
        let rt = self.disks.entry(disk.clone()).or_default();
        if first_sight
            && let Some(model) = method_for(disk, policy, estimate, &self.cgroup_action)
                .0
                .iocost_model()
        {
            actuator.prepare_iocost(disk.id, model);
            rt.model_looked_at = Some(now);
        }
        if estimate.capacity {
            // Measured: the probe is done with, and the speeds file forgets the answer too.
            rt.no_room = None;
        } else if first_sight {
            rt.no_room = self
                .known
                .get(&disk.id)
                .and_then(|k| k.identity.as_deref())
                .and_then(|i| self.speeds.no_room(i));
        }
        // The measured speed moves with every backlog: say when it changed a lot, but
        // at most once a minute (each decision line shows the value used anyway).
        if rt
            .bandwidth_logged
            .is_none_or(|b| (bw / b - 1.0).abs() > 0.2)
            && self.limit.allow(format!("bandwidth {}", disk.label()))
        {
            tracing::info!(
                "{}: judging writers against {} ({})",
                disk.label(),
                show_rate(bw),
                estimate.source
            );
            rt.bandwidth_logged = Some(bw);
        }
        rt.bandwidth = Some(estimate);
        self.metrics.disk(
            disk,
            bw,
            rt.state.held.is_some(),
            rt.method.as_ref().is_some_and(Method::uses_iocost),
            rt.draining.len(),
        );
    }
}
