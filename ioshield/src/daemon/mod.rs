//! `ioshield daemon`: ticks the pipeline (probe -> rates -> offenders -> actions), reloads its
//! configuration on SIGHUP, and puts everything back on SIGTERM/SIGINT.
mod classic;
mod decisions;
mod disk;
mod engine;
mod guard;
mod instance;
mod light_writer;
mod metrics;
mod probe_hearing;
mod ratelimit;
mod serve;
mod speed_probe;
mod speeds;
pub mod status;
mod user_links;

use std::{path::PathBuf, sync::Arc};

use anyhow::{Context as _, Result};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    act::{Actuator, CgroupAction, UndoReport, cgroup::Cgroupfs, systemd::Systemd},
    config::Config,
    journal::Journal,
    model::tree::ProcessTree,
    probe::Probe,
    system::procfs::Procfs,
};
use engine::Engine;

pub async fn run(config_path: Option<PathBuf>) -> Result<()> {
    let config = Config::load(config_path.as_deref())?;
    // Before the journal is read: another instance's live journal is not a crash's leftovers.
    let _instance = instance::InstanceLock::acquire(&config.daemon.state_file)?;
    let (journal, leftovers) = Journal::open(&config.daemon.state_file)?;
    let systemd = Systemd::detect().await;
    let cgroupfs = Cgroupfs::detect();
    let cgroup_action = match (&systemd, &cgroupfs) {
        (Ok(s), _) => Ok(CgroupAction::Systemd(s.hierarchy())),
        (_, Ok(fs)) => Ok(CgroupAction::Cgroupfs(fs.clone())),
        // On a systemd host its reason is the one that matters.
        (Err(s), Err(c)) => Err(if crate::system::host::systemd_booted() {
            s.clone()
        } else {
            c.clone()
        }),
    };
    let mut actuator = Actuator::new(journal, cgroupfs.ok(), systemd.ok());
    if !leftovers.is_empty() {
        let report = actuator.recover(leftovers).await;
        log_undo("restored what a previous instance left", &report);
    }
    let mut sigterm = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("SIGHUP handler")?;

    // systemd arms WatchdogSec= when the service starts, not when it is ready, and loading
    // the BPF programs can take longer than that under emulation: keep it fed until READY=1.
    let starting = StartupWatchdog::start();
    let mut probe = Probe::start()?;
    let mut bursts = probe.take_bursts();
    // Parsing the kernel's BTF for offsets takes tens of MB that are free again now; hand them
    // back so a long-running daemon's RSS reflects what it uses.
    // SAFETY: glibc call with no preconditions.
    unsafe { libc::malloc_trim(0) };
    let mut tree = ProcessTree::scan(Box::new(Procfs));
    let mut engine = Engine::new(config, &tree, cgroup_action);
    if let Some(memory) = engine.cgroup_setup()
        && let Err(e) = actuator.prepare_cgroups(memory)
    {
        // Made again at the first restriction, which fails with its own reason if this does.
        tracing::warn!("preparing ioshield's cgroup: {e:#}");
    }
    tracing::info!(features = ?probe.features(), "probes attached");
    engine.announce();
    let features = serde_json::to_value(probe.features())?;
    let (status_tx, status_rx) = tokio::sync::watch::channel(Arc::new(String::new()));
    let _status_server = status::StatusServer::start(engine.socket(), status_rx)?;
    let (metrics_tx, metrics_rx) = tokio::sync::watch::channel(Arc::new(String::new()));
    if let Some(addr) = engine.metrics_config().listen {
        metrics::serve(addr, metrics_rx).await?;
        tracing::info!("serving Prometheus metrics on http://{addr}/metrics");
    }
    let publish = |engine: &Engine| {
        if let Ok(doc) = serde_json::to_string(&engine.status(features.clone())) {
            status_tx.send_replace(Arc::new(doc));
        }
        let m = engine.metrics_config();
        if m.listen.is_some() || m.textfile.is_some() {
            let text = engine.metrics.render();
            if let Some(path) = &m.textfile
                && let Err(e) = metrics::write_textfile(path, &text)
            {
                tracing::warn!("metrics textfile {}: {e}", path.display());
            }
            metrics_tx.send_replace(Arc::new(text));
        }
    };
    publish(&engine);
    // Tell systemd (Type=notify) that the probes are attached and we are protecting the machine.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    drop(starting);

    let mut ticker = tokio::time::interval(engine.tick());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hearing = tokio::time::interval(engine::HEAR_EVERY);
    hearing.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // With WatchdogSec= systemd restarts a daemon whose ticks stopped (a hung call, a deadlock):
    // the restart's recovery then undoes what it had changed.
    let watchdog = sd_notify::watchdog_enabled().is_some();
    let mut said = String::new();
    let iocost_made = actuator.iocost_made();
    let result = loop {
        let backlog_due = engine.backlog_due();
        tokio::select! {
            _ = iocost_made.notified() => {
                if engine.finish_retunes(&mut actuator).await {
                    publish(&engine);
                }
            }
            batch = next_bursts(&mut bursts) => {
                match batch {
                    Ok(batch) => match engine.on_bursts(batch, &mut probe, &mut tree, &mut actuator).await {
                        Ok(true) => publish(&engine),
                        Ok(false) => {}
                        Err(e) => break Err(e),
                    },
                    Err(e) => {
                        // The tick still sees every writer, a second later.
                        tracing::warn!("burst reports unavailable, judging at each tick only: {e:#}");
                        bursts = None;
                    }
                }
            }
            _ = ticker.tick() => {
                if let Err(e) = engine.step(&mut probe, &mut tree, &mut actuator).await {
                    break Err(e);
                }
                publish(&engine);
                let now = engine.summary();
                if now != said {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&now)]);
                    said = now;
                }
                if watchdog {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                }
            }
            // A backlog due over the limit before the next tick is judged when it is.
            _ = sleep_until_due(backlog_due) => {
                if let Err(e) = engine.step(&mut probe, &mut tree, &mut actuator).await {
                    break Err(e);
                }
                publish(&engine);
            }
            // Only while a step forced the rate up for room: taken back, the rate is held
            // again at once, not at the next tick; heard kept up with, the writer's memory.high
            // goes up toward the forced rate's at once.
            _ = hearing.tick(), if engine.hears_others() => {
                if engine.hear_between_ticks(&actuator) {
                    ticker.reset_immediately();
                }
            }
            _ = sighup.recv() => {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Reloading]);
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
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
            }
            _ = sigterm.recv() => break Ok(()),
            _ = sigint.recv() => break Ok(()),
        }
        // Restrictions are made and released, and disks measured, only in the branches above.
        actuator.refresh_dirty_counts(
            engine.refresh_dirty_counts(),
            engine.dirty_counts_refreshed(),
        );
    };
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    engine.save_speeds();
    let report = actuator.release_all().await;
    log_undo("stopping: restored everything", &report);
    result
}

/// Ready at `due`; never without one.
async fn sleep_until_due(due: Option<std::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The next batch of kernel burst reports; never ready when there is no reader.
async fn next_bursts(
    reader: &mut Option<crate::probe::burst::BurstReader>,
) -> Result<Vec<crate::probe::burst::Burst>> {
    match reader {
        Some(r) => r.next_batch().await,
        None => std::future::pending().await,
    }
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

/// Pings systemd's watchdog from a thread of its own while start-up runs (the tick loop pings
/// it afterwards); stops when dropped.
struct StartupWatchdog {
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl StartupWatchdog {
    fn start() -> StartupWatchdog {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(every) = sd_notify::watchdog_enabled() {
            let done = done.clone();
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                    std::thread::sleep(every / 4);
                }
            });
        }
        StartupWatchdog { done }
    }
}

impl Drop for StartupWatchdog {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
