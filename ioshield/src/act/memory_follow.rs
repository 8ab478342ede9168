//! Every tick, each held writer's `memory.high` kept at its page cache budget on top of what
//! its cgroup holds besides page cache (`memory_headroom::memory_high_to_follow`): raised as
//! its processes' own memory grows (a build's compilers, forked into the restriction after it
//! began), lowered where it was set higher than the budget (a unit limited in place, asked no
//! lower than what it held: the e2e's copy services kept 23-34 MB where 8 MiB was meant, for
//! their whole restriction), lifted for a writer with memory of its own. The unit's or cgroup's
//! previous values are journaled already: the release puts them back.
use std::time::{Duration, Instant};

use super::{Actuator, memory_headroom};
use crate::system::cgroups::{self, MemoryUse};

/// A `memory.high` the follower changed.
pub struct Followed {
    /// The unit, or the cgroup.
    pub place: String,
    pub budget: u64,
    pub used: MemoryUse,
    pub to: u64,
    pub took: Duration,
}

impl Followed {
    /// The log line's words after the place: "memory.high raised from 8.4 MB to 308.3 MB: ...".
    pub fn describe(&self) -> String {
        let show = crate::display::show_bytes;
        if self.to == u64::MAX {
            return format!(
                "memory.high lifted: its processes hold {} of their own besides its page cache, \
                 and over a memory.high every allocation of theirs would wait; its write control \
                 alone holds it ({} ms)",
                show(self.used.beside_cache()),
                self.took.as_millis()
            );
        }
        let verb = if self.to > self.used.high {
            "raised"
        } else {
            "lowered"
        };
        format!(
            "memory.high {verb} from {} to {} (a page cache of {} on top of the {} it holds \
             besides; {} of its {} page cache dirty or under writeback) in {} ms",
            show(self.used.high),
            show(self.to),
            show(self.budget),
            show(self.used.beside_cache()),
            show(self.used.backlog),
            show(self.used.file),
            self.took.as_millis()
        )
    }
}

impl Actuator {
    /// Moves the `memory.high` of every held writer that needs it. Returns what changed and the
    /// errors (a unit or cgroup gone meanwhile is left to its release).
    pub async fn follow_memory(&mut self) -> (Vec<Followed>, Vec<String>) {
        let mut changed = Vec::new();
        let mut errors = Vec::new();
        let mut ids: Vec<u64> = self.active.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(active) = self.active.get(&id) else {
                continue;
            };
            let Some(budget) = active.method.memory_high() else {
                continue;
            };
            let Some(used) = self
                .cgroup_dir(active)
                .and_then(|d| cgroups::memory_use(&d))
            else {
                continue;
            };
            let held_otherwise = active.method.holds_writes();
            let Some(to) = memory_headroom::memory_high_to_follow(budget, used, held_otherwise)
            else {
                continue;
            };
            let started = Instant::now();
            let (unit, cgroup, manager) =
                (active.unit.clone(), active.cgroup.clone(), active.manager);
            let wrote = match (&unit, &self.systemd, &self.cgroupfs, &cgroup) {
                (Some(unit), Some(systemd), _, _) => systemd
                    .set_memory_high(manager, unit, to)
                    .await
                    .map_err(|e| format!("{e:#}")),
                (None, _, Some(fs), Some(cg)) => fs
                    .write_file(cg, "memory.high", &show_high(to))
                    .map_err(|e| format!("memory.high of {}: {e}", cg.display())),
                _ => continue,
            };
            match wrote {
                Ok(()) => {
                    if let Some(active) = self.active.get_mut(&id) {
                        active.memory_lifted = to == u64::MAX;
                    }
                    changed.push(Followed {
                        place: unit
                            .or_else(|| cgroup.map(|c| c.display().to_string()))
                            .unwrap_or_default(),
                        budget,
                        used,
                        to,
                        took: started.elapsed(),
                    })
                }
                Err(e) => errors.push(e),
            }
        }
        (changed, errors)
    }

    /// Whether the restriction's `memory.high` was lifted for its processes' own memory: its
    /// retunes leave it so.
    pub fn memory_lifted(&self, id: u64) -> bool {
        self.active.get(&id).is_some_and(|a| a.memory_lifted)
    }
}

/// `memory.high` as the file takes it.
fn show_high(bytes: u64) -> String {
    if bytes == u64::MAX {
        "max".into()
    } else {
        bytes.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{
        act::{Active, CgroupLimits, Method, Retune, WriteControl, cgroup::Cgroupfs},
        journal::Journal,
        system::devices::DevId,
    };

    const MIB: u64 = 1 << 20;

    /// A held writer's cgroup in a cgroupfs stand-in, with the memory files the kernel has.
    fn held(current: u64, file: u64, high: u64) -> (tempfile::TempDir, Actuator, Cgroupfs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Cgroupfs {
            root: dir.path().join("cgroup"),
        };
        let cg = fs.abs(Path::new("/ioshield/r1-42"));
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(cg.join("memory.current"), format!("{current}\n")).unwrap();
        std::fs::write(
            cg.join("memory.stat"),
            format!(
                "anon {}\nfile {file}\nfile_dirty 0\nfile_writeback 0\n",
                current - file
            ),
        )
        .unwrap();
        std::fs::write(cg.join("memory.high"), format!("{high}\n")).unwrap();
        let (journal, _) = Journal::open(&dir.path().join("state.json")).unwrap();
        let mut actuator = Actuator::new(journal, Some(fs.clone()), None);
        let mut active = Active::new(Method::Cgroup(CgroupLimits {
            dev: DevId {
                major: 254,
                minor: 16,
            },
            write: WriteControl::Limit(25_000_000),
            memory_high: Some(8 * MIB),
        }));
        active.cgroup = Some("/ioshield/r1-42".into());
        actuator.active.insert(1, active);
        (dir, actuator, fs)
    }

    fn high(fs: &Cgroupfs) -> String {
        std::fs::read_to_string(fs.abs(Path::new("/ioshield/r1-42/memory.high"))).unwrap()
    }

    #[tokio::test]
    async fn a_held_copy_keeps_its_budget() {
        let (_dir, mut actuator, fs) = held(9 * MIB, 8 * MIB, 9 * MIB);
        let (changed, errors) = actuator.follow_memory().await;
        assert!(changed.is_empty() && errors.is_empty());
        assert_eq!(high(&fs), format!("{}\n", 9 * MIB));
    }

    #[tokio::test]
    async fn a_compiler_forked_into_the_restriction_has_memory_high_lifted() {
        let (_dir, mut actuator, fs) = held(300 * MIB, 4 * MIB, 8 * MIB);
        let (changed, errors) = actuator.follow_memory().await;
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(high(&fs), "max");
        assert_eq!(changed.len(), 1);
        let line = changed[0].describe();
        assert!(
            line.starts_with("memory.high lifted: its processes hold 310.4 MB of their own"),
            "{line}"
        );
        // Lifted, it stays so.
        std::fs::write(fs.abs(Path::new("/ioshield/r1-42/memory.high")), "max\n").unwrap();
        assert!(actuator.follow_memory().await.0.is_empty());
    }

    /// A retune (the disk measured, the speed probe's next step) sets the held writer's limits
    /// again: its memory.high too, unless the follower lifted it for its processes' memory.
    #[tokio::test]
    async fn a_retune_leaves_a_lifted_memory_high_lifted() {
        let retuned = Method::Cgroup(CgroupLimits {
            dev: DevId {
                major: 254,
                minor: 16,
            },
            write: WriteControl::Limit(30_000_000),
            memory_high: Some(8 * MIB),
        });
        let (_dir, mut actuator, fs) = held(300 * MIB, 4 * MIB, 8 * MIB);
        actuator.follow_memory().await;
        assert_eq!(high(&fs), "max");
        assert!(actuator.memory_lifted(1));
        // The compiler exited: what the cgroup holds is its page cache again.
        std::fs::write(
            fs.abs(Path::new("/ioshield/r1-42/memory.current")),
            "5242880\n",
        )
        .unwrap();
        assert!(matches!(
            actuator.retune(1, &retuned).await.unwrap(),
            Retune::Done(..)
        ));
        assert_eq!(high(&fs), "max");
        assert!(actuator.memory_lifted(1));
        // Not lifted: the retune sets it to the budget on top of what the cgroup holds besides.
        let (_dir, mut actuator, fs) = held(9 * MIB, 8 * MIB, 9 * MIB);
        actuator.follow_memory().await;
        assert!(!actuator.memory_lifted(1));
        std::fs::write(fs.abs(Path::new("/ioshield/r1-42/memory.high")), "max\n").unwrap();
        assert!(matches!(
            actuator.retune(1, &retuned).await.unwrap(),
            Retune::Done(..)
        ));
        assert_eq!(high(&fs), (9 * MIB).to_string());
    }

    #[tokio::test]
    async fn a_limit_above_the_budget_comes_down() {
        let (_dir, mut actuator, fs) = held(34 * MIB, 33 * MIB, 34 * MIB);
        let (changed, _) = actuator.follow_memory().await;
        assert_eq!(high(&fs), (9 * MIB).to_string());
        assert!(
            changed[0]
                .describe()
                .starts_with("memory.high lowered from 35.7 MB to 9.4 MB"),
            "{}",
            changed[0].describe()
        );
    }
}
