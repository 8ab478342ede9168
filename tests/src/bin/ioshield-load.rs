//! `ioshield-load`: the thesis's loads (control, write, multiwrite, offender) and a database-like
//! commit load for measuring stalls, `summarize` to read their records, and `tarball` to make
//! the untar offender's source. Runs inside the test VM as well as on a host.
use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Result;
use clap::{Parser, Subcommand};
use ioshield_tests::load::{
    clock,
    innocent::{self, Innocent},
    offender::{self, Mode, OffenderOptions},
    record::LoadRecord,
    summary, tarball,
    units::{parse_duration, parse_size},
};

#[derive(Parser)]
#[command(
    name = "ioshield-load",
    about = "Loads that measure I/O stalls (Mendez Orero, 2020)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct Common {
    /// How long to run, e.g. `50s`.
    #[arg(long, value_parser = parse_duration, default_value = "50s")]
    duration: Duration,
    /// Directory the write loads write into (on the disk under test).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Where to write the JSON record (default: stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Sleep 50 ms per cycle (no I/O: measures CPU and timer noise).
    Control(Common),
    /// Write 6 bytes to an open file, sleep 50 ms.
    Write(Common),
    /// Create a new file, write 6 bytes, close it, sleep 100 ms.
    Multiwrite(Common),
    /// Append 4 KiB to an open file and fdatasync it, sleep 100 ms (a database's commit).
    Commit(Common),
    /// The commit once a second (4 kB/s): a light appender.
    Appender(Common),
    /// Write 1 MiB through the page cache, no sync, sleep 100 ms (10 MB/s: a download).
    Bulk(Common),
    /// Write chunks through the page cache without pause.
    Offender {
        /// File to write (with --threads, FILE.0, FILE.1, ...).
        #[arg(long)]
        file: PathBuf,
        /// Wait this long before the first write.
        #[arg(long, value_parser = parse_duration, default_value = "0s")]
        delay: Duration,
        /// Stop after writing this long (default: until --size, or SIGTERM).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Stop after this many bytes, e.g. `2G`.
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Bytes per write.
        #[arg(long, value_parser = parse_size, default_value = "1MiB")]
        chunk: u64,
        /// Fork a short-lived child to write each chunk.
        #[arg(long, conflicts_with = "threads")]
        fork_per_chunk: bool,
        /// Write from this many threads, each to its own file.
        #[arg(long)]
        threads: Option<usize>,
        /// At most this many bytes a second, e.g. `14000000` or `14M` (MiB), with no burst to
        /// make up for a write that waited (default: as fast as it can).
        #[arg(long, value_parser = parse_size)]
        rate: Option<u64>,
        /// Where to write the JSON record (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write the untar offender's tarball: `small/f0000`... of FILE_SIZE bytes, then `big`.
    Tarball {
        /// The archive to write.
        #[arg(long)]
        out: PathBuf,
        /// How many small files.
        #[arg(long, default_value_t = 8192)]
        files: u32,
        /// Bytes of each small file.
        #[arg(long, value_parser = parse_size, default_value = "32KiB")]
        file_size: u64,
        /// Bytes of one large file after them (none by default).
        #[arg(long, value_parser = parse_size)]
        big: Option<u64>,
    },
    /// Print the metrics of load records side by side.
    Summarize {
        files: Vec<PathBuf>,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ioshield-load: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    clock::stop_on_signals();
    let (record, out) = match cli.command {
        Command::Control(c) => (innocent::run(Innocent::Control, c.duration, &c.dir)?, c.out),
        Command::Write(c) => (innocent::run(Innocent::Write, c.duration, &c.dir)?, c.out),
        Command::Multiwrite(c) => (
            innocent::run(Innocent::Multiwrite, c.duration, &c.dir)?,
            c.out,
        ),
        Command::Commit(c) => (innocent::run(Innocent::Commit, c.duration, &c.dir)?, c.out),
        Command::Appender(c) => (
            innocent::run(Innocent::Appender, c.duration, &c.dir)?,
            c.out,
        ),
        Command::Bulk(c) => (innocent::run(Innocent::Bulk, c.duration, &c.dir)?, c.out),
        Command::Offender {
            file,
            delay,
            duration,
            size,
            chunk,
            fork_per_chunk,
            threads,
            rate,
            out,
        } => {
            let mode = match (fork_per_chunk, threads) {
                (true, _) => Mode::ForkPerChunk,
                (false, Some(n)) => Mode::Threads(n),
                (false, None) => Mode::Single,
            };
            let opts = OffenderOptions {
                file,
                delay,
                duration,
                size,
                chunk: usize::try_from(chunk)?,
                mode,
                rate,
            };
            (offender::run(&opts)?, out)
        }
        Command::Tarball {
            out,
            files,
            file_size,
            big,
        } => {
            return tarball::write(
                &out,
                tarball::Contents {
                    files,
                    file_size,
                    big,
                },
            );
        }
        Command::Summarize { files, json } => {
            let rows = summary::rows(&files)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", summary::table(&rows));
            }
            return Ok(());
        }
    };
    report(&record, out)
}

/// The record goes to a file (or stdout); a one-line summary always goes to stderr.
fn report(record: &LoadRecord, out: Option<PathBuf>) -> Result<()> {
    match &out {
        Some(path) => record.save(path)?,
        None => println!("{}", serde_json::to_string(record)?),
    }
    match &record.metrics {
        Some(m) => eprintln!(
            "ioshield-load: {} cycles={} longest={:.3}s paused={:.2}s wait={:.1}ms over100ms={}",
            record.load,
            m.cycles,
            m.longest_pause_s,
            m.total_paused_s,
            m.wait_s * 1e3,
            m.pauses_over_100ms
        ),
        None => eprintln!(
            "ioshield-load: {} wrote {} bytes at {:.1} MB/s",
            record.load,
            record.bytes_written,
            record.bytes_per_sec / 1e6
        ),
    }
    Ok(())
}
