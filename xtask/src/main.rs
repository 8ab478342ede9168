//! Developer tasks: `cargo xtask setup | build | run | test`. Each task installs what it needs
//! first (idempotently), so the README's two commands work on a fresh machine.
mod bench;
mod cmd;
mod measure;
mod package;
mod setup;
mod test;
mod vm;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the toolchain pieces the BPF build needs (nightly rust-src, LLVM 22, bpf-linker).
    Setup,
    /// Build ioshield (release) with its embedded BPF object.
    Build,
    /// Set up, build, and run ioshield with the given arguments, e.g. `cargo xtask run -- top`.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up and run every check: fmt, clippy, unit tests, and integration tests on this kernel.
    Test {
        /// Skip fmt and clippy.
        #[arg(long)]
        no_lint: bool,
        /// Skip the qemu runs (Debian kernels, systemd end-to-end), which take about 8 minutes.
        #[arg(long)]
        no_vm: bool,
        /// Only run tests whose name contains this.
        filter: Option<String>,
    },
    /// Measure the BPF programs' cost per event or the daemon's CPU and memory.
    Measure {
        #[command(subcommand)]
        what: Measure,
        /// Repeats (probe-cost, detection) or seconds per phase (daemon-cost).
        #[arg(long, default_value_t = 5, global = true)]
        n: u64,
    },
    /// The stall benchmark: scenarios x kernels x repeats in qemu, tables, JSON and timelines.
    Bench(bench::BenchArgs),
    /// Build the .deb and .rpm into target/packages (installs cargo-deb, cargo-generate-rpm).
    Package,
    /// Fuzz the configuration parser and the state-file loader: every property test named
    /// `*_without_panic`, with this many cases each (`cargo test` runs proptest's default 256).
    Fuzz {
        #[arg(long, default_value_t = 1_000_000)]
        cases: u64,
    },
    /// Boot Debian kernels under qemu with a slow disk and run scenarios (see tests/vm/).
    Vm {
        #[command(subcommand)]
        cmd: vm::VmCommand,
    },
}

#[derive(Subcommand)]
enum Measure {
    /// run_time_ns / run_cnt of each BPF program under a writer and a fork burst.
    ProbeCost,
    /// The daemon's CPU per hour and RSS, idle and under a heavy writer.
    DaemonCost,
    /// How soon the bench's offenders (`cp`, `tar x`, `dd`) are restricted on this machine,
    /// with the shipped configuration on a disk never measured (`--n` runs of each).
    Detection,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::ensure(),
        Task::Build => setup::ensure().and_then(|()| build_release()),
        Task::Run { args } => setup::ensure().and_then(|()| run(&args)),
        Task::Test {
            no_lint,
            no_vm,
            filter,
        } => setup::ensure().and_then(|()| test::run_all(!no_lint, !no_vm, filter.as_deref())),
        Task::Vm { cmd } => vm::main(cmd),
        Task::Package => package::run_all(),
        Task::Fuzz { cases } => setup::ensure().and_then(|()| fuzz(cases)),
        Task::Bench(args) => bench::main(args),
        Task::Measure { what, n } => {
            setup::ensure()
                .and_then(|()| build_release())
                .and_then(|()| match what {
                    Measure::ProbeCost => measure::probe_cost(n as usize),
                    Measure::DaemonCost => measure::daemon_cost(n),
                    Measure::Detection => measure::detection(n as usize),
                })
        }
    };
    if let Err(e) = result {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn fuzz(cases: u64) -> Result<()> {
    let started = std::time::Instant::now();
    cmd::run(
        cmd::command(env!("CARGO"))
            .env("PROPTEST_CASES", cases.to_string())
            .args([
                "test",
                "--release",
                "--package",
                "ioshield",
                "without_panic",
                "--",
                "--test-threads=2",
            ]),
    )?;
    println!(
        "xtask: fuzzing passed, {cases} cases per property, {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn build_release() -> Result<()> {
    cmd::cargo(&["build", "--release", "--package", "ioshield"])
}

fn run(args: &[String]) -> Result<()> {
    build_release()?;
    let bin = cmd::workspace_root().join("target/release/ioshield");
    let status = std::process::Command::new(bin).args(args).status()?;
    std::process::exit(status.code().unwrap_or(1));
}
