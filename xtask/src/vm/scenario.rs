//! A scenario on the busybox test bed: the guest binaries built once, then per run a boot of
//! the runner with the script.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Result, bail};

use super::runner::{self, Root};
use crate::{
    cmd::{cargo, workspace_root},
    setup,
};

pub use runner::Done;

/// Host side, ready to boot guests: the binaries they run are built.
pub struct Guest {
    binaries: Vec<PathBuf>,
}

pub struct Run<'a> {
    pub series: &'a str,
    pub script: &'a Path,
    pub out: &'a Path,
    pub env: &'a [String],
    pub timeout: Duration,
    pub echo: bool,
    /// The data disk's write speed, if not the bed's usual one.
    pub data_write_bps: Option<u64>,
}

/// Builds `ioshield-load` (release) and returns its path.
pub fn build_load_generator() -> Result<PathBuf> {
    cargo(&[
        "build",
        "--release",
        "--package",
        "ioshield-tests",
        "--bin",
        "ioshield-load",
    ])?;
    Ok(workspace_root().join("target/release/ioshield-load"))
}

impl Guest {
    /// `ioshield`: a prebuilt binary to test instead of this workspace's release build.
    pub fn prepare(ioshield: Option<&Path>) -> Result<Guest> {
        let release = workspace_root().join("target/release");
        let ioshield = match ioshield {
            Some(bin) => {
                build_load_generator()?;
                bin.to_path_buf()
            }
            None => {
                // ioshield's build embeds the BPF object, which needs the toolchain from setup.
                setup::ensure()?;
                cargo(&[
                    "build",
                    "--release",
                    "--package",
                    "ioshield",
                    "--package",
                    "ioshield-tests",
                    "--bin",
                    "ioshield",
                    "--bin",
                    "ioshield-load",
                ])?;
                release.join("ioshield")
            }
        };
        if !ioshield.is_file() {
            bail!("{} does not exist", ioshield.display());
        }
        Ok(Guest {
            binaries: vec![ioshield, release.join("ioshield-load")],
        })
    }

    /// The host's ioshield has the `daemon` subcommand (scenarios using it can run).
    pub fn has_daemon(&self) -> bool {
        std::process::Command::new(&self.binaries[0])
            .args(["daemon", "--help"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    pub fn run(&self, run: &Run) -> Result<Done> {
        runner::run(&runner::Options {
            series: run.series,
            root: Root::Busybox {
                binaries: &self.binaries,
                script: run.script,
                env: run.env,
            },
            out: run.out,
            timeout: run.timeout,
            echo: run.echo,
            data_write_bps: run.data_write_bps,
        })
    }
}
