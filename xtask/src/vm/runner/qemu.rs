//! The qemu command line of the test bed: software emulation (KVM fails on these
//! machines), 2 vCPUs, 4 GiB, and virtio disks the guest finds by serial.
use std::{
    path::Path,
    process::{Command, Stdio},
};

/// The slow disk: 30 MB/s of writes, like a modest hard disk or a cheap SD card, unless a run
/// asks for another speed (`cargo xtask bench --disk-mbps`).
pub const DATA_WRITE_BPS: u64 = 30_000_000;
const MEMORY_MB: u32 = 4096;

pub struct Machine<'a> {
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    /// A root image and the systemd unit to boot; without one the initramfs is the whole system.
    pub image: Option<(&'a Path, &'a str)>,
    pub data: &'a Path,
    /// The data disk's write speed (qemu's throttle), bytes per second.
    pub data_write_bps: u64,
    pub results: &'a Path,
    /// A disk with no throttle (the guest's `/mnt/fast`), for innocents that write elsewhere
    /// than the slow disk: a desktop's system disk while a copy fills a USB stick. Last, so
    /// that the other disks keep the names they always had.
    pub fast: Option<&'a Path>,
}

pub fn command(m: &Machine) -> Command {
    // panic=-1 reboots on panic, which -no-reboot turns into qemu exiting.
    let mut append = "console=ttyS0 panic=-1 loglevel=4".to_string();
    let mut drives = Vec::new();
    if let Some((image, unit)) = m.image {
        append += &format!(" systemd.unit={unit} systemd.show_status=auto");
        // The cached image stays as built: the guest writes to a throw-away overlay.
        drives.push((image, ",snapshot=on".to_string(), "root"));
    }
    drives.push((
        m.data,
        format!(
            ",cache=none,aio=native,throttling.bps-write={}",
            m.data_write_bps
        ),
        "data",
    ));
    drives.push((m.results, String::new(), "results"));
    if let Some(fast) = m.fast {
        drives.push((fast, ",cache=none,aio=native".to_string(), "fast"));
    }
    let mut c = Command::new("qemu-system-x86_64");
    c.args(["-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2"])
        .args(["-m", &MEMORY_MB.to_string()])
        .args(["-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(m.vmlinuz)
        .arg("-initrd")
        .arg(m.initrd)
        .args(["-append", &append]);
    // Devices in this order get the PCI slots, and so the vdX names, the guests have always seen.
    for (i, (path, options, serial)) in drives.iter().enumerate() {
        c.arg("-drive")
            .arg(format!(
                "file={},if=none,id=d{i},format=raw{options}",
                drive_path(path)
            ))
            .arg("-device")
            .arg(format!("virtio-blk-pci,drive=d{i},serial={serial}"));
    }
    c.stdin(Stdio::null()).stdout(Stdio::piped());
    c
}

/// qemu's -drive option separates with commas; a comma in a path is written twice.
fn drive_path(p: &Path) -> String {
    p.display().to_string().replace(',', ",,")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(m: &Machine) -> Vec<String> {
        command(m)
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    const COMMON: &[&str] = &[
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max",
        "-smp",
        "2",
        "-m",
        "4096",
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
        "-kernel",
        "/k/vmlinuz",
        "-initrd",
        "/w/initrd.cpio",
        "-append",
    ];

    #[test]
    fn busybox_guest_has_data_then_results_then_fast() {
        let m = Machine {
            vmlinuz: Path::new("/k/vmlinuz"),
            initrd: Path::new("/w/initrd.cpio"),
            image: None,
            data: Path::new("/w/data.img"),
            data_write_bps: DATA_WRITE_BPS,
            results: Path::new("/w/a,b/results.img"),
            fast: Some(Path::new("/w/fast.img")),
        };
        let mut want: Vec<&str> = COMMON.to_vec();
        want.extend([
            "console=ttyS0 panic=-1 loglevel=4",
            "-drive",
            "file=/w/data.img,if=none,id=d0,format=raw,cache=none,aio=native,throttling.bps-write=30000000",
            "-device",
            "virtio-blk-pci,drive=d0,serial=data",
            "-drive",
            "file=/w/a,,b/results.img,if=none,id=d1,format=raw",
            "-device",
            "virtio-blk-pci,drive=d1,serial=results",
            "-drive",
            "file=/w/fast.img,if=none,id=d2,format=raw,cache=none,aio=native",
            "-device",
            "virtio-blk-pci,drive=d2,serial=fast",
        ]);
        assert_eq!(args(&m), want);
    }

    #[test]
    fn systemd_guest_has_root_first() {
        let m = Machine {
            vmlinuz: Path::new("/k/vmlinuz"),
            initrd: Path::new("/w/initrd.cpio"),
            image: Some((Path::new("/c/root.img"), "ioshield-e2e.target")),
            data: Path::new("/w/data.img"),
            data_write_bps: DATA_WRITE_BPS,
            results: Path::new("/w/results.img"),
            fast: None,
        };
        let mut want: Vec<&str> = COMMON.to_vec();
        want.extend([
            "console=ttyS0 panic=-1 loglevel=4 systemd.unit=ioshield-e2e.target systemd.show_status=auto",
            "-drive",
            "file=/c/root.img,if=none,id=d0,format=raw,snapshot=on",
            "-device",
            "virtio-blk-pci,drive=d0,serial=root",
            "-drive",
            "file=/w/data.img,if=none,id=d1,format=raw,cache=none,aio=native,throttling.bps-write=30000000",
            "-device",
            "virtio-blk-pci,drive=d1,serial=data",
            "-drive",
            "file=/w/results.img,if=none,id=d2,format=raw",
            "-device",
            "virtio-blk-pci,drive=d2,serial=results",
        ]);
        assert_eq!(args(&m), want);
    }
}
