//! The offender: writes 1 MiB chunks through the page cache as fast as the kernel lets it, never
//! syncing, like `dd`, a download or a backup. Modes cover the thesis's attribution pitfalls:
//! work fanned out to threads, and short-lived children that each write a little.
use std::{
    fs::OpenOptions,
    io::Write as _,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use super::{clock, record::LoadRecord};

#[derive(Debug, Clone)]
pub struct OffenderOptions {
    /// File to write (threads write `FILE.N`).
    pub file: PathBuf,
    /// Idle time before the first write: the process exists (and is placed in its cgroup) first.
    pub delay: Duration,
    /// Stop after this long writing ...
    pub duration: Option<Duration>,
    /// ... or after this many bytes, whichever comes first; neither means until SIGTERM.
    pub size: Option<u64>,
    pub chunk: usize,
    pub mode: Mode,
    /// At most this many bytes a second: a writer a little slower than the disk, which builds
    /// its backlog slowly. A write that waited is not made up for with a burst (a source of
    /// that speed with little buffer, such as a download). `None`: as fast as it can.
    pub rate: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One process, one thread.
    Single,
    /// `N` threads, each writing its own file.
    Threads(usize),
    /// A child process per chunk, which appends the chunk and exits.
    ForkPerChunk,
}

/// Shared between writer threads: how much is written and when to stop.
struct Budget {
    written: AtomicU64,
    size: Option<u64>,
    deadline: Option<f64>,
    rate: Option<u64>,
    /// When the next chunk is due, at `rate`.
    next_due: Mutex<f64>,
}

impl Budget {
    /// Claims one chunk, or says the offender is done.
    fn claim(&self, chunk: u64) -> bool {
        if clock::stop_requested() || self.deadline.is_some_and(|d| clock::now() >= d) {
            return false;
        }
        let before = self.written.fetch_add(chunk, Ordering::Relaxed);
        match self.size {
            Some(size) if before >= size => {
                self.written.fetch_sub(chunk, Ordering::Relaxed);
                false
            }
            _ => {
                if let Some(rate) = self.rate {
                    let due = {
                        let mut next = self.next_due.lock().unwrap_or_else(|e| e.into_inner());
                        let due = next.max(clock::now());
                        *next = due + chunk as f64 / rate as f64;
                        due
                    };
                    sleep_unless_stopped(Duration::from_secs_f64((due - clock::now()).max(0.0)));
                }
                !clock::stop_requested()
            }
        }
    }
}

pub fn run(opts: &OffenderOptions) -> Result<LoadRecord> {
    if opts.chunk == 0 {
        bail!("--chunk must be larger than zero");
    }
    if opts.rate == Some(0) {
        bail!("--rate must be larger than zero");
    }
    sleep_unless_stopped(opts.delay);
    let start = clock::now();
    let budget = Budget {
        written: AtomicU64::new(0),
        size: opts.size,
        deadline: opts.duration.map(|d| start + d.as_secs_f64()),
        rate: opts.rate,
        next_due: Mutex::new(start),
    };
    let buf = vec![0xa5u8; opts.chunk];
    let mut ends = match opts.mode {
        Mode::Single => write_chunks(&opts.file, &buf, &budget)?,
        Mode::Threads(n) => with_threads(&opts.file, n, &buf, &budget)?,
        Mode::ForkPerChunk => fork_per_chunk(&opts.file, &buf, &budget)?,
    };
    ends.sort_by(f64::total_cmp);
    let written = (ends.len() * opts.chunk) as u64;
    Ok(LoadRecord::new("offender", 0.0, start, ends, written))
}

fn sleep_unless_stopped(d: Duration) {
    let until = clock::now() + d.as_secs_f64();
    while !clock::stop_requested() && clock::now() < until {
        thread::sleep(Duration::from_millis(20).min(d));
    }
}

fn write_chunks(file: &Path, buf: &[u8], budget: &Budget) -> Result<Vec<f64>> {
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    let mut ends = Vec::new();
    while budget.claim(buf.len() as u64) {
        f.write_all(buf)
            .with_context(|| format!("writing {}", file.display()))?;
        ends.push(clock::now());
    }
    Ok(ends)
}

fn with_threads(file: &Path, n: usize, buf: &[u8], budget: &Budget) -> Result<Vec<f64>> {
    if n == 0 {
        bail!("--threads must be at least 1");
    }
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let file = numbered(file, i);
                s.spawn(move || write_chunks(&file, buf, budget))
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().expect("writer thread panicked")?);
        }
        Ok(all)
    })
}

fn numbered(file: &Path, i: usize) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(format!(".{i}"));
    PathBuf::from(name)
}

/// Each chunk is written by a fresh child that exits right away, so a tool that only looks at
/// live processes, or forgets exited children, misses the writer.
fn fork_per_chunk(file: &Path, buf: &[u8], budget: &Budget) -> Result<Vec<f64>> {
    // Prepared before fork: the child only makes async-signal-safe calls.
    let path = std::ffi::CString::new(file.as_os_str().as_bytes())
        .context("file name contains a NUL byte")?;
    std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
    let mut ends = Vec::new();
    while budget.claim(buf.len() as u64) {
        // SAFETY: this process is single-threaded here; the child calls only open/write/_exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork failed: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: plain syscalls on memory that stays valid; _exit skips Rust's atexit work.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_APPEND);
                let ok = fd >= 0 && write_all_raw(fd, buf);
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for the child we just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!("writer child {pid} failed writing {}", file.display());
        }
        ends.push(clock::now());
    }
    Ok(ends)
}

/// SAFETY: `fd` must be an open descriptor; only async-signal-safe calls.
unsafe fn write_all_raw(fd: libc::c_int, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paced, 3 chunks at 10 chunks a second take at least the two gaps between them.
    #[test]
    fn a_rate_paces_the_writes() {
        let dir = tempfile::tempdir().unwrap();
        let chunk = 64 << 10;
        let opts = OffenderOptions {
            file: dir.path().join("out"),
            delay: Duration::ZERO,
            duration: None,
            size: Some(3 * chunk as u64),
            chunk,
            mode: Mode::Single,
            rate: Some(10 * chunk as u64),
        };
        let record = run(&opts).unwrap();
        assert_eq!(
            std::fs::metadata(&opts.file).unwrap().len(),
            3 * chunk as u64
        );
        let took = record.cycle_ends_s.last().unwrap() - record.start_s;
        assert!(took >= 0.2, "3 chunks at 10 a second in {took} s");
    }
}
