//! What a restriction does, chosen per disk from the configuration and what the host allows.
use super::{cgroup::Cgroupfs, iocost};
use crate::{
    config::{ActionKind, DevicePolicy, Iocost},
    detect::bandwidth::{self, Estimate},
    display::show_rate,
    system::devices::{self, DevId, Disk},
};

#[derive(Clone, Debug, PartialEq)]
pub enum Method {
    /// Idle I/O class on every thread. Does not reach buffered writeback: the flusher writes on
    /// behalf of the cgroup that dirtied the page, not of the thread (measured in `docs/bench`).
    Ioprio,
    /// A cgroup of its own with write limits: cgroup writeback charges the flusher's I/O to it.
    Cgroup(CgroupLimits),
    /// The same through systemd, on the offender's own unit.
    SystemdScope(ScopeLimits),
    /// Decide and log, change nothing.
    DryRun,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CgroupLimits {
    pub dev: DevId,
    pub write: WriteControl,
    pub memory_high: Option<u64>,
}

/// How a restricted offender's writes are held back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WriteControl {
    /// `io.max wbps` on its cgroup ([`NO_WRITE_LIMIT`]: none).
    Limit(u64),
    /// `io.weight` on its cgroup, iocost on the disk: turned on by ioshield with `model`, or by
    /// someone else (`None`). `fallback` is the `io.max` limit used if iocost cannot be turned
    /// on for the disk.
    Weight {
        weight: u16,
        model: Option<iocost::Model>,
        fallback: u64,
    },
}

/// The weight of a restricted offender's cgroup (and of ioshield's parent cgroup) under iocost:
/// the lowest there is, against the default 100 of everyone else.
pub const OFFENDER_WEIGHT: u16 = 1;

/// The weight of an offender that dirties less than the rate it is held at (a speed probe's
/// window saw it use too little of it): an untar of small files, slowed by its own metadata,
/// not by the disk. At weight 1 with a 32 MiB `memory.high` the untar ran at 0.54-0.58x of
/// its unmitigated speed on 6.12; at weight 10 without `memory.high` at 1.08x, its innocents
/// pausing no longer (docs/bench/weight-10.md). A copy at weight 10 paused the committing load
/// longer: it never gets here, since it uses its rate.
pub const LIGHT_WRITER_WEIGHT: u16 = 10;

/// The weight of a restricted offender's cgroup for its first [`ONSET`] where iocost ioshield
/// turned on through cgroupfs holds it. Its pages dirtied before go on being written through
/// the cgroup they were dirtied in, the innocents' one, for a while after the move, and at
/// weight 1 the flusher waited in iocost for the offender's writes while it held ext4's journal
/// handle for them (`ioc_rqos_throttle` under `ext4_do_writepages`): every `fsync` beside it
/// waited for the journal commit behind that handle. Behind a writer of 14 MB/s on the bed's
/// 30 MB/s disk, restricted by its backlog 2.6 s in, the restriction's first second paused the
/// committing load 0.21-0.35 s (median 0.26, 11 runs) at weight 1 on 6.12 and 0.06-0.29 s
/// (median 0.12, 8 runs) with this onset, and the load's p99 fell from 230-245 to 112-145 ms
/// (docs/bench/unwritten-backlog.md, stop 64). Its `memory.high` holds the writer meanwhile,
/// as it does at weight 1. Not on older kernels ([`ONSET_FROM`]).
pub const ONSET_WEIGHT: u16 = LIGHT_WRITER_WEIGHT;

/// How long a restriction holds at [`ONSET_WEIGHT`] before the offender's weight.
pub const ONSET: std::time::Duration = std::time::Duration::from_secs(2);

/// The first kernel the onset is for. On 6.1 the restriction's first second paused the
/// committing load 0.04-0.08 s at weight 1 (8 runs), and 0.06-0.31 s in its first 2 s with the
/// onset (8 runs): there the innocents' cgroup, which writes the backlog, loses a tenth of the
/// disk to the new one and its own `fsync` waits in iocost's throttle longer. The kernels
/// between 6.1 and 6.12 were not measured; they keep weight 1 from the start.
pub const ONSET_FROM: (u32, u32) = (6, 12);

/// The weight of a restricted offender's cgroup while the kernel's latency control sets the
/// rate of a disk ioshield has not measured (a speed probe's window, a rate forced for room;
/// `daemon::speed_probe`), where iocost ioshield turned on through cgroupfs holds it. That
/// control hands out budgets every 100 ms instead of every 10 ms, and at weight 1 the flusher
/// slept in iocost's throttle for the writer's pages while it held ext4's journal handle for
/// them (`ioc_rqos_throttle` under `ext4_do_writepages`, the disk idle meanwhile): every
/// `fsync` beside it waited for the journal commit behind that handle. At weight 10 (stop 67)
/// the sleeps were shorter, not gone: a traced 6.1 window still had the flusher there in 4 of
/// the 9 samples with the committing load waiting, no write in flight. On the bed's 30 MB/s
/// disk never measured, 3 runs per kernel with a copy and with the load offender, the same
/// session: 11 of 12 runs kept every innocent within 0.25 s at 25, against 5 of 12 at 10; the
/// committing load's longest pause 0.17-0.25 s median against 0.23-0.28 s, worst 0.29 s (a
/// first second on 6.1, before any window) against 0.35 s; the writers no slower. Its windows
/// show room the disk does not have more often (10 of 12 runs against 6), but each rate forced
/// for it was taken back by the disk's queue, and paused nobody more than 0.25 s. At 50 (the
/// copy, 6 runs) the windows paused less and the rates forced for their false rooms more,
/// 0.30 and 0.32 s (docs/bench/speed-probe.md, stop 68).
pub const LATENCY_CONTROL_WEIGHT: u16 = 25;

/// The `memory.high` of a lightened offender (where its policy sets one). Lifted altogether an
/// untar dirtied its whole job in seconds and left its time to `sync` to the backlog (0.88x of
/// its unmitigated speed on 6.1 with the disk's speed known, against 1.32x at 8 MiB); at 32 MiB
/// its page cache and the slab of its new inodes held it on 6.12 (0.58x at weight 10). At 128
/// MiB: 0.83-1.31x on both kernels, measured disk or not, innocents pausing at most 0.09 s
/// (docs/bench/small-files.md). Bounded, it also bounds what a light writer that turns into a
/// copy dumps before it is held at weight 1 again, and needs no lowering then.
pub const LIGHT_WRITER_MEMORY_HIGH: u64 = 128 << 20;

impl WriteControl {
    /// The rate that bounds the offender: its write limit, or the disk speed iocost models
    /// (for a disk not yet measured, the highest rate the kernel may choose).
    fn rate(&self) -> Option<u64> {
        match *self {
            WriteControl::Limit(w) => Some(w),
            WriteControl::Weight { model, .. } => model.map(|m| m.rate()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScopeLimits {
    pub dev: DevId,
    /// Device node systemd knows the disk by, e.g. `/dev/vdb`.
    pub device: String,
    /// `IOWriteBandwidthMax=` ([`NO_WRITE_LIMIT`]: none), or `IOWeight=` under iocost.
    pub write: WriteControl,
    pub memory_high: Option<u64>,
}

/// `io.max wbps=max`, and systemd's "infinity" for `IOWriteBandwidthMax=` (UINT64_MAX): while
/// the daemon lets an unmeasured disk show its speed, `memory.high` alone holds the offender.
pub const NO_WRITE_LIMIT: u64 = u64::MAX;

/// A write limit as io.max and `systemctl show` spell it.
fn show_wbps(wbps: u64) -> String {
    if wbps == NO_WRITE_LIMIT {
        "max".into()
    } else {
        show_rate(wbps as f64).replace(' ', "")
    }
}

/// The value io.max takes.
pub fn io_max_wbps(wbps: u64) -> String {
    if wbps == NO_WRITE_LIMIT {
        "max".into()
    } else {
        wbps.to_string()
    }
}

impl WriteControl {
    /// How iocost holds the offender, after its weight: "(iocost on, disk modelled at 25MB/s)".
    fn describe_iocost(model: Option<iocost::Model>) -> String {
        match model {
            Some(m) => format!("(iocost on, {})", m.describe(show_wbps)),
            None => "(iocost as set up on the disk)".into(),
        }
    }
}

impl ScopeLimits {
    /// The unit properties, as `systemctl show` would print them.
    pub fn describe(&self) -> String {
        let mut s = match self.write {
            WriteControl::Limit(w) => {
                format!("IOWriteBandwidthMax={} {}", self.device, show_wbps(w))
            }
            WriteControl::Weight { weight, model, .. } => {
                format!("IOWeight={weight} {}", WriteControl::describe_iocost(model))
            }
        };
        if let Some(m) = self.memory_high {
            s.push_str(&format!(" MemoryHigh={}M", m / (1024 * 1024)));
        }
        s
    }
}

/// How the cgroup action can be carried out on this host, if at all.
pub enum CgroupAction {
    /// Through systemd's D-Bus API (systemd owns the tree); the hierarchy is for reading the
    /// root's `io.cost.*`, which no unit owns.
    Systemd(Cgroupfs),
    /// Writing cgroupfs directly (no systemd).
    Cgroupfs(Cgroupfs),
}

impl CgroupAction {
    /// Whether ioshield may turn iocost on here under `configured`: on systemd hosts only when
    /// asked (`on`): there the weight left a committing service slower than the write limit
    /// (see [`Iocost::Auto`]).
    pub fn iocost_allowed(&self, configured: Iocost) -> Iocost {
        match (self, configured) {
            (_, Iocost::Off) | (CgroupAction::Systemd(_), Iocost::Auto) => Iocost::Off,
            _ => Iocost::On,
        }
    }

    /// Whether iocost is on for `dev`, and whose it is. Also on a systemd host: `io.cost.*`
    /// live on the root cgroup only, and systemd has no unit property for them.
    pub fn iocost(&self, dev: DevId) -> iocost::State {
        match self {
            CgroupAction::Cgroupfs(fs) | CgroupAction::Systemd(fs) => fs.iocost(dev),
        }
    }
}

impl Method {
    /// The word metrics and logs use for the kind of action.
    pub fn label(&self) -> &'static str {
        match self {
            Method::Ioprio => "ioprio",
            Method::Cgroup(_) | Method::SystemdScope(_) => "cgroup",
            Method::DryRun => "dry-run",
        }
    }

    /// The disk a cgroup action holds writes to.
    pub fn dev(&self) -> Option<DevId> {
        match self {
            Method::Cgroup(l) => Some(l.dev),
            Method::SystemdScope(l) => Some(l.dev),
            Method::Ioprio | Method::DryRun => None,
        }
    }

    /// How the offender's writes are held, for the cgroup actions.
    fn write(&self) -> Option<WriteControl> {
        match self {
            Method::Cgroup(l) => Some(l.write),
            Method::SystemdScope(l) => Some(l.write),
            _ => None,
        }
    }

    /// Whether something besides `memory.high` holds the writer: a write limit or iocost's
    /// weight (not while the speed probe lifts the limit, nor for a user manager without io).
    pub fn holds_writes(&self) -> bool {
        match self.write() {
            Some(WriteControl::Limit(wbps)) => wbps != NO_WRITE_LIMIT,
            Some(WriteControl::Weight { .. }) => true,
            None => false,
        }
    }

    /// The `io.max` (or `IOWriteBandwidthMax=`) limit that holds the writer, bytes per second:
    /// not iocost's weight, nor a limit the speed probe lifted.
    pub fn io_max_limit(&self) -> Option<u64> {
        match self.write() {
            Some(WriteControl::Limit(wbps)) if wbps != NO_WRITE_LIMIT => Some(wbps),
            _ => None,
        }
    }

    /// The write limit in bytes per second, or the disk speed ioshield's iocost model assumes,
    /// for the actions that set one.
    pub fn write_limit(&self) -> Option<u64> {
        self.write()?.rate()
    }

    /// The offender's `memory.high`, where the method sets one.
    pub fn memory_high(&self) -> Option<u64> {
        match self {
            Method::Cgroup(l) => l.memory_high,
            Method::SystemdScope(l) => l.memory_high,
            Method::Ioprio | Method::DryRun => None,
        }
    }

    /// Whether the offender is held back by iocost weight.
    pub fn uses_iocost(&self) -> bool {
        matches!(self.write(), Some(WriteControl::Weight { .. }))
    }

    /// The iocost ioshield turned on for the offender's disk, if that is what holds it.
    pub fn iocost_model(&self) -> Option<iocost::Model> {
        match self.write()? {
            WriteControl::Weight { model, .. } => model,
            WriteControl::Limit(_) => None,
        }
    }

    /// Whether the offender is held under iocost ioshield turned on, whose model pins the
    /// disk's rate (not the rate control of a disk not yet measured, which lets it show its
    /// speed).
    pub fn pins_disk(&self) -> bool {
        self.vrate() == Some(iocost::Vrate::Pinned)
    }

    /// Whether the offender is held under iocost ioshield turned on for a disk it has not
    /// measured (the assumed slow disk's model, the rate held there or left to the kernel's
    /// latency control).
    pub fn under_rate_control(&self) -> bool {
        matches!(
            self.vrate(),
            Some(iocost::Vrate::Held { .. } | iocost::Vrate::Adaptive { .. })
        )
    }

    /// Whether the offender is held under iocost ioshield turned on for a disk it has not
    /// measured, at a rate held fixed (not left to the kernel's latency control).
    pub fn holds_rate(&self) -> bool {
        matches!(self.vrate(), Some(iocost::Vrate::Held { .. }))
    }

    /// How iocost ioshield turned on sets the disk's rate, if it holds the offender.
    pub fn vrate(&self) -> Option<iocost::Vrate> {
        self.iocost_model().map(|m| m.vrate)
    }

    /// Under a rate held on a disk not yet measured, the same restriction with the rate left
    /// to the kernel's latency control (see [`iocost::Model::listening`]), at
    /// [`LATENCY_CONTROL_WEIGHT`] at least where the weight of iocost ioshield turned on
    /// through cgroupfs holds it.
    pub fn listening(self) -> Method {
        let listening = self.with_model(iocost::Model::listening);
        match listening.vrate() {
            Some(iocost::Vrate::Adaptive { .. }) => {
                listening.with_weight(|w| w.max(LATENCY_CONTROL_WEIGHT))
            }
            _ => listening,
        }
    }

    /// The same restriction with its weight `change`d, where the weight of iocost ioshield
    /// turned on through cgroupfs holds it (a systemd unit's `IOWeight=` was measured at the
    /// offender's weight only).
    fn with_weight(mut self, change: impl FnOnce(u16) -> u16) -> Method {
        if let Method::Cgroup(CgroupLimits {
            write:
                WriteControl::Weight {
                    weight,
                    model: Some(_),
                    ..
                },
            ..
        }) = &mut self
        {
            *weight = change(*weight);
        }
        self
    }

    /// For an offender that dirties less than the rate it is held at, the same restriction at
    /// [`LIGHT_WRITER_WEIGHT`] where the weight of iocost ioshield turned on through cgroupfs
    /// holds it, and as it is where a write limit does (the daemon also raises an "auto"
    /// `memory.high` with [`Method::with_light_memory_high`], which is all that lightens a
    /// writer under a limit: the untar dirties less than the limit, and a small `memory.high`
    /// is what holds it). `None` under a weight on a systemd host (iocost is off there unless
    /// asked, and the light weight was measured only through cgroupfs), and for the actions
    /// that set neither.
    pub fn lightened(&self) -> Option<Method> {
        match self {
            Method::Cgroup(l) => match l.write {
                WriteControl::Weight { .. } => self.our_iocost_at(LIGHT_WRITER_WEIGHT),
                WriteControl::Limit(_) => Some(self.clone()),
            },
            Method::SystemdScope(l) => match l.write {
                WriteControl::Limit(_) => Some(self.clone()),
                WriteControl::Weight { .. } => None,
            },
            Method::Ioprio | Method::DryRun => None,
        }
    }

    /// The restriction for its first [`ONSET`]: at [`ONSET_WEIGHT`] where the weight of iocost
    /// ioshield turned on through cgroupfs holds it lower; `None` otherwise (a write limit,
    /// a systemd unit's `IOWeight=`, whose onset was not measured, or a lightened writer).
    pub fn at_onset(&self) -> Option<Method> {
        self.weight()
            .filter(|&w| w < ONSET_WEIGHT)
            .and_then(|_| self.our_iocost_at(ONSET_WEIGHT))
    }

    /// The same restriction at `weight`, where the weight of iocost ioshield turned on through
    /// cgroupfs holds it (its model is ours); `None` for any other.
    fn our_iocost_at(&self, weight: u16) -> Option<Method> {
        match self {
            Method::Cgroup(l) => match l.write {
                WriteControl::Weight {
                    model: Some(model),
                    fallback,
                    ..
                } => Some(Method::Cgroup(CgroupLimits {
                    write: WriteControl::Weight {
                        weight,
                        model: Some(model),
                        fallback,
                    },
                    ..l.clone()
                })),
                _ => None,
            },
            _ => None,
        }
    }

    /// The iocost weight the offender's cgroup is given, where a weight holds it.
    pub fn weight(&self) -> Option<u16> {
        match self.write()? {
            WriteControl::Weight { weight, .. } => Some(weight),
            WriteControl::Limit(_) => None,
        }
    }

    /// Under a probe's window (the rate left to the kernel's latency control), the same
    /// restriction with the rate held again at the top of the window's range, at the
    /// offender's weight again; `None` otherwise. Only a writer at [`OFFENDER_WEIGHT`] gets a
    /// window: a lightened one gets none, and the onset is over before the first.
    pub fn window_closed(&self) -> Option<Method> {
        let closed = self.iocost_model()?.closed()?;
        Some(
            self.clone()
                .with_model(|_| closed)
                .with_weight(|_| OFFENDER_WEIGHT),
        )
    }

    /// The same restriction with `change` applied to the iocost model ioshield turned on for
    /// it, if any.
    fn with_model(mut self, change: impl FnOnce(iocost::Model) -> iocost::Model) -> Method {
        let write = match &mut self {
            Method::Cgroup(l) => &mut l.write,
            Method::SystemdScope(l) => &mut l.write,
            _ => return self,
        };
        if let WriteControl::Weight { model: Some(m), .. } = write {
            *m = change(*m);
        }
        self
    }

    /// The range of rates the kernel's latency control may choose, under the rate control of
    /// a disk ioshield has not measured.
    pub fn rate_range(&self) -> Option<(u64, u64)> {
        self.iocost_model()?.range()
    }

    /// The rate the offender's writes may run at, at least, when the kernel holds them there:
    /// the lowest rate iocost's rate control may choose on a disk ioshield has not measured,
    /// or a write limit (none for "no limit", where `memory.high` alone holds the writer).
    /// Allowed well above what the disk completes while writes queue, the disk is what holds
    /// them (`detect::bandwidth`): on systemd hosts the speed probe raises
    /// `IOWriteBandwidthMax=` to 50 MB/s on the 30 MB/s disk, which then completed 26 MB/s with
    /// 1.1 writes queued (median), never the four a backlog shows, and went unmeasured through
    /// six copies (tests/vm/in-place-copies.sh, stop 54).
    pub fn allowed_rate(&self) -> Option<u64> {
        if let Some((min, _)) = self.rate_range() {
            return Some(min);
        }
        match self.write()? {
            WriteControl::Limit(w) if w != NO_WRITE_LIMIT => Some(w),
            _ => None,
        }
    }

    /// Under the rate control of a disk not yet measured, the same restriction with the rate
    /// held at `wbps` at least; anything else as it is.
    pub fn with_rate_at_least(self, wbps: u64) -> Method {
        self.with_model(|m| m.at_least(wbps))
    }

    /// The same restriction with memory.high raised to `bytes` where it is lower (off stays
    /// off).
    pub fn with_memory_high_at_least(self, bytes: u64) -> Method {
        self.map_memory_high(|m| m.max(bytes))
    }

    /// The same restriction with memory.high lowered to `bytes` where it is higher (off stays
    /// off).
    pub fn with_memory_high_at_most(self, bytes: u64) -> Method {
        self.map_memory_high(|m| m.min(bytes))
    }

    /// The same restriction with memory.high at least a light writer's (off stays off): what
    /// a lightened writer keeps for the rest of its restriction, heavy again or not, since
    /// written below what its cgroup holds, the daemon would reclaim the difference itself.
    pub fn with_light_memory_high(self) -> Method {
        self.with_memory_high_at_least(LIGHT_WRITER_MEMORY_HIGH)
    }

    /// The same restriction with memory.high `share` (0 to 1) of the way up from `from` to
    /// the one it has, where it is higher (off stays off).
    pub fn with_memory_high_on_the_way(self, from: Option<u64>, share: f64) -> Method {
        let Some(from) = from else {
            return self;
        };
        self.map_memory_high(|m| {
            if m <= from {
                return m;
            }
            from + ((m - from) as f64 * share.clamp(0.0, 1.0)) as u64
        })
    }

    /// The same restriction with its memory.high, where it sets one, passed through `f`.
    fn map_memory_high(mut self, f: impl FnOnce(u64) -> u64) -> Method {
        if let Method::Cgroup(CgroupLimits { memory_high, .. })
        | Method::SystemdScope(ScopeLimits { memory_high, .. }) = &mut self
        {
            *memory_high = memory_high.map(f);
        }
        self
    }

    /// The same restriction with its write limit lifted (memory.high kept).
    pub fn without_write_limit(self) -> Method {
        self.with_write_limit(NO_WRITE_LIMIT)
    }

    /// The same restriction with another write limit (memory.high kept); under the rate
    /// control of a disk not yet measured, the highest rate it may choose. Weights under a
    /// pinned model or someone else's iocost as they are.
    pub fn with_write_limit(mut self, wbps: u64) -> Method {
        let write = match &mut self {
            Method::Cgroup(l) => &mut l.write,
            Method::SystemdScope(l) => &mut l.write,
            _ => return self,
        };
        match write {
            WriteControl::Limit(w) => *w = wbps,
            WriteControl::Weight { model: Some(m), .. } => *m = m.up_to(wbps),
            WriteControl::Weight { model: None, .. } => {}
        }
        self
    }

    pub fn describe(&self) -> String {
        match self {
            Method::Ioprio => "ioprio idle".into(),
            Method::DryRun => "dry-run, nothing changed".into(),
            Method::SystemdScope(l) => format!("{} through systemd", l.describe()),
            Method::Cgroup(l) => {
                let mut s = match l.write {
                    WriteControl::Limit(w) => format!("io.max wbps={}", show_wbps(w)),
                    WriteControl::Weight { weight, model, .. } => format!(
                        "io.weight={weight} {}",
                        WriteControl::describe_iocost(model)
                    ),
                };
                if let Some(m) = l.memory_high {
                    s.push_str(&format!(" memory.high={}M", m / (1024 * 1024)));
                }
                s
            }
        }
    }
}

/// The method for `disk` under `policy` at bandwidth `bw`, and a warning when the configured
/// action cannot be carried out here and a weaker one is used instead.
pub fn method_for(
    disk: &Disk,
    policy: &DevicePolicy,
    estimate: Estimate,
    cgroup_action: &Result<CgroupAction, String>,
) -> (Method, Option<String>) {
    let bw = estimate.bytes_per_sec;
    let wbps = (policy.limit * bw) as u64;
    let memory_high = policy.memory_high.bytes(bw, policy.max_flush_seconds);
    let cgroup = |how: &CgroupAction| {
        let write = write_control(
            how.iocost(disk.id),
            how.iocost_allowed(policy.iocost),
            devices::is_blk_mq(disk.id),
            estimate,
            wbps,
        );
        match how {
            CgroupAction::Cgroupfs(_) => Method::Cgroup(CgroupLimits {
                dev: disk.id,
                write,
                memory_high,
            }),
            CgroupAction::Systemd(_) => Method::SystemdScope(ScopeLimits {
                dev: disk.id,
                device: disk.label(),
                write,
                memory_high,
            }),
        }
    };
    match (policy.action, cgroup_action) {
        (ActionKind::DryRun, _) => (Method::DryRun, None),
        (ActionKind::Ioprio, _) => (Method::Ioprio, None),
        (ActionKind::Cgroup | ActionKind::Auto, Ok(how)) => (cgroup(how), None),
        (ActionKind::Cgroup, Err(why)) => (
            Method::Ioprio,
            Some(format!(
                "cgroup action requested but {why}; using ioprio, which does not slow buffered \
                 writeback"
            )),
        ),
        (ActionKind::Auto, Err(why)) => (
            Method::Ioprio,
            Some(format!(
                "action auto: {why}, so using ioprio (it does not slow buffered writeback, only \
                 the offender's reads and direct writes)"
            )),
        ),
    }
}

/// iocost weight where someone set iocost up on the disk (`state`), or where ioshield may turn
/// it on (the configuration allows it, the kernel has it, the disk is multi-queue); else
/// `io.max` at `wbps`.
///
/// A disk whose speed is known (measured under a backlog, in an earlier run, or configured) gets
/// a model of that speed with the rate pinned to it. One that is not (assumed, or only a lower
/// bound) gets a model of the assumed slow disk with the rate held there, or at the lower bound
/// if there is one, until the probe lets the disk show whether it has room and forces the rate
/// up (`daemon::speed_probe`): a model pinned to a guess for good would hold a fast disk there,
/// raising it step by step to find the disk's speed overshot a slow one (6.12: a 0.95 s pause
/// when the model went from 25 to 50 MB/s on the bed's disk), and `io.max` from the assumed
/// speed until the disk was measured left the innocents 1-3 s pauses on 6.12 (ext4's commit
/// waits for the offender's held data; docs/bench/iocost-adaptive.md). Held, not under the
/// kernel's latency control, for the latency targets' sake (see [`iocost::Vrate::Held`]).
pub fn write_control(
    state: iocost::State,
    allowed: Iocost,
    blk_mq: bool,
    estimate: Estimate,
    wbps: u64,
) -> WriteControl {
    let weight = |model| WriteControl::Weight {
        weight: OFFENDER_WEIGHT,
        model,
        fallback: wbps,
    };
    let ours = matches!(state, iocost::State::Off | iocost::State::Ours)
        && matches!(allowed, Iocost::Auto | Iocost::On)
        && blk_mq;
    match state {
        iocost::State::Foreign => weight(None),
        _ if ours && estimate.capacity => {
            weight(Some(iocost::Model::pinned(estimate.bytes_per_sec as u64)))
        }
        _ if ours => {
            let model = iocost::Model::held(bandwidth::UNMEASURED as u64);
            // A lower bound: the disk wrote at least that, steadily.
            weight(Some(if estimate.measured {
                model.at_least(estimate.bytes_per_sec as u64)
            } else {
                model
            }))
        }
        _ => WriteControl::Limit(wbps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A device number no disk has, so that what the host's disks have (multi-queue, iocost)
    /// does not decide the method.
    fn disk() -> Disk {
        Disk {
            id: DevId {
                major: 4095,
                minor: 16,
            },
            name: Some("vdb".into()),
        }
    }

    /// A cgroup held by `weight` under iocost on a disk not measured (the 25 MB/s model).
    fn held_at(dev: DevId, weight: u16) -> Method {
        Method::Cgroup(CgroupLimits {
            dev,
            write: WriteControl::Weight {
                weight,
                model: Some(iocost::Model::held(25_000_000)),
                fallback: 12_500_000,
            },
            memory_high: None,
        })
    }

    /// A systemd unit's limits on the e2e's data disk, 254:16.
    fn scope(write: WriteControl, memory_high: u64) -> Method {
        Method::SystemdScope(ScopeLimits {
            dev: DevId {
                major: 254,
                minor: 16,
            },
            device: "/dev/vdb".into(),
            write,
            memory_high: Some(memory_high),
        })
    }

    /// A systemd host whose hierarchy has no iocost files.
    fn systemd() -> CgroupAction {
        CgroupAction::Systemd(Cgroupfs {
            root: "/nonexistent".into(),
        })
    }

    const MEASURED: Estimate = Estimate {
        bytes_per_sec: 30e6,
        source: "configured",
        measured: true,
        capacity: true,
    };

    /// A restriction waiting for its backlog leaves no window open: the rate is held again at
    /// the top of the window's range, at the offender's weight again; a held or forced rate,
    /// and io.max, have no window. A window and a forced rate are at the latency control's
    /// weight.
    #[test]
    fn a_window_closes_to_the_rate_held_before_it() {
        let dev = DevId {
            major: 254,
            minor: 16,
        };
        let held = held_at(dev, OFFENDER_WEIGHT).with_memory_high_at_least(8 << 20);
        let window = held.clone().listening();
        assert!(held.holds_rate() && !window.holds_rate());
        assert_eq!(window.rate_range(), Some((6_250_000, 25_000_000)));
        assert_eq!(window.weight(), Some(LATENCY_CONTROL_WEIGHT));
        assert_eq!(window.memory_high(), held.memory_high());
        assert_eq!(window.window_closed(), Some(held.clone()));
        assert_eq!(held.window_closed(), None);
        let forced = held.clone().listening().with_rate_at_least(40_000_000);
        assert!(!forced.holds_rate());
        assert_eq!(forced.rate_range(), Some((40_000_000, 40_000_000)));
        assert_eq!(forced.weight(), Some(LATENCY_CONTROL_WEIGHT));
        assert_eq!(forced.window_closed(), None);
        let limit = Method::Cgroup(CgroupLimits {
            dev,
            write: WriteControl::Limit(12_500_000),
            memory_high: None,
        });
        assert_eq!(limit.window_closed(), None);
    }

    /// What the kernel lets the offender's writes run at: the bottom of the rate control's range
    /// on a disk not measured (held or forced), a write limit as it is; nothing under a model
    /// pinned at a measured speed, nor where memory.high alone holds the writer.
    #[test]
    fn the_allowed_rate_is_the_rate_controls_floor_or_the_write_limit() {
        let dev = DevId {
            major: 254,
            minor: 16,
        };
        let with = |write| scope(write, 32 << 20);
        assert_eq!(
            with(WriteControl::Limit(50_000_000)).allowed_rate(),
            Some(50_000_000)
        );
        assert_eq!(
            with(WriteControl::Limit(NO_WRITE_LIMIT)).allowed_rate(),
            None
        );
        let held = held_at(dev, OFFENDER_WEIGHT);
        assert_eq!(held.allowed_rate(), Some(25_000_000));
        let forced = held.clone().listening().with_rate_at_least(40_000_000);
        assert_eq!(forced.allowed_rate(), Some(40_000_000));
        let pinned = held.with_model(|_| iocost::Model::pinned(30_000_000));
        assert_eq!(pinned.allowed_rate(), None);
        assert_eq!(Method::Ioprio.allowed_rate(), None);
    }

    /// A restriction's onset, and the kernel's latency control, raise the weight only where our
    /// iocost holds it lower through cgroupfs: a write limit, a systemd unit and someone else's
    /// iocost keep theirs, a lightened writer (already at the onset's weight) has no onset, and
    /// a measured disk's pinned rate has no latency control. (The probe gives a lightened writer
    /// no window; the engine lightens it again after a forced rate, `light_writer::lighten`.)
    #[test]
    fn the_onset_and_the_latency_control_raise_the_weight_under_our_iocost_only() {
        let dev = DevId {
            major: 254,
            minor: 16,
        };
        let held = held_at(dev, OFFENDER_WEIGHT).with_memory_high_at_least(8 << 20);
        let onset = held.at_onset().unwrap();
        assert_eq!(onset.weight(), Some(ONSET_WEIGHT));
        assert_eq!(onset.memory_high(), held.memory_high());
        assert_eq!(onset.rate_range(), held.rate_range());
        assert_eq!(held_at(dev, LIGHT_WRITER_WEIGHT).at_onset(), None);
        let theirs = Method::Cgroup(CgroupLimits {
            dev,
            write: WriteControl::Weight {
                weight: OFFENDER_WEIGHT,
                model: None,
                fallback: 12_500_000,
            },
            memory_high: None,
        });
        assert_eq!(theirs.at_onset(), None);
        let limit = Method::Cgroup(CgroupLimits {
            dev,
            write: WriteControl::Limit(12_500_000),
            memory_high: None,
        });
        assert_eq!(limit.at_onset(), None);
        assert_eq!(limit.clone().listening(), limit);
        let unit = scope(
            WriteControl::Weight {
                weight: OFFENDER_WEIGHT,
                model: Some(iocost::Model::held(25_000_000)),
                fallback: 12_500_000,
            },
            8 << 20,
        );
        assert_eq!(unit.at_onset(), None);
        let window = unit.listening();
        assert_eq!(window.weight(), Some(OFFENDER_WEIGHT));
        assert_eq!(window.rate_range(), Some((6_250_000, 25_000_000)));
        assert_eq!(Method::Ioprio.at_onset(), None);
        // A measured disk's rate is pinned: no latency control, no weight of its own.
        let pinned = Method::Cgroup(CgroupLimits {
            dev,
            write: WriteControl::Weight {
                weight: OFFENDER_WEIGHT,
                model: Some(iocost::Model::pinned(30_000_000)),
                fallback: 12_500_000,
            },
            memory_high: None,
        });
        assert_eq!(pinned.clone().listening(), pinned);
    }

    /// A weight under iocost ioshield turned on (cgroupfs) is lightened to 10; a write limit,
    /// through cgroupfs or systemd, stays (only memory.high lightens it); someone else's iocost
    /// and a weight on a systemd unit keep their restriction.
    #[test]
    fn a_light_writer_gets_weight_10_under_our_iocost_and_keeps_a_write_limit() {
        let dev = DevId {
            major: 254,
            minor: 16,
        };
        let limits = |write| CgroupLimits {
            dev,
            write,
            memory_high: Some(32 << 20),
        };
        let ours = WriteControl::Weight {
            weight: OFFENDER_WEIGHT,
            model: Some(iocost::Model::held(25_000_000)),
            fallback: 12_500_000,
        };
        let held = Method::Cgroup(limits(ours));
        let light = held.lightened().unwrap();
        assert_eq!(light.weight(), Some(LIGHT_WRITER_WEIGHT));
        assert_eq!(light.memory_high(), Some(32 << 20));
        let light = light.with_light_memory_high();
        assert_eq!(light.memory_high(), Some(LIGHT_WRITER_MEMORY_HIGH));
        assert_eq!(light.iocost_model(), held.iocost_model());
        assert_eq!(held.weight(), Some(1));
        assert_eq!(
            light.describe(),
            "io.weight=10 (iocost on, disk not measured: modelled at 25.0MB/s, the rate held at \
             25.0MB/s) memory.high=128M"
        );
        // memory.high "off" stays off, a larger one stays larger.
        let off = Method::Cgroup(CgroupLimits {
            memory_high: None,
            ..limits(ours)
        });
        assert_eq!(off.with_light_memory_high().memory_high(), None);
        let big = Method::Cgroup(CgroupLimits {
            memory_high: Some(256 << 20),
            ..limits(ours)
        });
        assert_eq!(big.with_light_memory_high().memory_high(), Some(256 << 20));
        let foreign = WriteControl::Weight {
            weight: OFFENDER_WEIGHT,
            model: None,
            fallback: 12_500_000,
        };
        assert_eq!(Method::Cgroup(limits(foreign)).lightened(), None);
        let limit = Method::Cgroup(limits(WriteControl::Limit(12_500_000)));
        assert_eq!(limit.lightened(), Some(limit.clone()));
        assert_eq!(limit.weight(), None);
        let scope = |write| scope(write, 8 << 20);
        assert_eq!(scope(ours).lightened(), None);
        let unit = scope(WriteControl::Limit(18_750_000));
        let light = unit.lightened().unwrap().with_light_memory_high();
        assert_eq!(
            light.describe(),
            "IOWriteBandwidthMax=/dev/vdb 18.8MB/s MemoryHigh=128M through systemd"
        );
        assert_eq!(Method::Ioprio.lightened(), None);
    }

    /// The shipped policy's restriction through systemd on a measured disk, with `memory_high`.
    fn through_systemd(memory_high: crate::config::MemoryHigh) -> Method {
        let mut policy = Config::default().policy_for(None).clone();
        policy.memory_high = memory_high;
        method_for(&disk(), &policy, MEASURED, &Ok(systemd())).0
    }

    fn high(m: &Method) -> Option<u64> {
        match m {
            Method::SystemdScope(l) => l.memory_high,
            _ => panic!("{m:?}"),
        }
    }

    #[test]
    fn memory_high_lowered_only_where_higher() {
        let m = through_systemd(crate::config::MemoryHigh::Auto);
        assert_eq!(high(&m), Some(crate::config::MemoryHigh::FLOOR));
        let lowered = m.clone().with_memory_high_at_most(8 << 20);
        assert_eq!(high(&lowered), Some(8 << 20));
        assert!(
            lowered.describe().contains(" MemoryHigh=8M "),
            "{}",
            lowered.describe()
        );
        assert_eq!(
            high(&lowered.with_memory_high_at_most(64 << 20)),
            Some(8 << 20)
        );
        let off = through_systemd(crate::config::MemoryHigh::Off);
        assert_eq!(high(&off.with_memory_high_at_most(8 << 20)), None);
    }

    #[test]
    fn memory_high_on_the_way_up_from_a_lower_one() {
        let full =
            through_systemd(crate::config::MemoryHigh::Auto).with_memory_high_at_least(44 << 20);
        let way = |from, share| high(&full.clone().with_memory_high_on_the_way(from, share));
        assert_eq!(way(Some(8 << 20), 0.0), Some(8 << 20));
        assert_eq!(way(Some(8 << 20), 0.5), Some(26 << 20));
        assert_eq!(way(Some(8 << 20), 1.0), Some(44 << 20));
        assert_eq!(
            way(Some(64 << 20), 0.5),
            Some(44 << 20),
            "not from a higher one"
        );
        assert_eq!(way(None, 0.5), Some(44 << 20));
        let off = through_systemd(crate::config::MemoryHigh::Off);
        assert_eq!(
            high(&off.with_memory_high_on_the_way(Some(8 << 20), 0.5)),
            None
        );
    }

    #[test]
    fn without_the_write_limit_memory_high_stays() {
        let policy = Config::default().policy_for(None).clone();
        let (m, _) = method_for(&disk(), &policy, MEASURED, &Ok(systemd()));
        let m = m.without_write_limit();
        let Method::SystemdScope(l) = &m else {
            panic!("{m:?}")
        };
        assert_eq!(l.write, WriteControl::Limit(NO_WRITE_LIMIT));
        assert!(l.memory_high.is_some());
        assert!(m.describe().contains("IOWriteBandwidthMax=/dev/vdb max"));
        assert_eq!(io_max_wbps(NO_WRITE_LIMIT), "max");
    }

    #[test]
    fn limits_follow_the_policy_and_fallbacks_say_why() {
        let config = Config::default();
        let mut policy = config.policy_for(None).clone();
        policy.limit = 0.5;
        let (m, note) = method_for(&disk(), &policy, MEASURED, &Ok(systemd()));
        assert_eq!(note, None);
        let Method::SystemdScope(l) = &m else {
            panic!("{m:?}")
        };
        assert_eq!(
            (l.device.as_str(), l.write),
            ("/dev/vdb", WriteControl::Limit(15_000_000))
        );
        // Default memory_high = auto: 30 MB/s x 1 s is under the floor.
        assert_eq!(l.memory_high, Some(crate::config::MemoryHigh::FLOOR));
        assert_eq!(m.label(), "cgroup");
        assert!(
            m.describe()
                .contains("IOWriteBandwidthMax=/dev/vdb 15.0MB/s")
        );

        let (m, note) = method_for(&disk(), &policy, MEASURED, &Err("no io controller".into()));
        assert_eq!(m, Method::Ioprio);
        assert!(note.unwrap().contains("no io controller"));

        policy.action = ActionKind::DryRun;
        let (m, note) = method_for(&disk(), &policy, MEASURED, &Ok(systemd()));
        assert_eq!((m, note), (Method::DryRun, None));
    }

    /// On systemd hosts iocost is turned on only when asked (the e2e measured the weight
    /// worse for a committing service than the write limit there).
    #[test]
    fn systemd_hosts_turn_iocost_on_only_when_asked() {
        let systemd = systemd();
        assert_eq!(systemd.iocost_allowed(Iocost::Auto), Iocost::Off);
        assert_eq!(systemd.iocost_allowed(Iocost::On), Iocost::On);
        assert_eq!(systemd.iocost_allowed(Iocost::Off), Iocost::Off);
        let fs = CgroupAction::Cgroupfs(Cgroupfs {
            root: "/nonexistent".into(),
        });
        assert_eq!(fs.iocost_allowed(Iocost::Auto), Iocost::On);
        assert_eq!(fs.iocost_allowed(Iocost::Off), Iocost::Off);
    }

    #[test]
    fn iocost_weight_where_allowed_and_possible_else_io_max() {
        use iocost::State;
        let w =
            |state, allowed, blk_mq| write_control(state, allowed, blk_mq, MEASURED, 22_500_000);
        let ours = WriteControl::Weight {
            weight: 1,
            model: Some(iocost::Model::pinned(30_000_000)),
            fallback: 22_500_000,
        };
        assert_eq!(w(State::Off, Iocost::Auto, true), ours);
        assert_eq!(w(State::Ours, Iocost::Auto, true), ours);
        // Someone else's iocost is used as it is, whatever the configuration says.
        let theirs_at = |fallback| WriteControl::Weight {
            weight: 1,
            model: None,
            fallback,
        };
        let theirs = theirs_at(22_500_000);
        assert_eq!(w(State::Foreign, Iocost::Off, true), theirs);
        assert_eq!(
            w(State::Off, Iocost::Off, true),
            WriteControl::Limit(22_500_000)
        );
        // Device-mapper and md disks have no iocost; old kernels neither.
        assert_eq!(
            w(State::Off, Iocost::Auto, false),
            WriteControl::Limit(22_500_000)
        );
        assert_eq!(
            w(State::Unavailable, Iocost::Auto, true),
            WriteControl::Limit(22_500_000)
        );
        // Before the disk's speed is known: the assumed slow disk's model, its rate held
        // there.
        let assumed = Estimate {
            measured: false,
            capacity: false,
            ..Estimate::ASSUMED
        };
        let held = WriteControl::Weight {
            weight: 1,
            model: Some(iocost::Model::held(25_000_000)),
            fallback: 18_750_000,
        };
        assert_eq!(
            write_control(State::Off, Iocost::Auto, true, assumed, 18_750_000),
            held
        );
        assert_eq!(
            write_control(State::Foreign, Iocost::Auto, true, assumed, 18_750_000),
            theirs_at(18_750_000)
        );
        // Not where iocost may not be turned on.
        assert_eq!(
            write_control(State::Off, Iocost::Off, true, assumed, 18_750_000),
            WriteControl::Limit(18_750_000)
        );
        assert_eq!(
            write_control(State::Off, Iocost::Auto, false, assumed, 18_750_000),
            WriteControl::Limit(18_750_000)
        );
        // A lower bound: the rate held there (a model of it, pinned, would hold every writer
        // to it for good; held, the probe raises it).
        let floor = Estimate {
            capacity: false,
            ..MEASURED
        };
        assert_eq!(
            write_control(State::Off, Iocost::Auto, true, floor, 22_500_000),
            WriteControl::Weight {
                weight: 1,
                model: Some(iocost::Model::held(25_000_000).at_least(30_000_000)),
                fallback: 22_500_000,
            }
        );
        let m = Method::Cgroup(CgroupLimits {
            dev: disk().id,
            write: held,
            memory_high: None,
        });
        // The estimate follows the disk under the rate control: not pinned.
        assert!(m.uses_iocost() && !m.pins_disk() && m.under_rate_control());
        assert_eq!(m.write_limit(), Some(25_000_000));
        assert_eq!(
            m.describe(),
            "io.weight=1 (iocost on, disk not measured: modelled at 25.0MB/s, the rate held at \
             25.0MB/s)"
        );
        // A lower bound raises the held rate; a write limit does not move it.
        let Method::Cgroup(CgroupLimits {
            write: WriteControl::Weight {
                model: Some(model), ..
            },
            ..
        }) = &m
        else {
            panic!("{m:?}")
        };
        assert_eq!(
            model.at_least(26_500_000).describe(show_wbps),
            "disk not measured: modelled at 25.0MB/s, the rate held at 26.5MB/s"
        );
        assert_eq!(m.clone().with_write_limit(31_250_000), m);
        // Listening: the kernel's latency control, down to a quarter, up to the held rate.
        let listening = m.clone().listening();
        assert!(listening.under_rate_control() && !listening.pins_disk());
        assert_ne!(listening.vrate(), m.vrate());
        assert_eq!(
            listening.describe(),
            "io.weight=25 (iocost on, disk not measured: modelled at 25.0MB/s, the kernel's \
             latency control setting the rate between 6.2MB/s and 25.0MB/s)"
        );
        // The probe raises the highest rate.
        let probed = listening.clone().with_write_limit(31_250_000);
        assert_eq!(probed.write_limit(), Some(31_250_000));
        assert!(!probed.pins_disk());
        assert_eq!(
            probed.describe(),
            "io.weight=25 (iocost on, disk not measured: modelled at 25.0MB/s, the kernel's \
             latency control setting the rate between 6.2MB/s and 31.2MB/s)"
        );
        let m = listening;
        // Lifted: as far as the kernel's rate control goes (100 times the model).
        assert_eq!(m.without_write_limit().write_limit(), Some(2_500_000_000));

        let m = Method::Cgroup(CgroupLimits {
            dev: disk().id,
            write: ours,
            memory_high: None,
        });
        assert!(m.uses_iocost());
        assert!(m.pins_disk() && !m.under_rate_control());
        assert_eq!(m.write_limit(), Some(30_000_000));
        assert_eq!(
            m.describe(),
            "io.weight=1 (iocost on, disk modelled at 30.0MB/s)"
        );
        // Someone else's iocost: weighed, but ioshield's model does not pin the disk.
        let theirs = Method::Cgroup(CgroupLimits {
            dev: disk().id,
            write: theirs,
            memory_high: None,
        });
        assert!(theirs.uses_iocost() && !theirs.pins_disk());
        // The model follows the disk's measured speed, not a write limit.
        assert_eq!(m.clone().with_write_limit(50_000_000), m);
        assert_eq!(m.clone().without_write_limit(), m);

        // The same through systemd: IOWeight= on the unit.
        let m = Method::SystemdScope(ScopeLimits {
            dev: disk().id,
            device: "/dev/vdb".into(),
            write: ours,
            memory_high: Some(64 << 20),
        });
        assert!(m.uses_iocost());
        assert_eq!(m.write_limit(), Some(30_000_000));
        assert_eq!(
            m.describe(),
            "IOWeight=1 (iocost on, disk modelled at 30.0MB/s) MemoryHigh=64M through systemd"
        );
        assert_eq!(m.clone().with_write_limit(50_000_000), m);
        let limited = Method::SystemdScope(ScopeLimits {
            dev: disk().id,
            device: "/dev/vdb".into(),
            write: WriteControl::Limit(18_750_000),
            memory_high: None,
        });
        assert!(!limited.uses_iocost());
        assert_eq!(
            limited.with_write_limit(50_000_000).write_limit(),
            Some(50_000_000)
        );
    }
}
