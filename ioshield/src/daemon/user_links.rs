//! Which users' own systemd a restriction may soon need: those whose processes write. Reaching
//! a user's manager starts a bridge (`act::systemd::Systemd::connect_ahead`), so it is opened
//! when one of the user's processes is first seen writing, not when one of them floods a disk.
use std::{
    collections::HashSet,
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::system::cgroups;

/// How often the processes already looked at are forgotten (their pids may be reused, and a
/// user who logged out and back in has a new manager to reach).
const FORGET_EVERY: Duration = Duration::from_secs(60);

pub struct UserLinks {
    /// Writers whose cgroup was read already.
    seen: HashSet<u32>,
    since: Instant,
}

impl UserLinks {
    pub fn new(now: Instant) -> Self {
        Self {
            seen: HashSet::new(),
            since: now,
        }
    }

    /// The users whose managers run processes among `writers` not looked at before, each
    /// writer's cgroup from `cgroup_of` (`system::cgroups::of_process`).
    pub fn users_of(
        &mut self,
        writers: impl IntoIterator<Item = u32>,
        now: Instant,
        cgroup_of: impl Fn(u32) -> Option<PathBuf>,
    ) -> Vec<u32> {
        if now.duration_since(self.since) >= FORGET_EVERY {
            self.seen.clear();
            self.since = now;
        }
        let mut users: Vec<u32> = writers
            .into_iter()
            .filter(|pid| self.seen.insert(*pid))
            .filter_map(|pid| cgroups::user_manager_of(&cgroup_of(pid)?))
            .collect();
        users.sort_unstable();
        users.dedup();
        users
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each writer is looked at once a minute; only users' own managers count.
    #[test]
    fn each_writer_is_looked_at_once_a_minute() {
        let cgroup_of = |pid: u32| {
            Some(PathBuf::from(match pid {
                10 | 13 => "/user.slice/user-1000.slice/user@1000.service/app.slice/a.scope",
                11 => "/system.slice/nightly-backup.service",
                12 => "/user.slice/user-1001.slice/user@1001.service/app.slice/b.service",
                _ => return None,
            }))
        };
        let t0 = Instant::now();
        let mut links = UserLinks::new(t0);
        assert_eq!(
            links.users_of([10, 11, 12, 99], t0, cgroup_of),
            [1000, 1001]
        );
        let t1 = t0 + Duration::from_secs(1);
        assert!(links.users_of([10, 11, 12], t1, cgroup_of).is_empty());
        assert_eq!(links.users_of([10, 13], t1, cgroup_of), [1000]);
        assert_eq!(links.users_of([10], t0 + FORGET_EVERY, cgroup_of), [1000]);
    }
}
