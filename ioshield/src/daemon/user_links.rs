//! Which users' own systemd a restriction may soon need: those whose processes write. Reaching
//! a user's manager starts a bridge (`act::systemd::Systemd::connect_ahead`), so it is opened
//! when one of the user's processes is first seen writing, not when one of them floods a disk.
use std::{
    collections::HashSet,
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

    /// The users whose managers run processes among `writers` not looked at before.
    pub fn users_of(&mut self, writers: impl IntoIterator<Item = u32>, now: Instant) -> Vec<u32> {
        if now.duration_since(self.since) >= FORGET_EVERY {
            self.seen.clear();
            self.since = now;
        }
        let mut users: Vec<u32> = writers
            .into_iter()
            .filter(|pid| self.seen.insert(*pid))
            .filter_map(|pid| cgroups::user_manager_of(&cgroups::of_process(pid)?))
            .collect();
        users.sort_unstable();
        users.dedup();
        users
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own process is looked at once, then not again until forgotten.
    #[test]
    fn each_writer_is_looked_at_once_a_minute() {
        let me = std::process::id();
        let mine = cgroups::of_process(me).and_then(|cg| cgroups::user_manager_of(&cg));
        let t0 = Instant::now();
        let mut links = UserLinks::new(t0);
        assert_eq!(
            links.users_of([me], t0),
            mine.into_iter().collect::<Vec<_>>()
        );
        assert!(links.users_of([me], t0 + Duration::from_secs(1)).is_empty());
        assert!(links.seen.contains(&me));
        let later = t0 + FORGET_EVERY;
        assert_eq!(
            links.users_of([me], later),
            mine.into_iter().collect::<Vec<_>>()
        );
        assert_eq!(links.since, later);
    }
}
