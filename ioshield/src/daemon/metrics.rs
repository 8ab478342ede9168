//! Prometheus metrics (off unless configured): served on a loopback address and/or written to a
//! textfile for node_exporter. Per device and per action, never per pid (unbounded labels).
use std::{
    path::{Path, PathBuf},
    sync::{Arc, atomic::AtomicU64},
};

use super::{classic, serve};
use crate::{model::sample::Sample, system::devices::Disk};
use anyhow::{Context as _, Result};
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
    sync::watch,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabel {
    /// The kernel's name (`sda`), as node_exporter labels disks, so the two join.
    pub device: String,
}

impl DeviceLabel {
    fn of(disk: &Disk) -> Self {
        DeviceLabel {
            device: disk.name.clone().unwrap_or_else(|| disk.label()),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    /// restrict | release
    pub action: String,
    /// cgroup | ioprio | dry-run
    pub method: String,
    /// ok | error
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    /// cgroup | ioprio | dry-run
    pub method: String,
}

/// 10 ms to 5.12 s: a restriction on cgroupfs takes tens of ms, one through systemd up to
/// seconds (a user's systemd reached for the first time, a busy disk's queue freeze).
fn restrict_seconds_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 10))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProgramLabel {
    pub program: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LostLabel {
    pub kind: String,
}

type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

pub struct Metrics {
    registry: Registry,
    pub dirtied_bytes: Family<DeviceLabel, Counter>,
    pub throttled_seconds: Family<DeviceLabel, FloatCounter>,
    pub offenders: Family<DeviceLabel, Gauge>,
    pub draining: Family<DeviceLabel, Gauge>,
    pub iocost: Family<DeviceLabel, Gauge>,
    pub bandwidth: Family<DeviceLabel, FloatGauge>,
    pub backlog_guard: Family<DeviceLabel, Gauge>,
    pub actions: Family<ActionLabel, Counter>,
    pub restrict_seconds: Family<MethodLabel, Histogram, fn() -> Histogram>,
    pub undone_changes: Counter,
    pub pending_undos: Gauge,
    pub lost: Family<LostLabel, Counter>,
    pub bursts: Family<DeviceLabel, Counter>,
    pub long_commits: Family<DeviceLabel, Counter>,
    pub journal_logged: Family<DeviceLabel, Counter>,
    pub program_runs: Family<ProgramLabel, Counter>,
    pub program_seconds: Family<ProgramLabel, FloatCounter>,
    /// Last totals read from the kernel, to turn them into counter increments.
    program_totals: std::collections::HashMap<String, (u64, u64)>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("ioshield");
        let m = Metrics {
            dirtied_bytes: Family::default(),
            throttled_seconds: Family::default(),
            offenders: Family::default(),
            draining: Family::default(),
            iocost: Family::default(),
            bandwidth: Family::default(),
            backlog_guard: Family::default(),
            actions: Family::default(),
            restrict_seconds: Family::new_with_constructor(restrict_seconds_buckets),
            undone_changes: Counter::default(),
            pending_undos: Gauge::default(),
            lost: Family::default(),
            bursts: Family::default(),
            long_commits: Family::default(),
            journal_logged: Family::default(),
            program_runs: Family::default(),
            program_seconds: Family::default(),
            program_totals: std::collections::HashMap::new(),
            registry: Registry::default(),
        };
        registry.register(
            "dirtied_bytes",
            "Bytes of page cache dirtied by processes, per disk",
            m.dirtied_bytes.clone(),
        );
        registry.register(
            "throttled_seconds",
            "Time writers were paused by balance_dirty_pages, per disk",
            m.throttled_seconds.clone(),
        );
        registry.register(
            "backlog_guard_bytes",
            "The cap on the disk's dirty data ioshield's backlog guard (max_dirty) holds, 0 \
             without one",
            m.backlog_guard.clone(),
        );
        registry.register(
            "offenders",
            "Process subtrees currently restricted, per disk",
            m.offenders.clone(),
        );
        registry.register(
            "draining",
            "Restrictions whose processes are gone, kept until the backlog they left is \
             written while the disk's next writer may be restricted, per disk",
            m.draining.clone(),
        );
        registry.register(
            "iocost",
            "1 while the disk's restricted offender is held by iocost weight (io.weight 1, 10 \
             for a writer that dirties less than its held rate) instead of a write limit",
            m.iocost.clone(),
        );
        registry.register(
            "bandwidth_bytes_per_second",
            "Write bandwidth the disk's writers are judged against",
            m.bandwidth.clone(),
        );
        registry.register(
            "actions",
            "Restrictions and releases, by method and result",
            m.actions.clone(),
        );
        registry.register(
            "restrict_seconds",
            "Time from the decision to restrict to the offender held, by method: what the \
             offender dirtied meanwhile is backlog the others wait for",
            m.restrict_seconds.clone(),
        );
        registry.register(
            "undone_changes",
            "Changes undone on release: thread I/O priorities restored, processes moved back, \
             systemd scope members whose limits were lifted",
            m.undone_changes.clone(),
        );
        registry.register(
            "pending_undos",
            "Changes whose undo failed and is being retried",
            m.pending_undos.clone(),
        );
        registry.register(
            "lost_events",
            "Kernel-side events lost (full maps, ring buffer overflow, failed reads)",
            m.lost.clone(),
        );
        registry.register(
            "bursts",
            "Kernel reports of a process dirtying faster than the disk writes, per disk",
            m.bursts.clone(),
        );
        registry.register(
            "long_journal_commits",
            "Journal commits (ext4) of 120 ms or more, per disk: every fsync on the filesystem \
             waited for each",
            m.long_commits.clone(),
        );
        registry.register(
            "journal_logged_bytes",
            "Bytes the filesystems' journals (ext4) logged, per disk: written, never dirtied, \
             so not taken for a backlog written",
            m.journal_logged.clone(),
        );
        registry.register(
            "bpf_program_runs",
            "Runs of each BPF program (counted while kernel.bpf_stats_enabled=1)",
            m.program_runs.clone(),
        );
        registry.register(
            "bpf_program_run_seconds",
            "Time spent in each BPF program (counted while kernel.bpf_stats_enabled=1)",
            m.program_seconds.clone(),
        );
        // A gauge of 1, not an OpenMetrics info: the classic format has no info type.
        let build = Family::<VersionLabel, Gauge>::default();
        build
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .set(1);
        registry.register("build_info", "ioshield's version", build);
        Metrics { registry, ..m }
    }

    /// One restriction or release and whether it worked.
    pub fn action(&self, action: &str, method: &str, ok: bool) {
        self.actions
            .get_or_create(&ActionLabel {
                action: action.into(),
                method: method.into(),
                result: if ok { "ok" } else { "error" }.into(),
            })
            .inc();
    }

    /// How long a restriction that worked took to put in place.
    pub fn restricted(&self, method: &str, took: std::time::Duration) {
        self.restrict_seconds
            .get_or_create(&MethodLabel {
                method: method.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// What one sample adds: bytes dirtied and time throttled per disk, and lost events.
    pub fn sample(&self, sample: &Sample) {
        let lost = sample.lost;
        for (kind, n) in [
            ("counter_map_full", lost.counter_map_full),
            ("lifecycle_dropped", lost.lifecycle_events_dropped),
            ("burst_dropped", lost.bursts_dropped),
            ("kernel_read_failed", lost.kernel_reads_failed),
        ] {
            self.lost
                .get_or_create(&LostLabel { kind: kind.into() })
                .inc_by(n);
        }
        for ((_, disk), delta) in &sample.writes {
            let label = DeviceLabel::of(disk);
            self.dirtied_bytes
                .get_or_create(&label)
                .inc_by(delta.dirtied_bytes);
            self.throttled_seconds
                .get_or_create(&label)
                .inc_by(delta.throttle_ms as f64 / 1000.0);
        }
        for (disk, n) in sample.long_commits.iter().filter(|(d, _)| d.name.is_some()) {
            self.long_commits
                .get_or_create(&DeviceLabel::of(disk))
                .inc_by(*n);
        }
        for (disk, n) in sample
            .journal_logged
            .iter()
            .filter(|(d, _)| d.name.is_some())
        {
            self.journal_logged
                .get_or_create(&DeviceLabel::of(disk))
                .inc_by(*n);
        }
    }

    /// A kernel burst report on `disk`.
    pub fn burst(&self, disk: &Disk) {
        self.bursts.get_or_create(&DeviceLabel::of(disk)).inc();
    }

    /// A disk's current bandwidth and whether an offender is restricted on it.
    pub fn disk(
        &self,
        disk: &Disk,
        bandwidth: f64,
        restricted: bool,
        by_iocost: bool,
        draining: usize,
    ) {
        let label = DeviceLabel::of(disk);
        self.bandwidth.get_or_create(&label).set(bandwidth);
        self.offenders
            .get_or_create(&label)
            .set(i64::from(restricted));
        self.draining
            .get_or_create(&label)
            .set(i64::try_from(draining).unwrap_or(i64::MAX));
        self.iocost
            .get_or_create(&label)
            .set(i64::from(restricted && by_iocost));
    }

    pub fn backlog_guard(&self, disk: &Disk, bytes: u64) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.backlog_guard
            .get_or_create(&DeviceLabel::of(disk))
            .set(bytes);
    }

    /// Feeds the kernel's cumulative per-program run count and time.
    pub fn program_cost(&mut self, program: &str, runs: u64, run_ns: u64) {
        let (r0, t0) = self
            .program_totals
            .insert(program.to_string(), (runs, run_ns))
            .unwrap_or((0, 0));
        let label = ProgramLabel {
            program: program.to_string(),
        };
        self.program_runs
            .get_or_create(&label)
            .inc_by(runs.saturating_sub(r0));
        self.program_seconds
            .get_or_create(&label)
            .inc_by(run_ns.saturating_sub(t0) as f64 / 1e9);
    }

    /// The classic Prometheus text format (see [`classic`]), for the textfile and HTTP alike.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        classic::from_openmetrics(&out)
    }
}

/// Serves the latest rendering over plain HTTP on a loopback address. Any request gets it:
/// the daemon serves nothing else.
pub async fn serve(addr: std::net::SocketAddr, text: watch::Receiver<Arc<String>>) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("metrics: listening on {addr}"))?;
    serve::spawn(format!("metrics on {addr}"), listener, move |mut stream| {
        let body = text.borrow().clone();
        async move {
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                classic::CONTENT_TYPE,
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    Ok(())
}

/// Writes the textfile atomically, so node_exporter never reads half of it.
pub fn write_textfile(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp: PathBuf = path.with_extension("prom.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        let m = Metrics::new();
        m.dirtied_bytes
            .get_or_create(&DeviceLabel::of(&Disk {
                id: Default::default(),
                name: Some("vdb".into()),
            }))
            .inc_by(4096);
        m.disk(
            &Disk {
                id: Default::default(),
                name: Some("vdb".into()),
            },
            30e6,
            true,
            true,
            1,
        );
        m.backlog_guard(
            &Disk {
                id: Default::default(),
                name: Some("vdb".into()),
            },
            7_500_000,
        );
        m.actions
            .get_or_create(&ActionLabel {
                action: "restrict".into(),
                method: "cgroup".into(),
                result: "ok".into(),
            })
            .inc();
        m.restricted("cgroup", std::time::Duration::from_millis(62));
        let text = m.render();
        assert!(
            text.contains("ioshield_dirtied_bytes_total{device=\"vdb\"} 4096"),
            "{text}"
        );
        assert!(
            text.contains("ioshield_draining{device=\"vdb\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE ioshield_restrict_seconds histogram\n"),
            "{text}"
        );
        for line in [
            "ioshield_restrict_seconds_bucket{le=\"0.04\",method=\"cgroup\"} 0\n",
            "ioshield_restrict_seconds_bucket{le=\"0.08\",method=\"cgroup\"} 1\n",
            "ioshield_restrict_seconds_count{method=\"cgroup\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.contains(
            "ioshield_actions_total{action=\"restrict\",method=\"cgroup\",result=\"ok\"} 1"
        ));
        assert!(text.contains("# TYPE ioshield_build_info gauge"), "{text}");
        assert!(
            text.contains(&format!(
                "ioshield_build_info{{version=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(
            text.contains("# TYPE ioshield_undone_changes_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("ioshield_iocost{device=\"vdb\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ioshield_backlog_guard_bytes{device=\"vdb\"} 7500000\n"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }
}
