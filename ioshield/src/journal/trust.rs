//! What of a state file may be acted on: entries ioshield itself could have made, from this
//! boot; a file that cannot be read is moved aside for a person to look at.
use std::path::Path;

use serde::Deserialize;

use super::{Change, VERSION};

/// The state file as read, before its entries are trusted.
#[derive(Deserialize)]
pub(super) struct RawState {
    #[serde(default)]
    version: u32,
    #[serde(default)]
    boot_id: String,
    changes: Vec<serde_json::Value>,
}

/// The entries of a state file that are safe to act on.
pub(super) fn accept(raw: RawState, boot_id: &str, path: &Path) -> Vec<Change> {
    if !raw.boot_id.is_empty() && !boot_id.is_empty() && raw.boot_id != boot_id {
        tracing::warn!(
            "state file {} is from an earlier boot: nothing it lists survived the reboot",
            path.display()
        );
        return Vec::new();
    }
    if raw.version != VERSION {
        tracing::warn!(
            "state file {} has version {} (this is {VERSION}): reading what still parses",
            path.display(),
            raw.version
        );
    }
    let mut out = Vec::new();
    for value in raw.changes {
        match serde_json::from_value::<Change>(value.clone()) {
            Ok(change) => match change.validate() {
                Ok(()) => out.push(change),
                Err(why) => tracing::warn!(
                    "state file {}: ignoring an entry ioshield could not have made ({why}): \
                     {value}",
                    path.display()
                ),
            },
            Err(e) => tracing::warn!(
                "state file {}: ignoring an unreadable entry ({e}): {value}",
                path.display()
            ),
        }
    }
    out
}

/// The entries of a state file's bytes that are safe to act on, or why the bytes are not a state
/// file at all.
pub(super) fn leftovers(bytes: &[u8], boot_id: &str, path: &Path) -> Result<Vec<Change>, String> {
    serde_json::from_slice::<RawState>(bytes)
        .map(|raw| accept(raw, boot_id, path))
        .map_err(|e| e.to_string())
}

/// Moves a state file that cannot be read aside, keeping it for a person to look at.
pub(super) fn quarantine(path: &Path, why: &str) {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = path.with_extension(format!("corrupt-{stamp}"));
    match std::fs::rename(path, &aside) {
        Ok(()) => tracing::error!(
            "state file {} is not readable ({why}); moved to {}, starting with nothing to undo",
            path.display(),
            aside.display()
        ),
        Err(e) => tracing::error!(
            "state file {} is not readable ({why}) and could not be moved aside ({e}); starting \
             with nothing to undo",
            path.display()
        ),
    }
}

impl Change {
    /// Whether this entry is something ioshield itself could have made: its own cgroups under
    /// `/ioshield`, its own scopes, a unit name, a process other than init. A state file is
    /// root's, but a bad entry would otherwise make ioshield remove foreign cgroups or move
    /// processes outside cgroupfs.
    pub fn validate(&self) -> Result<(), String> {
        let ours = Path::new("/").join(crate::act::cgroup::PARENT);
        let plain = |p: &Path| {
            p.is_absolute()
                && p.components()
                    .all(|c| !matches!(c, std::path::Component::ParentDir))
        };
        match self {
            Change::Ioprio { thread, .. } if thread.id <= 1 => Err("pid 1 or 0".into()),
            Change::Ioprio { .. } => Ok(()),
            Change::CgroupCreated { path, .. } if plain(path) && path.starts_with(&ours) => Ok(()),
            Change::CgroupCreated { path, .. } => {
                Err(format!("cgroup {} is not ioshield's", path.display()))
            }
            Change::ControllerEnabled { path, .. } if path == Path::new("/") || *path == ours => {
                Ok(())
            }
            Change::ControllerEnabled { path, .. } => Err(format!(
                "controllers of {} are not ioshield's",
                path.display()
            )),
            Change::CgroupMove {
                process, from, to, ..
            } => {
                if process.id <= 1 {
                    Err("pid 1 or 0".into())
                } else if !plain(from) || !plain(to) || !to.starts_with(&ours) {
                    Err(format!(
                        "a move from {} to {} is not ioshield's",
                        from.display(),
                        to.display()
                    ))
                } else {
                    Ok(())
                }
            }
            Change::SystemdScope { unit, .. } => {
                if unit.starts_with("ioshield-") && unit.ends_with(".scope") && !unit.contains('/')
                {
                    Ok(())
                } else {
                    Err(format!("scope {unit} is not ioshield's"))
                }
            }
            Change::Iocost {
                device, model, qos, ..
            } => {
                let one_line = |l: &Option<String>| l.as_deref().is_none_or(|l| !l.contains('\n'));
                if crate::system::devices::DevId::parse(device).is_none() {
                    Err(format!("`{device}` is not a device number"))
                } else if !one_line(model) || !one_line(qos) {
                    Err(format!("iocost settings of {device} span lines"))
                } else {
                    Ok(())
                }
            }
            Change::BacklogGuard {
                device,
                max_ratio_fine,
                ..
            } => {
                if crate::system::devices::DevId::parse(device).is_none() {
                    Err(format!("`{device}` is not a device number"))
                } else if *max_ratio_fine > 1_000_000 {
                    Err(format!(
                        "max_ratio_fine {max_ratio_fine} of {device} is over 100%"
                    ))
                } else {
                    Ok(())
                }
            }
            Change::UnitLimits { unit, .. } => {
                let kinds = [".service", ".scope", ".slice", ".socket", ".mount", ".swap"];
                if !unit.contains('/') && kinds.iter().any(|k| unit.ends_with(k)) {
                    Ok(())
                } else {
                    Err(format!("{unit} is not a unit name"))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Identity, Journal};

    #[test]
    fn entries_ioshield_could_not_have_made_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let who = |id| Identity { id, start_time: 1 };
        let good = Change::CgroupCreated {
            restriction: 1,
            path: "/ioshield/r1-42".into(),
        };
        let bad = [
            Change::CgroupCreated {
                restriction: 1,
                path: "/ioshield/../system.slice".into(),
            },
            Change::CgroupCreated {
                restriction: 1,
                path: "/system.slice/sshd.service".into(),
            },
            Change::Ioprio {
                restriction: 1,
                thread: who(1),
                previous: 0,
                applied: 0,
            },
            Change::SystemdScope {
                restriction: 1,
                unit: "sshd.service".into(),
                device: "/dev/vda".into(),
                members: vec![],
                user: None,
            },
            Change::CgroupMove {
                restriction: 1,
                process: who(42),
                from: "/user.slice".into(),
                to: "/system.slice".into(),
            },
        ];
        let mut changes = vec![serde_json::to_value(&good).unwrap()];
        changes.extend(bad.iter().map(|c| serde_json::to_value(c).unwrap()));
        changes.push(serde_json::json!({"kind": "from_the_future", "restriction": 3}));
        let text = serde_json::json!({ "version": VERSION, "changes": changes });
        std::fs::write(&path, text.to_string()).unwrap();
        let (_, left) = Journal::open(&path).unwrap();
        assert_eq!(left, vec![good]);
    }

    #[test]
    fn leftovers_of_another_boot_are_not_undone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let change = Change::CgroupCreated {
            restriction: 1,
            path: "/ioshield/r1-42".into(),
        };
        let text = serde_json::json!({
            "version": VERSION,
            "boot_id": "not-this-boot",
            "changes": [change],
        });
        std::fs::write(&path, text.to_string()).unwrap();
        let (_, left) = Journal::open(&path).unwrap();
        if crate::system::host::boot_id().is_empty() {
            assert_eq!(left.len(), 1, "without a boot id nothing can be told apart");
        } else {
            assert!(left.is_empty());
        }
    }

    proptest::proptest! {
        /// Whatever bytes the state file holds (a crash mid-write, a disk error, an edit), the
        /// loader answers with entries or a reason, never a panic. `cargo xtask fuzz` runs this
        /// with a million cases; `cargo test` with proptest's default.
        #[test]
        fn any_bytes_load_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = leftovers(&bytes, "boot", Path::new("/run/ioshield/state.json"));
        }

        /// State-file-shaped JSON with any kinds, paths, ids and names.
        #[test]
        fn any_entries_load_without_panic(
            kind in "(ioprio|cgroup_created|controller_enabled|systemd_scope|unit_limits|cgroup_move|[a-z_]{0,12})",
            path in "[/a-z.\\-]{0,40}",
            unit in "[ -~]{0,40}",
            id in proptest::prelude::any::<i64>(),
            version in proptest::prelude::any::<u32>(),
            boot in "(boot|other|)",
        ) {
            let entry = serde_json::json!({
                "kind": kind, "restriction": id, "path": path, "unit": unit, "device": path,
                "controller": unit, "from": path, "to": path, "previous": id, "applied": id,
                "thread": {"id": id, "start_time": id}, "process": {"id": id, "start_time": 1},
                "members": [{"id": id, "start_time": 1}],
            });
            let doc = serde_json::json!({"version": version, "boot_id": boot, "changes": [entry]});
            let bytes = serde_json::to_vec(&doc).unwrap();
            if let Ok(changes) = leftovers(&bytes, "boot", Path::new("/run/ioshield/state.json")) {
                for c in changes {
                    proptest::prop_assert!(c.validate().is_ok());
                }
            }
        }
    }
}
