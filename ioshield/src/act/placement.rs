//! Where a restriction goes on a systemd host, decided from the offender's cgroup path and who
//! else lives in its unit (systemd's rule: one writer per cgroup subtree, CGROUP_DELEGATION.md).
use std::{collections::HashSet, path::Path};

/// What restricting an offender on a systemd host does. The offender never moves: the kernel
/// keeps a file's writeback with the cgroup that first dirtied it, so a writer moved to a unit
/// of its own has its files written through the unit it left, unlimited (a service's copy
/// split off beside its own worker: the other services' longest pause 0.45-1.17 s, against
/// medians of 0.04-0.23 s held in place, docs/bench/service-worker.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Set the limits on the offender's unit itself (`SetUnitProperties`), nothing moved.
    /// `others`: the unit's processes that are neither the offender's nor ones it was started
    /// by, held with it: a service's other workers (the service is the unit its admin gave
    /// resources to; moved aside they would still write through its writeback, and a service's
    /// main process forks the next ones into it). `user`: the unit is a user manager's
    /// (`user@UID.service/...`), and only that manager may change it.
    InPlace {
        unit: String,
        user: Option<u32>,
        others: Vec<u32>,
    },
    /// A scope (a login session, a terminal) that also holds processes neither the offender's
    /// nor what started it (a job its shell left running): those move aside into a new scope
    /// in the same slice, through the same manager, bound to the scope, and the limits go on
    /// the scope itself, as in place. Not for a service: its other workers are the service's
    /// to manage.
    Spare {
        unit: String,
        slice: String,
        user: Option<u32>,
        others: Vec<u32>,
    },
    /// A subtree ioshield must not write into or move out of: another manager's delegated
    /// subtree (container engines, machined), a user manager itself, or no unit at all. `why`
    /// is said once in the log.
    Foreign { why: String },
}

/// `cgroup` is the offender root's cgroup (as /proc/PID/cgroup shows it), `unit_pids` every
/// process in that unit's cgroup and below, `members` the offender's subtree and `ancestors` the
/// root's ancestors. The limits always go on the offender's own unit: the processes it was
/// started by (a service's main process and the shells between it and the writer, a terminal
/// tab's or login session's shell waiting for its copy) are held with it, and so is anything
/// else in a service (another worker); anything else in a scope (a job the shell left running)
/// moves aside. The cost is theirs: what a held shell starts is held with it, and a held
/// service's other workers wait with its writer (docs/bench/service-worker.md).
pub fn place(
    cgroup: &Path,
    unit_pids: &[u32],
    members: &HashSet<u32>,
    ancestors: &HashSet<u32>,
) -> Placement {
    let parts: Vec<&str> = cgroup
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|c| *c != "/")
        .collect();
    // Below `user@UID.service` the user's own systemd is the manager: the same rules apply to
    // its units, through it.
    let mut user = None;
    let mut parts = parts.as_slice();
    if let Some(i) = parts.iter().position(|p| p.starts_with("user@")) {
        let Some(uid) = crate::system::cgroups::user_manager_of(Path::new(parts[i])) else {
            return Placement::Foreign {
                why: format!("{} is not a user manager ioshield knows", parts[i]),
            };
        };
        user = Some(uid);
        parts = &parts[i + 1..];
        if parts.first() == Some(&"init.scope") {
            return Placement::Foreign {
                why: format!("it is user {uid}'s systemd itself"),
            };
        }
    }
    // Slices nest; the first service or scope below them is the unit. Anything below that is a
    // sub-cgroup that only a unit with Delegate=yes has (whatever its name, e.g. a container's
    // own `init.scope`), and belongs to whoever it was delegated to.
    let Some(unit_at) = parts
        .iter()
        .position(|p| crate::system::cgroups::is_unit_name(p) && !p.ends_with(".slice"))
    else {
        return Placement::Foreign {
            why: format!("its cgroup {} is not a unit of systemd's", cgroup.display()),
        };
    };
    let unit = parts[unit_at].to_string();
    if unit_at + 1 < parts.len() {
        return Placement::Foreign {
            why: format!(
                "it lives in a delegated subtree of {unit} ({}), which belongs to that unit's \
                 own manager",
                cgroup.display()
            ),
        };
    }
    let ours = |p: &u32| members.contains(p) || ancestors.contains(p);
    let others: Vec<u32> = unit_pids.iter().copied().filter(|p| !ours(p)).collect();
    if others.is_empty() || !unit.ends_with(".scope") {
        return Placement::InPlace { unit, user, others };
    }
    let slice = parts[..unit_at]
        .last()
        .filter(|p| p.ends_with(".slice"))
        .map_or("-.slice".to_string(), |p| p.to_string());
    Placement::Spare {
        unit,
        slice,
        user,
        others,
    }
}

/// Which of a scope's `others` to move aside: those whose parent is not among them (`parent`
/// gives a live process's parent). A process forked by one moved later is born where its parent
/// is; one already running stays held (a shell loop's `sleep`, gone in a moment, which listed
/// would have systemd refuse the whole move once it exits before the call).
pub fn heads(others: &[u32], parent: impl Fn(u32) -> Option<u32>) -> Vec<u32> {
    let set: HashSet<u32> = others.iter().copied().collect();
    others
        .iter()
        .copied()
        .filter(|&p| parent(p).is_some_and(|pp| !set.contains(&pp)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_heads_of_the_others_move_aside() {
        // 12: a job the shell (10) left running, 13 its `sleep`; 14 gone.
        let parent = |p: u32| match p {
            12 => Some(10),
            13 => Some(12),
            _ => None,
        };
        assert_eq!(heads(&[12, 13, 14], parent), vec![12]);
    }

    fn members(pids: &[u32]) -> HashSet<u32> {
        pids.iter().copied().collect()
    }

    #[test]
    fn a_service_that_is_all_offender_is_restricted_in_place() {
        let p = place(
            Path::new("/system.slice/nightly-backup.service"),
            &[40, 41],
            &members(&[40, 41, 42]),
            &HashSet::new(),
        );
        assert_eq!(
            p,
            Placement::InPlace {
                unit: "nightly-backup.service".into(),
                user: None,
                others: vec![]
            }
        );
        // The service's script (40) runs the writer (41): the script is part of the job.
        let p = place(
            Path::new("/system.slice/backup.service"),
            &[40, 41],
            &members(&[41]),
            &members(&[40, 1]),
        );
        assert!(matches!(p, Placement::InPlace { .. }));
        // Another worker of the same service (42) is not, and is held with it: the writer
        // never leaves its files' writeback, and the service's workers stay the service's.
        let p = place(
            Path::new("/system.slice/web.service"),
            &[40, 41, 42],
            &members(&[41]),
            &members(&[40, 1]),
        );
        assert_eq!(
            p,
            Placement::InPlace {
                unit: "web.service".into(),
                user: None,
                others: vec![42]
            }
        );
    }

    #[test]
    fn a_shared_session_is_held_with_its_other_jobs_moved_aside() {
        // The login shell (10) waits for the copy (40, 41): the session is the copy's.
        let own = place(
            Path::new("/user.slice/user-1000.slice/session-3.scope"),
            &[10, 40, 41],
            &members(&[40, 41]),
            &members(&[10, 1]),
        );
        assert_eq!(
            own,
            Placement::InPlace {
                unit: "session-3.scope".into(),
                user: None,
                others: vec![]
            }
        );
        // A job the shell left running (12) is not the copy's: it moves aside.
        let p = place(
            Path::new("/user.slice/user-1000.slice/session-3.scope"),
            &[10, 12, 40, 41],
            &members(&[40, 41]),
            &members(&[10, 1]),
        );
        assert_eq!(
            p,
            Placement::Spare {
                unit: "session-3.scope".into(),
                slice: "user-1000.slice".into(),
                user: None,
                others: vec![12]
            }
        );
        // A unit whose processes could not be listed: nothing is known to move aside.
        let p = place(
            Path::new("/system.slice/x.scope"),
            &[],
            &members(&[1]),
            &HashSet::new(),
        );
        assert!(matches!(p, Placement::InPlace { ref others, .. } if others.is_empty()));
    }

    #[test]
    fn a_user_managers_units_are_placed_through_it() {
        let base = "/user.slice/user-1000.slice/user@1000.service";
        let own = place(
            Path::new(&format!("{base}/app.slice/run-r1.service")),
            &[40],
            &members(&[40]),
            &HashSet::new(),
        );
        assert_eq!(
            own,
            Placement::InPlace {
                unit: "run-r1.service".into(),
                user: Some(1000),
                others: vec![]
            }
        );
        // A terminal's scope holds the shell and whatever else runs in that terminal: held in
        // place while the shell only waits for the copy, the rest moved aside once it runs
        // something else.
        let tab = place(
            Path::new(&format!("{base}/app.slice/app-gnome-terminal-42.scope")),
            &[30, 40],
            &members(&[40]),
            &members(&[30]),
        );
        assert_eq!(
            tab,
            Placement::InPlace {
                unit: "app-gnome-terminal-42.scope".into(),
                user: Some(1000),
                others: vec![]
            }
        );
        let terminal = place(
            Path::new(&format!("{base}/app.slice/app-gnome-terminal-42.scope")),
            &[30, 31, 40],
            &members(&[40]),
            &members(&[30]),
        );
        assert_eq!(
            terminal,
            Placement::Spare {
                unit: "app-gnome-terminal-42.scope".into(),
                slice: "app.slice".into(),
                user: Some(1000),
                others: vec![31]
            }
        );
        let manager = place(
            Path::new(&format!("{base}/init.scope")),
            &[20],
            &members(&[20]),
            &HashSet::new(),
        );
        assert!(
            matches!(manager, Placement::Foreign { ref why } if why.contains("systemd itself"))
        );
    }

    #[test]
    fn delegated_subtrees_are_left_alone() {
        let container = place(
            Path::new("/system.slice/docker-abc.scope/init.scope"),
            &[40],
            &members(&[40]),
            &HashSet::new(),
        );
        assert!(
            matches!(container, Placement::Foreign { ref why } if why.contains("docker-abc.scope"))
        );
        let root = place(Path::new("/"), &[40], &members(&[40]), &HashSet::new());
        assert!(matches!(root, Placement::Foreign { .. }));
    }
}
