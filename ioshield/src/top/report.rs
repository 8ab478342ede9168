//! Turns one sample into the rows `top` shows; also the `--json` interface scripts rely on.
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::{
    model::{
        sample::{Lost, Sample},
        tree::ProcessTree,
    },
    probe::{Features, Probe, ProgramCost},
    system::{
        cgroups,
        devices::{self, DevId, Disk},
        procfs,
        vmstat::DirtyState,
    },
};

#[derive(Debug, Serialize)]
pub struct Report {
    /// When the window ended, RFC 3339 in UTC (`2026-11-22T20:31:07Z`).
    pub time: String,
    pub interval_secs: f64,
    pub processes: Vec<ProcessRow>,
    pub devices: Vec<DeviceRow>,
    pub dirty: DirtyState,
    pub probe: ProbeInfo,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    /// The full command line (`comm` when the process has none or is gone).
    pub cmdline: String,
    /// The innermost systemd service or scope the process is in, else its cgroup path.
    pub unit: Option<String>,
    pub user: String,
    pub uid: Option<u32>,
    /// `/dev/vda`, or `major:minor` for a device without a node.
    pub device: String,
    pub dev: DevId,
    pub dirty_bytes_per_sec: f64,
    /// The process and all its descendants, including those that exited in the window.
    pub tree_dirty_bytes_per_sec: f64,
    pub throttled_ms_per_sec: f64,
    /// Files it wrote from their first page: many small ones mark an untar or a checkout.
    pub files_per_sec: f64,
    pub exited: bool,
}

#[derive(Debug, Serialize)]
pub struct DeviceRow {
    pub device: String,
    pub dev: DevId,
    /// What the disk itself wrote (/proc/diskstats).
    pub write_bytes_per_sec: f64,
    /// What processes dirtied in the page cache for it (the BPF counters).
    pub dirty_bytes_per_sec: f64,
}

#[derive(Debug, Serialize)]
pub struct ProbeInfo {
    pub features: Features,
    pub lost: Lost,
    pub programs: Vec<ProgramCost>,
}

/// Where a person would look for the process: its unit on a systemd host, else its cgroup.
fn place_of(pid: u32) -> Option<String> {
    let cgroup = cgroups::of_process(pid)?;
    Some(cgroups::innermost_unit(&cgroup).unwrap_or_else(|| cgroup.display().to_string()))
}

impl Report {
    pub fn build(sample: &Sample, tree: &mut ProcessTree, probe: &Probe) -> Report {
        let secs = sample.elapsed.as_secs_f64();
        // Per disk: each process's own dirty rate, throttle rate and files written.
        type PerPid = HashMap<u32, f64>;
        let mut per_disk: BTreeMap<Disk, (PerPid, PerPid, PerPid)> = BTreeMap::new();
        for ((pid, disk), delta) in &sample.writes {
            tree.ensure(*pid);
            let (own, throttle, files) = per_disk.entry(disk.clone()).or_default();
            *own.entry(*pid).or_default() += delta.dirtied_bytes as f64 / secs;
            *throttle.entry(*pid).or_default() += delta.throttle_ms as f64 / secs;
            *files.entry(*pid).or_default() += delta.files_started as f64 / secs;
        }

        let mut processes = Vec::new();
        let mut devices = Vec::new();
        for (disk, (own, throttle, files)) in &per_disk {
            let totals = tree.subtree_totals(own, 1.0);
            let mut pids: Vec<u32> = totals.keys().copied().collect();
            pids.extend(throttle.keys());
            pids.sort_unstable();
            pids.dedup();
            for pid in pids {
                let node = tree.get(pid);
                let uid = node.and_then(|n| n.uid);
                let comm = node.map_or_else(|| "?".into(), |n| n.comm.clone());
                let alive = node.is_some_and(|n| !n.exited);
                let (cmdline, unit) = if alive {
                    (procfs::cmdline(pid), place_of(pid))
                } else {
                    (None, None)
                };
                processes.push(ProcessRow {
                    pid,
                    ppid: node.map_or(0, |n| n.ppid),
                    cmdline: cmdline.unwrap_or_else(|| comm.clone()),
                    unit,
                    comm,
                    user: uid.map_or_else(|| "?".into(), procfs::user_name),
                    uid,
                    device: disk.label(),
                    dev: disk.id,
                    dirty_bytes_per_sec: own.get(&pid).copied().unwrap_or(0.0),
                    tree_dirty_bytes_per_sec: totals.get(&pid).copied().unwrap_or(0.0),
                    throttled_ms_per_sec: throttle.get(&pid).copied().unwrap_or(0.0),
                    files_per_sec: files.get(&pid).copied().unwrap_or(0.0),
                    exited: node.is_none_or(|n| n.exited),
                });
            }
            devices.push(DeviceRow {
                device: disk.label(),
                dev: disk.id,
                write_bytes_per_sec: sample.disks.get(&disk.id).map_or(0, |d| d.written) as f64
                    / secs,
                dirty_bytes_per_sec: own.values().sum(),
            });
        }
        // Disks that wrote without anyone dirtying pages in the window (e.g. flushing a backlog).
        for (dev, delta) in &sample.disks {
            let bytes = delta.written;
            if bytes == 0 || devices.iter().any(|d| d.dev == *dev) {
                continue;
            }
            let disk = Disk {
                id: *dev,
                name: None,
            };
            if let Some(name) = devices::whole_disk_name(*dev) {
                devices.push(DeviceRow {
                    device: Disk {
                        name: Some(name),
                        ..disk
                    }
                    .label(),
                    dev: *dev,
                    write_bytes_per_sec: bytes as f64 / secs,
                    dirty_bytes_per_sec: 0.0,
                });
            }
        }
        processes.sort_by(|a, b| {
            b.dirty_bytes_per_sec
                .total_cmp(&a.dirty_bytes_per_sec)
                .then(
                    b.tree_dirty_bytes_per_sec
                        .total_cmp(&a.tree_dirty_bytes_per_sec),
                )
                .then(b.throttled_ms_per_sec.total_cmp(&a.throttled_ms_per_sec))
                .then(a.pid.cmp(&b.pid))
        });
        devices.sort_by(|a, b| a.device.cmp(&b.device));
        Report {
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            interval_secs: secs,
            processes,
            devices,
            dirty: sample.dirty,
            probe: ProbeInfo {
                features: probe.features().clone(),
                lost: sample.lost,
                programs: probe.program_costs(),
            },
        }
    }
}
