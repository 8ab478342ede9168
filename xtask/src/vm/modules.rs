//! Which kernel modules the guest's initramfs must load, in which order (from the kernel's
//! `modules.dep`), and copying them there.
use std::{
    collections::HashMap,
    fs,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::kernels::Kernel;

/// What the test bed needs: the virtio disk driver (with the PCI transport), mq-deadline (the
/// baseline scheduler, a module on 6.12) and BFQ for the thesis scenario. Whatever of it a
/// kernel has built in is skipped; dependencies come first.
pub const TEST_BED: &[&str] = &["virtio_pci", "virtio_blk", "mq_deadline", "bfq"];
/// What the systemd guest's initramfs needs to mount its root; udev loads the rest from there.
pub const ROOT_DISK: &[&str] = &["virtio_pci", "virtio_blk"];

/// Copies `wanted` and what they depend on from `kernel` to `dest`, decompressed (busybox insmod
/// cannot read .xz), and returns their paths relative to `dest` in load order.
pub fn stage(kernel: &Kernel, wanted: &[&str], dest: &Path) -> Result<Vec<String>> {
    let src = kernel.modules_dir();
    let mut staged = Vec::new();
    for rel in load_order(&src, wanted)? {
        let from = src.join(&rel);
        let plain = rel
            .strip_suffix(".xz")
            .or_else(|| rel.strip_suffix(".zst"))
            .unwrap_or(&rel)
            .to_string();
        let to = dest.join(&plain);
        fs::create_dir_all(to.parent().expect("module path has a directory"))?;
        if rel.ends_with(".xz") {
            let data = Command::new("xz")
                .arg("-dc")
                .arg(&from)
                .stderr(Stdio::inherit())
                .output()
                .context("running xz")?;
            if !data.status.success() {
                bail!("xz -dc {} failed", from.display());
            }
            fs::write(&to, data.stdout)?;
        } else if rel.ends_with(".ko") {
            fs::copy(&from, &to)?;
        } else {
            bail!("{rel}: unsupported module compression");
        }
        staged.push(plain);
    }
    Ok(staged)
}

/// Module name as modprobe spells it: file name without `.ko[.xz]`, dashes as underscores.
fn name_of(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// Paths (relative to the modules directory) of the modules to insmod, in load order.
fn load_order(modules_dir: &Path, wanted: &[&str]) -> Result<Vec<String>> {
    let dep_file = modules_dir.join("modules.dep");
    let text =
        fs::read_to_string(&dep_file).with_context(|| format!("reading {}", dep_file.display()))?;
    let builtin = fs::read_to_string(modules_dir.join("modules.builtin")).unwrap_or_default();
    resolve(&text, &builtin, wanted)
}

fn resolve(modules_dep: &str, builtin: &str, wanted: &[&str]) -> Result<Vec<String>> {
    let deps: HashMap<String, (String, Vec<String>)> = modules_dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| {
            let d = d.split_whitespace().map(str::to_string).collect();
            (name_of(m), (m.to_string(), d))
        })
        .collect();
    let builtin: Vec<String> = builtin.lines().map(name_of).collect();
    let mut order = Vec::new();
    for w in wanted {
        if builtin.iter().any(|b| b == w) {
            continue;
        }
        if !deps.contains_key(*w) {
            bail!("kernel has no module {w}, built in or loadable");
        }
        visit(w, &deps, &mut order);
    }
    Ok(order)
}

/// Depth-first, dependencies before dependents, each module once.
fn visit(name: &str, deps: &HashMap<String, (String, Vec<String>)>, order: &mut Vec<String>) {
    let Some((path, needs)) = deps.get(name) else {
        return;
    };
    if order.contains(path) {
        return;
    }
    for n in needs {
        visit(&name_of(n), deps, order);
    }
    order.push(path.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/block/virtio_blk.ko.xz: kernel/drivers/virtio/virtio_ring.ko.xz kernel/drivers/virtio/virtio.ko.xz
kernel/drivers/virtio/virtio.ko.xz:
kernel/drivers/virtio/virtio_ring.ko.xz:
kernel/drivers/virtio/virtio_pci.ko.xz: kernel/drivers/virtio/virtio_pci_legacy_dev.ko.xz kernel/drivers/virtio/virtio_pci_modern_dev.ko.xz kernel/drivers/virtio/virtio_ring.ko.xz kernel/drivers/virtio/virtio.ko.xz
kernel/drivers/virtio/virtio_pci_legacy_dev.ko.xz:
kernel/drivers/virtio/virtio_pci_modern_dev.ko.xz:
kernel/block/bfq.ko.xz:
";

    #[test]
    fn dependencies_load_first_and_once() {
        let order = resolve(DEP, "", &["virtio_pci", "virtio_blk", "bfq"]).unwrap();
        let names: Vec<String> = order.iter().map(|p| name_of(p)).collect();
        assert_eq!(
            names,
            [
                "virtio_pci_legacy_dev",
                "virtio_pci_modern_dev",
                "virtio_ring",
                "virtio",
                "virtio_pci",
                "virtio_blk",
                "bfq"
            ]
        );
    }

    #[test]
    fn builtin_modules_are_skipped() {
        let order = resolve(DEP, "kernel/block/bfq.ko\n", &["bfq"]).unwrap();
        assert!(order.is_empty());
        assert!(resolve(DEP, "", &["nonexistent"]).is_err());
    }
}
