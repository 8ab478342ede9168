//! `ioshield top`: a one-shot (or `--watch`) view of who dirties the page cache.
mod report;
mod table;

use std::time::Duration;

use anyhow::Result;

use crate::{model::tree::ProcessTree, output, probe::Probe};
pub use report::Report;

pub struct TopOptions {
    pub interval: Duration,
    pub watch: bool,
    pub count: Option<u64>,
    pub json: bool,
    pub rows: usize,
}

pub async fn run(opts: TopOptions) -> Result<()> {
    let mut probe = Probe::start()?;
    let mut tree = ProcessTree::scan(Box::new(crate::system::procfs::Procfs));
    tracing::info!(features = ?probe.features(), "probes attached");
    let limit = match (opts.watch, opts.count) {
        (_, Some(n)) => n.max(1),
        (true, None) => u64::MAX,
        (false, None) => 1,
    };
    for shown in 0..limit {
        tokio::select! {
            () = tokio::time::sleep(opts.interval) => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        let sample = probe.sample()?;
        tree.follow(
            &sample.lifecycle,
            probe.features().lifecycle,
            sample.lost.lifecycle_events_dropped > 0,
        );
        let report = Report::build(&sample, &mut tree, &probe);
        if opts.json {
            output::print(&format!("{}\n", serde_json::to_string(&report)?))?;
        } else {
            let gap = if opts.watch && shown > 0 { "\n" } else { "" };
            output::print(&format!("{gap}{}", table::render(&report, opts.rows)))?;
        }
        tree.prune_exited();
    }
    Ok(())
}
