//! Disk speeds measured in earlier runs, kept per disk identity in the service's state
//! directory, so that a restarted daemon judges writers right from the first second instead of
//! against the kernel's 100 MiB/s guess. The file is ioshield's own; it changes nothing else.
//!
//! A JSON object of bytes per second by disk identity (`"serial:data": 30100000.0`); a lower
//! bound (what the disk wrote without a backlog: a short copy held under a restriction never
//! shows more; or a rate the speed probe forced for the disk's room and held) is kept under the identity with [`AT_LEAST`] in front, so that an older daemon
//! reading the file ignores it instead of taking it for the disk's speed; the rate at which a
//! speed probe's window showed the disk without room to spare, under [`NO_ROOM`].
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use super::speed_probe::{NoRoom, covered_by_no_room};
use crate::detect::bandwidth::Kept;

/// In front of a disk's identity: the value is a lower bound of its speed. Identities start
/// with `wwid:`, `serial:`, `dm-uuid:`, `dm-name:`, `md-uuid:` or `model:`.
const AT_LEAST: &str = "at-least:";
/// In front of a disk's identity: the rate held when a window of the speed probe showed that
/// the disk queues at that rate (`SpeedProbe`): a disk never measured (short copies end before
/// the probe forces the rate) would otherwise pay for the same answer in every restriction.
const NO_ROOM: &str = "no-room:";
/// In front of a disk's identity: when its [`NO_ROOM`] answer was given, in seconds since the
/// epoch (the answer stands for `NO_ROOM_KEPT`). An answer kept without one (by stop 40's
/// daemon) counts from the moment it is read.
const NO_ROOM_SINCE: &str = "no-room-since:";

/// At most one write a minute while the values move.
const SAVE_EVERY: Duration = Duration::from_secs(60);
/// Changes smaller than this are not worth a write.
const WORTH_SAVING: f64 = 0.05;

pub struct SpeedFile {
    path: PathBuf,
    /// Bytes per second by disk identity, lower bounds under [`AT_LEAST`] + identity.
    known: BTreeMap<String, f64>,
    saved: BTreeMap<String, f64>,
    last_save: Option<Instant>,
}

impl SpeedFile {
    /// Reads the file; a missing file is an empty one, an unreadable one is said once and
    /// replaced on the next save.
    pub fn load(path: &Path) -> SpeedFile {
        let known: BTreeMap<String, f64> = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "disk speeds file {} is not readable ({e}); measuring again",
                    path.display()
                );
                BTreeMap::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::warn!("cannot read disk speeds file {}: {e}", path.display());
                BTreeMap::new()
            }
        };
        let mut known: BTreeMap<String, f64> = known
            .into_iter()
            .filter(|(_, v)| v.is_finite() && *v > 0.0)
            .collect();
        let read = known.clone();
        let unstamped: Vec<String> = known
            .keys()
            .filter_map(|k| k.strip_prefix(NO_ROOM))
            .filter(|i| !known.contains_key(&format!("{NO_ROOM_SINCE}{i}")))
            .map(str::to_string)
            .collect();
        for identity in unstamped {
            known.insert(
                format!("{NO_ROOM_SINCE}{identity}"),
                epoch_seconds(SystemTime::now()),
            );
        }
        SpeedFile {
            path: path.to_path_buf(),
            // A time stamped here is not in the file yet.
            saved: read,
            known,
            last_save: None,
        }
    }

    /// The disk's speed if one is kept, else a lower bound if one is.
    pub fn get(&self, identity: &str) -> Option<Kept> {
        if let Some(&v) = self.known.get(identity) {
            return Some(Kept::Speed(v));
        }
        let v = *self.known.get(&format!("{AT_LEAST}{identity}"))?;
        Some(Kept::AtLeast(v))
    }

    /// Keeps `kept` for the disk, in place of whatever was kept for it. A measured speed, or
    /// a lower bound beyond it (as the speed probe judges one), makes the disk's "no room" rate
    /// moot.
    pub fn set(&mut self, identity: &str, kept: Kept) {
        let floor_key = format!("{AT_LEAST}{identity}");
        let (key, other, v) = match kept {
            Kept::Speed(v) => (identity.to_string(), floor_key, v),
            Kept::AtLeast(v) => (floor_key, identity.to_string(), v),
        };
        if matches!(kept, Kept::Speed(_))
            || self
                .no_room(identity)
                .is_some_and(|n| v > n.rate && !covered_by_no_room(v, n.rate))
        {
            self.set_no_room(identity, None);
        }
        self.known.remove(&other);
        self.known.insert(key, v);
    }

    /// The rate at which the disk showed no room to spare, and when, if it did and was not
    /// measured since.
    pub fn no_room(&self, identity: &str) -> Option<NoRoom> {
        let rate = *self.known.get(&format!("{NO_ROOM}{identity}"))?;
        let since = self
            .known
            .get(&format!("{NO_ROOM_SINCE}{identity}"))
            .map_or(SystemTime::UNIX_EPOCH, |s| {
                SystemTime::UNIX_EPOCH + Duration::from_secs_f64(*s)
            });
        Some(NoRoom { rate, since })
    }

    /// Keeps the rate at which the disk showed no room to spare and when, or forgets it
    /// (`None`: the disk showed room).
    pub fn set_no_room(&mut self, identity: &str, answer: Option<NoRoom>) {
        let (rate, since) = (
            format!("{NO_ROOM}{identity}"),
            format!("{NO_ROOM_SINCE}{identity}"),
        );
        match answer {
            Some(n) => {
                self.known.insert(rate, n.rate);
                self.known.insert(since, epoch_seconds(n.since));
            }
            None => {
                self.known.remove(&rate);
                self.known.remove(&since);
            }
        }
    }

    /// Writes the file if a value moved enough since the last write and the last write is a
    /// minute old (or `now` is set: on exit).
    pub fn save(&mut self, now: bool) {
        let moved = self.saved.keys().any(|k| !self.known.contains_key(k))
            || self.known.iter().any(|(k, v)| {
                self.saved
                    .get(k)
                    .is_none_or(|s| (v / s - 1.0).abs() > WORTH_SAVING)
            });
        let due = now || self.last_save.is_none_or(|t| t.elapsed() >= SAVE_EVERY);
        if !moved || !due {
            return;
        }
        self.last_save = Some(Instant::now());
        match write_atomically(&self.path, &self.known) {
            Ok(()) => self.saved = self.known.clone(),
            Err(e) => tracing::warn!("cannot write disk speeds file {}: {e}", self.path.display()),
        }
    }
}

/// Whole seconds since the epoch (0 for a clock before it): the file's numbers are `f64`.
fn epoch_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs() as f64)
}

fn write_atomically(path: &Path, known: &BTreeMap<String, f64>) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(known)?)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_survive_a_restart_and_bad_files_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib/disks.json");
        let mut f = SpeedFile::load(&path);
        let data = |path: &Path| SpeedFile::load(path).get("serial:data");
        assert_eq!(f.get("serial:data"), None);
        f.set("serial:data", Kept::Speed(30e6));
        f.save(false);
        assert_eq!(data(&path), Some(Kept::Speed(30e6)));
        // A small move is not written; a large one is, but at most once a minute unless now.
        f.set("serial:data", Kept::Speed(30.5e6));
        f.save(true);
        assert_eq!(data(&path), Some(Kept::Speed(30e6)));
        f.set("serial:data", Kept::Speed(60e6));
        f.save(false);
        assert_eq!(data(&path), Some(Kept::Speed(30e6)));
        f.save(true);
        assert_eq!(data(&path), Some(Kept::Speed(60e6)));
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(data(&path), None);
        std::fs::write(&path, r#"{"a": -1, "b": 5e7}"#).unwrap();
        let f = SpeedFile::load(&path);
        assert_eq!((f.get("a"), f.get("b")), (None, Some(Kept::Speed(5e7))));
    }

    #[test]
    fn a_lower_bound_is_kept_as_one_and_a_speed_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disks.json");
        let mut f = SpeedFile::load(&path);
        f.set("serial:nvme", Kept::AtLeast(80e6));
        f.save(true);
        let text = std::fs::read_to_string(&path).unwrap();
        // Under a key of its own: a daemon that knows only speeds finds no speed for the disk.
        let plain: BTreeMap<String, f64> = serde_json::from_str(&text).unwrap();
        assert_eq!(plain.get("serial:nvme"), None, "{text}");
        let mut f = SpeedFile::load(&path);
        assert_eq!(f.get("serial:nvme"), Some(Kept::AtLeast(80e6)));
        // Measured: the speed replaces the bound, in the file too.
        f.set("serial:nvme", Kept::Speed(75e6));
        f.save(true);
        let f = SpeedFile::load(&path);
        assert_eq!(f.get("serial:nvme"), Some(Kept::Speed(75e6)));
        assert_eq!(f.known.len(), 1, "{:?}", f.known);
    }

    const SINCE: u64 = 1_800_000_000;

    fn answer(rate: f64) -> NoRoom {
        NoRoom {
            rate,
            since: SystemTime::UNIX_EPOCH + Duration::from_secs(SINCE),
        }
    }

    #[test]
    fn a_no_room_rate_is_kept_until_the_disk_shows_more() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disks.json");
        let mut f = SpeedFile::load(&path);
        f.set_no_room("serial:stick", Some(answer(25e6)));
        f.set("serial:stick", Kept::AtLeast(20e6));
        f.save(true);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(r#""no-room:serial:stick": 25000000.0"#),
            "{text}"
        );
        assert!(
            text.contains(r#""no-room-since:serial:stick": 1800000000.0"#),
            "{text}"
        );
        let mut f = SpeedFile::load(&path);
        assert_eq!(f.no_room("serial:stick"), Some(answer(25e6)));
        // Neither the disk's speed nor its lower bound.
        assert_eq!(f.get("serial:stick"), Some(Kept::AtLeast(20e6)));
        assert_eq!(f.no_room("serial:other"), None);
        // A lower bound a quarter above the rate contradicts it (the step a window's room
        // would have taken), one under that does not (the bed's held writer showed 26.9 MB/s
        // under an answer at 25); a measured speed makes it moot.
        f.set("serial:stick", Kept::AtLeast(26.9e6));
        assert_eq!(f.no_room("serial:stick"), Some(answer(25e6)));
        f.set("serial:stick", Kept::AtLeast(31e6));
        assert_eq!(f.no_room("serial:stick"), Some(answer(25e6)));
        f.set("serial:stick", Kept::AtLeast(31.25e6));
        assert_eq!(f.no_room("serial:stick"), None);
        f.set_no_room("serial:stick", Some(answer(25e6)));
        f.set("serial:stick", Kept::Speed(24e6));
        assert_eq!(f.no_room("serial:stick"), None);
        f.set_no_room("serial:stick", Some(answer(25e6)));
        f.set_no_room("serial:stick", None);
        assert_eq!(f.no_room("serial:stick"), None);
        // Nothing of the answer is left in the file.
        f.save(true);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("no-room"), "{text}");
    }

    /// An answer kept without its time (stop 40's daemon) counts from when it is read, and
    /// the time is written with it.
    #[test]
    fn an_answer_kept_without_its_time_counts_from_its_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disks.json");
        std::fs::write(&path, r#"{"no-room:serial:data": 25000000}"#).unwrap();
        let before = SystemTime::now() - Duration::from_secs(1);
        let mut f = SpeedFile::load(&path);
        let kept = f.no_room("serial:data").unwrap();
        assert_eq!(kept.rate, 25e6);
        assert!(kept.since >= before, "{kept:?}");
        assert!(kept.fresh(SystemTime::now()));
        f.save(false);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""no-room-since:serial:data""#), "{text}");
    }
}
