//! A Debian 12 root file system with systemd as PID 1, for `cargo xtask vm e2e`: debootstrapped
//! once into `target/vm-cache/rootfs/`, then turned into one ext4 image per kernel (the tree plus
//! that kernel's modules, so udev and modprobe work as on an installed machine). Both are kept:
//! a second run neither debootstraps nor rebuilds the image. The guest boots it with qemu's
//! `snapshot=on`, so the cached image is never changed by a run.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use super::kernels::Kernel;
use crate::cmd::{command, output, run};

const SUITE: &str = "bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";
/// On top of minbase: what a systemd machine needs to boot and to run the package's unit.
/// perl-base (in minbase) drives the test's writer, so python3 is not needed. libpam-systemd
/// (pam_systemd) is what lets `user@UID.service` start, dbus-user-session gives each user the bus
/// their systemd is reached on: user managers as on a desktop. dmsetup maps a disk the way LUKS
/// and LVM do.
const INCLUDE: &str = "systemd,systemd-sysv,dbus,udev,kmod,e2fsprogs,procps,libpam-systemd,\
                       dbus-user-session,dmsetup";
/// Apparent size of the image; the file is sparse and the guest writes to a snapshot.
const IMAGE_SIZE: u64 = 2 << 30;
/// Units that would only add load to an emulated guest (timers fire apt and fstrim jobs) or wait
/// for input on the console (first-boot prompts).
const MASKED: &[&str] = &[
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-firstboot.service",
    "getty@tty1.service",
    "serial-getty@ttyS0.service",
];

/// `target/vm-cache/rootfs`: the debootstrapped tree and the images made from it.
pub fn dir(cache: &Path) -> PathBuf {
    cache.join("rootfs")
}

/// The root image for `kernel`, built (and cached) when missing.
pub fn image(cache: &Path, kernel: &Kernel) -> Result<PathBuf> {
    let dir = dir(cache);
    let tree = tree(&dir)?;
    let img = dir.join(format!("{SUITE}-{}.img", kernel.release));
    let stamp = stamp_of(&tree)?;
    // The image records which tree it was made from: a new debootstrap rebuilds it.
    let img_stamp = img.with_extension("img.stamp");
    if img.exists() && fs::read_to_string(&img_stamp).ok().as_deref() == Some(&stamp) {
        return Ok(img);
    }
    eprintln!("xtask: building {}", img.display());
    let staging = dir.join(format!("staging-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    // Hard links: the staging tree costs no copy of the ~250 MB debootstrap tree.
    run(command("cp").arg("-al").arg(&tree).arg(&staging))?;
    let modules = staging.join("lib/modules");
    fs::create_dir_all(&modules)?;
    run(command("cp")
        .arg("-a")
        .arg(kernel.modules_dir())
        .arg(&modules))?;
    let tmp = dir.join(format!("{}.img.tmp-{}", kernel.release, std::process::id()));
    let made = make_ext4(&staging, &tmp);
    let _ = fs::remove_dir_all(&staging);
    made?;
    fs::rename(&tmp, &img)?;
    fs::write(&img_stamp, &stamp)?;
    Ok(img)
}

fn make_ext4(tree: &Path, img: &Path) -> Result<()> {
    let _ = fs::remove_file(img);
    fs::File::create(img)
        .with_context(|| format!("creating {}", img.display()))?
        .set_len(IMAGE_SIZE)?;
    run(command("mkfs.ext4")
        .args(["-q", "-F", "-L", "root", "-d"])
        .arg(tree)
        .arg(img))
}

/// What identifies a tree: the suite, the package list and when it was made.
fn stamp_of(tree: &Path) -> Result<String> {
    fs::read_to_string(tree.with_extension("ready"))
        .with_context(|| format!("{} is not ready", tree.display()))
}

/// The debootstrapped tree, made once. `<tree>.ready` marks a complete one and says what is in it.
/// debootstrap and mkfs.ext4 are among the runner's host packages.
fn tree(dir: &Path) -> Result<PathBuf> {
    let tree = dir.join(format!("{SUITE}-systemd"));
    let ready = tree.with_extension("ready");
    let want = format!("{SUITE} minbase {INCLUDE}\n");
    if let Ok(have) = fs::read_to_string(&ready)
        && have.starts_with(&want)
    {
        return Ok(tree);
    }
    let _ = fs::remove_file(&ready);
    let _ = fs::remove_dir_all(&tree);
    fs::create_dir_all(dir)?;
    eprintln!(
        "xtask: debootstrap {SUITE} into {} (a few minutes)",
        tree.display()
    );
    let staging = dir.join(format!("debootstrap-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    let made = run(command("debootstrap")
        .args(["--variant=minbase", &format!("--include={INCLUDE}"), SUITE])
        .arg(&staging)
        .arg(MIRROR))
    .and_then(|()| configure(&staging));
    if let Err(e) = made {
        // debootstrap leaves proc mounted when it fails half way.
        let _ = run(command("umount").arg("-l").arg(staging.join("proc")));
        bail!(
            "debootstrap failed (staging left in {}): {e:#}",
            staging.display()
        );
    }
    fs::rename(&staging, &tree)?;
    let made_at = output(command("date").arg("-u").arg("+%FT%TZ"))?;
    fs::write(&ready, format!("{want}{made_at}"))?;
    Ok(tree)
}

/// One-time settings of the tree, as an installer would make them.
fn configure(root: &Path) -> Result<()> {
    fs::write(root.join("etc/hostname"), "e2e\n")?;
    fs::write(
        root.join("etc/fstab"),
        "# the root is mounted by the test initramfs\n",
    )?;
    let etc_units = root.join("etc/systemd/system");
    fs::create_dir_all(&etc_units)?;
    for unit in MASKED {
        let link = etc_units.join(unit);
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink("/dev/null", &link)?;
    }
    // The downloaded packages are not needed once installed.
    let archives = root.join("var/cache/apt/archives");
    if let Ok(entries) = fs::read_dir(&archives) {
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "deb") {
                fs::remove_file(e.path())?;
            }
        }
    }
    // symlink_metadata: /sbin/init is an absolute link, which must not resolve on the host.
    if fs::symlink_metadata(root.join("sbin/init")).is_err() {
        bail!("the tree has no /sbin/init (systemd-sysv missing?)");
    }
    Ok(())
}
