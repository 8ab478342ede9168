//! The innocent loads: each does a tiny bit of work, sleeps a fixed time, and notes when the
//! cycle ended. Any extra time is a stall caused by someone else.
use std::{
    fs::{self, File, OpenOptions},
    io::{Seek as _, SeekFrom, Write as _},
    path::{Path, PathBuf},
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result};

use super::{clock, record::LoadRecord};

/// The thesis's loads and their sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Innocent {
    /// Sleeps 50 ms: no I/O, so its pauses are CPU and timer noise (subtract them).
    Control,
    /// Writes 6 bytes to a file kept open, sleeps 50 ms: stalls on inode/journal updates.
    Write,
    /// Creates a new file, writes to it, closes it, sleeps 100 ms: stalls on the journal too, and
    /// suffers most in the thesis (openat).
    Multiwrite,
    /// Appends 4 KiB to a file kept open and `fdatasync`s it, sleeps 100 ms: a database's
    /// commit. Its pauses are commit latencies beyond the sleep.
    Commit,
    /// The same commit once a second (4 kB/s): a light appender, such as a mail or chat
    /// client's database, which writes too little for the smoothed rates to keep.
    Appender,
    /// Writes 1 MiB through the page cache, no sync, sleeps 100 ms (10 MB/s, over a file of
    /// 64 MiB written round): a download, a build's objects. Enough dirtying to enter the
    /// kernel's dirty throttling, so its pauses show it, and the machine-wide dirty limit
    /// that a slow disk's backlog can reach.
    Bulk,
}

impl Innocent {
    pub fn name(self) -> &'static str {
        match self {
            Innocent::Control => "control",
            Innocent::Write => "write",
            Innocent::Multiwrite => "multiwrite",
            Innocent::Commit => "commit",
            Innocent::Appender => "appender",
            Innocent::Bulk => "bulk",
        }
    }

    pub fn nominal(self) -> Duration {
        match self {
            Innocent::Control | Innocent::Write => Duration::from_millis(50),
            Innocent::Multiwrite | Innocent::Commit | Innocent::Bulk => Duration::from_millis(100),
            Innocent::Appender => Duration::from_secs(1),
        }
    }
}

const PAYLOAD: &[u8] = b"hello\n";
/// One database page per commit.
const COMMIT_BYTES: usize = 4096;
/// The bulk writer's write, and the size of the file it writes round.
const BULK_BYTES: usize = 1 << 20;
const BULK_FILE_BYTES: u64 = 64 << 20;

/// Runs `load` for `duration` (or until SIGTERM) in `dir`, which the write loads write into.
pub fn run(load: Innocent, duration: Duration, dir: &Path) -> Result<LoadRecord> {
    let mut work = Work::open(load, dir)?;
    let nominal = load.nominal();
    let start = clock::now();
    let deadline = start + duration.as_secs_f64();
    let mut ends = Vec::with_capacity((duration.as_millis() / nominal.as_millis()) as usize + 16);
    while !clock::stop_requested() {
        work.cycle()?;
        thread::sleep(nominal);
        let end = clock::now();
        ends.push(end);
        if end >= deadline {
            break;
        }
    }
    Ok(LoadRecord::new(
        load.name(),
        nominal.as_secs_f64(),
        start,
        ends,
        work.bytes,
    ))
}

/// One cycle's I/O, with what it needs kept between cycles.
struct Work {
    load: Innocent,
    open_file: Option<File>,
    dir: PathBuf,
    created: u64,
    bytes: u64,
}

impl Work {
    fn open(load: Innocent, dir: &Path) -> Result<Self> {
        let open_file = match load {
            Innocent::Write | Innocent::Commit | Innocent::Appender | Innocent::Bulk => {
                let path = dir.join(format!("{}-{}.log", load.name(), std::process::id()));
                Some(
                    OpenOptions::new()
                        .create(true)
                        .write(true)
                        .append(load != Innocent::Bulk)
                        .open(&path)
                        .with_context(|| format!("opening {}", path.display()))?,
                )
            }
            _ => None,
        };
        let dir = match load {
            Innocent::Multiwrite => {
                let d = dir.join(format!("multiwrite-{}", std::process::id()));
                fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
                d
            }
            _ => dir.to_path_buf(),
        };
        Ok(Work {
            load,
            open_file,
            dir,
            created: 0,
            bytes: 0,
        })
    }

    fn cycle(&mut self) -> Result<()> {
        match self.load {
            Innocent::Control => {}
            Innocent::Write => {
                let f = self.open_file.as_mut().expect("opened for the write load");
                f.write_all(PAYLOAD).context("write load")?;
                self.bytes += PAYLOAD.len() as u64;
            }
            Innocent::Commit | Innocent::Appender => {
                let f = self.open_file.as_mut().expect("opened for the commit load");
                f.write_all(&[b'c'; COMMIT_BYTES]).context("commit load")?;
                f.sync_data().context("commit load: fdatasync")?;
                self.bytes += COMMIT_BYTES as u64;
            }
            Innocent::Bulk => {
                let f = self.open_file.as_mut().expect("opened for the bulk load");
                if self.bytes.is_multiple_of(BULK_FILE_BYTES) {
                    f.seek(SeekFrom::Start(0)).context("bulk load: seek")?;
                }
                f.write_all(&[b'b'; BULK_BYTES]).context("bulk load")?;
                self.bytes += BULK_BYTES as u64;
            }
            Innocent::Multiwrite => {
                let path = self.dir.join(format!("f{}", self.created));
                let mut f =
                    File::create(&path).with_context(|| format!("creating {}", path.display()))?;
                f.write_all(PAYLOAD).context("multiwrite load")?;
                drop(f);
                self.created += 1;
                self.bytes += PAYLOAD.len() as u64;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bulk writer writes its file round: what it keeps on the disk stays bounded however
    /// long it runs, while every write counts.
    #[test]
    fn the_bulk_writer_writes_its_file_round() {
        let dir = std::env::temp_dir().join(format!("ioshield-bulk-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut work = Work::open(Innocent::Bulk, &dir).unwrap();
        let cycles = BULK_FILE_BYTES as usize / BULK_BYTES + 3;
        for _ in 0..cycles {
            work.cycle().unwrap();
        }
        assert_eq!(work.bytes, (cycles * BULK_BYTES) as u64);
        let file = dir.join(format!("bulk-{}.log", std::process::id()));
        assert_eq!(fs::metadata(&file).unwrap().len(), BULK_FILE_BYTES);
        fs::remove_dir_all(&dir).unwrap();
    }
}
