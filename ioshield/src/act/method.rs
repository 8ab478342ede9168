//! What a restriction does, chosen per disk from the configuration and what the host allows.
use super::cgroup::Cgroupfs;
use crate::{
    config::{ActionKind, DevicePolicy},
    detect::bandwidth::Estimate,
    display::show_rate,
    system::devices::{DevId, Disk},
};

#[derive(Clone, Debug, PartialEq)]
pub enum Method {
    /// Idle I/O class on every thread. Does not reach buffered writeback: the flusher writes on
    /// behalf of the cgroup that dirtied the page, not of the thread (measured in `docs/bench`).
    Ioprio,
    /// A cgroup of its own with write limits: cgroup writeback charges the flusher's I/O to it.
    Cgroup(CgroupLimits),
    /// The same through systemd: on the offender's own unit, or a scope split off it.
    SystemdScope(ScopeLimits),
    /// Decide and log, change nothing.
    DryRun,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CgroupLimits {
    pub dev: DevId,
    /// [`NO_WRITE_LIMIT`] while the disk's speed is only assumed.
    pub wbps: u64,
    /// iocost weight, used instead of `io.max` when iocost is on for the device.
    pub weight: Option<u16>,
    pub memory_high: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScopeLimits {
    /// Device node systemd knows the disk by, e.g. `/dev/vdb`.
    pub device: String,
    /// [`NO_WRITE_LIMIT`] while the disk's speed is only assumed.
    pub wbps: u64,
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

impl ScopeLimits {
    /// The unit properties, as `systemctl show` would print them.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "IOWriteBandwidthMax={} {}",
            self.device,
            show_wbps(self.wbps)
        );
        if let Some(m) = self.memory_high {
            s.push_str(&format!(" MemoryHigh={}M", m / (1024 * 1024)));
        }
        s
    }
}

/// How the cgroup action can be carried out on this host, if at all.
pub enum CgroupAction {
    /// Through systemd's D-Bus API (systemd owns the tree).
    Systemd,
    /// Writing cgroupfs directly (no systemd).
    Cgroupfs(Cgroupfs),
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

    /// The write limit in bytes per second, for the actions that set one.
    pub fn write_limit(&self) -> Option<u64> {
        match self {
            Method::Cgroup(l) if l.weight.is_none() => Some(l.wbps),
            Method::SystemdScope(l) => Some(l.wbps),
            _ => None,
        }
    }

    /// The same restriction with its write limit lifted (memory.high kept).
    pub fn without_write_limit(self) -> Method {
        self.with_write_limit(NO_WRITE_LIMIT)
    }

    /// The same restriction with another write limit (memory.high kept); other kinds as they are.
    pub fn with_write_limit(mut self, wbps: u64) -> Method {
        match &mut self {
            Method::Cgroup(l) if l.weight.is_none() => l.wbps = wbps,
            Method::SystemdScope(l) => l.wbps = wbps,
            _ => {}
        }
        self
    }

    pub fn describe(&self) -> String {
        match self {
            Method::Ioprio => "ioprio idle".into(),
            Method::DryRun => "dry-run, nothing changed".into(),
            Method::SystemdScope(l) => format!("{} through systemd", l.describe()),
            Method::Cgroup(l) => {
                let mut s = match l.weight {
                    Some(w) => format!("io.weight={w} (iocost)"),
                    None => format!("io.max wbps={}", show_wbps(l.wbps)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn disk() -> Disk {
        Disk {
            id: DevId {
                major: 254,
                minor: 16,
            },
            name: Some("vdb".into()),
        }
    }

    const MEASURED: Estimate = Estimate {
        bytes_per_sec: 30e6,
        source: "configured",
        measured: true,
    };

    #[test]
    fn without_the_write_limit_memory_high_stays() {
        let policy = Config::default().policy_for(None).clone();
        let (m, _) = method_for(&disk(), &policy, MEASURED, &Ok(CgroupAction::Systemd));
        let m = m.without_write_limit();
        let Method::SystemdScope(l) = &m else {
            panic!("{m:?}")
        };
        assert_eq!(l.wbps, NO_WRITE_LIMIT);
        assert!(l.memory_high.is_some());
        assert!(m.describe().contains("IOWriteBandwidthMax=/dev/vdb max"));
        assert_eq!(io_max_wbps(l.wbps), "max");
    }

    #[test]
    fn limits_follow_the_policy_and_fallbacks_say_why() {
        let config = Config::default();
        let mut policy = config.policy_for(None).clone();
        policy.limit = 0.5;
        let (m, note) = method_for(&disk(), &policy, MEASURED, &Ok(CgroupAction::Systemd));
        assert_eq!(note, None);
        let Method::SystemdScope(l) = &m else {
            panic!("{m:?}")
        };
        assert_eq!((l.device.as_str(), l.wbps), ("/dev/vdb", 15_000_000));
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
        let (m, note) = method_for(&disk(), &policy, MEASURED, &Ok(CgroupAction::Systemd));
        assert_eq!((m, note), (Method::DryRun, None));
    }
}
