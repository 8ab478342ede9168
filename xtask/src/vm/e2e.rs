//! `cargo xtask vm e2e`: the Debian package on a real systemd machine. Boots Debian 12 (systemd
//! as PID 1, rootfs.rs) on each kernel, and its `ioshield-e2e.service` installs the package with
//! dpkg and runs tests/vm/e2e-systemd.sh, whose `PASS`/`FAIL` lines are printed here.
use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{
    runner::{self, Root},
    sysboot::FileSource,
};
use crate::cmd::workspace_root;

/// The target the guest boots into: basic.target (sysinit, sockets, journald, udev) plus the
/// system bus, as on a server, and the test; no getty, no multi-user.target.
const TARGET: &str = "\
[Unit]
Description=ioshield end-to-end test
Requires=basic.target ioshield-e2e.service
Wants=dbus.service
After=basic.target
AllowIsolate=yes
";

const SERVICE: &str = "\
[Unit]
Description=ioshield end-to-end test script
After=basic.target dbus.service
[Service]
Type=oneshot
ExecStart=/bin/bash /e2e/run.sh
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
";

pub struct Args<'a> {
    pub series: &'a [String],
    /// The package; default: the newest `target/packages/*.deb`.
    pub deb: Option<&'a Path>,
    pub script: &'a Path,
    pub out: &'a Path,
    pub timeout: Duration,
    pub echo: bool,
    /// Whether the guest also measures the baselines (ioshield stopped) of its `MEASURE` lines.
    pub measure: bool,
}

pub fn run(a: &Args) -> Result<()> {
    let started = Instant::now();
    let deb = match a.deb {
        Some(d) => d.to_path_buf(),
        None => newest_deb(&workspace_root().join("target/packages"))?,
    };
    eprintln!("xtask: e2e with {}", deb.display());
    // The commit load the cross-slice measurement runs as a system service.
    let load = super::scenario::build_load_generator()?;
    let mut failed = Vec::new();
    for series in a.series {
        let out = a.out.join(series);
        match run_one(a, series, &deb, &load, &out) {
            Ok(summary) => {
                eprintln!("xtask: vm e2e {series}: {summary}");
                if !summary.ok {
                    failed.push(format!("{series}: {}", summary.line));
                }
            }
            Err(e) => {
                eprintln!("xtask: vm e2e {series}: {e:#}");
                failed.push(format!("{series}: {e:#}"));
            }
        }
    }
    eprintln!(
        "xtask: vm e2e done in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!("e2e failed: {}", failed.join("; "));
    }
    Ok(())
}

struct Summary {
    ok: bool,
    line: String,
    wall: Duration,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} in {:.0}s", self.line, self.wall.as_secs_f64())
    }
}

fn run_one(a: &Args, series: &str, deb: &Path, load: &Path, out: &Path) -> Result<Summary> {
    let files = [
        ("ioshield.deb", FileSource::Path(deb.to_path_buf())),
        ("e2e-systemd.sh", FileSource::Path(a.script.to_path_buf())),
        ("ioshield-load", FileSource::Path(load.to_path_buf())),
        ("run.sh", FileSource::Text(include_str!("e2e-run.sh"))),
        ("ioshield-e2e.target", FileSource::Text(TARGET)),
        ("ioshield-e2e.service", FileSource::Text(SERVICE)),
        (
            "env",
            FileSource::Text(if a.measure { "E2E_MEASURE=1\n" } else { "" }),
        ),
    ];
    let done = runner::run(&runner::Options {
        series,
        root: Root::Debian {
            unit: "ioshield-e2e.target",
            files: &files,
        },
        out,
        timeout: a.timeout,
        echo: a.echo,
        data_write_bps: None,
    })?;
    let status = done.status;
    let checks = fs::read_to_string(done.results.join("checks.txt")).unwrap_or_default();
    for line in checks.lines() {
        if ["PASS ", "FAIL ", "TIME ", "SPEED "]
            .iter()
            .any(|p| line.starts_with(p))
        {
            println!("{series}: {line}");
        }
    }
    let line = checks
        .lines()
        .rev()
        .find(|l| l.starts_with("e2e: "))
        .map_or_else(
            || format!("no summary line, script exit {status}"),
            str::to_string,
        );
    Ok(Summary {
        ok: status == 0 && !checks.contains("\nFAIL ") && !checks.starts_with("FAIL "),
        line,
        wall: done.wall,
    })
}

/// The most recently built package in `dir`.
fn newest_deb(dir: &Path) -> Result<PathBuf> {
    let debs = fs::read_dir(dir)
        .with_context(|| {
            format!(
                "no {} (build the package with `cargo xtask package` or pass --deb)",
                dir.display()
            )
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"));
    debs.max_by_key(|p| fs::metadata(p).and_then(|m| m.modified()).ok())
        .with_context(|| format!("no .deb in {} (run `cargo xtask package`)", dir.display()))
}
