//! The command line. Kept apart from `main` so man pages and completions can be generated from it.
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "ioshield",
    version,
    about = "Keeps Linux responsive while a heavy buffered writer floods the page cache",
    long_about = "ioshield watches, with BPF, which processes dirty the page cache on which disk, \
                  and demotes the I/O of the one flooding it until it calms down."
)]
pub struct Cli {
    /// Log filter, e.g. `info`, `debug`, `ioshield=trace` (default: `info`, `warn` for `top`).
    #[arg(long, global = true, env = "IOSHIELD_LOG")]
    pub log: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show who dirties the page cache, per process and disk, then exit.
    Top(TopArgs),
    /// Watch writers and demote the one flooding a disk until it calms down (the service).
    Daemon(DaemonArgs),
    /// Validate a configuration file and print the effective configuration.
    CheckConfig(CheckConfigArgs),
    /// Ask the running daemon what it is doing: devices, offenders, recent decisions.
    Status(StatusArgs),
    /// Why the daemon did (or did not) restrict a process: its rates against the disk's
    /// threshold, whether it may be chosen, where it lives, what a restriction would do.
    Explain(ExplainArgs),
    /// Check what ioshield needs and uses on this machine, one line each, and what follows when
    /// something is missing. Exits 1 when ioshield cannot protect this machine at all.
    Doctor,
    /// Write the man pages and shell completions into DIR (used by `cargo xtask package`).
    #[command(hide = true)]
    GenerateAssets {
        /// Output directory, created if missing.
        dir: std::path::PathBuf,
    },
}

#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// Configuration file (default: /etc/ioshield/ioshield.toml if it exists, else built-in
    /// defaults). A path given here must exist.
    #[arg(short, long)]
    pub config: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The daemon's socket (default: `daemon.socket` from the configuration).
    #[arg(long)]
    pub socket: Option<std::path::PathBuf>,
    /// Print the daemon's status document as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The process to explain.
    pub pid: u32,
    /// The daemon's socket (default: `daemon.socket` from the configuration).
    #[arg(long)]
    pub socket: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// The file to check (default: /etc/ioshield/ioshield.toml, or the built-in defaults).
    pub file: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Sampling window, e.g. `2s`, `500ms` (`-d`/`--delay` as in iotop).
    #[arg(
        short,
        long,
        visible_short_alias = 'd',
        visible_alias = "delay",
        default_value = "2s",
        value_parser = parse_interval
    )]
    pub interval: Duration,
    /// Keep refreshing until quit: a live full-screen view on a terminal (keys: q quit, s sort,
    /// r reverse, o only writers, c command line), repeated tables otherwise.
    #[arg(short, long)]
    pub watch: bool,
    /// Number of refreshes (implies --watch when more than 1).
    #[arg(short = 'n', long, visible_alias = "iter")]
    pub count: Option<u64>,
    /// Print one JSON object per refresh instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Batch mode: plain repeated tables even on a terminal, for logging.
    #[arg(short, long)]
    pub batch: bool,
    /// Table rows to print.
    #[arg(long, default_value_t = 20)]
    pub rows: usize,
    /// Only these processes (repeatable).
    #[arg(short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only processes of this user (name or uid).
    #[arg(short, long)]
    pub user: Option<String>,
    /// Only processes that dirtied pages or were throttled themselves, not ancestors shown for
    /// what their descendants wrote.
    #[arg(short, long)]
    pub only: bool,
    /// Column to sort by (biggest rates first; names and pids ascending).
    #[arg(long, value_enum, default_value_t = crate::top::SortKey::Dirty)]
    pub sort: crate::top::SortKey,
    /// Reverse the sort order.
    #[arg(long)]
    pub reverse: bool,
    /// Show each process's full command line instead of its name.
    #[arg(short, long)]
    pub cmdline: bool,
}

/// `--interval`: from 100 ms (shorter windows are noise) to a day.
fn parse_interval(s: &str) -> Result<Duration, String> {
    crate::config::units::parse_duration_within(
        s,
        Duration::from_millis(100),
        Duration::from_secs(86_400),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_interval("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_interval("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("1e20").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
