//! `cargo xtask vm`: boots Debian kernels under qemu with a slow disk and runs a scenario script
//! against the real ioshield, so behaviour can be checked on kernels other than the
//! host's. Every boot goes through runner.rs; the other files prepare what it boots.
mod ci;
mod e2e;
mod initramfs;
pub mod kernels;
mod libs;
mod modules;
mod rootfs;
mod runner;
pub use runner::DATA_WRITE_BPS;
pub mod scenario;
mod sysboot;

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum VmCommand {
    /// Boot each kernel and run a scenario script; results go to OUT/<kernel>/.
    Run {
        /// Kernel series, e.g. `6.1`, `6.12` (repeat or comma-separate; default: all known).
        #[arg(long, value_delimiter = ',')]
        kernel: Vec<String>,
        /// Shell script run by the guest's busybox sh, e.g. tests/vm/stall.sh.
        #[arg(long)]
        script: PathBuf,
        /// Directory for console logs and the guest's $RESULTS.
        #[arg(long)]
        out: PathBuf,
        /// `KEY=VALUE` exported to the script (repeatable), e.g. `--env SCENARIO=oracle`.
        #[arg(long, short)]
        env: Vec<String>,
        /// Kill the guest after this many seconds.
        #[arg(long, default_value_t = 900)]
        timeout: u64,
        /// Do not copy the guest's console to stdout.
        #[arg(long, short)]
        quiet: bool,
        /// Put this ioshield binary in the guest instead of building the workspace's.
        #[arg(long)]
        ioshield: Option<PathBuf>,
        /// The data disk's write speed in MB/s (qemu's throttle; default the bed's 30 MB/s).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        disk_mbps: Option<u64>,
    },
    /// Short functional check on each kernel: smoke test, then stall runs compared.
    Ci {
        #[arg(long, value_delimiter = ',')]
        kernel: Vec<String>,
        /// Where to keep each run's logs and results.
        #[arg(long, default_value = "target/vm-ci")]
        out: PathBuf,
    },
    /// The Debian package on Debian 12 booted with systemd: dpkg install, restrict and release
    /// through systemd scopes, stop, remove, purge (tests/vm/e2e-systemd.sh).
    E2e {
        /// Kernel series (default: 6.12 only, the one CI runs; `--kernel 6.1,6.12` for both).
        #[arg(long, value_delimiter = ',', default_value = "6.12")]
        kernel: Vec<String>,
        /// The package to install (default: the newest target/packages/*.deb).
        #[arg(long)]
        deb: Option<PathBuf>,
        /// The guest's test script (default: the workspace's tests/vm/e2e-systemd.sh).
        #[arg(long)]
        script: Option<PathBuf>,
        /// Where console logs and the guest's results go, per kernel.
        #[arg(long, default_value = "target/vm-e2e")]
        out: PathBuf,
        /// Kill the guest after this many seconds.
        #[arg(long, default_value_t = 900)]
        timeout: u64,
        /// Do not copy the guest's console to stdout.
        #[arg(long, short)]
        quiet: bool,
        /// Also measure the copy and the untar with ioshield stopped, the baselines of their
        /// `MEASURE` lines (left out of `cargo xtask test`: they check nothing).
        #[arg(long)]
        measure: bool,
    },
}

pub fn main(cmd: VmCommand) -> Result<()> {
    match cmd {
        VmCommand::Run {
            kernel,
            script,
            out,
            env,
            timeout,
            quiet,
            ioshield,
            disk_mbps,
        } => {
            let guest = scenario::Guest::prepare(ioshield.as_deref())?;
            for series in or_all(kernel) {
                let run = scenario::Run {
                    series: &series,
                    script: &script,
                    out: &out.join(&series),
                    env: &env,
                    timeout: std::time::Duration::from_secs(timeout),
                    echo: !quiet,
                    data_write_bps: disk_mbps.map(|m| m * 1_000_000),
                };
                let done = guest.run(&run)?;
                eprintln!(
                    "xtask: vm {series}: scenario exit {} in {:.0}s, results in {}",
                    done.status,
                    done.wall.as_secs_f64(),
                    done.results.display()
                );
                if done.status != 0 {
                    anyhow::bail!("scenario {} failed on {series}", script.display());
                }
            }
            Ok(())
        }
        VmCommand::Ci { kernel, out } => ci::run(&or_all(kernel), &out),
        VmCommand::E2e {
            kernel,
            deb,
            script,
            out,
            timeout,
            quiet,
            measure,
        } => e2e::run(&e2e::Args {
            series: &kernel,
            deb: deb.as_deref(),
            script: &script
                .unwrap_or_else(|| crate::cmd::workspace_root().join("tests/vm/e2e-systemd.sh")),
            out: &out,
            timeout: std::time::Duration::from_secs(timeout),
            echo: !quiet,
            measure,
        }),
    }
}

fn or_all(kernels: Vec<String>) -> Vec<String> {
    if kernels.is_empty() {
        kernels::all_series()
    } else {
        kernels
    }
}
