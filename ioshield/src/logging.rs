//! Logs go to the journal, with structured fields (IOSHIELD_PID, IOSHIELD_ACTION), when systemd
//! connected us to it; to stderr otherwise.
use tracing_subscriber::{EnvFilter, prelude::*};

pub fn init(filter: &str, default: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new(default));
    let journald = std::env::var_os("JOURNAL_STREAM")
        .and_then(|_| tracing_journald::layer().ok())
        .map(|l| l.with_field_prefix(Some("IOSHIELD".into())));
    match journald {
        Some(journal) => tracing_subscriber::registry()
            .with(filter)
            .with(journal)
            .init(),
        None => tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_target(false)
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
            )
            .init(),
    }
}
