//! Installs what building the BPF side needs, and does nothing (quickly) when it is there:
//! the nightly toolchain's rust-src, LLVM 22 and bpf-linker 0.13.0 built against it.
use std::path::Path;

use anyhow::{Result, bail};

use crate::cmd::{command, output, run};

const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

pub fn ensure() -> Result<()> {
    ensure_nightly_rust_src()?;
    ensure_bpf_linker()?;
    Ok(())
}

fn ensure_nightly_rust_src() -> Result<()> {
    let toolchains = output(command("rustup").args(["toolchain", "list"]))?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        eprintln!("xtask: installing the nightly toolchain");
        run(command("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]))?;
    }
    let components = output(command("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))?;
    if !components.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("xtask: adding rust-src to the nightly toolchain");
        run(command("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))?;
    }
    Ok(())
}

fn ensure_bpf_linker() -> Result<()> {
    let version = output(command("bpf-linker").arg("--version")).unwrap_or_default();
    if version.contains(BPF_LINKER_VERSION) {
        return Ok(());
    }
    if !Path::new(LLVM_PREFIX).join("lib/libLLVM.so").exists() {
        eprintln!(
            "xtask: installing llvm-22-dev (bpf-linker {BPF_LINKER_VERSION} links against it)"
        );
        apt_install(&["llvm-22-dev"])?;
    }
    eprintln!("xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about 2 minutes)");
    run(command("cargo").env("LLVM_PREFIX", LLVM_PREFIX).args([
        "+nightly",
        "install",
        "bpf-linker",
        "--version",
        BPF_LINKER_VERSION,
        "--no-default-features",
        "--features",
        "llvm-22",
    ]))?;
    Ok(())
}

/// `apt-get install` of Debian packages, updating the lists once if a package is not found.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !output(command("dpkg-query").args(["-W", "-f=${Status}", p]))
                .unwrap_or_default()
                .contains("install ok installed")
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let install = |args: &[&str]| {
        command("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(args)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if install(&missing) {
        return Ok(());
    }
    run(command("apt-get").args(["update", "-q"]))?;
    if !install(&missing) {
        bail!("apt-get install {} failed", missing.join(" "));
    }
    Ok(())
}
