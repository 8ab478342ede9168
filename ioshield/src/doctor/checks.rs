//! The checks behind `ioshield doctor`, each reading through `system` (and, for the BPF
//! programs and systemd, trying the real thing).
use super::Finding;
use crate::{
    act::{
        CgroupAction, WriteControl,
        cgroup::Cgroupfs,
        iocost,
        method::{method_for, write_control},
        systemd::Systemd,
    },
    config::{Config, Iocost, MaxDirty},
    detect::bandwidth::Estimate,
    probe::Probe,
    system::{bdi, cgroups, devices, host, kernel},
};

pub async fn all() -> Vec<Finding> {
    let mut out = vec![privileges(), btf()];
    out.extend(tracepoints());
    out.push(programs());
    out.extend(cgroup_v2());
    let systemd = Systemd::detect().await;
    out.push(manager(&systemd).await);
    out.extend(disks(&systemd));
    out
}

fn privileges() -> Finding {
    match kernel::privileges::require_bpf_privileges() {
        Ok(()) => Finding::ok(
            "privileges",
            "may load BPF programs (CAP_BPF and CAP_PERFMON, or root)",
        ),
        Err(e) => Finding::missing("privileges", format!("{e:#}")),
    }
}

fn btf() -> Finding {
    match kernel::btf::KernelBtf::load() {
        Ok(_) => Finding::ok(
            "BTF",
            "kernel type information: dirtied bytes counted per folio, processes followed from \
             fork/exit events",
        ),
        Err(e) => Finding::degraded(
            "BTF",
            format!(
                "{e:#}: one page counted per dirty event (large folios undercounted) and /proc \
                 rescanned each tick"
            ),
        ),
    }
}

fn tracepoints() -> Vec<Finding> {
    let tracefs = match kernel::tracefs::Tracefs::open() {
        Ok(t) => t,
        Err(e) => return vec![Finding::missing("tracefs", format!("{e:#}"))],
    };
    let mut out = Vec::new();
    match tracefs.first_of(
        "writeback",
        &["writeback_dirty_folio", "writeback_dirty_page"],
    ) {
        Some(tp) => out.push(Finding::ok(
            "tracepoint writeback dirty",
            format!("writeback:{tp}: who dirties pages, per disk"),
        )),
        None => out.push(Finding::missing(
            "tracepoint writeback dirty",
            "neither writeback_dirty_folio nor writeback_dirty_page: ioshield cannot see writers",
        )),
    }
    out.push(if tracefs.has("writeback", "balance_dirty_pages") {
        Finding::ok(
            "tracepoint balance_dirty_pages",
            "time the kernel throttles each writer",
        )
    } else {
        Finding::degraded(
            "tracepoint balance_dirty_pages",
            "missing: throttling is not measured (detection does not need it)",
        )
    });
    out
}

fn programs() -> Finding {
    match Probe::start() {
        Ok(p) => Finding::ok(
            "BPF programs",
            format!(
                "load and attach ({} mode)",
                match p.features().dirty_mode {
                    crate::probe::DirtyMode::FolioBytes => "folio bytes",
                    crate::probe::DirtyMode::PageEvents => "page events",
                }
            ),
        ),
        Err(e) => Finding::missing("BPF programs", format!("{e:#}")),
    }
}

fn cgroup_v2() -> Vec<Finding> {
    let Some(root) = cgroups::v2_mount() else {
        return vec![Finding::degraded(
            "cgroup v2",
            "not mounted: only the ioprio action, which does not slow buffered writeback",
        )];
    };
    let have = cgroups::controllers(&root);
    ["io", "memory"]
        .iter()
        .map(|c| {
            let what = format!("cgroup v2 {c} controller");
            if have.iter().any(|h| h == c) {
                Finding::ok(&what, format!("available at {}", root.display()))
            } else {
                Finding::degraded(
                    &what,
                    format!(
                        "not in {} (bound to cgroup v1?): {}",
                        root.join("cgroup.controllers").display(),
                        if *c == "io" {
                            "no write limits; ioprio instead, which does not slow writeback"
                        } else {
                            "no memory.high, so a restriction bites seconds later"
                        }
                    ),
                )
            }
        })
        .collect()
}

async fn manager(systemd: &Result<Systemd, String>) -> Finding {
    match systemd {
        Ok(s) => {
            let version = s.version().await.unwrap_or_else(|| "?".into());
            let users = match cgroups::user_manager_controllers() {
                None => "no user manager running to look at".to_string(),
                Some(c) if c.iter().any(|c| c == "io") => {
                    format!("user@.service delegates {} (io included)", c.join(" "))
                }
                Some(c) => format!(
                    "user@.service delegates {}, not io: writers in user units get ioprio only",
                    c.join(" ")
                ),
            };
            Finding::ok(
                "systemd",
                format!("version {version}, reached over D-Bus: limits go through it; {users}"),
            )
        }
        Err(why) if host::systemd_booted() => Finding::degraded("systemd", why.clone()),
        Err(_) => Finding::ok(
            "systemd",
            "not running this host: ioshield writes cgroupfs itself",
        ),
    }
}

fn disks(systemd: &Result<Systemd, String>) -> Vec<Finding> {
    let config = Config::load(None).unwrap_or_default();
    let action = match systemd {
        Ok(s) => Ok(CgroupAction::Systemd(s.hierarchy())),
        Err(s) => Cgroupfs::detect()
            .map(CgroupAction::Cgroupfs)
            .map_err(|c| if host::systemd_booted() { s.clone() } else { c }),
    };
    let mut found = devices::whole_disks();
    found.sort_by_key(|d| d.label());
    found
        .iter()
        .map(|disk| {
            let policy = config.policy_for(Some(&disk.label())).clone();
            let estimate = crate::detect::bandwidth::BandwidthEstimator::default()
                .estimate(disk.id, policy.bandwidth);
            let (method, note) = method_for(disk, &policy, estimate, &action);
            let knobs = match (bdi::has_byte_limits(disk.id), policy.max_dirty) {
                (true, MaxDirty::Off) => "per-BDI max_bytes/strict_limit available".to_string(),
                (true, max) => format!("backlog guard max_dirty = {}", show_max_dirty(max)),
                (false, MaxDirty::Off) => {
                    "per-BDI byte limits not available (kernel < 6.2)".to_string()
                }
                (false, max) => format!(
                    "max_dirty = {} cannot be applied: per-BDI byte limits need Linux 6.2",
                    show_max_dirty(max)
                ),
            };
            let iocost = match &action {
                Ok(how @ CgroupAction::Systemd(_))
                    if policy.iocost == Iocost::Auto
                        && how.iocost(disk.id) != iocost::State::Foreign =>
                {
                    ", IOWriteBandwidthMax= (iocost weight only with iocost = \"on\" on systemd \
                     hosts)"
                }
                Ok(how) => iocost_note(
                    how.iocost(disk.id),
                    how.iocost_allowed(policy.iocost),
                    devices::is_blk_mq(disk.id),
                ),
                Err(_) => "",
            };
            let what = format!("disk {}", disk.label());
            let what_it_does = note
                .map(|n| n.trim_start_matches("action auto: ").to_string())
                .unwrap_or_else(|| method.describe());
            let detail = format!("action auto: {what_it_does}{iocost}; {knobs}");
            let guard_refused = policy.max_dirty != MaxDirty::Off && !bdi::has_byte_limits(disk.id);
            if note_is_fallback(&method) || guard_refused {
                Finding::degraded(&what, detail)
            } else {
                Finding::ok(&what, detail)
            }
        })
        .collect()
}

fn show_max_dirty(max: MaxDirty) -> String {
    match max {
        MaxDirty::Off => "off".into(),
        MaxDirty::Seconds(s) => format!("{s}s of the disk's speed"),
        MaxDirty::Bytes(b) => crate::display::show_bytes(b),
    }
}

fn note_is_fallback(method: &crate::act::Method) -> bool {
    matches!(method, crate::act::Method::Ioprio)
}

/// What iocost will do for a disk, by the rule restrictions follow (`method::write_control`
/// for a disk whose speed is measured): `doctor` does not read the speeds file, so the method
/// it shows is the one for a disk not yet measured (io.max, or iocost's rate control).
fn iocost_note(state: iocost::State, allowed: Iocost, blk_mq: bool) -> &'static str {
    let measured = Estimate {
        measured: true,
        capacity: true,
        ..Estimate::ASSUMED
    };
    match write_control(state, allowed, blk_mq, measured, 0) {
        WriteControl::Weight { model: None, .. } => {
            ", held by io.weight=1 under the iocost set up on the disk"
        }
        WriteControl::Weight { .. } => {
            ", iocost's model pinned to the disk's speed once it is measured"
        }
        WriteControl::Limit(_) if state == iocost::State::Unavailable => {
            ", no iocost in this kernel"
        }
        WriteControl::Limit(_) if allowed != Iocost::Off && !blk_mq => {
            ", no iocost on this disk (not multi-queue)"
        }
        WriteControl::Limit(_) => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_says_when_iocost_takes_over() {
        use iocost::State;
        assert!(iocost_note(State::Off, Iocost::Auto, true).contains("once it is measured"));
        assert!(iocost_note(State::Off, Iocost::Auto, false).contains("not multi-queue"));
        assert_eq!(iocost_note(State::Off, Iocost::Off, true), "");
        assert!(iocost_note(State::Foreign, Iocost::Off, true).contains("set up on the disk"));
        assert!(iocost_note(State::Unavailable, Iocost::Auto, true).contains("no iocost"));
    }
}
