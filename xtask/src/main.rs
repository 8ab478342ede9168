//! Developer tasks: `cargo xtask setup | build | run | test`. Each task installs what it needs
//! first (idempotently), so the README's two commands work on a fresh machine.
mod cmd;
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
        /// Only run tests whose name contains this.
        filter: Option<String>,
    },
    /// Boot Debian kernels under qemu with a slow disk and run scenarios (see tests/vm/).
    Vm {
        #[command(subcommand)]
        cmd: vm::VmCommand,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::ensure(),
        Task::Build => setup::ensure().and_then(|()| build_release()),
        Task::Run { args } => setup::ensure().and_then(|()| run(&args)),
        Task::Test { no_lint, filter } => {
            setup::ensure().and_then(|()| test::run_all(!no_lint, filter.as_deref()))
        }
        Task::Vm { cmd } => vm::main(cmd),
    };
    if let Err(e) = result {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
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
