//! Writing results to stdout, whose reader may leave early (`ioshield top --json | head -1`).
//! Rust ignores SIGPIPE, so a closed pipe shows up as EPIPE on the next write; `print!` would
//! panic on it. Here it becomes [`StdoutClosed`], which `main` turns into a quiet exit 0, as
//! other command-line tools do when their reader is done.
use std::io::Write as _;

#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `text` and flushes it, so each `top` refresh reaches a pipe when it is made.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}
