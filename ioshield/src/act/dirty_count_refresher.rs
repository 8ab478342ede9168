//! The thread that keeps the kernel's dirty page counts of held writers' cgroups fresh
//! (`DaemonConfig::refresh_dirty_counts` says why): it reads their `memory.stat` every few
//! milliseconds while a writer is held by `memory.high`, and sleeps otherwise.
//!
//! A thread of its own rather than a timer of the daemon's loop: each of the loop's wake-ups
//! polls all its branches, and on the emulated bench guest a refresh cost the daemon about
//! 1 ms of CPU there against 0.5 ms here, where it is one sleep and one read
//! (docs/bench/dirty-counts.md).
use std::{
    path::PathBuf,
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::Duration,
};

use crate::system::cgroups::MemoryCounts;

#[derive(Default)]
struct State {
    every: Option<Duration>,
    /// By restriction id.
    cgroups: Vec<(u64, MemoryCounts)>,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The thread holds the lock only around reads that cannot panic; a poisoned lock still
        // holds a usable list.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) struct DirtyCountRefresher {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DirtyCountRefresher {
    pub fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("dirty-counts".into())
            .spawn(move || run(&theirs))
            .map_err(|e| tracing::warn!("no thread to refresh dirty counts ({e}): never refreshed"))
            .ok();
        Self { shared, thread }
    }

    /// Refreshes the cgroups at `dirs` (by restriction id) every `every` from now on; `None`
    /// or no cgroup: none. A cgroup already refreshed keeps its open file.
    pub fn set(&self, every: Option<Duration>, dirs: &[(u64, PathBuf)]) {
        let dirs = if every.is_some() { dirs } else { &[] };
        let mut state = self.shared.lock();
        let unchanged = state.every == every
            && state.cgroups.len() == dirs.len()
            && state
                .cgroups
                .iter()
                .zip(dirs)
                .all(|((id, c), (want, dir))| id == want && c.dir() == dir);
        if unchanged {
            return;
        }
        let mut old = std::mem::take(&mut state.cgroups);
        for (id, dir) in dirs {
            let kept = old.iter().position(|(i, c)| i == id && c.dir() == dir);
            match kept.map(|at| old.swap_remove(at)) {
                Some(c) => state.cgroups.push(c),
                // A cgroup gone already has nothing to refresh.
                None => {
                    if let Ok(c) = MemoryCounts::open(dir) {
                        state.cgroups.push((*id, c));
                    }
                }
            }
        }
        state.every = every;
        self.shared.changed.notify_one();
    }

    /// Stops refreshing restriction `id`'s cgroup: before the cgroup is removed.
    pub fn forget(&self, id: u64) {
        self.shared.lock().cgroups.retain(|(i, _)| *i != id);
    }

    /// The restrictions whose cgroups are refreshed now.
    #[cfg(test)]
    fn refreshed(&self) -> Vec<u64> {
        self.shared
            .lock()
            .cgroups
            .iter()
            .map(|(id, _)| *id)
            .collect()
    }
}

impl Drop for DirtyCountRefresher {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut buf = vec![0; 4096];
    let mut state = shared.lock();
    while !state.stop {
        let Some(every) = state.every.filter(|_| !state.cgroups.is_empty()) else {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
            continue;
        };
        // One that fails is gone with its cgroup.
        state.cgroups.retain(|(_, c)| c.refresh(&mut buf).is_ok());
        // Wakes early on a change: one more read then, which does no harm.
        state = shared
            .changed
            .wait_timeout(state, every)
            .map_or_else(|e| e.into_inner().0, |(s, _)| s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refreshes_the_cgroups_it_is_given_that_have_a_memory_stat() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("memory.stat"), "file_dirty 0\n").unwrap();
        }
        let r = DirtyCountRefresher::start();
        let every = Some(Duration::from_millis(5));
        r.set(every, &[(1, a.clone()), (2, b.clone())]);
        assert_eq!(r.refreshed(), [1, 2]);
        // No memory.stat: nothing to refresh there.
        r.set(every, &[(1, a.clone()), (3, dir.path().join("none"))]);
        assert_eq!(r.refreshed(), [1]);
        r.forget(1);
        assert!(r.refreshed().is_empty());
        r.set(every, &[(1, a.clone())]);
        assert_eq!(r.refreshed(), [1]);
        // Off: none kept open.
        r.set(None, &[(1, a)]);
        assert!(r.refreshed().is_empty());
        drop(r);
    }
}
