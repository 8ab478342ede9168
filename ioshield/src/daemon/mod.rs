//! `ioshield daemon`: ticks the pipeline (probe -> rates -> offenders -> actions), reloads its
//! configuration on SIGHUP, and puts everything back on SIGTERM/SIGINT.
mod engine;
mod ratelimit;

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    act::{Actuator, UndoReport, cgroup::Cgroupfs},
    config::Config,
    journal::Journal,
    model::tree::ProcessTree,
    probe::Probe,
};
use engine::Engine;

pub async fn run(config_path: Option<PathBuf>) -> Result<()> {
    let config = Config::load(config_path.as_deref())?;
    let (journal, leftovers) = Journal::open(&config.daemon.state_file)?;
    let cgroupfs = Cgroupfs::detect();
    let mut actuator = Actuator::new(journal, cgroupfs.clone().ok());
    if !leftovers.is_empty() {
        let report = actuator.recover(leftovers);
        log_undo("restored what a previous instance left", &report);
    }
    let mut sigterm = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("SIGHUP handler")?;

    let mut probe = Probe::start()?;
    // Parsing the kernel's BTF for offsets takes tens of MB that are free again now; hand them
    // back so a long-running daemon's RSS reflects what it uses.
    // SAFETY: glibc call with no preconditions.
    unsafe { libc::malloc_trim(0) };
    let mut tree = ProcessTree::from_proc();
    let mut engine = Engine::new(config, &tree, cgroupfs);
    tracing::info!(features = ?probe.features(), "probes attached");
    engine.announce();

    let mut ticker = tokio::time::interval(engine.tick());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = loop {
        tokio::select! {
            _ = ticker.tick() => {
                if let Err(e) = engine.step(&mut probe, &mut tree, &mut actuator) {
                    break Err(e);
                }
            }
            _ = sighup.recv() => {
                match Config::load(config_path.as_deref()) {
                    Ok(new) => {
                        let tick = new.daemon.tick;
                        engine.reconfigure(new, &tree);
                        ticker = tokio::time::interval(tick);
                        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        tracing::info!("configuration reloaded");
                    }
                    Err(e) => tracing::error!("configuration not reloaded, keeping the old one: {e}"),
                }
            }
            _ = sigterm.recv() => break Ok(()),
            _ = sigint.recv() => break Ok(()),
        }
    };
    let report = actuator.release_all();
    log_undo("stopping: restored everything", &report);
    result
}

fn log_undo(what: &str, r: &UndoReport) {
    tracing::info!(
        "{what}: {} restored, {} left as changed by someone else, {} already gone",
        r.restored,
        r.kept.len(),
        r.vanished
    );
    for k in &r.kept {
        tracing::info!("{k}");
    }
    for e in &r.errors {
        tracing::warn!("{e}");
    }
}
