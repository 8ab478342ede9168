//! `ioshield explain PID`: for one process, from the running daemon's last tick and from /proc:
//! how much it and its subtree dirty against the disk's threshold, whether it may be chosen and
//! why not, where it lives and what restricting it would do, and whether it is restricted now.
use std::{collections::HashSet, fmt::Write as _, path::Path};

use anyhow::Result;

use crate::{
    act::placement::{self, Placement},
    daemon::status::{self, Status},
    display::{printable, show_rate},
    output,
    system::{cgroups, host, procfs},
};

pub fn run(pid: u32, socket: &Path) -> Result<()> {
    let status = status::query(socket)?;
    output::print(&explain(pid, &status))
}

fn explain(pid: u32, s: &Status) -> String {
    let mut out = String::new();
    let Some(info) = procfs::read(pid) else {
        let _ = writeln!(out, "pid {pid}: no such process now");
        return with_decisions(out, pid, s);
    };
    let _ = writeln!(
        out,
        "pid {pid} ({}), parent {}, session {}{}",
        printable(&info.comm),
        info.ppid,
        info.session,
        if info.session == pid {
            " (it leads its session: judged by what it writes itself, never its children)"
        } else {
            ""
        }
    );
    let mut seen = false;
    for d in &s.devices {
        if let Some(w) = d.writers.iter().find(|w| w.pid == pid) {
            seen = true;
            let _ = writeln!(
                out,
                "on {}: dirties {} itself, its subtree scores {}; restricted above {} \
                 ({} of the disk's {}, {})",
                d.device,
                show_rate(w.own_bytes_per_sec),
                show_rate(w.subtree_bytes_per_sec),
                show_rate(d.restrict_at_bytes_per_sec),
                if d.bandwidth_bytes_per_sec > 0.0 {
                    format!(
                        "{:.0}%",
                        d.restrict_at_bytes_per_sec / d.bandwidth_bytes_per_sec * 100.0
                    )
                } else {
                    "?".into()
                },
                show_rate(d.bandwidth_bytes_per_sec),
                d.bandwidth_source
            );
            let _ = writeln!(
                out,
                "  may be chosen: {}",
                w.not_choosable
                    .as_deref()
                    .map_or("yes".to_string(), |why| format!("no, {why}"))
            );
        }
        if let Some(o) = d.offender.as_ref().filter(|o| o.pid == pid) {
            let _ = writeln!(
                out,
                "  restricted now on {} for {:.0} s: {}",
                d.device, o.restricted_for_secs, o.action
            );
            if let Some(r) = o.releasing_for_secs {
                let _ = writeln!(
                    out,
                    "  due for release for {r:.0} s: held until the backlog its writers left is \
                     written"
                );
            }
        }
    }
    if !seen {
        let _ = writeln!(
            out,
            "not among the busiest writers of any disk at the daemon's last tick"
        );
    }
    match cgroups::of_process(pid) {
        Some(cg) => {
            let _ = writeln!(out, "lives in cgroup {}", cg.display());
            if host::systemd_booted() {
                let mount = cgroups::v2_mount();
                let unit_pids = mount
                    .map(|m| cgroups::procs_below(&m.join(cg.strip_prefix("/").unwrap_or(&cg))))
                    .unwrap_or_default();
                let members: HashSet<u32> = std::iter::once(pid).collect();
                let ancestors: HashSet<u32> = procfs::ancestors(pid).collect();
                let would = match placement::place(&cg, &unit_pids, &members, &ancestors) {
                    Placement::InPlace { unit, user, others } if others.is_empty() => format!(
                        "limits set on {unit} itself through {}, nothing moved (every process \
                         of the unit is its own or one it was started by)",
                        manager_name(user)
                    ),
                    Placement::InPlace { unit, user, others } => format!(
                        "limits set on {unit} itself through {}, nothing moved; its other \
                         processes {others:?} (the service's other workers) held with it",
                        manager_name(user)
                    ),
                    Placement::Spare {
                        unit,
                        slice,
                        user,
                        others,
                    } => format!(
                        "limits set on {unit} itself through {}, then its other processes \
                         {others:?} (neither its own nor ones it was started by; the heads of \
                         their trees) moved aside into a scope of their own in {slice}, bound \
                         to {unit}",
                        manager_name(user)
                    ),
                    Placement::Foreign { why } => {
                        format!("no cgroup limits, the idle I/O class instead: {why}")
                    }
                };
                let _ = writeln!(out, "a restriction would put: {would}");
            }
        }
        None => {
            let _ = writeln!(out, "its cgroup cannot be read");
        }
    }
    with_decisions(out, pid, s)
}

fn manager_name(user: Option<u32>) -> String {
    user.map_or("systemd".into(), |uid| format!("user {uid}'s systemd"))
}

fn with_decisions(mut out: String, pid: u32, s: &Status) -> String {
    let needle = format!("pid {pid} ");
    let mine: Vec<_> = s
        .recent_decisions
        .iter()
        .filter(|d| d.message.contains(&needle))
        .collect();
    if mine.is_empty() {
        let _ = writeln!(out, "no recent decision about it");
    } else {
        let _ = writeln!(out, "recent decisions about it:");
        for d in mine {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(d.at.max(0.0));
            let _ = writeln!(
                out,
                "  {} {}",
                humantime::format_rfc3339_seconds(at),
                d.message
            );
        }
    }
    out
}
