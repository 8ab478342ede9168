//! ioprio_get/ioprio_set(2) on single threads (ioprio is per thread; children inherit it).
use std::io;

const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const CLASS_SHIFT: u16 = 13;
pub const CLASS_NONE: u16 = 0;
pub const CLASS_IDLE: u16 = 3;
/// The idle class: the thread's I/O is served only when the disk is otherwise idle.
pub const IDLE: u16 = CLASS_IDLE << CLASS_SHIFT;

pub fn get(tid: u32) -> io::Result<u16> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid as libc::c_int) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as u16)
}

pub fn set(tid: u32, value: u16) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            tid as libc::c_int,
            value as libc::c_int,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn class(value: u16) -> u16 {
    value >> CLASS_SHIFT
}

pub fn describe(value: u16) -> String {
    let level = value & ((1 << CLASS_SHIFT) - 1);
    match class(value) {
        0 => "none".to_string(),
        1 => format!("realtime/{level}"),
        2 => format!("best-effort/{level}"),
        3 => "idle".to_string(),
        c => format!("class {c}/{level}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_get_on_a_real_thread() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let tid = child.id();
        let before = get(tid).unwrap();
        set(tid, IDLE).unwrap();
        assert_eq!(get(tid).unwrap(), IDLE);
        set(tid, before).unwrap();
        assert_eq!(get(tid).unwrap(), before);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(get(tid).is_err());
        assert_eq!(describe(IDLE), "idle");
        assert_eq!(describe((2 << 13) | 4), "best-effort/4");
    }
}
