//! Processes as /proc shows them.
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    /// Session id: a process with `session == pid` leads a login session (a login shell).
    pub session: u32,
    pub comm: String,
    pub uid: Option<u32>,
    /// Start time in clock ticks since boot: with the pid, an identity that survives pid reuse.
    pub start_time: u64,
    /// Kernel threads have no user memory and must never be chosen as offenders.
    pub kernel_thread: bool,
}

/// /proc as the process tree's source of processes it did not see born.
pub struct Procfs;

impl crate::model::tree::ProcessSource for Procfs {
    fn read(&self, pid: u32) -> Option<ProcInfo> {
        read(pid)
    }
    fn scan(&self) -> Vec<ProcInfo> {
        scan()
    }
    fn cgroup(&self, pid: u32) -> Option<std::path::PathBuf> {
        super::cgroups::of_process(pid)
    }
}

pub fn read(pid: u32) -> Option<ProcInfo> {
    let mut info = parse_stat(pid, &read_stat(pid)?)?;
    info.uid = read_uid(pid);
    Some(info)
}

/// `/proc/PID/stat` (also answers for thread ids). A process may name itself with any bytes, so
/// invalid UTF-8 in its name must not make the whole file unreadable.
fn read_stat(pid: u32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Start time in clock ticks since boot of a process or thread: with the id, an identity that
/// survives id reuse. `None` when it is gone.
pub fn start_time(id: u32) -> Option<u64> {
    start_time_checked(id).ok().flatten()
}

/// Like [`start_time`], but tells "gone" (`Ok(None)`) from "could not look" (an error such as
/// running out of file descriptors), which must not be taken for "gone".
pub fn start_time_checked(id: u32) -> std::io::Result<Option<u64>> {
    match std::fs::read(format!("/proc/{id}/stat")) {
        Ok(bytes) => Ok(parse_stat(id, &String::from_utf8_lossy(&bytes)).map(|p| p.start_time)),
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn parse_stat(pid: u32, stat: &str) -> Option<ProcInfo> {
    // comm may itself contain spaces and parentheses: it runs to the last ')'.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // rest[0] is field 3 (state); ppid is field 4, session 6, flags 9, starttime 22.
    let ppid = rest.get(1)?.parse().ok()?;
    let session = rest.get(3)?.parse().ok()?;
    let flags: u64 = rest.get(6)?.parse().ok()?;
    let start_time = rest.get(19)?.parse().ok()?;
    const PF_KTHREAD: u64 = 0x0020_0000;
    Some(ProcInfo {
        pid,
        ppid,
        session,
        comm,
        uid: None,
        start_time,
        kernel_thread: flags & PF_KTHREAD != 0,
    })
}

fn read_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read(format!("/proc/{pid}/status")).ok()?;
    let status = String::from_utf8_lossy(&status);
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The parent, grandparent, ... of `pid` as /proc shows them now, up to init.
pub fn ancestors(pid: u32) -> impl Iterator<Item = u32> {
    let mut next = read(pid).map(|p| p.ppid);
    std::iter::from_fn(move || {
        let pid = next.filter(|&p| p > 0)?;
        next = read(pid).map(|p| p.ppid).filter(|&pp| pp != pid);
        Some(pid)
    })
    .take(256)
}

pub fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

pub fn scan() -> Vec<ProcInfo> {
    pids().into_iter().filter_map(read).collect()
}

pub fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// A descriptor that pins process `pid` (`pidfd_open`): what it names cannot be recycled.
pub fn pidfd_open(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us, owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

/// Thread ids of a process.
pub fn threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The command line, arguments joined by spaces; a kernel thread (or a process that cleared
/// it) has none.
pub fn cmdline(pid: u32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = bytes
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!args.is_empty()).then(|| args.join(" "))
}

/// A user given by name or number, as `-u` takes it; `None` when no such user exists.
pub fn user_id(user: &str) -> Option<u32> {
    if let Ok(uid) = user.parse() {
        return Some(uid);
    }
    nix::unistd::User::from_name(user)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw())
}

pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comm_with_parentheses_and_spaces() {
        let stat = "42 (a (b) c) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        let p = parse_stat(42, stat).unwrap();
        assert_eq!(p.comm, "a (b) c");
        assert_eq!(p.ppid, 7);
        assert_eq!(p.session, 42);
        assert_eq!(p.start_time, 12345);
        assert!(!p.kernel_thread);
    }

    #[test]
    fn reads_this_process() {
        let me = read(std::process::id()).unwrap();
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw() as u32);
        assert_eq!(me.uid, Some(nix::unistd::getuid().as_raw()));
        assert!(threads(me.pid).contains(&me.pid));
        let kthreadd = read(2).expect("kthreadd");
        assert!(kthreadd.kernel_thread);
    }
}
