//! Per-process dirty rates per disk, smoothed with an exponential moving average:
//! alpha = 1 - e^(-dt/tau), as in the thesis (tau 8 s by default). Beside it, the bytes over
//! about the last second ([`RECENT_TAU`]), for whether a writer adds to a backlog now.
use std::{collections::HashMap, time::Duration};

use crate::{
    model::{
        sample::{Lifecycle, Sample},
        tree::ProcessTree,
    },
    system::devices::Disk,
};

/// Below this a writer is forgotten (bytes/s).
const NEGLIGIBLE: f64 = 1024.0;

/// The time constant of [`Rate::recent`]. A writer of 14 MB/s on the bed's 30 MB/s disk passes
/// the backlog trigger's 5 MB/s 0.4 s after it starts there, where the 8 s average takes 3.5 s,
/// and each second the restriction waited left 14 MB more of the backlog the innocents' cgroup
/// is charged with (stop 62). Smoothed rather than the last sample's: a step the kernel's
/// report brings on between ticks measures a sample of a few milliseconds.
const RECENT_TAU: f64 = 1.0;

pub struct Rates {
    tau: Duration,
    ema: HashMap<(u32, Disk), Rate>,
}

/// One process's smoothed rates on one disk.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    /// Bytes dirtied per second.
    pub bytes: f64,
    /// Files written from their first page, per second.
    pub files: f64,
    /// Bytes dirtied per second over about the last second.
    pub recent: f64,
}

impl Rate {
    /// `x` is a sample's rate (its `recent` unused) over `dt` seconds.
    fn approach(&mut self, x: Rate, alpha: f64, dt: f64) {
        self.bytes += alpha * (x.bytes - self.bytes);
        self.files += alpha * (x.files - self.files);
        let quick = 1.0 - (-dt / RECENT_TAU).exp();
        self.recent += quick * (x.bytes - self.recent);
    }

    fn add(&mut self, other: Rate) {
        self.bytes += other.bytes;
        self.files += other.files;
        self.recent += other.recent;
    }
}

impl Rates {
    pub fn new(tau: Duration) -> Self {
        Self {
            tau,
            ema: HashMap::new(),
        }
    }

    pub fn set_tau(&mut self, tau: Duration) {
        self.tau = tau;
    }

    /// Folds one sample in. The tree must already include the sample's lifecycle events: an
    /// exited process's rate moves to its nearest live ancestor, so a parent that forks a
    /// short-lived writer per chunk carries all of their rate.
    pub fn update(&mut self, sample: &Sample, tree: &ProcessTree) {
        let dt = sample.elapsed.as_secs_f64();
        let alpha = 1.0 - (-dt / self.tau.as_secs_f64()).exp();
        let mut instant: HashMap<(u32, Disk), Rate> = sample
            .writes
            .iter()
            .map(|(k, d)| {
                let rate = Rate {
                    bytes: d.dirtied_bytes as f64 / dt,
                    files: d.files_started as f64 / dt,
                    recent: 0.0,
                };
                (k.clone(), rate)
            })
            .collect();
        for (key, value) in &mut self.ema {
            let x = instant.remove(key).unwrap_or_default();
            value.approach(x, alpha, dt);
        }
        for (key, x) in instant {
            let mut fresh = Rate::default();
            fresh.approach(x, alpha, dt);
            self.ema.insert(key, fresh);
        }
        for event in &sample.lifecycle {
            if let Lifecycle::Exit { pid, .. } = event {
                self.bequeath(*pid, tree);
            }
        }
        self.ema.retain(|_, v| v.bytes >= NEGLIGIBLE);
    }

    fn bequeath(&mut self, pid: u32, tree: &ProcessTree) {
        let heir = tree
            .ancestry(pid)
            .skip(1)
            .find(|p| tree.get(*p).is_some_and(|n| !n.exited));
        let keys: Vec<(u32, Disk)> = self
            .ema
            .keys()
            .filter(|(p, _)| *p == pid)
            .cloned()
            .collect();
        for key in keys {
            let Some(v) = self.ema.remove(&key) else {
                continue;
            };
            if let Some(heir) = heir {
                self.ema.entry((heir, key.1)).or_default().add(v);
            }
        }
    }

    pub fn disks(&self) -> Vec<Disk> {
        let mut d: Vec<Disk> = self.ema.keys().map(|(_, d)| d.clone()).collect();
        d.sort();
        d.dedup();
        d
    }

    /// Each process's own smoothed dirty rate (bytes per second) on `disk`.
    pub fn on_disk(&self, disk: &Disk) -> HashMap<u32, f64> {
        self.each_on(disk, |r| r.bytes)
    }

    /// Each process's dirty rate (bytes per second) on `disk` over about the last second.
    pub fn recent_on_disk(&self, disk: &Disk) -> HashMap<u32, f64> {
        self.each_on(disk, |r| r.recent)
    }

    fn each_on(&self, disk: &Disk, pick: fn(&Rate) -> f64) -> HashMap<u32, f64> {
        self.ema
            .iter()
            .filter(|((_, d), _)| d == disk)
            .map(|((p, _), v)| (*p, pick(v)))
            .collect()
    }

    /// What the processes `pids` dirty on `disk` together.
    pub fn of(&self, disk: &Disk, pids: impl IntoIterator<Item = u32>) -> Rate {
        let mut sum = Rate::default();
        for pid in pids {
            if let Some(r) = self.ema.get(&(pid, disk.clone())) {
                sum.add(*r);
            }
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model::sample::WriteDelta, system::devices::DevId};

    fn disk() -> Disk {
        Disk {
            id: DevId {
                major: 254,
                minor: 16,
            },
            name: Some("vdb".into()),
        }
    }

    fn sample(pid: u32, bytes: u64, lifecycle: Vec<Lifecycle>) -> Sample {
        let mut s = Sample {
            elapsed: Duration::from_secs(1),
            lifecycle,
            ..Sample::default()
        };
        if bytes > 0 {
            s.writes.insert(
                (pid, disk()),
                WriteDelta {
                    dirtied_bytes: bytes,
                    ..WriteDelta::default()
                },
            );
        }
        s
    }

    /// Files are smoothed beside bytes and go to the heir with them.
    #[test]
    fn files_are_smoothed_with_the_bytes_and_bequeathed() {
        let mut r = Rates::new(Duration::from_secs(8));
        let mut tree = ProcessTree::default();
        for (pid, ppid, comm) in [(1, 0, "sh"), (7, 1, "tar")] {
            tree.apply(&Lifecycle::Fork {
                pid,
                ppid,
                comm: comm.into(),
            });
        }
        let mut s = sample(7, 32_768 * 400, vec![]);
        s.writes.get_mut(&(7, disk())).unwrap().files_started = 400;
        for _ in 0..60 {
            r.update(&s, &tree);
        }
        let tar = r.of(&disk(), [7]);
        assert!((tar.files - 400.0).abs() < 1.0, "{tar:?}");
        assert!((tar.bytes / tar.files - 32_768.0).abs() < 1.0, "{tar:?}");
        let exit = Lifecycle::Exit {
            pid: 7,
            comm: "tar".into(),
        };
        tree.apply(&exit);
        r.update(&sample(0, 0, vec![exit]), &tree);
        assert!(r.of(&disk(), [7]).files == 0.0);
        assert!(
            r.of(&disk(), [1]).files > 300.0,
            "the parent carries the files"
        );
    }

    /// The last second's rate catches a new writer up where the average still climbs, and a
    /// step a few milliseconds after the last moves it by as little as it measured.
    #[test]
    fn the_recent_rate_follows_a_new_writer_within_seconds() {
        let mut r = Rates::new(Duration::from_secs(8));
        let tree = ProcessTree::default();
        r.update(&sample(7, 14_000_000, vec![]), &tree);
        r.update(&sample(7, 14_000_000, vec![]), &tree);
        let average = r.on_disk(&disk())[&7];
        let recent = r.recent_on_disk(&disk())[&7];
        assert!(average < 5e6, "{average}");
        assert!(
            (recent - 14e6 * (1.0 - (-2.0f64).exp())).abs() < 1.0,
            "{recent}"
        );
        let mut quick = sample(7, 0, vec![]);
        quick.elapsed = Duration::from_millis(10);
        r.update(&quick, &tree);
        let after = r.recent_on_disk(&disk())[&7];
        assert!(
            after > 0.98 * recent && after < recent,
            "{after} after {recent}"
        );
    }

    #[test]
    fn converges_with_the_thesis_time_constant() {
        let mut r = Rates::new(Duration::from_secs(8));
        let tree = ProcessTree::default();
        r.update(&sample(7, 100_000_000, vec![]), &tree);
        let first = r.on_disk(&disk())[&7];
        let alpha = 1.0 - (-1.0f64 / 8.0).exp();
        assert!((first - alpha * 1e8).abs() < 1.0);
        for _ in 0..40 {
            r.update(&sample(7, 100_000_000, vec![]), &tree);
        }
        assert!((r.on_disk(&disk())[&7] - 1e8).abs() < 1e6);
        for _ in 0..200 {
            r.update(&sample(7, 0, vec![]), &tree);
        }
        assert!(
            r.on_disk(&disk()).is_empty(),
            "a silent writer is forgotten"
        );
    }
}
