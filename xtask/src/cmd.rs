//! Running commands with the environment the BPF build needs.
use std::{
    ffi::OsStr,
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub fn cargo_home_bin() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
        .join("bin")
}

/// PATH with cargo's bin directory first, where `cargo install` put bpf-linker.
pub fn path_env() -> std::ffi::OsString {
    let mut paths = vec![cargo_home_bin()];
    if let Some(p) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(paths).expect("valid PATH")
}

pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(program);
    c.env("PATH", path_env()).current_dir(workspace_root());
    c
}

pub fn run(c: &mut Command) -> Result<()> {
    let status = c.status().with_context(|| format!("running {c:?}"))?;
    if !status.success() {
        bail!("{c:?} failed: {status}");
    }
    Ok(())
}

pub fn output(c: &mut Command) -> Result<String> {
    let out = c
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("running {c:?}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn cargo(args: &[&str]) -> Result<()> {
    run(command(env!("CARGO")).args(args))
}
