//! One tick of the daemon: sample, update the tree and rates, decide per disk, act.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    metrics::{ActionLabel, DeviceLabel, LostLabel, Metrics},
    ratelimit::RateLimit,
    status::{DecisionRecord, DeviceStatus, OffenderStatus, Status},
};
use crate::{
    act::{Actuator, CgroupLimits, Method, ScopeLimits, cgroup::Cgroupfs},
    config::{ActionKind, Config, DevicePolicy, units::show_rate},
    detect::{
        bandwidth::{BandwidthEstimator, Estimate},
        eligibility::Eligibility,
        policy::{Candidate, Decision, DiskState, Inputs, Trigger},
        rates::Rates,
    },
    model::tree::ProcessTree,
    probe::Probe,
    system::devices::{DevId, Devices, Disk},
};

/// How often device sections naming absent disks are looked up again.
const RESOLVE_EVERY: u64 = 30;
/// Decisions kept for `ioshield status`.
const RECENT: usize = 20;

struct Offender {
    pid: u32,
    comm: String,
    since: Instant,
    action: String,
}

#[derive(Default)]
struct DiskRuntime {
    state: DiskState,
    restriction: Option<u64>,
    offender: Option<Offender>,
    method: Option<Method>,
    bandwidth: Option<Estimate>,
    bandwidth_logged: Option<f64>,
}

fn method_label(m: &Method) -> &'static str {
    match m {
        Method::Ioprio => "ioprio",
        Method::Cgroup(_) | Method::SystemdScope(_) => "cgroup",
        Method::DryRun => "dry-run",
    }
}

/// How the cgroup action can be carried out on this host, if at all.
pub enum CgroupAction {
    /// Through systemd's D-Bus API (systemd owns the tree).
    Systemd,
    /// Writing cgroupfs directly (no systemd).
    Cgroupfs(Cgroupfs),
}

pub struct Engine {
    config: Config,
    cgroupfs: Result<CgroupAction, String>,
    rates: Rates,
    bandwidth: BandwidthEstimator,
    eligibility: Eligibility,
    devices: Devices,
    /// Which config section applies to which disk.
    sections: HashMap<DevId, String>,
    unresolved: Vec<String>,
    disks: HashMap<Disk, DiskRuntime>,
    limit: RateLimit,
    ticks: u64,
    started: Instant,
    recent: std::collections::VecDeque<DecisionRecord>,
    pub metrics: Metrics,
}

impl Engine {
    pub fn new(config: Config, tree: &ProcessTree, cgroupfs: Result<CgroupAction, String>) -> Self {
        let mut e = Self {
            rates: Rates::new(config.daemon.tau),
            eligibility: Eligibility::new(
                config.exclude.clone(),
                config.daemon.session_leaders,
                tree,
            ),
            config,
            cgroupfs,
            bandwidth: BandwidthEstimator::default(),
            devices: Devices::default(),
            sections: HashMap::new(),
            unresolved: Vec::new(),
            disks: HashMap::new(),
            limit: RateLimit::new(Duration::from_secs(60)),
            ticks: 0,
            started: Instant::now(),
            recent: std::collections::VecDeque::new(),
            metrics: Metrics::new(),
        };
        e.resolve_sections(true);
        e
    }

    pub fn tick(&self) -> Duration {
        self.config.daemon.tick
    }

    pub fn announce(&self) {
        let d = &self.config.daemon;
        let cg = match &self.cgroupfs {
            Ok(CgroupAction::Cgroupfs(fs)) => {
                format!("cgroup action available at {}", fs.root.display())
            }
            Ok(CgroupAction::Systemd) => "cgroup action through systemd".to_string(),
            Err(why) => format!("cgroup action unavailable: {why}"),
        };
        tracing::info!(
            "ioshield daemon running: tick {:?}, tau {:?}, parent factor {}, action {:?}; {cg}; \
             config {}",
            d.tick,
            d.tau,
            d.parent_factor,
            d.action,
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
            rt.method = None;
            rt.bandwidth_logged = None;
        }
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

    pub fn step(
        &mut self,
        probe: &mut Probe,
        tree: &mut ProcessTree,
        actuator: &mut Actuator,
    ) -> Result<()> {
        self.ticks += 1;
        if !self.unresolved.is_empty() && self.ticks.is_multiple_of(RESOLVE_EVERY) {
            self.resolve_sections(false);
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
        for (kind, n) in [
            ("counter_map_full", lost.counter_map_full),
            ("lifecycle_dropped", lost.lifecycle_events_dropped),
            ("kernel_read_failed", lost.kernel_reads_failed),
        ] {
            self.metrics
                .lost
                .get_or_create(&LostLabel { kind: kind.into() })
                .inc_by(n);
        }
        for ((_, disk), delta) in &sample.writes {
            let label = DeviceLabel {
                device: disk.label(),
            };
            self.metrics
                .dirtied_bytes
                .get_or_create(&label)
                .inc_by(delta.dirtied_bytes);
            self.metrics
                .throttled_seconds
                .get_or_create(&label)
                .inc_by(delta.throttle_ms as f64 / 1000.0);
        }
        for cost in probe.program_costs() {
            self.metrics
                .program_cost(&cost.name, cost.run_count, cost.run_time_ns);
        }
        tree.follow(&sample.lifecycle, probe.features().lifecycle);
        self.rates.update(&sample, tree);
        self.bandwidth.observe(&sample);
        let global_backlog = (sample.dirty.dirty_bytes + sample.dirty.writeback_bytes) as f64;

        let mut disks = self.rates.disks();
        disks.extend(
            self.disks
                .iter()
                .filter(|(_, rt)| rt.state.held.is_some())
                .map(|(d, _)| d.clone()),
        );
        disks.sort();
        disks.dedup();
        let now = Instant::now();
        for disk in disks.into_iter().filter(|d| d.name.is_some()) {
            self.step_disk(&disk, now, tree, actuator, global_backlog);
        }
        tree.prune_exited();
        Ok(())
    }

    fn step_disk(
        &mut self,
        disk: &Disk,
        now: Instant,
        tree: &mut ProcessTree,
        actuator: &mut Actuator,
        global_backlog: f64,
    ) {
        let policy = self.policy(disk);
        let elsewhere = self.held_elsewhere(disk);
        let estimate = self.bandwidth.estimate(disk.id, policy.bandwidth);
        let bw = estimate.bytes_per_sec;
        let rt = self.disks.entry(disk.clone()).or_default();
        // The kernel's estimate moves with every writeback burst: say when it changed a lot, but
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
        let label = DeviceLabel {
            device: disk.label(),
        };
        self.metrics.bandwidth.get_or_create(&label).set(bw);
        self.metrics
            .offenders
            .get_or_create(&label)
            .set(i64::from(rt.state.held.is_some()));

        // An excluded writer is never touched, and its parent is not to blame for it either.
        let mut own = self.rates.on_disk(disk);
        own.retain(|pid, _| {
            tree.get(*pid)
                .is_none_or(|n| self.eligibility.excluded(*pid, n).is_none())
        });
        let scores = tree.subtree_totals(&own, self.config.daemon.parent_factor);
        let offender = scores
            .iter()
            .filter(|(pid, _)| {
                !elsewhere.contains(pid)
                    && tree
                        .get(**pid)
                        .is_some_and(|n| self.eligibility.choosable(**pid, n).is_ok())
            })
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&pid, &score)| Candidate { pid, score });
        let held_root = rt.state.held.as_ref().map(|h| h.root);
        let held_gone = held_root.is_some_and(|r| tree.get(r).is_none_or(|n| n.exited));
        // The global dirty + writeback memory, not the bdi's own figure: before 6.10 debugfs
        // counts only the root cgroup's writeback there, which reads near zero when every
        // process lives in a child cgroup (bench on 6.1: 200 MB dirty, the trigger never fired).
        // The trigger also needs this disk's top writer to be active, so other disks' backlog
        // does not restrict an idle one.
        let backlog = global_backlog;
        let inputs = Inputs {
            now,
            offender,
            held_score: held_root
                .and_then(|r| scores.get(&r))
                .copied()
                .unwrap_or(0.0),
            held_gone,
            bandwidth: bw,
            flush_seconds: Some(backlog / bw),
        };
        let decision = rt.state.step(&inputs, &policy);
        match decision {
            Some(Decision::Restrict { offender, trigger }) => {
                self.restrict(disk, &policy, bw, offender, trigger, tree, actuator)
            }
            Some(Decision::Release { root, calm_for }) => {
                let rt = self.disks.get_mut(disk).expect("entry created above");
                rt.state.clear();
                let method = rt.method.as_ref().map_or("?", method_label).to_string();
                rt.offender = None;
                let comm = tree.get(root).map_or("?".into(), |n| n.comm.clone());
                let Some(id) = rt.restriction.take() else {
                    return;
                };
                let why = if held_gone {
                    "it exited".to_string()
                } else {
                    format!(
                        "tree {} < {:.0}% of {} for {:.0}s",
                        show_rate(inputs.held_score),
                        policy.release_at * 100.0,
                        show_rate(bw),
                        calm_for.as_secs_f64()
                    )
                };
                let r = actuator.release(id);
                let verb = if method == "dry-run" {
                    "would release"
                } else {
                    "release"
                };
                let message = format!(
                    "{verb} pid {root} ({comm}) on {}: {why}; {} restored, {} kept as changed \
                     by someone else, {} gone",
                    disk.label(),
                    r.restored,
                    r.kept.len(),
                    r.vanished
                );
                self.decided(root, "release", message);
                self.metrics.restored.inc_by(r.restored as u64);
                self.metrics
                    .actions
                    .get_or_create(&ActionLabel {
                        action: "release".into(),
                        method,
                        result: if r.errors.is_empty() { "ok" } else { "error" }.into(),
                    })
                    .inc();
                for k in &r.kept {
                    tracing::info!("{k}");
                }
                for e in &r.errors {
                    tracing::warn!("release pid {root}: {e}");
                }
            }
            None => {
                if let (Some(root), Some(id)) = (held_root, rt.restriction) {
                    let members = self.members(root, tree, disk);
                    if let Err(e) = actuator.sweep(id, &members)
                        && self.limit.allow(format!("sweep {root}"))
                    {
                        tracing::warn!("keeping pid {root}'s restriction complete: {e:#}");
                    }
                }
            }
        }
    }

    /// Roots of restrictions held on disks other than `disk`.
    fn held_elsewhere(&self, disk: &Disk) -> std::collections::HashSet<u32> {
        self.disks
            .iter()
            .filter(|(d, _)| *d != disk)
            .filter_map(|(_, rt)| rt.state.held.as_ref().map(|h| h.root))
            .collect()
    }

    /// The restriction's subtree, without anything excluded, and without subtrees another disk's
    /// restriction holds (moving those again would undo that restriction's cgroup or scope).
    fn members(&self, root: u32, tree: &ProcessTree, disk: &Disk) -> Vec<u32> {
        let elsewhere = self.held_elsewhere(disk);
        tree.subtree(root)
            .into_iter()
            .filter(|p| {
                *p == root
                    || (tree
                        .get(*p)
                        .is_some_and(|n| self.eligibility.excluded(*p, n).is_none())
                        && !tree
                            .ancestry(*p)
                            .take_while(|a| *a != root)
                            .any(|a| elsewhere.contains(&a)))
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn restrict(
        &mut self,
        disk: &Disk,
        policy: &DevicePolicy,
        bw: f64,
        offender: Candidate,
        trigger: Trigger,
        tree: &ProcessTree,
        actuator: &mut Actuator,
    ) {
        let method = self.method_for(disk, policy, bw);
        let members = self.members(offender.pid, tree, disk);
        let comm = tree
            .get(offender.pid)
            .map_or("?".into(), |n| n.comm.clone());
        let why = match trigger {
            Trigger::Rate => format!(
                "tree {} on {} > {:.0}% of {}",
                show_rate(offender.score),
                disk.label(),
                policy.restrict_at * 100.0,
                show_rate(bw)
            ),
            Trigger::FlushTime(s) => format!(
                "tree {} on {}, whose dirty backlog would take {s:.1}s to flush > {}s",
                show_rate(offender.score),
                disk.label(),
                policy.max_flush_seconds
            ),
        };
        let verb = if method == Method::DryRun {
            "would restrict"
        } else {
            "restrict"
        };
        let result = actuator.restrict(offender.pid, &members, &method);
        self.metrics
            .actions
            .get_or_create(&ActionLabel {
                action: "restrict".into(),
                method: method_label(&method).into(),
                result: if result.is_ok() { "ok" } else { "error" }.into(),
            })
            .inc();
        match result {
            Ok(id) => {
                let message = format!(
                    "{verb} pid {} ({comm}) {why}: {} ({} processes)",
                    offender.pid,
                    method.describe(),
                    members.len()
                );
                self.decided(offender.pid, "restrict", message);
                let rt = self.disks.get_mut(disk).expect("entry exists");
                rt.state.hold(offender.pid);
                rt.restriction = Some(id);
                rt.offender = Some(Offender {
                    pid: offender.pid,
                    comm,
                    since: Instant::now(),
                    action: method.describe(),
                });
            }
            Err(e) => {
                if self.limit.allow(format!("restrict {}", offender.pid)) {
                    tracing::error!("cannot restrict pid {} ({comm}) {why}: {e:#}", offender.pid);
                }
            }
        }
    }

    /// One log line per decision (with the pid and action as structured fields, which the
    /// journal keeps), also kept for `ioshield status`.
    fn decided(&mut self, pid: u32, action: &'static str, message: String) {
        tracing::info!(pid, action, "{message}");
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.recent.push_front(DecisionRecord { at, message });
        self.recent.truncate(RECENT);
    }

    pub fn status(&self, features: serde_json::Value) -> Status {
        let now = Instant::now();
        let mut devices: Vec<DeviceStatus> = self
            .disks
            .iter()
            .map(|(disk, rt)| DeviceStatus {
                device: disk.label(),
                dev: disk.id.to_string(),
                bandwidth_bytes_per_sec: rt.bandwidth.map_or(0.0, |b| b.bytes_per_sec),
                bandwidth_source: rt.bandwidth.map_or("", |b| b.source).to_string(),
                action: rt.method.as_ref().map(Method::describe),
                offender: rt.offender.as_ref().map(|o| OffenderStatus {
                    pid: o.pid,
                    comm: o.comm.clone(),
                    restricted_for_secs: now.duration_since(o.since).as_secs_f64(),
                    action: o.action.clone(),
                }),
            })
            .collect();
        devices.sort_by(|a, b| a.device.cmp(&b.device));
        Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uptime_secs: now.duration_since(self.started).as_secs_f64(),
            config: self.config.source.as_ref().map(|p| p.display().to_string()),
            features,
            cgroup_action: match &self.cgroupfs {
                Ok(CgroupAction::Cgroupfs(fs)) => format!("available at {}", fs.root.display()),
                Ok(CgroupAction::Systemd) => {
                    format!("through systemd, in {}", crate::act::systemd::SLICE)
                }
                Err(why) => format!("unavailable: {why}"),
            },
            devices,
            recent_decisions: self.recent.iter().cloned().collect(),
        }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.config.daemon.socket
    }

    pub fn metrics_config(&self) -> &crate::config::Metrics {
        &self.config.metrics
    }

    fn method_for(&mut self, disk: &Disk, policy: &DevicePolicy, bw: f64) -> Method {
        let wbps = (policy.limit * bw) as u64;
        let memory_high = policy.memory_high.bytes(bw, policy.max_flush_seconds);
        let cgroup = |how: &CgroupAction| match how {
            CgroupAction::Cgroupfs(fs) => Method::Cgroup(CgroupLimits {
                dev: disk.id,
                wbps,
                weight: fs.iocost_enabled(disk.id).then_some(1),
                memory_high,
            }),
            CgroupAction::Systemd => Method::SystemdScope(ScopeLimits {
                device: disk.label(),
                wbps,
                memory_high,
            }),
        };
        let (method, note) = match (policy.action, &self.cgroupfs) {
            (ActionKind::DryRun, _) => (Method::DryRun, None),
            (ActionKind::Ioprio, _) => (Method::Ioprio, None),
            (ActionKind::Cgroup | ActionKind::Auto, Ok(fs)) => (cgroup(fs), None),
            (ActionKind::Cgroup, Err(why)) => (
                Method::Ioprio,
                Some(format!(
                    "cgroup action requested but {why}; using ioprio, which does not \
                              slow buffered writeback"
                )),
            ),
            (ActionKind::Auto, Err(why)) => (
                Method::Ioprio,
                Some(format!(
                    "action auto: {why}, so using ioprio (it does not slow buffered \
                              writeback, only the offender's reads and direct writes)"
                )),
            ),
        };
        let rt = self.disks.get_mut(disk).expect("entry exists");
        if rt.method.as_ref().map(std::mem::discriminant) != Some(std::mem::discriminant(&method)) {
            match note {
                Some(n) => tracing::warn!("{}: {n}", disk.label()),
                None => tracing::info!("{}: action {}", disk.label(), method.describe()),
            }
        }
        rt.method = Some(method.clone());
        method
    }
}
