//! One daemon per state file. A second one would read the first's live journal as leftovers of a
//! crash, undo its restrictions and take over its socket; so before the journal is read, the
//! daemon takes an exclusive lock on `<state file>.lock`, which the kernel drops when the
//! process dies however it dies (no stale lock after SIGKILL, unlike a pid file alone).
use std::{
    fs::File,
    io::{Read as _, Seek as _, Write as _},
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

/// Held for the daemon's lifetime: dropping it (closing the file) releases the lock.
pub struct InstanceLock {
    _file: File,
}

pub fn lock_path(state_file: &Path) -> PathBuf {
    let mut name = state_file.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    state_file.with_file_name(name)
}

impl InstanceLock {
    pub fn acquire(state_file: &Path) -> Result<InstanceLock> {
        let path = lock_path(state_file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // Not truncated on open: the holder's pid must survive a second instance's attempt.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening the instance lock {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                bail!("locking {}: {err}", path.display());
            }
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let who = match holder.trim().parse::<u32>() {
                Ok(pid) => format!("pid {pid}"),
                Err(_) => "another process".to_string(),
            };
            bail!(
                "another ioshield daemon ({who}) is running with this state file: it holds {}",
                path.display()
            );
        }
        // Only for the message above: the lock, not this number, decides.
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        Ok(InstanceLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_state_file_is_refused_with_the_holders_pid() {
        let dir = std::env::temp_dir().join(format!("ioshield-lock-{}", std::process::id()));
        let state = dir.join("state.json");
        let first = InstanceLock::acquire(&state).unwrap();
        let second = InstanceLock::acquire(&state).err().unwrap().to_string();
        assert!(
            second.contains(&format!("pid {}", std::process::id()))
                && second.contains("state.json.lock"),
            "{second}"
        );
        drop(first);
        InstanceLock::acquire(&state).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
