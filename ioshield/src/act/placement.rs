//! Where a restriction goes on a systemd host, decided from the offender's cgroup path and who
//! else lives in its unit (systemd's rule: one writer per cgroup subtree, CGROUP_DELEGATION.md).
use std::{collections::HashSet, path::Path};

/// What restricting an offender on a systemd host does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every process of the unit is the offender's: set the limits on the unit itself
    /// (`SetUnitProperties`), nothing moves. `user`: the unit is a user manager's
    /// (`user@UID.service/...`), and only that manager may change it.
    InPlace { unit: String, user: Option<u32> },
    /// A service that also holds other processes (another worker): move the offender's
    /// subtree into a new scope in the same slice, through the same manager, bound to the unit
    /// so that stopping the unit stops it too.
    Split {
        unit: String,
        slice: String,
        user: Option<u32>,
    },
    /// A scope (a login session, a terminal) that also holds processes neither the offender's
    /// nor what started it (a job its shell left running): those move aside into a new scope
    /// in the same slice, through the same manager, bound to the scope, and the limits go on
    /// the scope itself, as in place; the offender stays with its files' writeback. Not for a
    /// service: its other workers are the service's to manage.
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
/// root's ancestors. A unit is one job when it holds nothing but the offender and the processes
/// it was started by: a service's main process and the shells between it and the writer (a
/// backup script running restic), or a terminal tab's or login session's shell waiting for its
/// copy. Those are held with it, in place, rather than the writer moved away from them: the
/// kernel keeps a file's writeback with the cgroup that first dirtied it, so a copy moved out of
/// its scope has its file written through the scope it left, unlimited, while its new scope's
/// `memory.high` waits on that (docs/bench/shell-scope.md: pauses of 0.3-1.3 s and a copy
/// crawling for 5 s). The cost is the shell's: what it starts while held is held with it.
/// Anything else in a scope (a job the shell left running) moves aside for the same reason;
/// anything else in a service (another worker) makes the service shared, and the writer moves.
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
    if !unit_pids.is_empty() && unit_pids.iter().all(ours) {
        return Placement::InPlace { unit, user };
    }
    let slice = parts[..unit_at]
        .last()
        .filter(|p| p.ends_with(".slice"))
        .map_or("-.slice".to_string(), |p| p.to_string());
    if unit.ends_with(".scope") && !unit_pids.is_empty() {
        let others = unit_pids.iter().copied().filter(|p| !ours(p)).collect();
        return Placement::Spare {
            unit,
            slice,
            user,
            others,
        };
    }
    Placement::Split { unit, slice, user }
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
                user: None
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
        // Another worker of the same service is not: split.
        let p = place(
            Path::new("/system.slice/web.service"),
            &[40, 41, 42],
            &members(&[41]),
            &members(&[40, 1]),
        );
        assert!(matches!(p, Placement::Split { .. }));
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
                user: None
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
        let p = place(
            Path::new("/system.slice/x.scope"),
            &[],
            &members(&[1]),
            &HashSet::new(),
        );
        assert!(matches!(p, Placement::Split { ref slice, .. } if slice == "system.slice"));
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
                user: Some(1000)
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
                user: Some(1000)
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
