//! One tick of the daemon: sample, update the tree and rates, decide per disk, act.
mod disk_step;
mod hold;
mod release;
mod restrict;

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    decisions::DecisionLog,
    disk::{DiskRuntime, Effects},
    guard::{BacklogGuards, Wanted},
    metrics::Metrics,
    probe_hearing::{hear_others, keep_room_proven},
    ratelimit::RateLimit,
    speeds::SpeedFile,
    status::{self, Status},
    user_links::UserLinks,
};
use crate::{
    act::{
        Actuator, CgroupAction, Method,
        method::{ONSET, ONSET_FROM, method_for},
    },
    config::{ActionKind, Bandwidth, Config, DevicePolicy, MaxDirty, MemoryHigh},
    detect::{
        backlog::Backlogs,
        bandwidth::{BandwidthEstimator, Estimate, RateHold},
        company::Company,
        eligibility::Eligibility,
        offender,
        policy::{BurstReport, Candidate},
        rates::Rates,
    },
    display::show_rate,
    model::tree::ProcessTree,
    probe::{Probe, burst::Burst},
    system::{
        cgroups,
        devices::{self, DevId, Devices, Disk},
    },
};

pub use crate::detect::pressure::HEAR_EVERY;

/// How often device sections naming absent disks are looked up again.
const RESOLVE_EVERY: u64 = 30;
/// A process reported by the kernel that may not be chosen (excluded, pid 1, ...) keeps
/// dirtying fast; its later reports are ignored this long instead of waking the daemon each time.
const IGNORE_BURSTS_FOR: Duration = Duration::from_secs(10);
/// Writes in flight on a disk, on average over the last sample, under which iocost left on after a
/// release is put back (turning it off waits for what is in flight).
const QUIET_QUEUE: f64 = 1.0;
/// Dirty and writeback memory under which it is put back: under iocost the disk's queue stays
/// short while the released writer's last pages wait in iocost's own queue, and turning iocost
/// off at the next tick let them flood the disk (commit paused 0.36-0.48 s right after, in 2 of
/// 3 runs on 6.12 with the speed known).
const QUIET_BACKLOG: f64 = 4.0 * 1024.0 * 1024.0;
/// How often a quiet disk's iocost model set up ahead is matched to its measured speed at most:
/// each write freezes the disk's queue a moment, and the speed moves with every backlog.
const MODEL_MATCH_EVERY: Duration = Duration::from_secs(10);

/// What sysfs says of a disk: read at its first sight, kept while the daemon runs.
struct Known {
    /// Its stable identity in the speeds file, if it has one.
    identity: Option<String>,
    /// Whether a backlog it has not begun to write counts (`detect::backlog`).
    kind: Option<devices::Kind>,
}

pub struct Engine {
    config: Config,
    /// This kernel's version, read once: `refresh_dirty_counts`' `auto` goes by it on every tick.
    kernel: Option<(u32, u32)>,
    cgroup_action: Result<CgroupAction, String>,
    rates: Rates,
    bandwidth: BandwidthEstimator,
    eligibility: Eligibility,
    devices: Devices,
    /// Which config section applies to which disk.
    sections: HashMap<DevId, String>,
    unresolved: Vec<String>,
    disks: HashMap<Disk, DiskRuntime>,
    limit: RateLimit,
    log: DecisionLog,
    ticks: u64,
    started: Instant,
    /// Failed undos waiting for another try, for `status`.
    pending_undos: usize,
    /// Measured disk speeds kept across restarts, and each disk's identity in that file.
    speeds: SpeedFile,
    /// What sysfs says of each disk seen, read once.
    known: HashMap<DevId, Known>,
    /// The actuator's [`Actuator::placements`] when the tree's cgroups were last forgotten.
    placements_seen: u64,
    /// Kernel burst reports not yet judged, and reporters that may not be chosen.
    bursts: Vec<(Disk, Burst)>,
    ignored_bursts: HashMap<u32, Instant>,
    guards: BacklogGuards,
    /// Each disk's part of the machine's dirty memory, for the backlog trigger.
    backlogs: Backlogs,
    /// The users whose processes write, whose own systemd is reached ahead.
    user_links: UserLinks,
    pub metrics: Metrics,
}

impl Engine {
    pub fn new(
        config: Config,
        tree: &ProcessTree,
        cgroup_action: Result<CgroupAction, String>,
    ) -> Self {
        let speeds = SpeedFile::load(&config.daemon.speeds_file);
        let mut e = Self {
            kernel: crate::system::host::kernel_version(),
            rates: Rates::new(config.daemon.tau),
            eligibility: Eligibility::new(
                config.exclude.clone(),
                config.daemon.session_leaders,
                tree,
            ),
            config,
            cgroup_action,
            bandwidth: BandwidthEstimator::default(),
            devices: Devices::default(),
            sections: HashMap::new(),
            unresolved: Vec::new(),
            disks: HashMap::new(),
            limit: RateLimit::new(Duration::from_secs(60)),
            log: DecisionLog::default(),
            ticks: 0,
            started: Instant::now(),
            pending_undos: 0,
            speeds,
            known: HashMap::new(),
            placements_seen: 0,
            bursts: Vec::new(),
            ignored_bursts: HashMap::new(),
            backlogs: Backlogs::default(),
            guards: BacklogGuards::default(),
            user_links: UserLinks::new(Instant::now()),
            metrics: Metrics::new(),
        };
        e.guards.rescan();
        e.resolve_sections(true);
        e
    }

    pub fn tick(&self) -> Duration {
        self.config.daemon.tick
    }

    /// The soonest a disk's backlog, growing as it does, is due over the limit before the next
    /// tick, for the daemon to take a step then.
    pub fn backlog_due(&self) -> Option<Instant> {
        self.disks
            .values()
            .filter(|rt| rt.state.held.is_none())
            .filter_map(|rt| rt.backlog_due)
            .min()
    }

    /// Whether a restriction's speed probe hears the others between ticks: its last step
    /// forced the rate up for the room a window showed, and a room the disk does not have
    /// pauses them within a second ([`HEAR_EVERY`]).
    pub fn hears_others(&self) -> bool {
        self.disks
            .values()
            .any(|rt| rt.restriction.is_some() && rt.speed_probe.hears_others())
    }

    /// Hears the others and the disk for each such probe between ticks; returns whether a
    /// step was taken back, or heard with the disk keeping up under it for another span, for
    /// the daemon to tick at once: to hold the rate again, or to raise the writer's
    /// memory.high toward the forced rate's.
    pub fn hear_between_ticks(&mut self, actuator: &Actuator) -> bool {
        let mut changed = false;
        for (disk, rt) in self
            .disks
            .iter_mut()
            .filter(|(_, rt)| rt.restriction.is_some())
        {
            changed |= hear_others(disk, rt, actuator);
        }
        changed
    }

    /// How often the dirty counts of writers held by `memory.high` are refreshed on this
    /// kernel; `None`: never.
    pub fn refresh_dirty_counts(&self) -> Option<Duration> {
        self.config
            .daemon
            .refresh_dirty_counts
            .interval(self.kernel)
    }

    /// The restrictions whose writer's dirty counts are refreshed (where `memory.high` holds
    /// it): every one. The refresh came case by case, each measured: disks of known speed
    /// (stop 44); rates iocost holds at most at the judged speed and the probe's windows
    /// ([`held_speed`]: with the 8 MiB beside others there too, the windows' pauses that kept
    /// them out at 32 MiB were shorter); rates the probe forced up, whose `memory.high` of a
    /// second of the rate (41 MiB at 43 MB/s) a writer whose counts the kernel reads up to 2 s
    /// late fills with dirty pages (after a false room on the 30 MB/s disk the committing load
    /// paused 0.22-0.50 s until the take-back, 4 runs, 6.12; refreshed 0.16-0.32 s, 5 runs;
    /// docs/bench/dirty-counts.md, stop 60). The last left out was a write limit on a disk
    /// not measured (systemd hosts, `iocost = "off"`), and `memory.high` alone once the probe
    /// lifted the limit: there, on 6.12, a `dd` service held by `MemoryHigh=32M` alone wrote
    /// 10-15 MB/s in bursts to the 30 MB/s disk, plain or under dm-crypt, and 12.3 MB/s under
    /// a 21 MB/s limit, too little queued for the disk to be measured; refreshed, 30.1-30.2 and
    /// 20.9 MB/s (6.1, whose counts are fresh: 30 MB/s). In the stall bench's write-limit
    /// path (`iocost = "off"`, 6.12, the copy) the committing load's longest pause went from
    /// 1.15 to 0.47 s, the copy from 0.67x to 0.95x (docs/bench/mapped-disk.md, stop 81).
    pub fn dirty_counts_refreshed(&self) -> impl Iterator<Item = u64> + '_ {
        self.disks.values().filter_map(|rt| rt.restriction)
    }

    /// Where ioshield writes cgroupfs itself and a disk's policy may restrict by cgroup:
    /// whether its restrictions need the memory controller too (some policy sets memory.high).
    pub fn cgroup_setup(&self) -> Option<bool> {
        cgroup_setup(&self.config, &self.cgroup_action)
    }

    pub fn announce(&self) {
        let d = &self.config.daemon;
        tracing::info!(
            "ioshield daemon running: tick {:?}, tau {:?}, parent factor {}, action {:?}, dirty \
             counts of writers held by memory.high refreshed {}; cgroup action {}; config {}",
            d.tick,
            d.tau,
            d.parent_factor,
            d.action,
            self.refresh_dirty_counts()
                .map_or("by the kernel alone".to_string(), |t| format!(
                    "every {t:?}"
                )),
            status::describe_cgroup_action(&self.cgroup_action),
            self.config
                .source
                .as_ref()
                .map_or("built-in defaults".to_string(), |p| p.display().to_string())
        );
    }

    pub fn reconfigure(&mut self, config: Config, tree: &ProcessTree) {
        self.rates.set_tau(config.daemon.tau);
        self.eligibility =
            Eligibility::new(config.exclude.clone(), config.daemon.session_leaders, tree);
        self.config = config;
        for rt in self.disks.values_mut() {
            // A held restriction keeps the method it was put in place with, for its next retune
            // to move from (to the new settings, if they change it): forgotten, every retune
            // of it was skipped until its release (`DiskRuntime::retune` moves only from a
            // known method), and its speed probe's steps and the disk's measurement with them.
            if rt.restriction.is_none() {
                rt.method = None;
            }
            rt.bandwidth_logged = None;
        }
        self.guards.reconfigured();
        self.resolve_sections(true);
    }

    fn resolve_sections(&mut self, announce: bool) {
        self.sections.clear();
        self.unresolved.clear();
        for (key, _) in &self.config.devices {
            match self.devices.lookup(key) {
                Some(disk) => {
                    self.sections.insert(disk.id, key.clone());
                }
                None => {
                    if announce {
                        tracing::warn!(
                            "device section \"{key}\": no such disk now; it applies when the disk \
                             appears"
                        );
                    }
                    self.unresolved.push(key.clone());
                }
            }
        }
    }

    fn policy(&self, disk: &Disk) -> DevicePolicy {
        self.config
            .policy_for(self.sections.get(&disk.id).map(String::as_str))
            .clone()
    }

    /// The kernel reported processes dirtying faster than their disks write: judge now rather
    /// than at the next tick. Returns whether a step ran.
    pub async fn on_bursts(
        &mut self,
        bursts: Vec<Burst>,
        probe: &mut Probe,
        tree: &mut ProcessTree,
        actuator: &mut Actuator,
    ) -> Result<bool> {
        tracing::debug!("kernel burst reports: {bursts:?}");
        let now = Instant::now();
        self.ignored_bursts
            .retain(|_, at| now.duration_since(*at) < IGNORE_BURSTS_FOR);
        let fresh: Vec<(Disk, Burst)> = bursts
            .into_iter()
            .filter(|b| !self.ignored_bursts.contains_key(&b.pid))
            .map(|b| (probe.disk_of(b.dev), b))
            .filter(|(d, _)| d.name.is_some())
            .collect();
        for (disk, _) in &fresh {
            self.metrics.burst(disk);
        }
        // A disk holds one restriction at a time (`DiskState::step`): a report on a disk that
        // holds one, its own offender's included (the kernel reports it every window it
        // outruns the disk), decides nothing, and a step for it would only cost CPU.
        let fresh: Vec<(Disk, Burst)> = fresh
            .into_iter()
            .filter(|(d, _)| self.disks.get(d).is_none_or(|rt| rt.state.held.is_none()))
            .collect();
        if fresh.is_empty() {
            return Ok(false);
        }
        self.bursts = fresh;
        self.step(probe, tree, actuator).await?;
        Ok(true)
    }

    /// Ends the retunes whose iocost writes were made apart from the loop
    /// ([`Actuator::iocost_made`] tells when). Returns whether one ended.
    pub async fn finish_retunes(&mut self, actuator: &mut Actuator) -> bool {
        let ended = actuator.finish_retunes().await;
        let any = !ended.is_empty();
        for (id, retuned) in ended {
            let Some((disk, rt)) = self
                .disks
                .iter_mut()
                .find(|(_, rt)| rt.restriction == Some(id))
            else {
                continue;
            };
            let mut fx = Effects {
                actuator,
                metrics: &mut self.metrics,
                log: &mut self.log,
                limit: &mut self.limit,
            };
            rt.finish_retune(disk, retuned, &mut fx);
        }
        any
    }

    pub async fn step(
        &mut self,
        probe: &mut Probe,
        tree: &mut ProcessTree,
        actuator: &mut Actuator,
    ) -> Result<()> {
        self.ticks += 1;
        if self.ticks.is_multiple_of(RESOLVE_EVERY) {
            self.guards.rescan();
            if !self.unresolved.is_empty() {
                self.resolve_sections(false);
            }
        }
        let sample = probe.sample()?;
        let lost = sample.lost;
        if (lost.counter_map_full > 0 || lost.lifecycle_events_dropped > 0)
            && self.limit.allow("lost")
        {
            tracing::warn!(
                "kernel maps full: {} counter updates and {} process events lost this tick",
                lost.counter_map_full,
                lost.lifecycle_events_dropped
            );
        }
        self.metrics.sample(&sample);
        for cost in probe.program_costs() {
            self.metrics
                .program_cost(&cost.name, cost.run_count, cost.run_time_ns);
        }
        tree.follow(
            &sample.lifecycle,
            probe.features().lifecycle,
            lost.lifecycle_events_dropped > 0,
        );
        tree.know(sample.writes.keys().map(|(pid, _)| *pid));
        // A restriction made or lifted since moved processes between cgroups.
        if actuator.placements() != self.placements_seen {
            tree.forget_cgroups();
            self.placements_seen = actuator.placements();
        }
        tree.learn_cgroups(sample.writes.keys().map(|(pid, _)| *pid));
        if actuator.through_systemd() {
            let writers = sample.writes.keys().map(|(pid, _)| *pid);
            let users = self
                .user_links
                .users_of(writers, Instant::now(), cgroups::of_process);
            for uid in users {
                actuator.connect_ahead(uid);
            }
        }
        self.rates.update(&sample, tree);
        for (disk, rt) in &self.disks {
            // A restriction set apart while its backlog is written holds the disk's rate too.
            let pinned = rt
                .restriction
                .into_iter()
                .chain(rt.draining.iter().map(|d| d.id))
                .any(|id| actuator.pins_disk(id));
            // systemd enforces a mapped disk's limit on the device at the bottom of it.
            let mapped = self.bandwidth.is_mapped(disk.id);
            let hold = if pinned {
                Some(RateHold::Pinned)
            } else {
                rt.restriction.and(rt.method.as_ref()).and_then(|m| {
                    let rate = m.allowed_rate()? as f64;
                    Some(match m {
                        Method::SystemdScope(_) if mapped => RateHold::LimitedBelow(rate),
                        _ => RateHold::AtLeast(rate),
                    })
                })
            };
            self.bandwidth.hold(disk.id, hold);
        }
        self.bandwidth.observe(&sample);
        for (disk, rt) in self
            .disks
            .iter_mut()
            .filter(|(_, rt)| rt.restriction.is_some())
        {
            if let Some(delta) = sample.disks.get(&disk.id) {
                rt.speed_probe
                    .observe(delta, sample.disks_elapsed.as_secs_f64());
            }
        }
        self.keep_speeds();
        self.speeds.save(false);
        // The released writers' iocost lingers while the machine holds a backlog at all; the
        // backlog trigger weighs each disk's own part of it.
        let backlog = (sample.dirty.dirty_bytes + sample.dirty.writeback_bytes) as f64;
        self.backlogs.observe(&sample);

        let mut disks = self.rates.disks();
        disks.extend(
            self.disks
                .iter()
                .filter(|(_, rt)| rt.state.held.is_some())
                .map(|(d, _)| d.clone()),
        );
        disks.extend(self.bursts.iter().map(|(d, _)| d.clone()));
        disks.sort();
        disks.dedup();
        let now = Instant::now();
        // A projected look is this step (or came with it): the disks stepped project again.
        for rt in self.disks.values_mut() {
            rt.backlog_due = rt.backlog_due.filter(|due| *due > now);
        }
        for disk in disks.into_iter().filter(|d| d.name.is_some()) {
            self.know(&disk);
            let may_be_slow = self
                .known
                .get(&disk.id)
                .and_then(|k| k.kind)
                .is_some_and(devices::Kind::may_be_slow);
            let backlog = self
                .backlogs
                .disk(disk.id, &sample)
                .unwritten_counts(may_be_slow);
            self.step_disk(&disk, now, tree, actuator, backlog).await;
        }
        self.bursts.clear();
        let draining: Vec<Disk> = self
            .disks
            .iter()
            .filter(|(_, rt)| !rt.draining.is_empty())
            .map(|(d, _)| d.clone())
            .collect();
        for disk in draining {
            let Some(rt) = self.disks.get_mut(&disk) else {
                continue;
            };
            let mut fx = Effects {
                actuator,
                metrics: &mut self.metrics,
                log: &mut self.log,
                limit: &mut self.limit,
            };
            rt.finish_drains(&disk, now, &mut fx).await;
        }
        self.update_guards(actuator);
        self.set_burst_limits(probe);
        // iocost left on after a release goes once the released writer's backlog is written
        // and the disk's queue is short.
        let quiet = |dev: DevId| {
            backlog < QUIET_BACKLOG
                && sample.disks.get(&dev).is_none_or(|d| {
                    d.writing() / sample.disks_elapsed.as_secs_f64().max(1e-3) < QUIET_QUEUE
                })
        };
        let settled = actuator.settle_lingering(quiet).await;
        self.match_iocost_models(actuator, quiet);
        self.metrics.undone_changes.inc_by(settled.restored as u64);
        if settled.restored > 0 {
            tracing::info!(
                "iocost off again on a disk no restriction holds now (its model kept for the \
                 next restriction there)"
            );
        }
        for e in &settled.errors {
            tracing::warn!("putting iocost back: {e}");
        }
        let (followed, errors) = actuator.follow_memory().await;
        for f in &followed {
            tracing::info!("{}: {}", f.place, f.describe());
        }
        for e in &errors {
            if self.limit.allow(format!("follow {e}")) {
                tracing::warn!("following a held writer's memory: {e}");
            }
        }
        let retried = actuator.retry_pending().await;
        self.metrics.undone_changes.inc_by(retried.restored as u64);
        if retried.restored > 0 {
            tracing::info!("undone on a later try: {} restored", retried.restored);
        }
        for e in &retried.errors {
            if self.limit.allow(format!("undo {e}")) {
                tracing::warn!("undo failed again, will try later: {e}");
            }
        }
        self.metrics
            .pending_undos
            .set(actuator.pending_undos() as i64);
        self.pending_undos = actuator.pending_undos();
        tree.prune_exited();
        Ok(())
    }

    /// Moves iocost's model set up ahead on each quiet disk no restriction holds to the disk's
    /// speed when the two differ by more than [`crate::act::iocost::KEPT_MODEL_SLACK`], at most
    /// once every [`MODEL_MATCH_EVERY`]: the next restriction there then only turns iocost on.
    /// The model in place is read each time, not remembered: a restriction's retune leaves it
    /// up to 20% away (e2e: 28.4 MB/s left while the disk was judged at 27.0, and the user
    /// unit's restriction wrote a model).
    fn match_iocost_models(&mut self, actuator: &mut Actuator, quiet: impl Fn(DevId) -> bool) {
        let due: Vec<Disk> = self
            .disks
            .iter()
            .filter(|(disk, rt)| {
                rt.restriction.is_none()
                    && rt.draining.is_empty()
                    && rt
                        .model_looked_at
                        .is_some_and(|at| at.elapsed() >= MODEL_MATCH_EVERY)
                    && quiet(disk.id)
            })
            .map(|(disk, _)| disk.clone())
            .collect();
        for disk in due {
            let policy = self.policy(&disk);
            let estimate = self.bandwidth.estimate(disk.id, policy.bandwidth);
            if let Some(model) = method_for(&disk, &policy, estimate, &self.cgroup_action)
                .0
                .iocost_model()
            {
                // Whatever it finds (iocost on, a restriction's model): looked at again later.
                actuator.refresh_iocost_model(disk.id, model);
            }
            if let Some(rt) = self.disks.get_mut(&disk) {
                rt.model_looked_at = Some(Instant::now());
            }
        }
    }

    /// Looks the disk's identity up the first time it is seen, and starts its speed from what
    /// an earlier run learned of it.
    fn know(&mut self, disk: &Disk) {
        if self.known.contains_key(&disk.id) {
            return;
        }
        let identity = devices::identity(disk);
        if let Some(kept) = identity.as_deref().and_then(|i| self.speeds.get(i)) {
            self.bandwidth.seed(disk.id, kept);
        }
        let kind = devices::kind(disk);
        let backlog = match kind {
            Some(k) if k.may_be_slow() => format!(
                "{}: dirty data it has not begun to write counts as a backlog until its speed \
                 is known",
                k.name()
            ),
            Some(k) => format!(
                "{}: its backlog counts once it writes, until its speed is known",
                k.name()
            ),
            None => "kind unknown: its backlog counts once it writes, until its speed is known"
                .to_string(),
        };
        match &identity {
            Some(i) => tracing::info!("{}: disk identity {i}", disk.label()),
            None => tracing::info!(
                "{}: no stable identity (no WWN, serial, device-mapper or RAID UUID, or model): \
                 its measured speed is not kept across restarts",
                disk.label()
            ),
        }
        tracing::info!("{}: {backlog}", disk.label());
        self.bandwidth
            .mapped_over(disk.id, devices::originating(disk));
        self.known.insert(disk.id, Known { identity, kind });
    }

    /// The backlog guard of every disk whose policy asks for one, at the speed writers there
    /// are judged against; lifted while a restriction holds on the disk.
    fn update_guards(&mut self, actuator: &mut Actuator) {
        // The shipped configuration has no guard anywhere: nothing to do per tick.
        let asked = std::iter::once(&self.config.default_device)
            .chain(self.config.devices.iter().map(|(_, p)| p))
            .any(|p| p.max_dirty != MaxDirty::Off);
        if !asked && !self.guards.any_applied() {
            return;
        }
        let disks = self.guards.disks().to_vec();
        for disk in &disks {
            let policy = self.policy(disk);
            let restricted = self.disks.get(disk).is_some_and(|rt| {
                (rt.state.held.is_some() || !rt.draining.is_empty())
                    && rt.method != Some(Method::DryRun)
            });
            let wanted = if policy.max_dirty == MaxDirty::Off {
                Err("max_dirty is off")
            } else if restricted {
                // The cap is shared by every writer of the disk, and a held offender's dirty
                // pages, written back slowly on purpose, fill it: the others then wait in
                // balance_dirty_pages for the offender (bench: commit pauses 1.3-2.7 s with the
                // guard kept during the restriction, 0.6 s without; docs/bench/backlog-guard.md).
                Err("a restriction holds the disk's writer")
            } else {
                self.know(disk);
                let estimate = self.bandwidth.estimate(disk.id, policy.bandwidth);
                let bw = estimate.bytes_per_sec;
                match policy.max_dirty {
                    // Not from an assumed speed or a lower bound: a cap from the assumed 25 MB/s
                    // kept the 6.12 bed's 30 MB/s disk from ever queueing enough to be
                    // measured, and the copy ran at 7 MB/s (docs/bench/backlog-guard.md).
                    MaxDirty::Seconds(_) if !estimate.capacity => {
                        Err("the disk's speed is not known yet")
                    }
                    MaxDirty::Seconds(s) => Ok(Wanted {
                        bytes: policy.max_dirty.bytes(bw).unwrap_or(MaxDirty::FLOOR),
                        why: format!("max_dirty {s}s of {} ({})", show_rate(bw), estimate.source),
                    }),
                    MaxDirty::Bytes(b) => Ok(Wanted {
                        bytes: b,
                        why: "max_dirty".to_string(),
                    }),
                    MaxDirty::Off => Err("max_dirty is off"),
                }
            };
            self.guards.update(disk, wanted, actuator);
            self.metrics
                .backlog_guard(disk, self.guards.applied(disk.id).unwrap_or(0));
        }
    }

    /// The choosable process with the fastest burst reported on `disk`, if any.
    fn burst_on(&mut self, disk: &Disk, tree: &ProcessTree) -> Option<BurstReport> {
        let mut best: Option<BurstReport> = None;
        for (_, b) in self.bursts.iter().filter(|(d, _)| d == disk) {
            let choosable = tree
                .get(b.pid)
                .map(|n| self.eligibility.choosable(tree, b.pid, n));
            match choosable {
                Some(Ok(())) => {}
                Some(Err(why)) => {
                    tracing::debug!("burst of pid {} on {} ignored: {why}", b.pid, disk.label());
                    self.ignored_bursts.insert(b.pid, Instant::now());
                    continue;
                }
                None => continue,
            }
            let rate = b.bytes_per_sec();
            if best.as_ref().is_none_or(|c| rate > c.offender.score) {
                best = Some(BurstReport {
                    offender: Candidate {
                        pid: b.pid,
                        score: rate,
                    },
                    bytes: b.bytes,
                    seconds: b.elapsed.as_secs_f64(),
                    crossed: b.crossed,
                });
            }
        }
        best
    }

    /// Each disk's burst limit for the kernel side: more than the disk writes in
    /// `burst_seconds`, within `burst_seconds`. Disks not seen yet get the default policy's
    /// limit at the speed assumed for a disk that has not been measured.
    fn set_burst_limits(&self, probe: &mut Probe) {
        let limit = |p: &DevicePolicy, bw: f64| ioshield_common::BurstLimit {
            window_ns: (p.burst_seconds * 1e9) as u64,
            bytes: (p.burst_seconds * bw) as u64,
        };
        let default_bw = match self.config.default_device.bandwidth {
            Bandwidth::BytesPerSec(b) => b as f64,
            Bandwidth::Auto => Estimate::ASSUMED.bytes_per_sec,
        };
        let default = limit(&self.config.default_device, default_bw);
        let result = probe.set_burst_limits(default, |disk| {
            let bw = self.disks.get(disk)?.bandwidth?.bytes_per_sec;
            Some(limit(&self.policy(disk), bw))
        });
        if let Err(e) = result {
            tracing::warn!("burst limits not updated: {e:#}");
        }
    }

    /// The busiest subtrees on a disk, with why each may not be chosen: what `explain` shows.
    fn top_writers(
        eligibility: &Eligibility,
        tree: &ProcessTree,
        scores: &offender::Scores,
    ) -> Vec<super::status::WriterStatus> {
        const SHOWN: usize = 16;
        let mut top: Vec<(&u32, &f64)> = scores.subtree.iter().collect();
        top.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        top.into_iter()
            .take(SHOWN)
            .map(|(&pid, &subtree)| {
                let node = tree.get(pid);
                let not_choosable = match node {
                    None => Some("not known to the process tree".to_string()),
                    Some(n) => match eligibility.choosable(tree, pid, n) {
                        Err(why) => Some(why.to_string()),
                        Ok(()) if eligibility.judged_alone(pid, n) => Some(
                            "a session leader: judged by its own writes only, not its children's"
                                .to_string(),
                        ),
                        Ok(()) => None,
                    },
                };
                super::status::WriterStatus {
                    pid,
                    comm: node.map_or("?".into(), |n| crate::display::printable(&n.comm)),
                    own_bytes_per_sec: scores.own.get(&pid).copied().unwrap_or(0.0),
                    subtree_bytes_per_sec: subtree,
                    not_choosable,
                }
            })
            .collect()
    }

    /// Roots of restrictions held on disks other than `disk`.
    fn held_elsewhere(&self, disk: &Disk) -> HashSet<u32> {
        self.disks
            .iter()
            .filter(|(d, _)| *d != disk)
            .filter_map(|(_, rt)| rt.state.held.as_ref().map(|h| h.root))
            .collect()
    }

    pub fn status(&self, features: serde_json::Value) -> Status {
        status::snapshot(
            self.disks.iter(),
            self.started,
            &self.config,
            &self.cgroup_action,
            self.log.recent(),
            self.pending_undos,
            features,
        )
    }

    /// One line for `systemctl status` (sd_notify `STATUS=`): what is restricted, where.
    pub fn summary(&self) -> String {
        let mut held: Vec<String> = self
            .disks
            .iter()
            .filter_map(|(disk, rt)| {
                let o = rt.offender.as_ref()?;
                Some(format!(
                    "restricting pid {} ({}) on {}",
                    o.pid,
                    o.comm,
                    disk.name.as_deref().unwrap_or("?")
                ))
            })
            .collect();
        held.sort();
        if held.is_empty() {
            format!("watching {} disks, nothing restricted", self.disks.len())
        } else {
            held.join("; ")
        }
    }

    /// Writes the measured disk speeds now (on exit). The room a restriction still held had
    /// shown counts as at its release: a daemon stopped under a long writer keeps it too.
    pub fn save_speeds(&mut self) {
        for (disk, rt) in &self.disks {
            keep_room_proven(&mut self.bandwidth, disk, &rt.speed_probe);
        }
        self.keep_speeds();
        self.speeds.save(true);
    }

    /// What the disks' speeds file is to keep of each disk with an identity.
    fn keep_speeds(&mut self) {
        for (dev, known) in &self.known {
            if let (Some(identity), Some(kept)) =
                (&known.identity, self.bandwidth.worth_keeping(*dev))
            {
                self.speeds.set(identity, kept);
            }
        }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.config.daemon.socket
    }

    pub fn metrics_config(&self) -> &crate::config::Metrics {
        &self.config.metrics
    }
}

fn cgroup_setup(config: &Config, action: &Result<CgroupAction, String>) -> Option<bool> {
    let Ok(CgroupAction::Cgroupfs(_)) = action else {
        return None;
    };
    let by_cgroup: Vec<&DevicePolicy> = std::iter::once(&config.default_device)
        .chain(config.devices.iter().map(|(_, p)| p))
        .filter(|p| matches!(p.action, ActionKind::Cgroup | ActionKind::Auto))
        .collect();
    if by_cgroup.is_empty() {
        return None;
    }
    Some(by_cgroup.iter().any(|p| p.memory_high != MemoryHigh::Off))
}

/// `method` for a restriction held for `held` on kernel `kernel` (`None`: unknown, taken as
/// new): at the onset's weight for its first [`ONSET`] where it has one
/// ([`Method::at_onset`]), on the kernels it is for ([`ONSET_FROM`]).
fn at_onset(method: Method, held: Duration, kernel: Option<(u32, u32)>) -> Method {
    if held >= ONSET || kernel.is_some_and(|v| v < ONSET_FROM) {
        return method;
    }
    method.at_onset().unwrap_or(method)
}

/// The disk's speed as far as a restriction by `method` goes: a disk not measured whose rate
/// iocost holds at the judged speed, or lets the kernel's latency control set up to it (a speed
/// probe's window), is written at most at that speed, as if it were the disk's. There the
/// writers beside the held one get the smaller `memory.high` and its dirty counts are
/// refreshed, as on a disk measured at that speed; not under a forced rate, whose own
/// `memory.high` lets the writer use it. On 6.12, the copy to the 30 MB/s disk never measured:
/// commit paused 0.29 (0.27-0.31) s against 0.46 (0.32-0.51), the copy 0.99x against 0.77x;
/// a 150 MB/s disk still showed room in its first window. Only where the writer's dirty counts
/// are current ([`crate::config::RefreshDirtyCounts::counts_current`]: refreshed from 6.8, the
/// kernel's own before): 8 MiB on 6.12 with the refresh off leaves the disk idle. 6.1 was left
/// out at first (stop 45): the window under 8 MiB showed room the 30 MB/s disk did not have,
/// and the forced rate paused commit 0.32 (0.27-0.34) s against 0.23 (0.20-0.24). Since a room
/// step is heard every 250 ms and its memory.high ramped (stops 69-70), such a room costs
/// little: on 6.1 at stop 71 the copy's commit paused 0.12 (0.12) s against 0.23 (0.37), the
/// load offender's 0.11 (0.11) against 0.22 (0.22), the writers as fast or faster
/// (docs/bench/held-rate.md).
///
/// A write limit (`io.max`, a systemd host's `IOWriteBandwidthMax=`) on a disk not measured
/// holds the writer at most at the limit, whichever the disk's speed: there the limit counts
/// as the disk's speed, so the writers beside it get a quarter of a second of it as
/// `memory.high` (8 MiB under the assumed slow disk's 18.8 MB/s; 12.5 MB at the probe's
/// 50 MB/s step, more at the steps a faster disk needs to show its speed). Held at 32 MiB, a
/// copy's writeback kept 7 MB queued under the 18.8 MB/s limit, and every journal commit beside
/// it waited for that: while held the committing load paused 0.39-0.49 s on 6.12 and
/// 0.30-0.37 s on 6.1, now 0.22-0.29 s (all in the 50 MB/s step, where the 30 MB/s disk is let
/// fall behind) and 0.12-0.17 s, the copy 0.96x and 1.02x of unmitigated
/// (docs/bench/write-limit-memory.md).
///
/// Not while `limit_counts` is false ([`limit_counts`]: the first seconds of a limit set on
/// the writer's own unit).
fn held_speed(estimate: Estimate, method: &Method, limit_counts: bool) -> Estimate {
    if estimate.capacity || method.holds_rate() || method.window_closed().is_some() {
        return Estimate {
            capacity: true,
            ..estimate
        };
    }
    match method.io_max_limit().filter(|_| limit_counts) {
        Some(wbps) => Estimate {
            bytes_per_sec: wbps as f64,
            capacity: true,
            ..estimate
        },
        None => estimate,
    }
}

/// Whether a write limit counts as the disk's speed ([`held_speed`]) for a restriction held for
/// `held_for`, set on the writer's own unit (`in_place`: a systemd unit it
/// is held in) or not. A writer held in place keeps the page cache it dirtied before, charged to
/// its own cgroup; the 8 MiB beside others at once makes it reclaim all of that at the limit's
/// pace, and a journal commit beside it waited for it: on 6.12 the first copy of a service
/// beside a committing load paused it 0.77 (0.52-0.90) s, against 0.42 (0.36-0.48) at 32 MiB.
/// For the restriction's first [`ONSET`] the limit does not count (32 MiB beside others), then
/// it does: 0.23 (0.21-0.29) s; 6.1 as before, 0.12 (0.10-0.16) s against 0.11 (0.10-0.22)
/// (docs/bench/write-limit-memory.md, "Stop 83"). A writer moved into a cgroup
/// of its own (ioshield's, on cgroupfs) leaves that page cache behind, and has the 8 MiB from
/// the start.
fn limit_counts(in_place: bool, held_for: Duration) -> bool {
    !in_place || held_for >= ONSET
}

/// `method` with its memory.high as the writers beside it make it, and the clause that says so
/// (`None` where the method sets no memory.high: ioprio, dry-run, or "off").
fn with_company(method: Method, company: Company) -> (Method, Option<String>) {
    if method.memory_high().is_none() {
        return (method, None);
    }
    let clause = company.clause().map(str::to_string);
    match company {
        Company::Beside { bytes, .. } => (method.with_memory_high_at_most(bytes), clause),
        Company::Alone | Company::Unchanged => (method, clause),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{act::cgroup::Cgroupfs, daemon::speed_probe::SpeedProbe};

    /// An engine of the default configuration whose speeds file is in `dir`, with its config.
    fn engine_in(dir: &tempfile::TempDir, tree: &ProcessTree) -> (Engine, Config) {
        let mut config = Config::default();
        config.daemon.speeds_file = dir.path().join("disks.json");
        let engine = Engine::new(config.clone(), tree, Err("not in a test".into()));
        (engine, config)
    }

    fn disk(name: &str, minor: u32) -> Disk {
        Disk {
            id: DevId { major: 254, minor },
            name: Some(name.into()),
        }
    }

    /// A reload keeps a held restriction's method, which its retunes move from; a disk holding
    /// none forgets its own, to say the new one at its next restriction.
    #[test]
    fn a_reload_keeps_a_held_restrictions_method_for_its_retunes() {
        let dir = tempfile::tempdir().unwrap();
        let tree = ProcessTree::default();
        let (mut engine, config) = engine_in(&dir, &tree);
        let held = DiskRuntime {
            restriction: Some(7),
            method: Some(Method::DryRun),
            ..Default::default()
        };
        let idle = DiskRuntime {
            method: Some(Method::DryRun),
            ..Default::default()
        };
        engine.disks.insert(disk("vda", 0), held);
        engine.disks.insert(disk("vdb", 16), idle);
        engine.reconfigure(config, &tree);
        assert_eq!(engine.disks[&disk("vda", 0)].method, Some(Method::DryRun));
        assert_eq!(engine.disks[&disk("vdb", 16)].method, None);
    }

    /// Every restriction's writer has its dirty counts refreshed: under a rate the speed probe
    /// forced up, in a window of iocost's latency control, and under a write limit on a disk
    /// not measured (the last left out before stop 81).
    #[test]
    fn every_held_writer_has_its_dirty_counts_refreshed() {
        use crate::act::{CgroupLimits, WriteControl, iocost::Model};
        let dir = tempfile::tempdir().unwrap();
        let tree = ProcessTree::default();
        let (mut engine, _) = engine_in(&dir, &tree);
        let limits = |minor, write| {
            Method::Cgroup(CgroupLimits {
                dev: DevId { major: 254, minor },
                write,
                memory_high: Some(41 << 20),
            })
        };
        let weight = || WriteControl::Weight {
            weight: 1,
            model: Some(Model::held(25_000_000)),
            fallback: 12_500_000,
        };
        let forced = limits(0, weight())
            .listening()
            .with_rate_at_least(43_000_000);
        let runtime = |id, method, speed_probe| DiskRuntime {
            restriction: Some(id),
            method: Some(method),
            bandwidth: Some(Estimate::ASSUMED),
            speed_probe,
            ..Default::default()
        };
        engine.disks.insert(
            disk("vda", 0),
            runtime(7, forced, SpeedProbe::forced_at(43_000_000)),
        );
        engine.disks.insert(
            disk("vdb", 16),
            runtime(
                8,
                limits(16, WriteControl::Limit(12_500_000)),
                SpeedProbe::default(),
            ),
        );
        engine.disks.insert(
            disk("vdc", 32),
            runtime(9, limits(32, weight()).listening(), SpeedProbe::default()),
        );
        engine.disks.insert(disk("vdd", 48), DiskRuntime::default());
        let mut refreshed: Vec<u64> = engine.dirty_counts_refreshed().collect();
        refreshed.sort();
        assert_eq!(refreshed, vec![7, 8, 9]);
    }

    /// A disk not measured counts as one of the judged speed for its restriction's writers while
    /// iocost holds the rate at most there, not once the speed probe forces it higher; under a
    /// write limit, as one of the limit's speed.
    #[test]
    fn a_rate_held_at_the_judged_speed_counts_as_the_disks() {
        use crate::act::{CgroupLimits, WriteControl, iocost::Model};
        let limits = |write| {
            Method::Cgroup(CgroupLimits {
                dev: DevId {
                    major: 254,
                    minor: 16,
                },
                write,
                memory_high: Some(32 << 20),
            })
        };
        let held = limits(WriteControl::Weight {
            weight: 1,
            model: Some(Model::held(25_000_000)),
            fallback: 12_500_000,
        });
        let assumed = Estimate::ASSUMED;
        assert!(held_speed(assumed, &held, true).capacity);
        let window = held.clone().listening();
        assert!(held_speed(assumed, &window, true).capacity);
        let forced = window.with_rate_at_least(40_000_000);
        assert!(!held_speed(assumed, &forced, true).capacity);
        // A write limit (io.max, a systemd host) holds the writer at most at the limit: that
        // is the speed its company is judged at.
        let limit = limits(WriteControl::Limit(12_500_000));
        let at_limit = held_speed(assumed, &limit, true);
        assert!(at_limit.capacity);
        assert_eq!(at_limit.bytes_per_sec, 12_500_000.0);
        let stepped = held_speed(assumed, &limit.clone().with_write_limit(50_000_000), true);
        assert_eq!(stepped.bytes_per_sec, 50_000_000.0);
        // Lifted by the probe: memory.high alone, only a measurement counts.
        assert!(!held_speed(assumed, &limit.clone().without_write_limit(), true).capacity);
        // A measured disk is judged at its own speed, not the limit's.
        let measured = Estimate {
            bytes_per_sec: 30e6,
            capacity: true,
            ..assumed
        };
        assert_eq!(held_speed(measured, &limit, true).bytes_per_sec, 30e6);
        let known = Estimate {
            capacity: true,
            ..assumed
        };
        assert!(held_speed(known, &forced, true).capacity);
        // The first seconds of a limit on the writer's own unit: not counted, the disk is
        // judged as the estimate has it; counted from the onset on, and from the start for a
        // writer moved out of its cgroup.
        let in_place = |s: f64| limit_counts(true, Duration::from_secs_f64(s));
        assert!(!held_speed(assumed, &limit, in_place(0.0)).capacity);
        assert!(!held_speed(assumed, &limit, in_place(1.9)).capacity);
        assert_eq!(
            held_speed(assumed, &limit, in_place(2.0)).bytes_per_sec,
            12_500_000.0
        );
        assert!(held_speed(assumed, &limit, limit_counts(false, Duration::ZERO)).capacity);
        // Only the limit waits: a held rate counts at once, in place or not.
        assert!(held_speed(assumed, &held, in_place(0.0)).capacity);
        assert_eq!(
            held_speed(measured, &limit, in_place(0.0)).bytes_per_sec,
            30e6
        );
    }

    /// A restriction under our iocost holds at the onset's weight for its first 2 s, then at
    /// the offender's weight, on kernels from 6.12.
    #[test]
    fn a_restriction_starts_at_the_onset_weight_for_2_s() {
        use crate::act::{
            CgroupLimits, WriteControl, iocost,
            method::{OFFENDER_WEIGHT, ONSET_WEIGHT},
        };
        let held = Method::Cgroup(CgroupLimits {
            dev: DevId {
                major: 254,
                minor: 16,
            },
            write: WriteControl::Weight {
                weight: OFFENDER_WEIGHT,
                model: Some(iocost::Model::held(25_000_000)),
                fallback: 18_750_000,
            },
            memory_high: Some(8 << 20),
        });
        let on = |kernel, s: f64| at_onset(held.clone(), Duration::from_secs_f64(s), kernel);
        let weight = |s: f64| on(Some((6, 12)), s).weight();
        assert_eq!(weight(0.0), Some(ONSET_WEIGHT));
        assert_eq!(weight(1.9), Some(ONSET_WEIGHT));
        assert_eq!(weight(2.0), Some(OFFENDER_WEIGHT));
        assert_eq!(weight(30.0), Some(OFFENDER_WEIGHT));
        // Not on the older kernels, where it was measured to pause the innocents longer; an
        // unknown kernel is taken as new.
        assert_eq!(on(Some((6, 1)), 0.0), held);
        assert_eq!(on(Some((6, 11)), 0.0).weight(), Some(OFFENDER_WEIGHT));
        assert_eq!(on(Some((6, 16)), 0.0).weight(), Some(ONSET_WEIGHT));
        assert_eq!(on(None, 0.0).weight(), Some(ONSET_WEIGHT));
        let ioprio = at_onset(Method::Ioprio, Duration::ZERO, None);
        assert_eq!(ioprio, Method::Ioprio);
    }

    /// The shipped configuration on a host without systemd sets up io and memory at start;
    /// memory only where some disk's policy uses memory.high; nothing where no disk is
    /// restricted by cgroup, nor on a systemd host (systemd makes the units).
    #[test]
    fn what_is_set_up_at_start() {
        let fs = Cgroupfs {
            root: "/sys/fs/cgroup".into(),
        };
        let direct = Ok(CgroupAction::Cgroupfs(fs.clone()));
        let dir = tempfile::tempdir().unwrap();
        let config = |text: &str| {
            let path = dir.path().join("ioshield.toml");
            std::fs::write(&path, text).unwrap();
            Config::load(Some(&path)).unwrap()
        };
        assert_eq!(cgroup_setup(&config(""), &direct), Some(true));
        let no_memory = config("[device.default]\nmemory_high = \"off\"\n");
        assert_eq!(cgroup_setup(&no_memory, &direct), Some(false));
        let one_disk = config("[daemon]\naction = \"ioprio\"\n[device.vdb]\naction = \"cgroup\"\n");
        assert_eq!(cgroup_setup(&one_disk, &direct), Some(true));
        let ioprio = config("[daemon]\naction = \"ioprio\"\n");
        assert_eq!(cgroup_setup(&ioprio, &direct), None);
        let systemd = Ok(CgroupAction::Systemd(fs));
        assert_eq!(cgroup_setup(&config(""), &systemd), None);
        assert_eq!(cgroup_setup(&config(""), &Err("no cgroup v2".into())), None);
    }
}
