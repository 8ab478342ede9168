//! ioshield: kernel counters -> samples -> rates -> offenders -> actions -> journal of changes.
//! See `probe` (kernel side), `model` (samples, tree), `top` (the view).
mod act;
mod cli;
mod config;
mod daemon;
mod detect;
mod journal;
mod kernel;
mod model;
mod probe;
mod system;
mod top;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Top(_) | Command::CheckConfig(_) => "warn",
        Command::Daemon(_) => "info",
    };
    let filter = EnvFilter::try_new(cli.log.as_deref().unwrap_or(default_level))
        .unwrap_or_else(|_| EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ioshield: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Top(a) => {
                top::run(top::TopOptions {
                    interval: a.interval,
                    watch: a.watch || a.count.is_some_and(|n| n > 1),
                    count: a.count,
                    json: a.json,
                    rows: a.rows,
                })
                .await
            }
            Command::Daemon(a) => daemon::run(a.config).await,
            Command::CheckConfig(a) => check_config(a.file.as_deref()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line a person can act on; the cause chain joined with ": ".
            eprintln!("ioshield: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let config = config::Config::load(file)?;
    match &config.source {
        Some(p) => println!("# {} is valid; effective configuration:", p.display()),
        None => println!("# no configuration file; built-in defaults:"),
    }
    print!("{}", config.to_toml());
    Ok(())
}
