//! `cargo xtask bench`: the stall benchmark (an offender flooding the page cache while small innocent writers are timed) as a matrix (scenario x kernel x
//! repeat) of `tests/vm/stall.sh` runs, summarised as a markdown table of medians and spreads
//! with ratios to the unmitigated run of the same bench, a JSON file of every run, a PNG
//! timeline per scenario and kernel, and each kernel's frontier (pause against the writer's
//! speed) as a table and a PNG.
//!
//! Each run is a boot of the vm runner with one ioshield binary, built once at the start, so
//! that the whole matrix measures the same daemon even while the tree changes.
mod frontier;
mod matrix;
mod plot;
mod report;
mod results;
mod stats;

/// Timestamps of the daemon's log, for the checks that read it too.
pub use results::{clock_offset, rfc3339_seconds};

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

/// Every scenario `stall.sh` knows, in the order the table shows them.
pub const SCENARIOS: &[&str] = &["none", "thesis", "ioshield-ioprio", "ioshield", "oracle"];

#[derive(Args)]
pub struct BenchArgs {
    /// Kernel series (comma-separated or repeated).
    #[arg(long, value_delimiter = ',', default_values_t = crate::vm::kernels::all_series())]
    kernel: Vec<String>,
    /// Scenarios (comma-separated or repeated); `none` is always added as the reference. A
    /// variant of the daemon's configuration is written `ioshield:TOML` with `;` between lines,
    /// e.g. `ioshield:limit = 0.8`: its lines go into the data disk's `[device]` section, but for
    /// `bandwidth`, `bdi.KNOB`, `iocost.model`/`iocost.qos`, `earlier.IDENTITY`, `mount` (the
    /// data disk's ext4 options, e.g. `mount = data=writeback`) and `lru_gen` (the kernel's
    /// multi-gen LRU, e.g. `lru_gen = n`), which set up the guest.
    #[arg(long, value_delimiter = ',', default_values_t = SCENARIOS.iter().map(|s| s.to_string()))]
    scenario: Vec<String>,
    /// What floods the page cache: `load` (the load generator), `cp` (a 400 MB file), `cpslow`
    /// (`cp` from a source paced at `--offender-rate`, 14 MB/s by default, until the offender's
    /// stop), `tar` (`tar x` of 8192 files of 32 KiB) or `tarbig` (the same and then one file
    /// of 200 MB: an untar that turns into a copy). All but `load` are jobs, timed to `sync`.
    #[arg(long, default_value = "load", value_parser = ["load", "cp", "cpslow", "tar", "tarbig"])]
    offender: String,
    /// The `load` offender, or `cpslow`'s source, at most this many bytes a second (e.g.
    /// 14000000 on the 30 MB/s disk): a writer under the disk's speed, whose backlog builds
    /// slowly.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    offender_rate: Option<u64>,
    /// The data disk's write speed in MB/s (qemu's throttle; default: the bed's 30). The oracle's
    /// limit stays two thirds of it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    disk_mbps: Option<u64>,
    /// Where the innocent loads write: `data`, the offender's slow disk (sharing its journal),
    /// or `fast`, a second disk with no throttle (a desktop's system disk while a copy fills a
    /// USB stick: with `--disk-mbps 10`).
    #[arg(long, default_value = "data", value_parser = ["data", "fast"])]
    innocents_on: String,
    /// Runs per scenario and kernel.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Seconds the innocent loads run (50 s gives the offender a 40 s window with 5 s either side).
    #[arg(long, default_value_t = 50)]
    duration: u64,
    /// Seconds the loads go on after the `load` offender stops (default: as long as it waits
    /// to start, 5 s or 3 s), to see its release and what its backlog does after.
    #[arg(long)]
    after: Option<u64>,
    /// Directory for every run's results, bench.md and the PNG timelines.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Also write every run's numbers as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Test this ioshield binary instead of building the workspace's.
    #[arg(long)]
    ioshield: Option<PathBuf>,
    /// Only summarise the runs already in OUT (no VM is booted).
    #[arg(long)]
    report_only: bool,
}

pub fn main(args: BenchArgs) -> Result<()> {
    let root = crate::cmd::workspace_root();
    let absolute = |p: &PathBuf| {
        if p.is_absolute() {
            p.clone()
        } else {
            root.join(p)
        }
    };
    let out = absolute(&args.out);
    let mut scenarios = args.scenario.clone();
    for s in &scenarios {
        let (base, _) = matrix::split_variant(s);
        if !SCENARIOS.contains(&base) {
            anyhow::bail!("unknown scenario {s}; known: {}", SCENARIOS.join(", "));
        }
    }
    // Ratios need the reference measured in the same bench.
    if !scenarios.iter().any(|s| s == "none") {
        scenarios.insert(0, "none".to_string());
    }
    let plan = matrix::Plan {
        kernels: args.kernel.clone(),
        scenarios,
        repeat: args.repeat.max(1),
        duration: args.duration,
        after: args.after,
        offender: args.offender.clone(),
        offender_rate: args.offender_rate,
        out: out.clone(),
        disk_bps: args
            .disk_mbps
            .map_or(crate::vm::DATA_WRITE_BPS, |mb| mb * 1_000_000),
        innocents_on: args.innocents_on.clone(),
    };
    if !args.report_only {
        let bin = matrix::binary(args.ioshield.as_deref(), &out)?;
        matrix::run_all(&plan, &bin)?;
    }
    let runs = results::collect(&plan)?;
    let md = report::markdown(&plan, &runs);
    print!("{md}");
    std::fs::write(out.join("bench.md"), &md)?;
    if let Some(json) = &args.json {
        std::fs::write(absolute(json), report::json(&runs)?)?;
    }
    for png in plot::timelines(&plan, &runs)? {
        eprintln!("xtask: bench: timeline {}", png.display());
    }
    for png in plot::frontiers(&plan, &runs, report::TABLE_LOADS)? {
        eprintln!("xtask: bench: frontier {}", png.display());
    }
    eprintln!("xtask: bench: table in {}", out.join("bench.md").display());
    Ok(())
}
