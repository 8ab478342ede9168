//! The guest's root file system: busybox, ioshield, ioshield-load with the shared libraries they
//! link, the kernel modules the test bed needs, /init and the scenario, as an uncompressed cpio.
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::{kernels::Kernel, modules};

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

/// Builds the cpio archive at `out`, staging in `staging` (emptied first).
pub fn build(c: &Contents, staging: &Path, out: &Path) -> Result<()> {
    let _ = fs::remove_dir_all(staging);
    for d in ["bin", "dev", "proc", "sys", "etc", "mnt", "tmp", "results"] {
        fs::create_dir_all(staging.join(d))?;
    }
    check_static(Path::new(BUSYBOX))?;
    copy_exec(Path::new(BUSYBOX), &staging.join("bin/busybox"))?;
    for bin in c.binaries {
        let name = bin.file_name().context("binary without a name")?;
        copy_exec(bin, &staging.join("bin").join(name))?;
        for lib in shared_libs(bin)? {
            let dest = staging.join(lib.strip_prefix("/").unwrap_or(&lib));
            if !dest.exists() {
                fs::create_dir_all(dest.parent().expect("absolute path"))?;
                // fs::copy follows symlinks: the guest gets the library under its soname.
                fs::copy(&lib, &dest).with_context(|| format!("copying {}", lib.display()))?;
            }
        }
    }
    let order = stage_modules(c.kernel, &staging.join("lib/modules"))?;
    fs::write(staging.join("etc/vm-modules"), order.join("\n") + "\n")?;
    fs::write(staging.join("etc/vm-env"), env_file(c.env)?)?;
    write_exec(&staging.join("init"), INIT)?;
    let scenario = fs::read_to_string(c.scenario)
        .with_context(|| format!("reading {}", c.scenario.display()))?;
    write_exec(&staging.join("scenario.sh"), &scenario)?;
    cpio(staging, out)
}

/// `ldd`'s report, stdout and stderr together (it says "not a dynamic executable" on stderr).
fn ldd(bin: &Path) -> Result<String> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// A dynamically linked busybox would need its own libraries; Debian's busybox-static is not.
fn check_static(bin: &Path) -> Result<()> {
    let ldd = ldd(bin)?;
    if !ldd.contains("not a dynamic executable") && !ldd.contains("statically linked") {
        bail!("{} is not static: install busybox-static", bin.display());
    }
    Ok(())
}

/// The libraries `ldd` resolves for `bin`, and its program interpreter.
fn shared_libs(bin: &Path) -> Result<Vec<PathBuf>> {
    let ldd = ldd(bin)?;
    let mut libs = Vec::new();
    for line in ldd.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    if ldd.contains("not found") {
        bail!("{}: a shared library is missing:\n{ldd}", bin.display());
    }
    Ok(libs)
}

/// Copies the needed modules, decompressed (busybox insmod cannot read .xz), and returns their
/// paths relative to `dest` in load order.
fn stage_modules(kernel: &Kernel, dest: &Path) -> Result<Vec<String>> {
    let src = kernel.modules_dir();
    let order = modules::load_order(&src, modules::WANTED)?;
    let mut staged = Vec::new();
    for rel in order {
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

fn copy_exec(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn write_exec(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

pub(super) fn cpio(staging: &Path, out: &Path) -> Result<()> {
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
