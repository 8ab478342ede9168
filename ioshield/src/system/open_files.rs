//! The regular files a process has open for writing on one disk, as descriptors of the daemon's
//! own (`act::writeback_kick` starts their writeback).
use std::{
    fs::File,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::fs::MetadataExt,
    },
};

use super::devices::{DevId, Devices};

/// The regular files `pid` holds open for writing (or reading and writing) whose file system is
/// on `disk`: copies of its own descriptors (`pidfd_getfd`), so that a file only its owner may
/// open is reached too and nothing is opened again. Its descriptors are listed from
/// `/proc/PID/fdinfo`, which the kernel shows to whoever may trace the process; `/proc/PID/fd`
/// also wants the owner's file permissions, which root without CAP_DAC_READ_SEARCH lacks for
/// another user's process. Both that and copying a descriptor take CAP_SYS_PTRACE for any
/// process whose capabilities the daemon's do not cover (`Err` when refused).
pub fn written_on(pid: u32, disk: DevId, devices: &mut Devices) -> io::Result<Vec<File>> {
    let mut files = Vec::new();
    let mut pidfd = None;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        match std::fs::read_to_string(entry.path()) {
            Ok(info) if access_mode(&info).is_some_and(|m| m != libc::O_RDONLY) => {}
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(e),
            // Closed meanwhile.
            Err(_) => continue,
        }
        if pidfd.is_none() {
            pidfd = Some(super::procfs::pidfd_open(pid)?);
        }
        let Some(pidfd) = &pidfd else { continue };
        match copy_fd(pidfd, fd) {
            Ok(file) if regular_on(&file, disk, devices) => files.push(file),
            // A socket, a pipe, a file on another disk: the copy is closed again, which leaves
            // the process's own descriptor as it was.
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(e),
            Err(_) => {}
        }
    }
    Ok(files)
}

/// The access mode of a descriptor (`flags:` in its fdinfo, octal).
fn access_mode(fdinfo: &str) -> Option<i32> {
    let flags = fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))?
        .trim();
    Some(i32::from_str_radix(flags, 8).ok()? & libc::O_ACCMODE)
}

/// A copy of descriptor `fd` of the process behind `pidfd`, sharing its open file.
fn copy_fd(pidfd: &OwnedFd, fd: i32) -> io::Result<File> {
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number and flags, and returns a new
    // descriptor (close-on-exec) or -1.
    let new = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { File::from_raw_fd(new as i32) })
}

/// Whether the copied descriptor is a regular file on `disk`, still open for writing (the
/// process may have put something else under that number since its fdinfo was read).
fn regular_on(file: &File, disk: DevId, devices: &mut Devices) -> bool {
    // SAFETY: F_GETFL on a descriptor the File owns.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0
        && flags & libc::O_ACCMODE != libc::O_RDONLY
        && file
            .metadata()
            .is_ok_and(|m| m.is_file() && devices.resolve(DevId::from_user(m.dev())).id == disk)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_access_mode_comes_from_fdinfos_octal_flags() {
        let info = "pos:\t0\nflags:\t0100001\nmnt_id:\t29\nino:\t12\n";
        assert_eq!(access_mode(info), Some(libc::O_WRONLY));
        assert_eq!(access_mode("flags:\t02100002\n"), Some(libc::O_RDWR));
        assert_eq!(access_mode("flags:\t0100000\n"), Some(libc::O_RDONLY));
        assert_eq!(access_mode("pos:\t0\n"), None);
    }

    #[test]
    fn finds_the_files_this_process_writes_on_their_disk_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let mut written = File::create(dir.path().join("written")).unwrap();
        written.write_all(b"dirty").unwrap();
        std::fs::write(dir.path().join("read"), b"x").unwrap();
        let _read = File::open(dir.path().join("read")).unwrap();
        let st_dev = written.metadata().unwrap().dev();
        let mut devices = Devices::default();
        let disk = devices.resolve(DevId::from_user(st_dev)).id;
        let files = written_on(std::process::id(), disk, &mut devices).unwrap();
        let ino = written.metadata().unwrap().ino();
        let found: Vec<u64> = files.iter().map(|f| f.metadata().unwrap().ino()).collect();
        assert!(found.contains(&ino), "{found:?} lacks {ino}");
        let read_ino = std::fs::metadata(dir.path().join("read")).unwrap().ino();
        assert!(!found.contains(&read_ino));
        // On a disk it does not write to, nothing.
        let elsewhere = DevId {
            major: 4095,
            minor: 0,
        };
        assert!(
            written_on(std::process::id(), elsewhere, &mut devices)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn finds_the_file_another_process_writes() {
        let dir = tempfile::tempdir().unwrap();
        let out = File::create(dir.path().join("out")).unwrap();
        let ino = out.metadata().unwrap().ino();
        let mut devices = Devices::default();
        let disk = devices
            .resolve(DevId::from_user(out.metadata().unwrap().dev()))
            .id;
        // Another user's, as a user's own unit is, where root may: its /proc/PID/fd is then
        // closed to root without CAP_DAC_READ_SEARCH, which the daemon's unit does not keep.
        let mut sleep = std::process::Command::new("sleep");
        if nix::unistd::geteuid().is_root() {
            std::os::unix::process::CommandExt::uid(&mut sleep, 65534);
        }
        // Its other descriptors /dev/null: the test's own output may be a file on that disk.
        let mut child = sleep
            .arg("10")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let found = written_on(child.id(), disk, &mut devices);
        child.kill().unwrap();
        child.wait().unwrap();
        let found: Vec<u64> = found
            .unwrap()
            .iter()
            .map(|f| f.metadata().unwrap().ino())
            .collect();
        assert_eq!(found, vec![ino]);
    }
}
