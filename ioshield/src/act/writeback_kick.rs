//! A writer held in place, on its own systemd unit, has the writeback of its open files
//! started at once.
//!
//! systemd enables the io controller on a unit only when it has io settings, so for a service
//! ioshield's write property is what turns it on. The kernel writes a memory cgroup's dirty
//! pages through a writeback structure paired with the io cgroup in effect when it was made:
//! the parent's, before. The writer's next write after the change finds the pair out of date
//! and retires it, and nothing but the kernel's periodic flusher (every
//! `dirty_writeback_centisecs`, 5 s) writes what the retired one holds: the pages dirtied
//! before the restriction, all of the writer's open file. Meanwhile the writer is over its
//! cgroup's dirty limit and crawls: in copy services restricted holding 12-24 MB the disk wrote
//! nothing for 2.4-4.5 s in 13 of 15 copies (tests/vm/in-place-copies.sh), and the e2e's daemon
//! released 8 of 18 held copies as calm before restricting them again
//! (docs/bench/writeback-kick.md). Any writeback of a file moves it off a
//! retired structure (the kernel's `wbc_attach_and_unlock_inode`); `sync_file_range` of its
//! first page is enough, and what was dirty goes on under the unit's new limits. The kick is
//! repeated for two seconds because the structure is retired only by a write after systemd
//! applied the property, which may come after its answer. Nothing is changed that needs undoing:
//! the kernel writes the same pages a few seconds later by itself.
use std::{
    fs::File,
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::system::{
    cgroups,
    devices::{DevId, Devices},
    open_files,
};

/// When to look for the writers' files, after the restriction (each a pause before the next
/// look): the first at once, the last 2 s after.
const SCHEDULE: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_millis(200),
    Duration::from_millis(300),
    Duration::from_millis(500),
    Duration::from_secs(1),
];

/// Starts the writeback of the files the processes in `cgroup` (absolute path) write on `disk`,
/// now and a few times over the next two seconds, in a thread of its own (the first page of a
/// file may be dirty, and writing it waits for the disk). `place` names the unit in the log.
pub fn start_soon(place: String, cgroup: PathBuf, disk: DevId) {
    let spawned = std::thread::Builder::new()
        .name("writeback-kick".into())
        .spawn(move || kick_for_a_while(&place, &cgroup, disk));
    if let Err(e) = spawned {
        tracing::warn!("no thread to start the writeback of a held unit's files ({e})");
    }
}

fn kick_for_a_while(place: &str, cgroup: &std::path::Path, disk: DevId) {
    let started = Instant::now();
    let mut devices = Devices::default();
    let mut told = false;
    let mut refused = false;
    for pause in SCHEDULE {
        std::thread::sleep(pause);
        let mut kicked = 0;
        for pid in cgroups::procs_below(cgroup) {
            match open_files::written_on(pid, disk, &mut devices) {
                Ok(files) => kicked += files.iter().filter(|f| start_writeback(f)).count(),
                // Only a refusal is worth a line: a process that ended meanwhile has nothing
                // left to write.
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && !refused => {
                    refused = true;
                    tracing::info!(
                        "{place}: the files pid {pid} writes are out of reach ({e}): the pages \
                         it dirtied before its restriction wait for the kernel's periodic \
                         writeback (up to 5 s)"
                    );
                }
                Err(_) => {}
            }
        }
        if kicked > 0 && !told {
            told = true;
            tracing::info!(
                "{place}: writeback of the {kicked} file(s) its processes write started {} ms \
                 after the restriction, rather than by the kernel's periodic writeback up to 5 s \
                 later (the pages dirtied before its io control was turned on)",
                started.elapsed().as_millis()
            );
        }
    }
}

/// `sync_file_range` of the file's first page, without waiting for it: the file's writeback
/// goes on through the kernel's current writeback structure for its cgroup.
fn start_writeback(file: &File) -> bool {
    super::backlog_split::start_page(file, 0)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_dirty_files_writeback_starts() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = File::create(dir.path().join("f")).unwrap();
        file.write_all(&[7u8; 8192]).unwrap();
        let again = File::open(dir.path().join("f")).unwrap();
        assert!(start_writeback(&again));
    }
}
