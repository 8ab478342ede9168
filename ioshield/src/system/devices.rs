//! Turns the `dev_t` a BPF program saw into the whole disk a person (and io.max) knows, e.g.
//! `/dev/vda`: partitions map to their disk, btrfs/overlay anonymous devices to their mount source.
use std::{collections::HashMap, fmt, path::Path};

use serde::Serialize;

/// A block device number, `major:minor`.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct DevId {
    pub major: u32,
    pub minor: u32,
}

impl DevId {
    /// From the kernel's internal encoding (`major << 20 | minor`) used by `sb->s_dev`.
    pub fn from_kernel(dev: u32) -> Self {
        Self {
            major: dev >> 20,
            minor: dev & 0xfffff,
        }
    }

    /// From the userspace encoding returned by stat(2) in `st_rdev` / `st_dev`.
    pub fn from_user(dev: u64) -> Self {
        Self {
            major: nix::sys::stat::major(dev) as u32,
            minor: nix::sys::stat::minor(dev) as u32,
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        let (maj, min) = s.trim().split_once(':')?;
        Some(Self {
            major: maj.parse().ok()?,
            minor: min.parse().ok()?,
        })
    }
}

impl fmt::Display for DevId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl Serialize for DevId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A whole disk (or, when nothing better is known, the raw device number).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Disk {
    pub id: DevId,
    /// Kernel name, e.g. `vda`, when the device is a block device.
    pub name: Option<String>,
}

impl Disk {
    /// What to show a person: `/dev/vda`, or `0:45` for a device that has no node.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("/dev/{n}"),
            None if self.id == DevId::default() => "?".to_string(),
            None => self.id.to_string(),
        }
    }
}

#[derive(Default)]
pub struct Devices {
    cache: HashMap<DevId, Disk>,
}

impl Devices {
    pub fn resolve(&mut self, dev: DevId) -> Disk {
        if let Some(d) = self.cache.get(&dev) {
            return d.clone();
        }
        let disk = whole_disk(dev)
            .or_else(|| mount_source(dev).and_then(whole_disk))
            .unwrap_or(Disk {
                id: dev,
                name: None,
            });
        self.cache.insert(dev, disk.clone());
        disk
    }

    /// Finds a disk by what a person or config file calls it: `/dev/vdb`, `vdb` or `254:16`.
    pub fn lookup(&mut self, spec: &str) -> Option<Disk> {
        if let Some(id) = DevId::parse(spec) {
            return whole_disk(id);
        }
        let name = spec.strip_prefix("/dev/").unwrap_or(spec);
        let dev = std::fs::read_to_string(format!("/sys/class/block/{name}/dev")).ok()?;
        whole_disk(DevId::parse(&dev)?)
    }
}

/// Every whole disk backed by a device (not loop, ram or zram devices), by kernel name.
pub fn whole_disks() -> Vec<Disk> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.path().join("device").exists())
        .filter_map(|e| {
            let dev = std::fs::read_to_string(e.path().join("dev")).ok()?;
            Some(Disk {
                id: DevId::parse(&dev)?,
                name: Some(e.file_name().to_string_lossy().into_owned()),
            })
        })
        .collect()
}

/// A name for the disk that survives reboots and renumbering: its WWN, else its serial, else for
/// a mapped device (LUKS, LVM) its device-mapper UUID or name and for a software RAID its array
/// UUID, else its model and size (from sysfs). `None` for devices without a node or any of these.
pub fn identity(disk: &Disk) -> Option<String> {
    identity_in(&Path::new("/sys/block").join(disk.name.as_ref()?))
}

/// [`identity`] of the block device whose sysfs directory is `sys`.
fn identity_in(sys: &Path) -> Option<String> {
    let read = |rel: &str| {
        std::fs::read_to_string(sys.join(rel))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    if let Some(w) = read("wwid").or_else(|| read("device/wwid")) {
        return Some(format!("wwid:{w}"));
    }
    if let Some(s) = read("serial").or_else(|| read("device/serial")) {
        return Some(format!("serial:{s}"));
    }
    // An encrypted or LVM root has none of the above: without these its speed would be learned
    // anew after every restart. The UUID is set by cryptsetup or LVM and survives reboots; a
    // device mapped by hand may have none, and then its name is what the admin made it under.
    if let Some(u) = read("dm/uuid") {
        return Some(format!("dm-uuid:{u}"));
    }
    if let Some(n) = read("dm/name") {
        return Some(format!("dm-name:{n}"));
    }
    if let Some(u) = read("md/uuid") {
        return Some(format!("md-uuid:{u}"));
    }
    let model = read("device/model")?;
    Some(format!("model:{model}:sectors:{}", read("size")?))
}

/// What the kernel says a disk is, from sysfs: what tells a disk that may be as slow as the
/// assumed speed (a USB stick, an SD card, a hard disk) from one that is not (an SSD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `removable` is 1: a USB stick or a card reader's card.
    Removable,
    /// Attached over USB or to an SD/MMC slot (or device-mapper over one), whatever it says of
    /// its rotation: a USB SSD or an SD card says 0 and is not removable, and may write at
    /// 10-40 MB/s.
    SlowBus,
    /// `queue/rotational` is 1: a hard disk, or a device that does not say (virtio, many USB
    /// bridges report 1).
    Rotational,
    /// `queue/rotational` is 0: NVMe, SATA SSDs, device-mapper over them.
    SolidState,
}

impl Kind {
    /// Whether the disk may be as slow as the speed a disk not measured is assumed at: then a
    /// backlog it has not begun to write already counts (`detect::backlog`).
    pub fn may_be_slow(self) -> bool {
        self != Kind::SolidState
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Removable => "removable",
            Kind::SlowBus => "on USB or an SD/MMC slot",
            Kind::Rotational => "rotational",
            Kind::SolidState => "solid-state",
        }
    }

    /// From the disk's `removable` and `queue/rotational` files and whether it hangs on a slow
    /// bus: a removable disk is that, whatever its rotation says (USB sticks say either).
    fn from_sysfs(
        removable: Option<&str>,
        rotational: Option<&str>,
        slow_bus: bool,
    ) -> Option<Kind> {
        if removable.map(str::trim) == Some("1") {
            return Some(Kind::Removable);
        }
        if slow_bus {
            return Some(Kind::SlowBus);
        }
        match rotational.map(str::trim)? {
            "1" => Some(Kind::Rotational),
            "0" => Some(Kind::SolidState),
            _ => None,
        }
    }
}

/// The disk's kind, or `None` when sysfs does not say (no name, or the files unreadable).
pub fn kind(disk: &Disk) -> Option<Kind> {
    let sys = Path::new("/sys/block").join(disk.name.as_ref()?);
    let read = |rel: &str| std::fs::read_to_string(sys.join(rel)).ok();
    Kind::from_sysfs(
        read("removable").as_deref(),
        read("queue/rotational").as_deref(),
        on_slow_bus(&sys, 0),
    )
}

/// Whether the block device `sys` links to (`/sys/block/NAME`, or an entry of a mapped
/// device's `slaves`) hangs below a USB or an SD/MMC controller (its device path passes one),
/// or is device-mapper or md over such a disk or partition (LUKS on a USB SSD); `depth`
/// bounds the walk down that stack.
fn on_slow_bus(sys: &Path, depth: u32) -> bool {
    let Ok(real) = std::fs::canonicalize(sys) else {
        return false;
    };
    if passes_slow_bus(&real) {
        return true;
    }
    depth < 4
        && std::fs::read_dir(real.join("slaves"))
            .is_ok_and(|entries| entries.flatten().any(|e| on_slow_bus(&e.path(), depth + 1)))
}

/// Whether a device path passes a USB bus (`usb1`) or an MMC host (`mmc_host`, `mmc0`), e.g.
/// `/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host4/.../block/sdb` or
/// `/sys/devices/platform/.../mmc_host/mmc0/mmc0:aaaa/block/mmcblk0`.
fn passes_slow_bus(device: &Path) -> bool {
    device.iter().any(|c| {
        let c = c.to_string_lossy();
        let numbered = |prefix: &str| {
            c.strip_prefix(prefix)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        c == "mmc_host" || numbered("usb") || numbered("mmc")
    })
}

/// Where the writes of a block device mapped over exactly one other (LUKS, LVM on one disk or
/// on LUKS) queue: the device at the bottom of the mapping, followed down while each layer sits
/// on a single one (the partition or disk LUKS is on, or an md array). systemd puts an
/// `IOWriteBandwidthMax=` given for the mapping on that device's whole disk (its
/// `block_get_originating`, layer by layer, then the whole disk; seen in the e2e: vdb's number
/// in the writer's io.max for dm-0), so the writes that limit holds back count as in flight on
/// the mapping, and only the device below shows whether the disk queues them. `None` for a
/// device that is not mapped, or mapped over several (systemd then limits the mapping itself,
/// unless they are all on one disk: that rarer case is not told apart here).
pub fn originating(disk: &Disk) -> Option<DevId> {
    let name = disk.name.as_ref()?;
    originating_in(&Path::new("/sys/block").join(name))
}

fn originating_in(sys: &Path) -> Option<DevId> {
    let mut below = single_slave(sys)?;
    // A mapping is a few layers deep at most; the bound only guards against a loop.
    for _ in 0..8 {
        match single_slave(&below) {
            Some(next) => below = next,
            None => break,
        }
    }
    DevId::parse(&std::fs::read_to_string(below.join("dev")).ok()?)
}

fn single_slave(sys: &Path) -> Option<std::path::PathBuf> {
    let mut slaves = std::fs::read_dir(sys.join("slaves")).ok()?.flatten();
    let one = slaves.next()?.path();
    slaves.next().is_none().then_some(one)
}

/// Whether the disk is a multi-queue block device (`/sys/dev/block/DEV/mq`): iocost works only
/// on those, not on device-mapper or md devices.
pub fn is_blk_mq(dev: DevId) -> bool {
    Path::new(&format!("/sys/dev/block/{dev}/mq")).is_dir()
}

/// The kernel name of `dev` when it is a whole disk itself (not a partition), e.g. `vdb`.
pub fn whole_disk_name(dev: DevId) -> Option<String> {
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{dev}")).ok()?;
    if sys.join("partition").exists() {
        return None;
    }
    Some(sys.file_name()?.to_string_lossy().into_owned())
}

fn whole_disk(dev: DevId) -> Option<Disk> {
    if dev.major == 0 {
        return None;
    }
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{dev}")).ok()?;
    let disk_dir = if sys.join("partition").exists() {
        sys.parent()?.to_path_buf()
    } else {
        sys
    };
    let id = DevId::parse(&std::fs::read_to_string(disk_dir.join("dev")).ok()?)?;
    let name = disk_dir.file_name()?.to_string_lossy().into_owned();
    Some(Disk {
        id,
        name: Some(name),
    })
}

/// The block size of the filesystem on `dev`, from one of its mounts: the unit a journal logs
/// in (jbd2 logs in the filesystem's blocks).
pub fn fs_block_size(dev: DevId) -> Option<u64> {
    find_mount_of(dev, |line| {
        let mount = unescape_mount_path(line.split(' ').nth(4)?);
        let st = nix::sys::statvfs::statvfs(Path::new(&mount)).ok()?;
        Some(st.block_size() as u64).filter(|&b| b > 0)
    })
}

/// The first of `dev`'s mounts (lines of mountinfo) for which `found` says something.
fn find_mount_of<T>(dev: DevId, found: impl FnMut(&str) -> Option<T>) -> Option<T> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let wanted = dev.to_string();
    mountinfo
        .lines()
        .filter(|line| line.split(' ').nth(2) == Some(wanted.as_str()))
        .find_map(found)
}

/// A mount point as mountinfo spells it: space, tab, newline and backslash as octal escapes.
fn unescape_mount_path(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match escaped {
            Some(b) if bytes[i] == b'\\' => {
                out.push(b);
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// For an anonymous device (btrfs subvolume, overlay), the block device its mount came from.
fn mount_source(dev: DevId) -> Option<DevId> {
    find_mount_of(dev, |line| {
        let (_, after) = line.split_once(" - ")?;
        let source = after.split(' ').nth(1)?;
        if !source.starts_with("/dev/") {
            return None;
        }
        let st = nix::sys::stat::stat(Path::new(source)).ok()?;
        Some(DevId::from_user(st.st_rdev))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_as_mountinfo_escapes_them() {
        assert_eq!(unescape_mount_path("/mnt/my\\040disk"), "/mnt/my disk");
        assert_eq!(unescape_mount_path("/a\\134b"), "/a\\b");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path("/end\\04"), "/end\\04");
    }

    #[test]
    fn the_root_filesystem_has_a_block_size() {
        let root = nix::sys::stat::stat("/").unwrap();
        let size = fs_block_size(DevId::from_user(root.st_dev));
        assert!(size.is_some_and(|b| b >= 512), "{size:?}");
    }

    #[test]
    fn kernel_encoding_splits_major_minor() {
        let d = DevId::from_kernel((254 << 20) | 16);
        assert_eq!(
            d,
            DevId {
                major: 254,
                minor: 16
            }
        );
        assert_eq!(d.to_string(), "254:16");
        assert_eq!(DevId::parse("8:0\n"), Some(DevId { major: 8, minor: 0 }));
        assert_eq!(DevId::parse("vda"), None);
    }

    #[test]
    fn root_filesystem_resolves_to_a_whole_disk() {
        let st = nix::sys::stat::stat("/").unwrap();
        let mut devices = Devices::default();
        let disk = devices.resolve(DevId::from_user(st.st_dev));
        let name = disk.name.clone().expect("/ is on a block device here");
        assert!(
            !Path::new(&format!("/sys/block/{name}"))
                .join("partition")
                .exists(),
            "{name} must be a whole disk"
        );
        assert_eq!(devices.lookup(&disk.label()), Some(disk.clone()));
        assert_eq!(devices.lookup(&disk.id.to_string()), Some(disk));
        assert_eq!(devices.lookup("/dev/no-such-disk"), None);
    }

    #[test]
    fn usb_and_mmc_controllers_are_told_from_their_path() {
        let on = |path: &str| passes_slow_bus(Path::new(path));
        assert!(on(
            "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host4/target4:0:0/4:0:0:0/block/sdb"
        ));
        assert!(on(
            "/sys/devices/pci0000:00/0000:00:1e.6/mmc_host/mmc0/mmc0:aaaa/block/mmcblk0"
        ));
        assert!(on(
            "/sys/devices/platform/fe320000.mmc/mmc1/mmc1:0001/block/mmcblk1"
        ));
        assert!(!on(
            "/sys/devices/pci0000:00/0000:00:04.0/virtio2/block/vda"
        ));
        assert!(!on(
            "/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1"
        ));
        assert!(!on("/sys/devices/virtual/block/dm-0"));
        assert!(
            !on("/sys/devices/platform/usbmisc/block/x"),
            "a name is not a bus"
        );
    }

    #[test]
    fn mapped_and_raid_devices_have_an_identity_of_their_own() {
        let root = tempfile::tempdir().unwrap();
        let device = |name: &str, files: &[(&str, &str)]| {
            let sys = root.path().join(name);
            for (rel, text) in files {
                let path = sys.join(rel);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            }
            identity_in(&sys)
        };
        assert_eq!(
            device(
                "dm-0",
                &[
                    ("dm/uuid", "CRYPT-LUKS2-0b4f9c1e2d3a4b5c-luks-0b4f\n"),
                    ("dm/name", "luks-0b4f\n"),
                    ("size", "1000\n"),
                ]
            )
            .as_deref(),
            Some("dm-uuid:CRYPT-LUKS2-0b4f9c1e2d3a4b5c-luks-0b4f")
        );
        assert_eq!(
            device("dm-1", &[("dm/uuid", "\n"), ("dm/name", "slow\n")]).as_deref(),
            Some("dm-name:slow"),
            "a device mapped without a UUID"
        );
        assert_eq!(
            device(
                "md0",
                &[("md/uuid", "3f1a2b4c-0000-1111-2222-333344445555\n")]
            )
            .as_deref(),
            Some("md-uuid:3f1a2b4c-0000-1111-2222-333344445555")
        );
        assert_eq!(
            device(
                "sda",
                &[
                    ("device/wwid", "naa.5000c500a1b2c3d4\n"),
                    ("device/model", "ST4000\n"),
                    ("size", "7814037168\n")
                ]
            )
            .as_deref(),
            Some("wwid:naa.5000c500a1b2c3d4"),
            "a disk keeps the identity earlier versions gave it"
        );
        assert_eq!(
            device("vdb", &[("device/model", "QEMU\n"), ("size", "2048\n")]).as_deref(),
            Some("model:QEMU:sectors:2048")
        );
        assert_eq!(device("loop0", &[("size", "2048\n")]), None);
    }

    #[test]
    fn a_device_mapped_over_one_other_is_told_from_a_disk_and_a_spanning_volume() {
        let root = tempfile::tempdir().unwrap();
        // sysfs links each slave to the device's own directory; nested directories stand in.
        let device = |path: &str, dev: &str| {
            let sys = root.path().join(path);
            std::fs::create_dir_all(&sys).unwrap();
            std::fs::write(sys.join("dev"), format!("{dev}\n")).unwrap();
            sys
        };
        let luks = device("dm-0", "253:0");
        device("dm-0/slaves/nvme0n1p3", "259:3");
        assert_eq!(
            originating_in(&luks),
            Some(DevId {
                major: 259,
                minor: 3
            }),
            "LUKS on a partition: the partition"
        );
        let lvm_on_luks = device("dm-1", "253:1");
        device("dm-1/slaves/dm-2", "253:2");
        device("dm-1/slaves/dm-2/slaves/sda", "8:0");
        assert_eq!(
            originating_in(&lvm_on_luks),
            Some(DevId { major: 8, minor: 0 }),
            "LVM on LUKS on a disk: the disk"
        );
        let luks_on_raid = device("dm-3", "253:3");
        device("dm-3/slaves/md0", "9:0");
        device("dm-3/slaves/md0/slaves/sdb", "8:16");
        device("dm-3/slaves/md0/slaves/sdc", "8:32");
        assert_eq!(
            originating_in(&luks_on_raid),
            Some(DevId { major: 9, minor: 0 }),
            "LUKS on a mirror: the array, where systemd stops"
        );
        let spanning = device("dm-4", "253:4");
        device("dm-4/slaves/sdd", "8:48");
        device("dm-4/slaves/sde", "8:64");
        assert_eq!(originating_in(&spanning), None, "LVM spanning two disks");
        assert_eq!(originating_in(&device("nvme0n1", "259:0")), None, "a disk");
    }

    /// sysfs as the kernel lays it out: `/sys/block/NAME` links into `/sys/devices`, and a
    /// mapped device lists the disks below it in `slaves`.
    #[test]
    fn luks_on_a_usb_ssd_is_on_a_slow_bus_and_on_nvme_is_not() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let at = |rel: &str| root.path().join(rel);
        let usb = "devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host4/target4:0:0/4:0:0:0/block/sdb/sdb1";
        let nvme = "devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1";
        for dir in [
            usb,
            nvme,
            "devices/virtual/block/dm-0/slaves",
            "devices/virtual/block/dm-1/slaves",
            "block",
        ] {
            std::fs::create_dir_all(at(dir)).unwrap();
        }
        for (name, target) in [
            ("sdb1", usb),
            ("nvme0n1", nvme),
            ("dm-0", "devices/virtual/block/dm-0"),
            ("dm-1", "devices/virtual/block/dm-1"),
        ] {
            symlink(at(target), at(&format!("block/{name}"))).unwrap();
        }
        symlink(at(usb), at("devices/virtual/block/dm-0/slaves/sdb1")).unwrap();
        symlink(at(nvme), at("devices/virtual/block/dm-1/slaves/nvme0n1")).unwrap();
        let on = |name: &str| on_slow_bus(&at(&format!("block/{name}")), 0);
        assert!(on("sdb1"));
        assert!(on("dm-0"), "LUKS on a partition of the USB SSD");
        assert!(!on("nvme0n1"));
        assert!(!on("dm-1"), "LUKS on the NVMe disk");
        assert!(!on("sdz"), "no such disk");
    }

    #[test]
    fn a_disk_says_its_kind_from_sysfs() {
        let kind = |removable, rotational| Kind::from_sysfs(removable, rotational, false);
        assert_eq!(kind(Some("1\n"), Some("0\n")), Some(Kind::Removable));
        assert_eq!(kind(Some("1\n"), Some("1\n")), Some(Kind::Removable));
        assert_eq!(kind(Some("0\n"), Some("1\n")), Some(Kind::Rotational));
        assert_eq!(kind(Some("0\n"), Some("0\n")), Some(Kind::SolidState));
        assert_eq!(kind(None, Some("0\n")), Some(Kind::SolidState));
        assert_eq!(kind(Some("0\n"), None), None);
        assert_eq!(kind(Some("0\n"), Some("?")), None);
        // A USB SSD says it is solid-state and not removable.
        let usb_ssd = Kind::from_sysfs(Some("0\n"), Some("0\n"), true);
        assert_eq!(usb_ssd, Some(Kind::SlowBus));
        assert!(usb_ssd.unwrap().may_be_slow());
        assert_eq!(
            Kind::from_sysfs(Some("1\n"), Some("0\n"), true),
            Some(Kind::Removable)
        );
        // The host's root disk has both files; a device without a node has none.
        let st = nix::sys::stat::stat("/").unwrap();
        let root = Devices::default().resolve(DevId::from_user(st.st_dev));
        assert!(super::kind(&root).is_some(), "{root:?}");
        let anonymous = Disk {
            id: DevId {
                major: 0,
                minor: 45,
            },
            name: None,
        };
        assert_eq!(super::kind(&anonymous), None);
    }
}
