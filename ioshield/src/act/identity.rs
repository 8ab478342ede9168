//! Telling a process (or thread) from a later one that got the same id.
use std::os::fd::{AsRawFd, OwnedFd};

use crate::{journal::Identity, system::procfs};

pub fn of_process(pid: u32) -> Option<Identity> {
    Some(Identity {
        id: pid,
        start_time: procfs::start_time(pid)?,
    })
}

/// `/proc/TID/stat` also answers for threads that are not group leaders.
pub fn of_thread(tid: u32) -> Option<Identity> {
    of_process(tid)
}

/// True if the id still names the same process or thread.
pub fn is_current(who: &Identity) -> bool {
    check(who).unwrap_or(false)
}

/// Whether the id still names the same process or thread; an error when /proc could not be
/// read for another reason than the process being gone (then nothing may be concluded).
pub fn check(who: &Identity) -> Result<bool, String> {
    procfs::start_time_checked(who.id)
        .map(|t| t == Some(who.start_time))
        .map_err(|e| format!("cannot tell whether {} still runs: {e}", who.id))
}

/// A pidfd pins a process: after acting on a bare pid, asking the pidfd whether the process is
/// still alive tells us whether the pid could have been recycled in between.
pub struct PidFd(OwnedFd);

impl PidFd {
    pub fn open(pid: u32) -> Option<PidFd> {
        procfs::pidfd_open(pid).ok().map(PidFd)
    }

    pub fn alive(&self) -> bool {
        // SAFETY: signal 0 only checks; the fd is ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_tell_processes_apart() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let who = of_process(child.id()).unwrap();
        assert!(is_current(&who));
        let fd = PidFd::open(child.id()).unwrap();
        assert!(fd.alive());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!fd.alive());
        assert!(!is_current(&who));
        assert!(!is_current(&Identity {
            id: std::process::id(),
            start_time: who.start_time + 1_000_000,
        }));
    }
}
