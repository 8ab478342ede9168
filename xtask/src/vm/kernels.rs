//! Debian cloud kernels for the guest: found with apt, downloaded once, unpacked and indexed under
//! `target/vm-cache/kernels`. Cloud kernels boot fast, have BTF, and build virtio as modules.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{command, output, run};

/// Kernel series the test bed knows, and how Debian names their cloud images: package name is
/// `prefix + N + suffix` and the newest N wins. Add a line to test another series.
const SERIES: &[(&str, &str, &str)] = &[
    ("6.1", "linux-image-6.1.0-", "-cloud-amd64"),
    ("6.12", "linux-image-6.12.", "+deb12-cloud-amd64"),
];

/// The series `cargo xtask vm` commands use when none is given.
pub fn all_series() -> Vec<String> {
    SERIES.iter().map(|(s, _, _)| s.to_string()).collect()
}

#[derive(Debug, Clone)]
pub struct Kernel {
    /// `uname -r` in the guest, and the directory name under `lib/modules`.
    pub release: String,
    /// The unpacked package.
    pub root: PathBuf,
}

impl Kernel {
    pub fn vmlinuz(&self) -> PathBuf {
        self.root.join(format!("boot/vmlinuz-{}", self.release))
    }

    pub fn modules_dir(&self) -> PathBuf {
        self.root.join(format!("lib/modules/{}", self.release))
    }
}

/// Marks an unpacked and depmod-ed kernel; a directory without it is a broken earlier attempt.
const READY: &str = ".ready";

pub fn fetch(series: &str, cache: &Path) -> Result<Kernel> {
    let Some(&(_, prefix, suffix)) = SERIES.iter().find(|(s, _, _)| *s == series) else {
        bail!(
            "unknown kernel series {series} (known: {})",
            all_series().join(", ")
        );
    };
    let dir = cache.join("kernels");
    fs::create_dir_all(&dir)?;
    // A kernel already in the cache is used as is: runs stay comparable, and need no network.
    let cached = newest(
        fs::read_dir(&dir)?
            .flatten()
            .filter(|e| e.path().join(READY).exists())
            .filter_map(|e| e.file_name().into_string().ok()),
        prefix,
        suffix,
    );
    let package = match cached {
        Some(p) => p,
        None => {
            let p = newest(apt_packages()?.into_iter(), prefix, suffix)
                .with_context(|| format!("apt has no package {prefix}N{suffix}"))?;
            unpack(&p, &dir)?;
            p
        }
    };
    let root = dir.join(&package);
    let release = fs::read_dir(root.join("lib/modules"))?
        .flatten()
        .find_map(|e| e.file_name().into_string().ok())
        .with_context(|| format!("{package} has no lib/modules"))?;
    Ok(Kernel { release, root })
}

/// The package among `names` with the highest number between `prefix` and `suffix`.
fn newest(names: impl Iterator<Item = String>, prefix: &str, suffix: &str) -> Option<String> {
    names
        .filter_map(|n| {
            let num: u32 = n.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()?;
            Some((num, n))
        })
        .max()
        .map(|(_, n)| n)
}

fn apt_packages() -> Result<Vec<String>> {
    let search = || {
        output(command("apt-cache").args([
            "search",
            "--names-only",
            "^linux-image-.*-cloud-amd64$",
        ]))
    };
    let mut found = search()?;
    if found.trim().is_empty() {
        // A fresh machine may have no package lists yet.
        run(command("apt-get").args(["update", "-q"]))?;
        found = search()?;
    }
    Ok(found
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Needs kmod's depmod, which the runner installs before it fetches a kernel.
fn unpack(package: &str, dir: &Path) -> Result<()> {
    eprintln!("xtask: downloading {package}");
    let download = dir.join("download");
    let _ = fs::remove_dir_all(&download);
    fs::create_dir_all(&download)?;
    run(command("apt-get")
        .args(["download", "-q", package])
        .current_dir(&download))?;
    let deb = fs::read_dir(&download)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .with_context(|| format!("apt-get download {package} left no .deb"))?;
    let root = dir.join(package);
    let _ = fs::remove_dir_all(&root);
    run(command("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    let release = fs::read_dir(root.join("lib/modules"))?
        .flatten()
        .find_map(|e| e.file_name().into_string().ok())
        .with_context(|| format!("{package} has no lib/modules"))?;
    // The package leaves modules.dep to its postinst; build it for the unpacked tree.
    run(command("depmod")
        .arg("-b")
        .arg(&root)
        .arg("-F")
        .arg(root.join(format!("boot/System.map-{release}")))
        .arg(&release))?;
    fs::write(root.join(READY), "")?;
    fs::remove_dir_all(&download)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_package_by_number_not_by_text() {
        let names = [
            "linux-image-6.1.0-9-cloud-amd64",
            "linux-image-6.1.0-56-cloud-amd64",
            "linux-image-6.1.0-56-cloud-amd64-dbg",
            "linux-image-6.12.117+deb12-cloud-amd64",
        ]
        .map(String::from);
        assert_eq!(
            newest(
                names.clone().into_iter(),
                "linux-image-6.1.0-",
                "-cloud-amd64"
            )
            .as_deref(),
            Some("linux-image-6.1.0-56-cloud-amd64")
        );
        assert_eq!(
            newest(names.into_iter(), "linux-image-6.12.", "+deb12-cloud-amd64").as_deref(),
            Some("linux-image-6.12.117+deb12-cloud-amd64")
        );
    }
}
