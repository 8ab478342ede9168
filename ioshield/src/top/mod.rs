//! `ioshield top`: who dirties the page cache, once, as repeated tables or JSON, or as a live
//! full-screen view on a terminal.
mod live;
mod report;
mod table;
mod view;

use std::{io::IsTerminal as _, time::Duration};

use anyhow::Result;

use crate::{model::tree::ProcessTree, output, probe::Probe};
pub use report::Report;
pub use view::{SortKey, View};

pub struct TopOptions {
    pub interval: Duration,
    pub watch: bool,
    pub count: Option<u64>,
    pub json: bool,
    /// Plain repeated output even on a terminal (`-b`, as iotop's batch mode).
    pub batch: bool,
    pub rows: usize,
    pub cmdline: bool,
    pub view: View,
}

/// The probe and the process tree it keeps current: one report per window.
pub struct Sampler {
    probe: Probe,
    tree: ProcessTree,
}

impl Sampler {
    fn start() -> Result<Sampler> {
        let probe = Probe::start()?;
        tracing::info!(features = ?probe.features(), "probes attached");
        Ok(Sampler {
            probe,
            tree: ProcessTree::scan(Box::new(crate::system::procfs::Procfs)),
        })
    }

    /// The report of the window since the previous call (or since the probe started).
    fn next(&mut self) -> Result<Report> {
        let sample = self.probe.sample()?;
        self.tree.follow(
            &sample.lifecycle,
            self.probe.features().lifecycle,
            sample.lost.lifecycle_events_dropped > 0,
        );
        let report = Report::build(&sample, &mut self.tree, &self.probe);
        self.tree.prune_exited();
        Ok(report)
    }
}

pub async fn run(opts: TopOptions) -> Result<()> {
    let mut sampler = Sampler::start()?;
    let limit = match (opts.watch, opts.count) {
        (_, Some(n)) => n.max(1),
        (true, None) => u64::MAX,
        (false, None) => 1,
    };
    if opts.watch && !opts.json && !opts.batch && std::io::stdout().is_terminal() {
        return live::run(&mut sampler, opts.view, opts.cmdline, opts.interval, limit).await;
    }
    let layout = table::Layout {
        rows: opts.rows,
        cmdline: opts.cmdline,
        filtered: opts.view.filters(),
    };
    for shown in 0..limit {
        tokio::select! {
            () = tokio::time::sleep(opts.interval) => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        let mut report = sampler.next()?;
        opts.view.apply(&mut report);
        if opts.json {
            output::print(&format!("{}\n", serde_json::to_string(&report)?))?;
        } else {
            let gap = if opts.watch && shown > 0 { "\n" } else { "" };
            output::print(&format!("{gap}{}", table::render(&report, &layout)))?;
        }
    }
    Ok(())
}
