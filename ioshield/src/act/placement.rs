//! Where a restriction goes on a systemd host, decided from the offender's cgroup path and who
//! else lives in its unit (systemd's rule: one writer per cgroup subtree, CGROUP_DELEGATION.md).
use std::{collections::HashSet, path::Path};

/// What restricting an offender on a systemd host does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Every process of the system unit is the offender's: set the limits on the unit itself
    /// (`SetUnitProperties`), nothing moves.
    InPlace { unit: String },
    /// The unit also holds innocent processes: move the offender's subtree into a new scope in
    /// the same slice, bound to the unit so that stopping the unit stops it too.
    Split { unit: String, slice: String },
    /// A subtree ioshield must not write into or move out of: a user manager's units
    /// (`user@UID.service`, whose own systemd owns them) or another manager's delegated subtree
    /// (container engines, machined). `why` is said once in the log.
    Foreign { why: String },
}

/// `cgroup` is the offender root's cgroup (as /proc/PID/cgroup shows it), `unit_pids` every
/// process in that unit's cgroup and below, `members` the offender's subtree and `ancestors` the
/// root's ancestors. A service is one job: its main process and the shells between it and the
/// writer (a backup script running restic) are part of the offender. A scope (a login session,
/// a terminal, an app) is shared with whatever else runs there, its shell included.
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
    if let Some(i) = parts.iter().position(|p| p.starts_with("user@")) {
        return Placement::Foreign {
            why: format!(
                "it runs under {}, whose own systemd manages it (ioshield does not move \
                 processes out of a user manager's subtree)",
                parts[i]
            ),
        };
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
    let ours =
        |p: &u32| members.contains(p) || (unit.ends_with(".service") && ancestors.contains(p));
    if !unit_pids.is_empty() && unit_pids.iter().all(ours) {
        return Placement::InPlace { unit };
    }
    let slice = parts[..unit_at]
        .last()
        .filter(|p| p.ends_with(".slice"))
        .map_or("-.slice".to_string(), |p| p.to_string());
    Placement::Split { unit, slice }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                unit: "nightly-backup.service".into()
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
    fn a_shared_session_is_split_within_its_slice() {
        // The login shell (10) is the writer's parent, but a session is shared: split.
        let p = place(
            Path::new("/user.slice/user-1000.slice/session-3.scope"),
            &[10, 40, 41],
            &members(&[40, 41]),
            &members(&[10, 1]),
        );
        assert_eq!(
            p,
            Placement::Split {
                unit: "session-3.scope".into(),
                slice: "user-1000.slice".into()
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
    fn user_managers_and_delegated_subtrees_are_left_alone() {
        let user = place(
            Path::new("/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"),
            &[40],
            &members(&[40]),
            &HashSet::new(),
        );
        assert!(matches!(user, Placement::Foreign { ref why } if why.contains("user@1000")));
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
