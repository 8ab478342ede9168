//! What `ioshield status` shows: a snapshot the engine refreshes every tick, served as one JSON
//! document per connection on a root-only Unix socket.
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};
use tokio::{io::AsyncWriteExt as _, net::UnixListener, sync::watch};

use super::{disk::DiskRuntime, serve};
use crate::{
    act::{CgroupAction, Method},
    config::Config,
    system::devices::Disk,
};
use std::time::Instant;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    pub uptime_secs: f64,
    pub config: Option<String>,
    /// Which tracepoints and modes the probe uses on this kernel.
    pub features: serde_json::Value,
    pub cgroup_action: String,
    pub devices: Vec<DeviceStatus>,
    /// Most recent first.
    pub recent_decisions: Vec<DecisionRecord>,
    /// Changes whose undo failed and is being retried.
    #[serde(default)]
    pub pending_undos: usize,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DeviceStatus {
    pub device: String,
    pub dev: String,
    pub bandwidth_bytes_per_sec: f64,
    pub bandwidth_source: String,
    pub action: Option<String>,
    pub offender: Option<OffenderStatus>,
    /// Rate above which the top subtree is restricted (`restrict_at` x bandwidth).
    #[serde(default)]
    pub restrict_at_bytes_per_sec: f64,
    /// The busiest writers at the last tick, busiest subtree first.
    #[serde(default)]
    pub writers: Vec<WriterStatus>,
    /// Restrictions whose processes are gone, kept until the backlog they left is written.
    #[serde(default)]
    pub draining: Vec<DrainingStatus>,
}

/// A restriction whose processes are all gone, kept at its limits until the backlog they left
/// is written, while the disk's next writer may be held.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DrainingStatus {
    pub pid: u32,
    pub comm: String,
    #[serde(default)]
    pub place: Option<String>,
    /// Since its release was due.
    pub waiting_for_secs: f64,
}

/// One writer on one disk as the daemon judged it at the last tick.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WriterStatus {
    pub pid: u32,
    pub comm: String,
    /// Its own smoothed dirty rate.
    pub own_bytes_per_sec: f64,
    /// Its subtree's score (own + parent_factor x children's).
    pub subtree_bytes_per_sec: f64,
    /// Why it may not be chosen, if it may not.
    #[serde(default)]
    pub not_choosable: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OffenderStatus {
    pub pid: u32,
    pub comm: String,
    pub restricted_for_secs: f64,
    pub action: String,
    /// The systemd unit (or ioshield's cgroup) holding the limits.
    #[serde(default)]
    pub place: Option<String>,
    /// Due for release and held until the backlog its writers left is written, this long so far.
    #[serde(default)]
    pub releasing_for_secs: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Seconds since the Unix epoch.
    pub at: f64,
    pub message: String,
}

/// The engine's state as `ioshield status` shows it.
pub fn snapshot<'a>(
    disks: impl Iterator<Item = (&'a Disk, &'a DiskRuntime)>,
    started: Instant,
    config: &Config,
    cgroup_action: &Result<CgroupAction, String>,
    recent_decisions: Vec<DecisionRecord>,
    pending_undos: usize,
    features: serde_json::Value,
) -> Status {
    let now = Instant::now();
    let mut devices: Vec<DeviceStatus> = disks
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
                place: o.place.clone(),
                releasing_for_secs: rt.drain.map(|d| now.duration_since(d.since).as_secs_f64()),
            }),
            restrict_at_bytes_per_sec: rt.bandwidth.map_or(0.0, |b| b.bytes_per_sec)
                * config.policy_for(None).restrict_at,
            writers: rt.writers.clone(),
            draining: rt
                .draining
                .iter()
                .map(|d| DrainingStatus {
                    pid: d.root,
                    comm: d.comm.clone(),
                    place: d.place.clone(),
                    waiting_for_secs: now.duration_since(d.drain.since).as_secs_f64(),
                })
                .collect(),
        })
        .collect();
    devices.sort_by(|a, b| a.device.cmp(&b.device));
    Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        uptime_secs: now.duration_since(started).as_secs_f64(),
        config: Some(config.origin()),
        features,
        cgroup_action: describe_cgroup_action(cgroup_action),
        devices,
        recent_decisions,
        pending_undos,
    }
}

pub fn describe_cgroup_action(how: &Result<CgroupAction, String>) -> String {
    match how {
        Ok(CgroupAction::Cgroupfs(fs)) => format!("available at {}", fs.root.display()),
        Ok(CgroupAction::Systemd(_)) => "through systemd, on the offender's own unit".to_string(),
        Err(why) => format!("unavailable: {why}"),
    }
}

/// Serves the latest snapshot to every client; the socket is 0600 so only root can read it.
pub struct StatusServer {
    path: PathBuf,
}

impl StatusServer {
    pub fn start(path: &Path, snapshots: watch::Receiver<Arc<String>>) -> Result<StatusServer> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // A socket left by a killed instance would make bind fail.
        let _ = std::fs::remove_file(path);
        let listener =
            UnixListener::bind(path).with_context(|| format!("listening on {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making {} root-only", path.display()))?;
        serve::spawn(
            format!("status socket {}", path.display()),
            listener,
            move |mut stream| {
                let doc = snapshots.borrow().clone();
                async move {
                    let _ = stream.write_all(doc.as_bytes()).await;
                    let _ = stream.shutdown().await;
                }
            },
        );
        Ok(StatusServer {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `ioshield status`: asks the running daemon.
/// No daemon answers on the socket (exit status 3, as `systemctl status` gives).
#[derive(Debug)]
pub struct NotRunning(pub String);

impl std::fmt::Display for NotRunning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRunning {}

pub fn query(socket: &Path) -> Result<Status> {
    use std::io::Read as _;
    let mut stream = match std::os::unix::net::UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(NotRunning(format!(
                "the daemon is not running (nothing answers on {}: {e})",
                socket.display()
            ))
            .into());
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "cannot reach the daemon at {} (are you root?)",
                    socket.display()
                )
            });
        }
    };
    // A daemon that accepts but never answers must not hang the caller.
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .with_context(|| format!("reading the daemon's answer on {}", socket.display()))?;
    serde_json::from_str(&text).context("the daemon's answer is not a status document")
}

pub fn render(s: &Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let now = std::time::SystemTime::now();
    let started = now - std::time::Duration::from_secs_f64(s.uptime_secs.max(0.0));
    let _ = writeln!(
        out,
        "ioshield {} (pid {}), active since {}; {} ago",
        s.version,
        s.pid,
        humantime::format_rfc3339_seconds(started),
        ago(s.uptime_secs)
    );
    let _ = writeln!(
        out,
        "config: {}",
        s.config.as_deref().unwrap_or("built-in defaults")
    );
    let _ = writeln!(out, "probe: {}", features_in_words(&s.features));
    let _ = writeln!(out, "cgroup action: {}", s.cgroup_action);
    if s.pending_undos > 0 {
        let _ = writeln!(
            out,
            "undo pending: {} changes could not be undone yet and are being retried",
            s.pending_undos
        );
    }
    for d in &s.devices {
        let _ = writeln!(
            out,
            "{} ({}): bandwidth {:.1} MB/s ({}), action {}",
            d.device,
            d.dev,
            d.bandwidth_bytes_per_sec / 1e6,
            d.bandwidth_source,
            d.action.as_deref().unwrap_or("not chosen yet")
        );
        match &d.offender {
            Some(o) => {
                let _ = writeln!(
                    out,
                    "  restricted: pid {} ({}){} for {}: {}",
                    o.pid,
                    crate::display::printable(&o.comm),
                    in_place(o.place.as_deref()),
                    ago(o.restricted_for_secs),
                    o.action
                );
                if let Some(r) = o.releasing_for_secs {
                    let _ = writeln!(
                        out,
                        "  due for release {} ago, held until the backlog its writers left is \
                         written",
                        ago(r)
                    );
                }
            }
            None => {
                let _ = writeln!(out, "  no offender");
            }
        }
        for w in &d.draining {
            let _ = writeln!(
                out,
                "  gone, held until the backlog it left is written: pid {} ({}){}, for {}",
                w.pid,
                crate::display::printable(&w.comm),
                in_place(w.place.as_deref()),
                ago(w.waiting_for_secs)
            );
        }
    }
    if !s.recent_decisions.is_empty() {
        let _ = writeln!(out, "recent decisions:");
        for r in &s.recent_decisions {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(r.at.max(0.0));
            let age = now.duration_since(at).map_or(0.0, |d| d.as_secs_f64());
            let _ = writeln!(
                out,
                "  {} ({} ago) {}",
                humantime::format_rfc3339_seconds(at),
                ago(age),
                r.message
            );
        }
    }
    out
}

/// ` in PLACE` for a restriction's unit or cgroup, nothing without one.
fn in_place(place: Option<&str>) -> String {
    place.map_or(String::new(), |p| {
        format!(" in {}", crate::display::printable(p))
    })
}

/// `1h 2min`, `45s`: whole seconds, as a person reads an age.
fn ago(secs: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs.max(0.0) as u64)).to_string()
}

/// The probe's features as a sentence instead of raw JSON.
fn features_in_words(f: &serde_json::Value) -> String {
    let tracepoint = f["dirty_tracepoint"].as_str().unwrap_or("?");
    let how = match f["dirty_mode"].as_str() {
        Some("folio-bytes") => format!("dirtied bytes per folio ({tracepoint})"),
        Some("page-events") => {
            format!("one page per dirty event ({tracepoint}; large folios undercounted)")
        }
        _ => format!("dirtied pages ({tracepoint})"),
    };
    let throttle = if f["throttle"].as_bool() == Some(true) {
        "throttling measured"
    } else {
        "throttling not measured"
    };
    let lifecycle = if f["lifecycle"].as_bool() == Some(true) {
        "processes followed from kernel events"
    } else {
        "processes rescanned from /proc each tick"
    };
    format!("{how}, {throttle}, {lifecycle}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restriction held past its release for its writers' backlog says so in `status`.
    #[test]
    fn a_release_waiting_for_the_backlog_is_shown() {
        let offender = OffenderStatus {
            pid: 140,
            comm: "cp".into(),
            restricted_for_secs: 30.0,
            action: "io.weight=1".into(),
            place: None,
            releasing_for_secs: None,
        };
        let mut s = Status {
            devices: vec![DeviceStatus {
                device: "/dev/vda".into(),
                offender: Some(offender),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = render(&s);
        assert!(text.contains("restricted: pid 140 (cp) for 30s"), "{text}");
        assert!(!text.contains("due for release"), "{text}");
        s.devices[0].offender.as_mut().unwrap().releasing_for_secs = Some(4.2);
        let text = render(&s);
        assert!(
            text.contains("due for release 4s ago, held until the backlog its writers left"),
            "{text}"
        );
        // Its processes gone, it waits apart while the disk holds its next writer.
        s.devices[0].offender = None;
        s.devices[0].draining.push(DrainingStatus {
            pid: 140,
            comm: "cp".into(),
            place: Some("/ioshield.slice/r3".into()),
            waiting_for_secs: 7.9,
        });
        let text = render(&s);
        assert!(
            text.contains(
                "gone, held until the backlog it left is written: pid 140 (cp) in \
                 /ioshield.slice/r3, for 7s"
            ),
            "{text}"
        );
    }
}
