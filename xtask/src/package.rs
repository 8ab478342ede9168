//! `cargo xtask package`: the .deb and .rpm, from the release binary (BPF object embedded), the
//! unit and default config in `packaging/`, and the man pages and completions that
//! `ioshield generate-assets` writes from the clap definitions. What goes where is declared in
//! `ioshield/Cargo.toml` (`[package.metadata.deb]`, `[package.metadata.generate-rpm]`).
use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::cmd::{command, run, workspace_root};

/// Where the package metadata expects the generated assets: under `target/release/`, which both
/// cargo-deb and cargo-generate-rpm map to the real target directory.
const ASSETS: &str = "target/release/assets";
const PACKAGES: &str = "target/packages";

/// Cargo subcommands used to build the packages: (subcommand, crate that installs it, extra
/// `cargo install` arguments). cargo-about writes the licence notices of the crates linked into
/// the binary; its command line is behind a feature.
const TOOLS: [(&str, &str, &[&str]); 3] = [
    ("deb", "cargo-deb", &[]),
    ("generate-rpm", "cargo-generate-rpm", &[]),
    ("about", "cargo-about", &["--features", "cli"]),
];

pub fn run_all() -> Result<()> {
    crate::setup::ensure()?;
    crate::build_release()?;
    // strip for the rpm's binary (cargo-deb strips its own copy), gzip for the man pages,
    // lintian to check the .deb as Debian would.
    crate::setup::apt_install(&["binutils", "gzip", "lintian"])?;
    let root = workspace_root();
    for (sub, krate, extra) in TOOLS {
        ensure_tool(sub, krate, extra)?;
    }
    generate_assets(&root)?;
    third_party_licences(&root)?;
    let out = root.join(PACKAGES);
    clear_packages(&out)?;
    let out_arg = out.to_string_lossy();
    // --no-build: the release binary was just built, with the BPF toolchain's environment.
    crate::cmd::cargo(&[
        "deb",
        "--package",
        "ioshield",
        "--no-build",
        "--output",
        &out_arg,
    ])?;
    crate::cmd::cargo(&[
        "generate-rpm",
        "--package",
        "ioshield",
        "--output",
        &out_arg,
    ])?;
    report(&out)?;
    lintian(&out)
}

/// The notices of every crate linked into the binary (not build tools or test-only crates, see
/// about.toml), from the crates' own licence files.
fn third_party_licences(root: &Path) -> Result<()> {
    let dest = root.join(ASSETS).join("THIRD-PARTY-LICENSES");
    // cargo about reads `cargo metadata` for every platform, which needs every platform's
    // crates in the registry cache (a build fetches only Linux's): on a fresh machine
    // `--offline` failed on a Windows-only crate (anstyle-wincon) until this fetch.
    run(command(env!("CARGO")).current_dir(root).args([
        "fetch",
        "--locked",
        "--manifest-path",
        "ioshield/Cargo.toml",
    ]))?;
    run(command(env!("CARGO"))
        .current_dir(root)
        // --offline: the licence texts come from the crates' own sources (only the package
        // registry is reachable here), --locked: the versions the binary was built with.
        .args(["about", "generate", "--offline", "--locked"])
        .args(["--manifest-path", "ioshield/Cargo.toml"])
        .args(["--config", "about.toml", "--output-file"])
        .arg(&dest)
        .arg("about.hbs"))?;
    let text = std::fs::read_to_string(&dest)
        .with_context(|| format!("cargo about wrote no {}", dest.display()))?;
    // A notice file without the crates we know are linked is a broken template or config.
    for krate in ["aya", "tokio", "zbus"] {
        if !text.contains(&format!("- {krate} ")) {
            bail!("{} does not name {krate}", dest.display());
        }
    }
    Ok(())
}

/// The .deb as Debian's own checker sees it: any error fails the packaging (warnings are shown).
fn lintian(out: &Path) -> Result<()> {
    let mut debs = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "deb") {
            debs.push(path);
        }
    }
    let result = command("lintian")
        .args(["--fail-on", "error", "--tag-display-limit", "0"])
        .args(&debs)
        .output()
        .context("running lintian")?;
    let text = String::from_utf8_lossy(&result.stdout);
    print!("{text}");
    eprint!("{}", String::from_utf8_lossy(&result.stderr));
    if !result.status.success() {
        bail!("lintian found errors in the .deb (above)");
    }
    println!(
        "lintian: no errors, {} warnings",
        text.lines().filter(|l| l.starts_with("W: ")).count()
    );
    Ok(())
}

/// Regenerates the assets from scratch, so that a page of a removed subcommand is not packaged.
fn generate_assets(root: &Path) -> Result<()> {
    let dir = root.join(ASSETS);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    let bin = root.join("target/release/ioshield");
    run(command(&bin)
        .arg("generate-assets")
        .arg(&dir)
        .stdout(std::process::Stdio::null()))?;
    // Man pages go in gzipped (Debian policy; rpm does not compress them for us). -n leaves the
    // name and time out of the header, so the same page gives the same bytes.
    let pages = man_pages(&dir)?;
    if pages.is_empty() {
        bail!(
            "ioshield generate-assets wrote no man page into {}",
            dir.display()
        );
    }
    run(command("gzip").args(["-9", "-n", "-f"]).args(&pages))?;
    // cargo-generate-rpm packages binaries as they are; the release binary keeps its symbols
    // for profiling here, so the rpm gets a stripped copy.
    run(command("strip")
        .arg("-o")
        .arg(dir.join("ioshield"))
        .arg(&bin))
}

fn man_pages(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "5" || e == "8") {
            pages.push(path);
        }
    }
    Ok(pages)
}

/// `cargo install --locked KRATE EXTRA...` unless `cargo SUB --version` already works.
fn ensure_tool(sub: &str, krate: &str, extra: &[&str]) -> Result<()> {
    let installed = command(env!("CARGO"))
        .args([sub, "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if installed {
        return Ok(());
    }
    eprintln!("xtask: installing {krate} (a few minutes, once)");
    let mut args = vec!["install", "--locked", krate];
    args.extend(extra);
    crate::cmd::cargo(&args)
}

/// Removes the packages of earlier runs, so the listing shows only what this run built.
fn clear_packages(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for entry in std::fs::read_dir(out)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "deb" || e == "rpm") {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(())
}

fn report(out: &Path) -> Result<()> {
    let mut built = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let entry = entry?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "deb" || e == "rpm") {
            built.push((path, entry.metadata()?.len()));
        }
    }
    if built.len() != 2 {
        bail!(
            "expected one .deb and one .rpm in {}, found {}",
            out.display(),
            built.len()
        );
    }
    built.sort();
    for (path, size) in built {
        println!(
            "{}  {:.1} MiB",
            path.display(),
            size as f64 / (1024.0 * 1024.0)
        );
    }
    Ok(())
}
