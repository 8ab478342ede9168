//! A writer about to be held has its backlog cut into short runs before the kernel's flusher
//! writes it under the restriction.
//!
//! ext4 maps and writes a file's run of contiguous dirty pages (up to 8 MiB) under one journal
//! handle, and iocost puts the flusher to sleep for each of its bios while it holds it: the
//! next commit waits for that handle, and every process that writes to the filesystem waits for
//! the commit. Restricted with a second of backlog, the paced writer's first run was 8 MiB in 4
//! of 4 traced runs on the 30 MB/s bed, its handle held 64-284 ms, and the innocent loads
//! paused 0.23 s behind the longest (docs/bench/unwritten-backlog.md, "Stop 89"). A page whose
//! writeback has begun ends a run, so starting the writeback of one page every [`EVERY`]
//! leaves the flusher runs of at most that: 40 ms of the bed's disk. Nothing is changed that
//! needs undoing: the kernel would write those pages anyway, a little later.
use std::{fs::File, os::fd::AsRawFd};

use crate::system::{
    devices::{DevId, Devices},
    open_files,
};

/// How far apart the pages whose writeback is started are.
const EVERY: u64 = 1 << 20;
/// How far back from a file's end: a writer appends, so its backlog is the end of its files.
/// Five times the backlog of a second at the bed's speed, and 128 calls at most per file (24
/// calls took 31-34 ms in the bed).
const SPAN: u64 = 128 << 20;

/// Cuts the backlog of the files `pids` write on `disk`, in a thread of its own: the calls wait
/// for the journal, and the restriction should not. Done before the restriction's limits are
/// written, the pages' writes pass before its throttle; the flusher came 77-180 ms after.
pub fn start(pids: Vec<u32>, disk: DevId) {
    let spawned = std::thread::Builder::new()
        .name("backlog-split".into())
        .spawn(move || {
            let started = split(&pids, disk);
            tracing::debug!(
                "writeback started of {started} page(s) of the files pids {pids:?} write on \
                 {disk}, one every {} KiB, so that the flusher writes their backlog in short runs",
                EVERY >> 10
            );
        });
    if let Err(e) = spawned {
        tracing::warn!("no thread to cut a held writer's backlog into short runs ({e})");
    }
}

/// Starts the writeback of the pages at [`offsets`] of each file `pids` write on `disk`;
/// returns how many were started. A process out of reach or gone is passed over: its backlog
/// is written as the kernel would have.
fn split(pids: &[u32], disk: DevId) -> usize {
    let mut devices = Devices::default();
    let mut started = 0;
    for &pid in pids {
        let Ok(files) = open_files::written_on(pid, disk, &mut devices) else {
            continue;
        };
        for file in files {
            let Ok(meta) = file.metadata() else { continue };
            started += offsets(meta.len())
                .filter(|&at| start_page(&file, at))
                .count();
        }
    }
    started
}

/// The offsets of the pages to start in a file of `len` bytes: every [`EVERY`] over the last
/// [`SPAN`], oldest first (the flusher starts where it left off, at the oldest dirty page).
fn offsets(len: u64) -> impl Iterator<Item = u64> {
    let last = len.saturating_sub(1) / EVERY * EVERY;
    let first = (last.saturating_sub(SPAN - EVERY) / EVERY * EVERY).max(EVERY);
    (first..=last).step_by(EVERY as usize)
}

/// `sync_file_range` of the page at `offset`, without waiting for it.
pub(super) fn start_page(file: &File, offset: u64) -> bool {
    let Ok(offset) = i64::try_from(offset) else {
        return false;
    };
    // SAFETY: a plain system call on a descriptor the File owns for the call's duration.
    let r = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, 4096, libc::SYNC_FILE_RANGE_WRITE)
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn one_page_every_mebibyte_of_the_files_end() {
        assert_eq!(offsets(0).count(), 0);
        assert_eq!(offsets(MIB).count(), 0, "a file of one run needs no cut");
        assert_eq!(offsets(MIB + 1).collect::<Vec<_>>(), [MIB]);
        assert_eq!(
            offsets(25 * MIB + 4096).collect::<Vec<_>>(),
            (1..=25).map(|m| m * MIB).collect::<Vec<_>>()
        );
        let big: Vec<u64> = offsets(10_000 * MIB).collect();
        assert_eq!(big.len(), 128);
        assert_eq!(big.first(), Some(&(9_872 * MIB)));
        assert_eq!(big.last(), Some(&(9_999 * MIB)));
    }

    #[test]
    fn a_page_of_a_written_file_is_started() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
        let file = File::options().write(true).open(&path).unwrap();
        assert!(start_page(&file, MIB));
        assert!(
            !start_page(&file, u64::MAX),
            "an offset past i64 is refused, not wrapped"
        );
    }
}
