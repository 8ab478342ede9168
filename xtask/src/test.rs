//! `cargo xtask test`: every check, in the order that fails fastest.
use anyhow::Result;

use crate::cmd::{cargo, command, run, workspace_root};

pub fn run_all(lint: bool, vm: bool, filter: Option<&str>) -> Result<()> {
    // systemd-analyze checks the unit's hardening; python3 drives the paced test writer;
    // promtool (in `prometheus`) checks that the metrics are what a scraper accepts; tmux is
    // the terminal the live `top` view is driven in.
    // groff-base renders the man pages in the packaging test.
    crate::setup::apt_install(&["systemd", "python3", "prometheus", "tmux", "groff-base"])?;
    if lint {
        cargo(&["fmt", "--all", "--", "--check"])?;
        cargo(&[
            "clippy",
            "--workspace",
            "--exclude",
            "ioshield-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])?;
        // The BPF crate only builds for the BPF target's rules (no unwinding).
        run(command("cargo").args([
            "+nightly",
            "clippy",
            "--package",
            "ioshield-ebpf",
            "--",
            "-C",
            "panic=abort",
            "-Zpanic_abort_tests",
            "-D",
            "warnings",
        ]))?;
    }
    cargo(&[
        "build",
        "--package",
        "ioshield",
        "--package",
        "ioshield-tests",
    ])?;
    let bin = workspace_root().join("target/debug/ioshield");
    // Integration tests load BPF programs and run real writers: one at a time, so one test's
    // writer does not slow down or throttle another's.
    let mut args = vec![
        "test",
        "--workspace",
        "--exclude",
        "ioshield-ebpf",
        "--",
        "--test-threads=1",
    ];
    if let Some(f) = filter {
        args.push(f);
    }
    run(command(env!("CARGO")).env("IOSHIELD_BIN", bin).args(&args))?;
    if vm && filter.is_none() {
        // Real Debian kernels in qemu: the BPF programs on 6.1 and 6.12, the cgroup action
        // against the stall, then the package in a systemd system.
        crate::vm::main(crate::vm::VmCommand::Ci {
            kernel: Vec::new(),
            out: "target/vm-ci".into(),
        })?;
        crate::package::run_all()?;
        crate::vm::main(crate::vm::VmCommand::E2e {
            kernel: vec!["6.12".into()],
            deb: None,
            script: None,
            out: "target/vm-e2e".into(),
            timeout: 900,
            quiet: true,
            measure: false,
        })?;
    }
    println!("xtask: every check passed");
    Ok(())
}
