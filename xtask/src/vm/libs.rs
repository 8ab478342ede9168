//! Host binaries in the busybox guest, which has no libraries of its own: what they link, found
//! with `ldd`.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

/// `ldd`'s report, stdout and stderr together (it says "not a dynamic executable" on stderr).
fn ldd(bin: &Path) -> Result<String> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// A dynamically linked busybox would need its own libraries; Debian's busybox-static is not.
pub fn check_static(bin: &Path) -> Result<()> {
    let ldd = ldd(bin)?;
    if !ldd.contains("not a dynamic executable") && !ldd.contains("statically linked") {
        bail!("{} is not static: install busybox-static", bin.display());
    }
    Ok(())
}

/// The libraries `ldd` resolves for `bin`, and its program interpreter.
pub fn shared_libs(bin: &Path) -> Result<Vec<PathBuf>> {
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
