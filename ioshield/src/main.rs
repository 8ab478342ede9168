//! ioshield: kernel counters -> samples -> rates -> offenders -> actions -> journal of changes.
//! See `probe` (kernel side), `model` (samples, tree), `top` (the view).
mod act;
mod assets;
mod cli;
mod config;
mod daemon;
mod detect;
mod display;
mod doctor;
mod explain;
mod journal;
mod logging;
mod model;
mod output;
mod probe;
mod system;
mod top;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Top(_)
        | Command::CheckConfig(_)
        | Command::Status(_)
        | Command::Doctor
        | Command::Explain(_)
        | Command::GenerateAssets { .. } => "warn",
        Command::Daemon(_) => "info",
    };
    logging::init(cli.log.as_deref().unwrap_or(default_level), default_level);

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
            Command::Top(a) => top_command(a).await,
            Command::Daemon(a) => daemon::run(a.config).await,
            Command::CheckConfig(a) => check_config(a.file.as_deref()),
            Command::Status(a) => status(a),
            Command::Doctor => doctor::run().await,
            Command::Explain(a) => explain::run(a.pid, &socket_for(a.socket)),
            Command::GenerateAssets { dir } => assets::generate(&dir),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<output::StdoutClosed>().is_some() => ExitCode::SUCCESS,
        // As `systemctl status` does for a unit that is not running.
        Err(e) if e.downcast_ref::<daemon::status::NotRunning>().is_some() => {
            eprintln!("ioshield: {e:#}");
            ExitCode::from(3)
        }
        Err(e) => {
            // One line a person can act on; the cause chain joined with ": ".
            eprintln!("ioshield: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn top_command(a: cli::TopArgs) -> anyhow::Result<()> {
    let uid = match &a.user {
        Some(user) => Some(
            system::procfs::user_id(user)
                .ok_or_else(|| anyhow::anyhow!("top --user {user}: no such user"))?,
        ),
        None => None,
    };
    top::run(top::TopOptions {
        interval: a.interval,
        watch: a.watch || a.count.is_some_and(|n| n > 1),
        count: a.count,
        json: a.json,
        batch: a.batch,
        rows: a.rows,
        cmdline: a.cmdline,
        view: top::View {
            pids: a.pids,
            uid,
            only_active: a.only,
            sort: a.sort,
            reverse: a.reverse,
        },
    })
    .await
}

fn check_config(file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let config = config::Config::load(file)?;
    let head = if config.source.is_none() && config.drop_ins.is_empty() {
        "# no configuration file; built-in defaults:".to_string()
    } else {
        let verb = if config.drop_ins.is_empty()
            || config.source.is_none() && config.drop_ins.len() == 1
        {
            "is"
        } else {
            "are"
        };
        format!(
            "# {} {verb} valid; effective configuration:",
            config.origin()
        )
    };
    output::print(&format!("{head}\n{}", config.to_toml()))
}

/// The socket given, or the default one if it is there: a bad edit of the config file must not
/// break `status` or `explain` while the daemon runs on its old configuration.
fn socket_for(given: Option<std::path::PathBuf>) -> std::path::PathBuf {
    let default = config::Config::default().daemon.socket;
    match given {
        Some(s) => s,
        None if default.exists() => default,
        None => config::Config::load(None).map_or(default, |c| c.daemon.socket),
    }
}

fn status(a: cli::StatusArgs) -> anyhow::Result<()> {
    let s = daemon::status::query(&socket_for(a.socket))?;
    if a.json {
        output::print(&format!("{}\n", serde_json::to_string_pretty(&s)?))
    } else {
        output::print(&daemon::status::render(&s))
    }
}
