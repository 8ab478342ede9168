//! The initramfs both guests start from: static busybox, the kernel modules they need before
//! anything else, and an /init, as an uncompressed cpio. For the busybox test bed it is the
//! whole system: ioshield, ioshield-load with the shared libraries they link, and the scenario.
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::{kernels::Kernel, libs, modules};

const INIT: &str = include_str!("init.sh");
const BUSYBOX: &str = "/bin/busybox";

pub struct Contents<'a> {
    pub kernel: &'a Kernel,
    /// Host binaries to put in /bin, with their libraries.
    pub binaries: &'a [PathBuf],
    pub scenario: &'a Path,
    /// `KEY=VALUE` lines exported to the scenario.
    pub env: &'a [String],
}

/// Builds the test bed's cpio archive at `out`, staging in `staging` (emptied first).
pub fn build(c: &Contents, staging: &Path, out: &Path) -> Result<()> {
    stage_base(
        staging,
        &["mnt", "tmp", "results"],
        c.kernel,
        modules::TEST_BED,
        INIT,
    )?;
    for bin in c.binaries {
        let name = bin.file_name().context("binary without a name")?;
        copy_exec(bin, &staging.join("bin").join(name))?;
        for lib in libs::shared_libs(bin)? {
            let dest = staging.join(lib.strip_prefix("/").unwrap_or(&lib));
            if !dest.exists() {
                fs::create_dir_all(dest.parent().expect("absolute path"))?;
                // fs::copy follows symlinks: the guest gets the library under its soname.
                fs::copy(&lib, &dest).with_context(|| format!("copying {}", lib.display()))?;
            }
        }
    }
    fs::write(staging.join("etc/vm-env"), env_file(c.env)?)?;
    let scenario = fs::read_to_string(c.scenario)
        .with_context(|| format!("reading {}", c.scenario.display()))?;
    write_exec(&staging.join("scenario.sh"), &scenario)?;
    // The scripts beside it, for it to source (tests/vm/iocost-bed.sh) as /scenarios/NAME.
    let dir = c
        .scenario
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if let (Some("sh"), Some(name)) =
            (path.extension().and_then(|e| e.to_str()), path.file_name())
        {
            let to = staging.join("scenarios").join(name);
            fs::create_dir_all(to.parent().expect("has a parent"))?;
            fs::copy(&path, &to).with_context(|| format!("copying {}", path.display()))?;
        }
    }
    cpio(staging, out)
}

/// Empties `staging` and puts in what every guest's initramfs has: busybox, the `modules` init
/// loads from `/etc/vm-modules`, `init` as /init, and the directories init mounts on plus `dirs`.
pub fn stage_base(
    staging: &Path,
    dirs: &[&str],
    kernel: &Kernel,
    modules: &[&str],
    init: &str,
) -> Result<()> {
    let _ = fs::remove_dir_all(staging);
    for d in ["bin", "dev", "proc", "sys", "etc"].iter().chain(dirs) {
        fs::create_dir_all(staging.join(d))?;
    }
    libs::check_static(Path::new(BUSYBOX))?;
    copy_exec(Path::new(BUSYBOX), &staging.join("bin/busybox"))?;
    let order = modules::stage(kernel, modules, &staging.join("lib/modules"))?;
    fs::write(staging.join("etc/vm-modules"), order.join("\n") + "\n")?;
    write_exec(&staging.join("init"), init)
}

/// Values are single-quoted so the scenario sees them verbatim.
fn env_file(env: &[String]) -> Result<String> {
    let mut out = String::new();
    for kv in env {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--env {kv}: expected KEY=VALUE");
        };
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("--env {kv}: {k:?} is not a shell variable name");
        }
        out += &format!("export {k}='{}'\n", v.replace('\'', r"'\''"));
    }
    Ok(out)
}

pub fn copy_exec(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

pub fn write_exec(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

pub fn cpio(staging: &Path, out: &Path) -> Result<()> {
    let archive = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    // `find .` lists every entry; newc is the format the kernel unpacks.
    let find = Command::new("find")
        .arg(".")
        .current_dir(staging)
        .stdout(Stdio::piped())
        .spawn()
        .context("running find")?;
    let status = Command::new("cpio")
        .args(["--quiet", "-o", "-H", "newc"])
        .current_dir(staging)
        .stdin(find.stdout.context("find's stdout")?)
        .stdout(archive)
        .status()
        .context("running cpio")?;
    if !status.success() {
        bail!("cpio failed: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_are_quoted() {
        let e = env_file(&["A=1".into(), "B=it's x".into()]).unwrap();
        assert_eq!(e, "export A='1'\nexport B='it'\\''s x'\n");
        assert!(env_file(&["no equals".into()]).is_err());
        assert!(env_file(&["A-B=1".into()]).is_err());
    }
}
