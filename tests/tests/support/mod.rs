//! Shared by the integration tests: run the real `ioshield` binary against the real kernel, with
//! real writers. These tests need root and BPF, as the daemon does.
#![allow(dead_code)]

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::mpsc,
    time::Duration,
};

pub const MIB: u64 = 1024 * 1024;

pub fn ioshield_bin() -> PathBuf {
    let bin = std::env::var_os("IOSHIELD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/ioshield"));
    assert!(
        bin.exists(),
        "{} missing: run the tests with `cargo xtask test`, which builds it",
        bin.display()
    );
    bin
}

pub fn ioshield() -> Command {
    let mut c = Command::new(ioshield_bin());
    c.env_remove("IOSHIELD_TEST_HIDE")
        .env_remove("IOSHIELD_LOG");
    c
}

/// A scratch directory on a real disk (not tmpfs), removed at the end of the test.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ioshield-test-")
        .tempdir_in("/var/tmp")
        .expect("scratch dir in /var/tmp")
}

/// `/dev/NAME` of the whole disk holding `path`, as ioshield should report it.
pub fn disk_label(path: &Path) -> String {
    let st = nix::sys::stat::stat(path).unwrap();
    let (maj, min) = (
        nix::sys::stat::major(st.st_dev),
        nix::sys::stat::minor(st.st_dev),
    );
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{maj}:{min}"))
        .expect("scratch dir is on a block device");
    let disk = if sys.join("partition").exists() {
        sys.parent().unwrap().to_path_buf()
    } else {
        sys
    };
    format!("/dev/{}", disk.file_name().unwrap().to_string_lossy())
}

/// Writes `mib` MiB of zeros to `file` with dd, returning the running writer.
pub fn dd(file: &Path, mib: u64) -> Child {
    Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", file.display()))
        .args(["bs=1M", &format!("count={mib}"), "status=none"])
        .spawn()
        .expect("dd")
}

/// A running `ioshield` whose probes are attached (it logged so) and whose output is collected.
pub struct Running {
    child: Child,
    pub stderr: mpsc::Receiver<String>,
    /// What it logged up to and including "probes attached".
    pub startup: Vec<String>,
}

impl Running {
    /// Starts `ioshield --log info ARGS...` and waits until its probes are attached.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Running {
        Running::start_limited(args, env, None)
    }

    /// As [`Running::start`], with at most `nofile` open files (RLIMIT_NOFILE) when given.
    pub fn start_limited(args: &[&str], env: &[(&str, &str)], nofile: Option<u64>) -> Running {
        let mut cmd = ioshield();
        cmd.args(["--log", "info"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ioshield");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    let ready = line.contains("probes attached");
                    seen.push(line);
                    if ready {
                        break;
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "ioshield never attached its probes; stderr:\n{}",
                        seen.join("\n")
                    );
                }
            }
        }
        Running {
            child,
            stderr: rx,
            startup: seen,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has not exited yet.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for exit; returns (status success, stdout, stderr lines after start-up).
    pub fn finish(self) -> (bool, String, Vec<String>) {
        let out = self.child.wait_with_output().expect("ioshield output");
        let lines: Vec<String> = self.stderr.try_iter().collect();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            lines,
        )
    }
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run command")
}

/// Runs `cmd` to its end, or kills it after `limit` and returns `None`.
pub fn run_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn command");
    let done = wait_for(limit, || child.try_wait().unwrap().is_some()).is_some();
    if !done {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("command output");
    done.then_some(out)
}

/// A loopback TCP port nothing listens on right now: the kernel picks it for a bind to port 0.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// `promtool check metrics` on `text`: whether Prometheus's own checker accepts it, and what it
/// said.
pub fn promtool_check(text: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package `prometheus`; `cargo xtask test` installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// Lets this process open `n` files, for tests that hold many connections.
pub fn allow_open_files(n: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < n {
            limit.rlim_cur = n.min(limit.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
}

/// The single stderr line of a failed run, checked to be one line and non-zero exit.
pub fn one_line_failure(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "expected failure, got {:?}",
        out.status
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{stderr}");
    assert!(lines[0].starts_with("ioshield: "), "{}", lines[0]);
    lines[0].to_string()
}

pub fn rows_for_pid(report: &serde_json::Value, pid: u32) -> Vec<serde_json::Value> {
    report["processes"]
        .as_array()
        .expect("processes list")
        .iter()
        .filter(|p| p["pid"].as_u64() == Some(pid as u64))
        .cloned()
        .collect()
}

pub fn f64_of(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// The paced writer (support/writer.py): `rate` MB/s per thread for `seconds`, then quiet.
pub fn writer(dir: &Path, rate: f64, seconds: f64, threads: u32, then_sleep: f64) -> Child {
    writer_command(dir, rate, seconds, threads, then_sleep)
        .spawn()
        .expect("python3 writer")
}

/// `writer` that renames itself (its comm) to `name`, bytes as they are, before writing.
pub fn writer_named(dir: &Path, rate: f64, seconds: f64, name: &[u8]) -> Child {
    let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
    writer_command(dir, rate, seconds, 1, 0.0)
        .args(["--name-hex", &hex])
        .spawn()
        .expect("python3 writer")
}

fn writer_command(dir: &Path, rate: f64, seconds: f64, threads: u32, then_sleep: f64) -> Command {
    let mut c = Command::new("python3");
    c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/writer.py"))
        .arg("--dir")
        .arg(dir)
        .args(["--rate", &rate.to_string()])
        .args(["--seconds", &seconds.to_string()])
        .args(["--threads", &threads.to_string()])
        .args(["--then-sleep", &then_sleep.to_string()])
        .stdout(Stdio::null());
    c
}

/// The raw ioprio of a thread, via ioprio_get(2).
pub fn ioprio(tid: u32) -> Option<u16> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, tid as libc::c_int) };
    (r >= 0).then_some(r as u16)
}

pub const IOPRIO_IDLE: u16 = 3 << 13;

pub fn threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `cond` every 20 ms for up to `limit`; returns how long it took.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A daemon under test, with its own config file and state file in a scratch directory.
pub struct Daemon {
    pub running: Option<Running>,
    pub config: PathBuf,
    pub state_file: PathBuf,
    pub socket: PathBuf,
    pub log: Vec<String>,
}

impl Daemon {
    /// `config` is the TOML body; `[daemon] state_file` is added to keep the test's state apart.
    pub fn start(dir: &Path, config: &str) -> Daemon {
        Self::start_with(dir, config, &[], None)
    }

    /// As [`Daemon::start`], with extra environment and at most `nofile` open files when given.
    pub fn start_with(
        dir: &Path,
        config: &str,
        env: &[(&str, &str)],
        nofile: Option<u64>,
    ) -> Daemon {
        let state_file = dir.join("state/state.json");
        let socket = dir.join("state/ioshield.sock");
        let config_path = dir.join("ioshield.toml");
        let ours = format!(
            "[daemon]\nstate_file = \"{}\"\nsocket = \"{}\"\nspeeds_file = \"{}\"\n",
            state_file.display(),
            socket.display(),
            dir.join("state/disks.json").display()
        );
        let body = if config.contains("[daemon]") {
            config.replacen("[daemon]\n", &ours, 1)
        } else {
            format!("{ours}{config}")
        };
        std::fs::write(&config_path, body).unwrap();
        let running = Running::start_limited(
            &["daemon", "--config", config_path.to_str().unwrap()],
            env,
            nofile,
        );
        Daemon {
            log: running.startup.clone(),
            running: Some(running),
            config: config_path,
            state_file,
            socket,
        }
    }

    /// Restarts on the same config and state file (after a crash, say).
    pub fn restart(&mut self) {
        assert!(self.running.is_none());
        let running = Running::start(&["daemon", "--config", self.config.to_str().unwrap()], &[]);
        self.log = running.startup.clone();
        self.running = Some(running);
    }

    pub fn pid(&self) -> u32 {
        self.running.as_ref().unwrap().pid()
    }

    pub fn alive(&mut self) -> bool {
        self.running.as_mut().is_some_and(Running::alive)
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig).unwrap();
    }

    /// Collects log lines so far and waits up to `limit` for one containing `needle`.
    pub fn wait_log(&mut self, needle: &str, limit: Duration) -> Option<String> {
        if let Some(l) = self.log.iter().find(|l| l.contains(needle)) {
            return Some(l.clone());
        }
        let start = std::time::Instant::now();
        let rx = &self.running.as_ref()?.stderr;
        while start.elapsed() < limit {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(50)) {
                self.log.push(line.clone());
                if line.contains(needle) {
                    return Some(line);
                }
            }
        }
        None
    }

    /// Stops with `sig` and waits; returns whether it exited successfully.
    pub fn stop(&mut self, sig: nix::sys::signal::Signal) -> bool {
        self.signal(sig);
        let (ok, _, lines) = self.running.take().unwrap().finish();
        self.log.extend(lines);
        ok
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running.is_some() {
            let _ = self.stop(nix::sys::signal::Signal::SIGTERM);
        }
    }
}

/// `write_bytes` of /proc/PID/io: what the kernel charged the process as dirtied (0 if gone).
#[allow(dead_code)]
pub fn proc_io_write_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}
