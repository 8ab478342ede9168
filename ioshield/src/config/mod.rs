//! The daemon's configuration: parsed and validated here, consumed as typed values elsewhere.
//! Works with no file at all; every error names the file, line and key.
mod device;
mod exclude;
mod file;
mod keys;
mod raw;
pub mod units;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Serialize;

pub use file::ConfigError;

pub const DEFAULT_PATH: &str = "/etc/ioshield/ioshield.toml";

/// `FILE.d/` next to a configuration file: `/etc/ioshield/ioshield.toml.d/`.
pub fn drop_in_dir(main: &Path) -> PathBuf {
    let mut dir = main.as_os_str().to_owned();
    dir.push(".d");
    PathBuf::from(dir)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionKind {
    /// The best available: the cgroup action where it can work, else ioprio.
    Auto,
    Cgroup,
    Ioprio,
    DryRun,
}

impl ActionKind {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "cgroup" => Ok(Self::Cgroup),
            "ioprio" => Ok(Self::Ioprio),
            "dry-run" => Ok(Self::DryRun),
            _ => Err(format!(
                "`{s}` is not an action (auto, cgroup, ioprio, dry-run)"
            )),
        }
    }
}

/// A cap on the memory a restricted offender allocates after it was moved. The kernel keeps
/// writing back a moved process's file through its old cgroup until it notices the new owner, so
/// `io.max` alone bites seconds late; new page cache, though, is charged to the new cgroup at
/// once, and `memory.high` throttles the offender right away (bench: 6.12 longest pause 2.1 s
/// with io.max alone, 0.07 s with this cap, as with a hand-placed cgroup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryHigh {
    /// bandwidth x max_flush_seconds, at least 32 MiB: the backlog the disk flushes in that time;
    /// while other processes write to a disk whose speed is known, a quarter of a second of it,
    /// at least 8 MiB ([`MemoryHigh::beside_others`]).
    Auto,
    Off,
    Bytes(u64),
}

impl MemoryHigh {
    pub const FLOOR: u64 = 32 << 20;
    /// The smallest `memory.high` beside others. On the 30 MB/s bed, 8 MiB instead of 32
    /// shortened the committing load's longest pause from 0.31-0.43 s to 0.19-0.23 s on 6.1
    /// and from 0.39-0.49 s to 0.32-0.36 s on 6.12 (load and copy benches), at 0.8-1.1 times
    /// the writer's speed under 32 MiB (docs/bench/commit-pause.md).
    pub const BESIDE_OTHERS_FLOOR: u64 = 8 << 20;
    /// Seconds of the disk's speed a restricted writer may hold as memory beside others: its
    /// writeback holds the filesystem's journal for about the time the disk takes to write its
    /// dirty pages.
    pub const BESIDE_OTHERS_SECONDS: f64 = 0.25;

    pub fn bytes(&self, bandwidth: f64, flush_seconds: f64) -> Option<u64> {
        match self {
            MemoryHigh::Off => None,
            MemoryHigh::Bytes(b) => Some(*b),
            MemoryHigh::Auto => Some(((bandwidth * flush_seconds) as u64).max(Self::FLOOR)),
        }
    }

    /// The `memory.high` while other processes write to the disk beside the restricted writer,
    /// where it is ioshield's to choose (`auto`); `None` keeps [`MemoryHigh::bytes`].
    pub fn beside_others(&self, bandwidth: f64) -> Option<u64> {
        match self {
            MemoryHigh::Auto => Some(
                ((bandwidth * Self::BESIDE_OTHERS_SECONDS) as u64).max(Self::BESIDE_OTHERS_FLOOR),
            ),
            MemoryHigh::Off | MemoryHigh::Bytes(_) => None,
        }
    }
}

impl Serialize for MemoryHigh {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MemoryHigh::Auto => s.serialize_str("auto"),
            MemoryHigh::Off => s.serialize_str("off"),
            MemoryHigh::Bytes(b) => s.serialize_str(&format!("{b}B")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bandwidth {
    /// Measured from the disk's write counters while it is busy; assumed slow until then.
    Auto,
    BytesPerSec(u64),
}

impl Serialize for Bandwidth {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Bandwidth::Auto => s.serialize_str("auto"),
            Bandwidth::BytesPerSec(b) => s.serialize_str(&format!("{b}B/s")),
        }
    }
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DaemonConfig {
    #[serde(serialize_with = "ser_duration")]
    pub tick: Duration,
    #[serde(serialize_with = "ser_duration")]
    pub tau: Duration,
    pub parent_factor: f64,
    pub action: ActionKind,
    pub state_file: PathBuf,
    /// Where the disks' measured speeds are kept across restarts, per disk identity.
    pub speeds_file: PathBuf,
    /// Root-only Unix socket `ioshield status` talks to.
    pub socket: PathBuf,
    /// Whether a session leader (login shell, `systemd --user`) may be chosen as the offender.
    /// Off by default: demoting a whole login session because one terminal ran `dd` is a bug.
    pub session_leaders: bool,
    /// How often the daemon reads the `memory.stat` of a writer it holds by `memory.high`
    /// (this setting also decides where a rate iocost holds at the judged speed, or a write
    /// limit, counts as the disk's: `daemon::engine::held_speed`). The read
    /// brings the kernel's counts of that cgroup's dirty pages up to date, and the kernel's
    /// dirty throttling of the writer goes by them: kernels
    /// from 2024 on (6.12, not 6.1) refresh them there only about every 2 s
    /// (`mem_cgroup_wb_stats` rate-limits its flush), so a writer held to a few MiB dirties all
    /// of it unseen and is held by memory.high's reclaim penalty instead, which leaves the disk
    /// idle (docs/bench/dirty-counts.md).
    pub refresh_dirty_counts: RefreshDirtyCounts,
}

/// `[daemon] refresh_dirty_counts`: see [`DaemonConfig::refresh_dirty_counts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshDirtyCounts {
    /// Every [`RefreshDirtyCounts::AUTO`] on kernels that rate-limit the flush (6.8 and later),
    /// never on older ones, where the kernel's own counts are fresh.
    Auto,
    Every(Duration),
    Off,
}

impl RefreshDirtyCounts {
    /// On the 30 MB/s bed (6.12, a copy held at 8 MiB beside the loads) every 20 ms kept the
    /// copy at 1.07x and the committing load's longest pause at 0.13 s against 0.49x and 0.27 s
    /// without; 10 ms: 1.09x and 0.07 s for 1.5 times the CPU; 50 ms: 0.93x and 0.16 s. With
    /// the reads on a thread of their own, 20 ms took the daemon from 1.1% to 2.7% of a vCPU
    /// over that bench, 10 ms to 3.3% (stop 45).
    pub const AUTO: Duration = Duration::from_millis(20);
    /// The first kernel whose `mem_cgroup_wb_stats` rate-limits its flush.
    const RATE_LIMITED_FROM: (u32, u32) = (6, 8);

    /// How often, on a kernel of version `kernel` (major, minor; `None`: unknown, taken as new).
    pub fn interval(&self, kernel: Option<(u32, u32)>) -> Option<Duration> {
        match self {
            RefreshDirtyCounts::Auto => kernel
                .is_none_or(|v| v >= Self::RATE_LIMITED_FROM)
                .then_some(Self::AUTO),
            RefreshDirtyCounts::Every(d) => Some(*d),
            RefreshDirtyCounts::Off => None,
        }
    }

    /// Whether the kernel's dirty throttling of a writer held by `memory.high` goes by counts
    /// that are current on a kernel of version `kernel`: the daemon refreshes them, or the
    /// kernel does not rate-limit its own flush of them (before 6.8).
    pub fn counts_current(&self, kernel: Option<(u32, u32)>) -> bool {
        self.interval(kernel).is_some() || kernel.is_some_and(|v| v < Self::RATE_LIMITED_FROM)
    }
}

impl Serialize for RefreshDirtyCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RefreshDirtyCounts::Auto => s.serialize_str("auto"),
            RefreshDirtyCounts::Every(d) => ser_duration(d, s),
            RefreshDirtyCounts::Off => s.serialize_str("off"),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Exclude {
    pub comm: Vec<String>,
    pub uid: Vec<u32>,
    /// cgroup v2 paths (as in /proc/PID/cgroup); a process in one of them or below is excluded.
    pub cgroup: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DevicePolicy {
    pub bandwidth: Bandwidth,
    pub restrict_at: f64,
    pub release_at: f64,
    #[serde(serialize_with = "ser_duration")]
    pub hold: Duration,
    /// Restrict when the disk's dirty backlog would take longer than this to flush (0: off).
    pub max_flush_seconds: f64,
    /// Restrict at once a process that alone dirties faster than the disk writes for this long
    /// (checked in the kernel, per write; 0: off).
    pub burst_seconds: f64,
    pub action: ActionKind,
    /// io.max write limit for a restricted offender, as a fraction of the bandwidth.
    pub limit: f64,
    /// memory.high for a restricted offender's cgroup.
    pub memory_high: MemoryHigh,
    /// Whether ioshield may turn iocost on for the disk while it restricts a writer there.
    pub iocost: Iocost,
    /// A cap on the disk's dirty data, held by the kernel for every writer from the first write.
    pub max_dirty: MaxDirty,
}

/// The backlog guard: the kernel's per-disk dirty limit (`/sys/class/bdi/M:m/max_bytes` with
/// `strict_limit`, Linux 6.2 and later), set while the daemon runs. It holds every writer of the
/// disk to that much dirty data from its first write, before any process is detected: what
/// others wait for behind the disk's backlog cannot grow past it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MaxDirty {
    Off,
    /// This many seconds of the disk's write speed (the speed ioshield judges writers against).
    Seconds(f64),
    Bytes(u64),
}

impl MaxDirty {
    /// Below a few MiB the kernel throttles a writer in steps too coarse to keep the disk busy.
    pub const FLOOR: u64 = 4 << 20;

    pub fn bytes(&self, bandwidth: f64) -> Option<u64> {
        match self {
            MaxDirty::Off => None,
            MaxDirty::Seconds(s) => Some(((s * bandwidth) as u64).max(Self::FLOOR)),
            MaxDirty::Bytes(b) => Some(*b),
        }
    }
}

impl Serialize for MaxDirty {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MaxDirty::Off => s.serialize_str("off"),
            MaxDirty::Seconds(secs) => s.serialize_str(&format!("{secs}s")),
            MaxDirty::Bytes(b) => s.serialize_str(&format!("{b}B")),
        }
    }
}

/// iocost on a disk: a cost model of the disk plus per-cgroup weights. Restricting an offender
/// by weight instead of an `io.max` limit is work-conserving (the offender gets whatever nobody
/// else asks for) and shorter pauses others see on 6.12 (docs/bench/candidates-6.12.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Iocost {
    /// Turn iocost on for the disk while a restriction there holds (a linear model from the
    /// disk's speed), unless someone else set iocost up on it: then use theirs as it is. Not on
    /// systemd hosts, where a copy held by IOWeight=1 paused a committing service about twice as
    /// long in total as IOWriteBandwidthMax= did, across slices and inside one alike (e2e,
    /// docs/bench/systemd-iocost.md).
    Auto,
    /// As `Auto`, on systemd hosts too.
    On,
    /// Use iocost only where someone else turned it on; otherwise `io.max`.
    Off,
}

/// Prometheus metrics: off unless one of these is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// A loopback address to serve `/metrics` on, e.g. `127.0.0.1:9814`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,
    /// A file for node_exporter's textfile collector, rewritten every tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub textfile: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Config {
    pub daemon: DaemonConfig,
    pub exclude: Exclude,
    pub metrics: Metrics,
    /// `[device.default]` merged over the built-in defaults.
    #[serde(rename = "device_default")]
    pub default_device: DevicePolicy,
    /// Per-device sections, keyed as written (`/dev/vdb`, `vdb` or `254:16`).
    pub devices: Vec<(String, DevicePolicy)>,
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// The drop-in files applied after it, in order.
    #[serde(skip)]
    pub drop_ins: Vec<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            daemon: DaemonConfig {
                tick: Duration::from_secs(1),
                tau: Duration::from_secs(8),
                parent_factor: 0.7,
                action: ActionKind::Auto,
                state_file: PathBuf::from("/run/ioshield/state.json"),
                speeds_file: PathBuf::from("/var/lib/ioshield/disks.json"),
                socket: PathBuf::from("/run/ioshield/ioshield.sock"),
                session_leaders: false,
                refresh_dirty_counts: RefreshDirtyCounts::Auto,
            },
            exclude: Exclude::default(),
            metrics: Metrics::default(),
            default_device: DevicePolicy {
                bandwidth: Bandwidth::Auto,
                restrict_at: 0.7,
                release_at: 0.2,
                hold: Duration::from_secs(10),
                max_flush_seconds: 1.0,
                burst_seconds: 0.25,
                action: ActionKind::Auto,
                limit: 0.75,
                memory_high: MemoryHigh::Auto,
                iocost: Iocost::Auto,
                max_dirty: MaxDirty::Off,
            },
            devices: Vec::new(),
            source: None,
            drop_ins: Vec::new(),
        }
    }
}

impl Config {
    /// `path` given: it must exist. Not given: the default path if it exists, else defaults.
    /// Either way the drop-in directory `PATH.d/` follows, if it exists.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let main = match path {
            Some(p) => Some(p),
            None => Some(Path::new(DEFAULT_PATH)).filter(|p| p.exists()),
        };
        file::load(main, &drop_in_dir(path.unwrap_or(Path::new(DEFAULT_PATH))))
    }

    /// Where the configuration came from, for people: the main file and its drop-ins.
    pub fn origin(&self) -> String {
        let mut files: Vec<String> = self
            .source
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        files.extend(self.drop_ins.iter().map(|p| p.display().to_string()));
        if files.is_empty() {
            "built-in defaults".into()
        } else {
            files.join(", ")
        }
    }

    /// The policy for a device section key, or the default policy.
    pub fn policy_for(&self, key: Option<&str>) -> &DevicePolicy {
        key.and_then(|k| self.devices.iter().find(|(n, _)| n == k).map(|(_, p)| p))
            .unwrap_or(&self.default_device)
    }

    /// The effective configuration as TOML, for `check-config`.
    pub fn to_toml(&self) -> String {
        #[derive(Serialize)]
        struct View<'a> {
            daemon: &'a DaemonConfig,
            exclude: &'a Exclude,
            metrics: &'a Metrics,
            device: std::collections::BTreeMap<&'a str, &'a DevicePolicy>,
        }
        let mut device = std::collections::BTreeMap::new();
        device.insert("default", &self.default_device);
        for (k, p) in &self.devices {
            device.insert(k.as_str(), p);
        }
        toml::to_string(&View {
            daemon: &self.daemon,
            exclude: &self.exclude,
            metrics: &self.metrics,
            device,
        })
        .unwrap_or_else(|e| format!("# cannot show the configuration: {e}\n"))
    }
}
