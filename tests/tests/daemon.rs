//! `ioshield daemon` on the host, with the ioprio action (this host's cgroup v2 has no io
//! controller; the cgroup action is tested in the qemu test bed). Real writers, real ioprio.
mod support;

use std::{process::Command, time::Duration};

use nix::sys::signal::Signal;
use support::*;

/// Judging writers against 20 MB/s makes a 150 MB/s writer an offender at the first tick.
const CONFIG: &str = r#"
[daemon]
action = "ioprio"
[device.default]
bandwidth = "20MB/s"
hold = "2s"
"#;

/// A dd fed at about 160 MB/s for 6 s: long-lived, buffered, and named dd. Returns (feed, dd).
fn paced_dd(dir: &std::path::Path) -> (std::process::Child, std::process::Child) {
    let mut feed = Command::new("sh")
        .arg("-c")
        .arg("for i in $(seq 60); do head -c 16M /dev/zero; sleep 0.1; done")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let dd = Command::new("dd")
        .arg(format!("of={}/dd.out", dir.display()))
        .args(["bs=1M", "iflag=fullblock", "status=none"])
        .stdin(feed.stdout.take().unwrap())
        .spawn()
        .unwrap();
    (feed, dd)
}

/// The number in a log line between the first `before` and the next `after`.
fn number_between(line: &str, before: &str, after: &str) -> Option<f64> {
    line.split_once(before)?.1.split(after).next()?.parse().ok()
}

fn all_threads_idle(pid: u32) -> bool {
    let tids = threads(pid);
    !tids.is_empty() && tids.iter().all(|&t| ioprio(t) == Some(IOPRIO_IDLE))
}

#[test]
fn a_dd_is_restricted_within_the_bound() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let start = std::time::Instant::now();
    let (mut feed, mut dd) = paced_dd(dir.path());
    let pid = dd.id();
    let latency = wait_for(Duration::from_secs(8), || ioprio(pid) == Some(IOPRIO_IDLE));
    let line = daemon.wait_log("restrict pid", Duration::from_secs(2));
    println!("dd restricted after {latency:?} (from spawn); daemon said: {line:?}");
    let latency = latency.expect("dd was never restricted");
    assert!(
        latency < Duration::from_secs(5),
        "the thesis's bound is 5 s"
    );
    // It was restricted for what it wrote: the kernel had charged it dirtied bytes by then.
    let written = proc_io_write_bytes(pid);
    assert!(written > 0, "dd restricted before it wrote anything");
    println!(
        "dd had dirtied {written} bytes {:?} after start",
        start.elapsed()
    );
    let line = line.unwrap();
    assert!(line.contains(&format!("restrict pid {pid} (dd)")), "{line}");
    assert!(line.contains("ioprio idle"), "{line}");
    let _ = feed.kill();
    let _ = feed.wait();
    let _ = dd.kill();
    let _ = dd.wait();
}

/// The kernel reports a process the moment it dirties faster than its disk writes: with the
/// shipped thresholds (the disk not measured yet) and a 10 s tick, a dd is restricted long
/// before any tick could have judged it.
#[test]
fn a_burst_is_restricted_before_the_next_tick() {
    let dir = scratch();
    let mut daemon = Daemon::start(
        dir.path(),
        "[daemon]\naction = \"ioprio\"\ntick = \"10s\"\n",
    );
    // The first tick runs at start; the next is 10 s away.
    std::thread::sleep(Duration::from_millis(500));
    let (mut feed, mut dd) = paced_dd(dir.path());
    let pid = dd.id();
    let latency = wait_for(Duration::from_secs(5), || ioprio(pid) == Some(IOPRIO_IDLE));
    let line = daemon.wait_log("restrict pid", Duration::from_secs(1));
    println!("dd restricted after {latency:?} (from spawn); daemon said: {line:?}");
    if latency.is_none() {
        println!("daemon log:\n{}", daemon.log.join("\n"));
    }
    let _ = feed.kill();
    let _ = feed.wait();
    let _ = dd.kill();
    let _ = dd.wait();
    let latency = latency.expect("dd was never restricted");
    assert!(
        latency < Duration::from_secs(3),
        "restricted only after {latency:?}: that was a tick, not the kernel's report"
    );
    let line = line.unwrap();
    assert!(
        line.contains(&format!("restrict pid {pid} (dd) dirtied")),
        "{line}"
    );
    assert!(line.contains("faster than the disk"), "{line}");
    // The kernel's time of the crossing and the daemon's clock agree (both CLOCK_MONOTONIC): the
    // report was judged within a tick of it, not a clock's difference away.
    let judged_ms = number_between(&line, "(judged ", " ms after)")
        .unwrap_or_else(|| panic!("no '(judged N ms after)' in {line}"));
    assert!(judged_ms < 1000.0, "{line}");
}

#[test]
fn every_thread_of_a_multithreaded_writer_is_restricted() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let mut w = writer(dir.path(), 60.0, 6.0, 4, 0.0);
    let pid = w.id();
    let took = wait_for(Duration::from_secs(6), || {
        all_threads_idle(pid) && threads(pid).len() >= 5
    });
    let line = daemon.wait_log("restrict pid", Duration::from_secs(1));
    assert!(
        took.is_some(),
        "threads {:?}",
        threads(pid).iter().map(|&t| ioprio(t)).collect::<Vec<_>>()
    );
    assert!(
        line.unwrap()
            .contains(&format!("restrict pid {pid} (python3)"))
    );
    w.kill().unwrap();
    w.wait().unwrap();
}

#[test]
fn a_shell_loop_of_short_lived_writers_gets_the_shell_restricted() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "for i in $(seq 40); do dd if=/dev/zero of={}/s bs=1M count=16 status=none; sleep 0.1; done",
            dir.path().display()
        ))
        .spawn()
        .unwrap();
    let pid = shell.id();
    // The kernel may report the first dd before the shell has a rate of its own: that dd is
    // restricted (and released as it exits) first; the shell must follow within the bound.
    let line = daemon.wait_log(&format!("restrict pid {pid} (sh)"), Duration::from_secs(8));
    println!("{line:?}");
    assert!(line.is_some(), "the loop's shell is the offender");
    assert!(wait_for(Duration::from_secs(2), || ioprio(pid) == Some(IOPRIO_IDLE)).is_some());
    shell.kill().unwrap();
    shell.wait().unwrap();
}

/// systemd calls setsid() for every service's main process, and anyone can type `setsid dd`:
/// leading a session must not hide a process that writes heavily itself.
#[test]
fn a_writer_that_leads_its_own_session_is_restricted() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    // `setsid --fork` so dd, not a wrapper, leads the new session (and is no longer our child).
    let out = Command::new("setsid")
        .args(["--fork", "sh", "-c"])
        .arg(format!(
            "echo $$ > {d}/pid; exec dd if=/dev/zero of={d}/s bs=1M count=3000 status=none",
            d = dir.path().display()
        ))
        .status()
        .unwrap();
    assert!(out.success());
    let pid_file = dir.path().join("pid");
    let pid: u32 = wait_for(Duration::from_secs(2), || pid_file.exists())
        .and_then(|_| std::fs::read_to_string(&pid_file).ok())
        .and_then(|s| s.trim().parse().ok())
        .expect("setsid wrote the writer's pid");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let session = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().nth(3))
        .unwrap_or("?")
        .to_string();
    let line = daemon.wait_log("restrict pid", Duration::from_secs(8));
    println!("session of {pid}: {session}; daemon said {line:?}");
    // Stop the writer before asserting, so a failure leaves nothing running.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(session, pid.to_string(), "dd leads its own session");
    assert!(
        line.as_deref()
            .is_some_and(|l| l.contains(&format!("restrict pid {pid} (dd)"))),
        "the session-leading writer is the offender: {line:?}"
    );
}

/// A process may name itself anything: bytes that are not UTF-8 and a terminal escape sequence.
/// The daemon still reads it, restricts it (every thread idle), and never prints the sequence
/// raw, neither in its log nor in `status`.
#[test]
fn a_writer_with_a_hostile_name_is_restricted_and_shown_escaped() {
    let dir = scratch();
    let mut w = writer_named(dir.path(), 150.0, 12.0, b"\xff\x1b[31mevil");
    let pid = w.id();
    // The daemon learns the name from /proc when it starts (a rename sends no event): start it
    // once the writer has renamed itself.
    let renamed = wait_for(Duration::from_secs(5), || {
        std::fs::read(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with(b"\xff"))
    });
    assert!(renamed.is_some(), "the writer did not rename itself");
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let idle = wait_for(Duration::from_secs(5), || all_threads_idle(pid));
    let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
    let line = daemon.wait_log(&format!("restrict pid {pid} "), Duration::from_secs(2));
    let human = run(ioshield().args(["status", "--socket"]).arg(&daemon.socket));
    let _ = w.kill();
    let _ = w.wait();
    assert_eq!(comm, b"\xff\x1b[31mevil\n", "the writer renamed itself");
    assert!(idle.is_some(), "never restricted; daemon said {line:?}");
    let line = line.expect("a restrict line");
    assert!(
        !line.contains('\x1b') && line.contains("[31mevil"),
        "the name is shown, escaped: {line:?}"
    );
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains(&format!("restricted: pid {pid} (")) && !text.contains('\x1b'),
        "{text:?}"
    );
}

/// A restriction is judged by what lives in it: when its root exits while the writers it
/// started keep writing, it must hold on to them instead of being released at once.
#[test]
fn a_restriction_outlives_its_root_while_its_children_write() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/writer.py");
    // Three paced writers under one shell (its subtree outscores each of them), which exits
    // after 4 s while they write on for 12 s.
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "for i in 1 2 3; do mkdir -p {d}/$i; python3 {w} --dir {d}/$i --rate 40 --seconds 12 & done; sleep 4",
            d = dir.path().display(),
            w = script.display()
        ))
        .spawn()
        .unwrap();
    let root = shell.id();
    let line = daemon.wait_log("restrict pid", Duration::from_secs(4));
    println!("{line:?}");
    assert!(
        line.as_deref()
            .is_some_and(|l| l.contains(&format!("restrict pid {root} (sh)"))),
        "the shell's subtree is the offender: {line:?}"
    );
    shell.wait().unwrap();
    let exited = std::time::Instant::now();
    // The writers go on for about 8 s after the shell: no release in that time.
    let early = daemon.wait_log("release pid", Duration::from_secs(5));
    println!("after the root exited: {early:?}");
    assert!(
        early.is_none(),
        "released {:?} after its root exited while its children still wrote: {early:?}",
        exited.elapsed()
    );
    // Once they are done (and gone), it is released.
    let late = daemon.wait_log("release pid", Duration::from_secs(30));
    assert!(late.is_some(), "never released after the writers finished");
}

/// A fork storm overflows the lifecycle ring buffer (made small here, as a storm of a few
/// thousand forks a second would the real one): a writer born in the middle of it, whose fork
/// event may be lost, must still be found and restricted, and the loss must be reported.
#[test]
fn a_writer_born_in_a_fork_storm_is_still_restricted() {
    let dir = scratch();
    let mut daemon = Daemon::start_with(
        dir.path(),
        CONFIG,
        &[("IOSHIELD_TEST_LIFECYCLE_BYTES", "4096")],
        None,
    );
    // Thousands of short-lived processes a second, for 12 s.
    let mut storm = Command::new("sh")
        .arg("-c")
        .arg("end=$(( $(date +%s) + 12 )); while [ $(date +%s) -lt $end ]; do /bin/true; /bin/true; /bin/true; done")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut w = writer(dir.path(), 150.0, 6.0, 1, 0.0);
    let pid = w.id();
    // This pid's line: on a shared machine someone else's backlog may be restricted first.
    let line = daemon.wait_log(&format!("restrict pid {pid} "), Duration::from_secs(8));
    let lost = daemon.wait_log("process events lost", Duration::from_secs(2));
    let _ = storm.kill();
    let _ = storm.wait();
    let _ = w.kill();
    let _ = w.wait();
    println!("writer {pid}: {line:?}\n{lost:?}");
    assert!(
        line.as_deref()
            .is_some_and(|l| l.contains(&format!("restrict pid {pid} (python3)"))),
        "the writer is restricted despite the storm: {line:?}"
    );
    assert!(lost.is_some(), "the lost events are reported");
}

/// A disk's speed measured in an earlier run is used from the first second of the next one,
/// instead of the kernel's 100 MiB/s guess for a disk it has not measured.
#[test]
fn a_disk_speed_from_an_earlier_run_is_used_at_once() {
    let dir = scratch();
    let auto = "[daemon]\naction = \"ioprio\"\n";
    // First run: the daemon names the disk it sees the writer on.
    let mut daemon = Daemon::start(dir.path(), auto);
    let mut w = writer(dir.path(), 30.0, 2.0, 1, 0.0);
    let line = daemon.wait_log("disk identity ", Duration::from_secs(5));
    w.wait().unwrap();
    assert!(daemon.stop(Signal::SIGTERM));
    let Some(line) = line else {
        let none = daemon.wait_log("no stable identity", Duration::from_secs(1));
        assert!(
            none.is_some(),
            "the daemon says nothing about the disk's identity"
        );
        println!("this machine's disk has no WWN, serial or model: nothing to keep");
        return;
    };
    let said = line
        .split(" INFO ")
        .nth(1)
        .unwrap_or(&line)
        .trim()
        .to_string();
    let (disk, identity) = said.split_once(": disk identity ").unwrap();
    println!("{disk}: {identity}");
    // Later runs, with a speed or a lower bound kept for that identity.
    let judged = |contents: String| {
        std::fs::write(dir.path().join("state/disks.json"), contents).unwrap();
        let mut daemon = Daemon::start(dir.path(), auto);
        let mut w = writer(dir.path(), 30.0, 2.0, 1, 0.0);
        let judged = daemon.wait_log(
            &format!("{disk}: judging writers against"),
            Duration::from_secs(5),
        );
        w.wait().unwrap();
        println!("{judged:?}");
        judged
    };
    let judged_at = judged(format!("{{\"{identity}\": 12345678.0}}"));
    assert!(
        judged_at
            .as_deref()
            .is_some_and(|l| l.contains("12.3 MB/s (measured in an earlier run)")),
        "{judged_at:?}"
    );
    // A lower bound kept by an earlier run (a copy that ended before the disk showed its
    // speed) is used as one.
    let judged_at = judged(format!("{{\"at-least:{identity}\": 87654321.0}}"));
    assert!(
        judged_at
            .as_deref()
            .is_some_and(|l| l.contains("87.7 MB/s (at least what an earlier run showed)")),
        "{judged_at:?}"
    );
}

/// `ioshield explain PID` says, from the running daemon, why a writer was restricted and why
/// a quiet process was not.
#[test]
fn explain_says_why() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let mut w = writer(dir.path(), 150.0, 6.0, 1, 0.0);
    let pid = w.id();
    assert!(
        daemon
            .wait_log(&format!("restrict pid {pid} "), Duration::from_secs(5))
            .is_some()
    );
    std::thread::sleep(Duration::from_millis(1200));
    let out = run(ioshield()
        .args(["explain", &pid.to_string(), "--socket"])
        .arg(&daemon.socket));
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains(&format!("pid {pid} (python3)")), "{text}");
    assert!(
        text.contains("dirties ") && text.contains("restricted above "),
        "{text}"
    );
    assert!(text.contains("may be chosen: yes"), "{text}");
    assert!(text.contains("restricted now on "), "{text}");
    assert!(text.contains("recent decisions about it:"), "{text}");
    let mut quiet = Command::new("sleep").arg("30").spawn().unwrap();
    let out = run(ioshield()
        .args(["explain", &quiet.id().to_string(), "--socket"])
        .arg(&daemon.socket));
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(text.contains("not among the busiest writers"), "{text}");
    assert!(text.contains("no recent decision about it"), "{text}");
    quiet.kill().unwrap();
    quiet.wait().unwrap();
    w.kill().unwrap();
    w.wait().unwrap();
}

#[test]
fn a_writer_that_calms_down_is_restored_after_the_hold() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let mut w = writer(dir.path(), 150.0, 3.0, 1, 60.0);
    let pid = w.id();
    let before = ioprio(pid).unwrap();
    assert!(wait_for(Duration::from_secs(4), || ioprio(pid) == Some(IOPRIO_IDLE)).is_some());
    // Quiet after 3 s; the smoothed rate falls under 20% of 20 MB/s, then 2 s of hold.
    let released = wait_for(Duration::from_secs(40), || ioprio(pid) == Some(before));
    println!("restored {released:?} after restriction");
    assert!(released.is_some(), "ioprio is still {:?}", ioprio(pid));
    let line = daemon
        .wait_log("release pid", Duration::from_secs(1))
        .unwrap();
    assert!(
        line.contains(&format!("release pid {pid} (python3)")),
        "{line}"
    );
    assert!(line.contains("1 restored"), "{line}");
    w.kill().unwrap();
    w.wait().unwrap();
}

#[test]
fn sigterm_restores_everything() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let mut w = writer(dir.path(), 150.0, 30.0, 2, 0.0);
    let pid = w.id();
    assert!(wait_for(Duration::from_secs(5), || all_threads_idle(pid)).is_some());
    assert!(daemon.stop(Signal::SIGTERM), "clean exit on SIGTERM");
    for t in threads(pid) {
        assert_eq!(ioprio(t), Some(0), "thread {t} restored");
    }
    assert!(
        daemon
            .log
            .iter()
            .any(|l| l.contains("stopping: restored everything: 3 restored")),
        "{:#?}",
        daemon.log
    );
    let state = std::fs::read_to_string(&daemon.state_file).unwrap();
    assert!(!state.contains("ioprio"), "journal emptied: {state}");
    w.kill().unwrap();
    w.wait().unwrap();
}

#[test]
fn after_sigkill_a_restart_restores_what_the_dead_daemon_changed() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let mut w = writer(dir.path(), 150.0, 3.0, 1, 60.0);
    let pid = w.id();
    assert!(wait_for(Duration::from_secs(4), || ioprio(pid) == Some(IOPRIO_IDLE)).is_some());
    assert!(!daemon.stop(Signal::SIGKILL));
    assert_eq!(
        ioprio(pid),
        Some(IOPRIO_IDLE),
        "a killed daemon cannot restore anything"
    );
    assert!(
        std::fs::read_to_string(&daemon.state_file)
            .unwrap()
            .contains("ioprio")
    );
    // Let the writer go quiet so the new instance has no reason to restrict it again: its
    // writing thread done (under load it outlived a fixed 3 s wait, and the restart then restored
    // 2 threads instead of the 1 left).
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        wait_for(Duration::from_secs(20), || threads(pid).len() == 1).is_some(),
        "the writer's thread never finished"
    );
    daemon.restart();
    assert!(wait_for(Duration::from_secs(3), || ioprio(pid) == Some(0)).is_some());
    let line = daemon
        .wait_log(
            "restored what a previous instance left",
            Duration::from_secs(2),
        )
        .unwrap();
    assert!(line.contains("1 restored"), "{line}");
    w.kill().unwrap();
    w.wait().unwrap();
}

#[test]
fn an_excluded_writer_is_never_touched() {
    let dir = scratch();
    let mut daemon = Daemon::start(
        dir.path(),
        &format!("{CONFIG}\n[exclude]\ncomm = [\"python3\"]\n"),
    );
    let mut w = writer(dir.path(), 150.0, 5.0, 2, 0.0);
    let pid = w.id();
    let mut seen = Vec::new();
    while w.try_wait().unwrap().is_none() {
        seen.extend(threads(pid).iter().filter_map(|&t| ioprio(t)));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|&p| p == 0),
        "excluded writer was changed: {seen:?}"
    );
    // Neither the writer nor its parent (this test) is blamed for its bytes.
    for pid in [pid, std::process::id()] {
        let needle = format!("restrict pid {pid} ");
        assert!(
            daemon
                .wait_log(&needle, Duration::from_millis(500))
                .is_none(),
            "{needle}: {:#?}",
            daemon.log
        );
    }
}

#[test]
fn a_priority_changed_by_hand_survives_release() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let mut w = writer(dir.path(), 150.0, 3.0, 1, 60.0);
    let pid = w.id();
    assert!(wait_for(Duration::from_secs(4), || ioprio(pid) == Some(IOPRIO_IDLE)).is_some());
    let by_hand = (2 << 13) | 7;
    assert!(
        Command::new("ionice")
            .args(["-c2", "-n7", "-p", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let line = daemon
        .wait_log("release pid", Duration::from_secs(40))
        .expect("released");
    assert!(line.contains("1 kept"), "{line}");
    assert!(
        daemon
            .wait_log("best-effort/7", Duration::from_secs(1))
            .is_some()
    );
    assert_eq!(ioprio(pid), Some(by_hand));
    w.kill().unwrap();
    w.wait().unwrap();
}

#[test]
fn dry_run_decides_but_changes_nothing() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), &CONFIG.replace("\"ioprio\"", "\"dry-run\""));
    let mut w = writer(dir.path(), 150.0, 4.0, 1, 0.0);
    let pid = w.id();
    let line = daemon
        .wait_log("would restrict", Duration::from_secs(5))
        .expect("a decision");
    assert!(line.contains(&format!("pid {pid}")), "{line}");
    assert_eq!(ioprio(pid), Some(0));
    w.wait().unwrap();
    let state = std::fs::read_to_string(&daemon.state_file).unwrap_or_default();
    assert!(!state.contains("ioprio"), "{state}");
}

#[test]
fn sighup_reloads_a_good_config_and_keeps_the_old_one_on_a_bad_one() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    let good = std::fs::read_to_string(&daemon.config).unwrap();
    std::fs::write(
        &daemon.config,
        format!("{good}\n[device.\"/dev/vda\"]\nrelease_at = 0.9\n"),
    )
    .unwrap();
    daemon.signal(Signal::SIGHUP);
    let line = daemon
        .wait_log("configuration not reloaded", Duration::from_secs(3))
        .unwrap();
    assert!(
        line.contains("ioshield.toml:") && line.contains("release_at"),
        "{line}"
    );
    std::fs::write(
        &daemon.config,
        good.replace("hold = \"2s\"", "hold = \"5s\""),
    )
    .unwrap();
    daemon.signal(Signal::SIGHUP);
    assert!(
        daemon
            .wait_log("configuration reloaded", Duration::from_secs(3))
            .is_some()
    );
    // Still working after both reloads, and with the new hold: released only after 5 s calm
    // (the old value was 2 s).
    // It writes for 3 s, then stays alive and quiet, so the release comes from the hold.
    let mut w = writer(dir.path(), 150.0, 3.0, 1, 40.0);
    assert!(
        daemon
            .wait_log("restrict pid", Duration::from_secs(5))
            .is_some()
    );
    let line = daemon.wait_log("release pid", Duration::from_secs(35));
    w.kill().unwrap();
    w.wait().unwrap();
    let line = line.expect("released after the writer calmed down");
    let calm =
        number_between(&line, " for ", "s").unwrap_or_else(|| panic!("no calm time in {line}"));
    assert!(
        calm >= 5.0,
        "released after {calm}s calm with hold = 5s: {line}"
    );
}

#[test]
fn config_errors_are_one_line_naming_file_line_and_key() {
    let dir = scratch();
    let cases = [
        (
            "[daemon]\ntick = \"1s\"\nticks = 2\n",
            ":3: daemon.ticks: unknown field `ticks`",
        ),
        (
            "[device.default]\nrelease_at = 0.8\n",
            ":2: device.default.release_at:",
        ),
        (
            "[device.\"/dev/vdb\"]\nbandwidth = \"0MB/s\"\n",
            ":2: device.\"/dev/vdb\".bandwidth:",
        ),
        ("[daemon]\ntau = \"-8s\"\n", ":2: daemon.tau:"),
        (
            "[daemon]\nparent_factor = 1.5\n",
            ":2: daemon.parent_factor:",
        ),
        ("[device.default]\nhold = 10\n", ":2: device.default.hold:"),
        // Values that used to panic (exit 101), or to be accepted and never work.
        ("[daemon]\ntick = \"1e20\"\n", ":2: daemon.tick:"),
        ("[daemon]\ntick = \"1ns\"\n", ":2: daemon.tick:"),
        (
            "[device.default]\nhold = \"99999999999999999999\"\n",
            ":2: device.default.hold:",
        ),
        (
            "[exclude]\ncomm = [\"longer-than-15-chars\"]\n",
            ":2: exclude.comm:",
        ),
        (
            "[exclude]\ncgroup = [\"system.slice/x.service\"]\n",
            ":2: exclude.cgroup:",
        ),
        (
            "[daemon]\nparent_factor = \"high\"\n",
            ":2: daemon.parent_factor:",
        ),
    ];
    for (text, expected) in cases {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = run(ioshield().arg("check-config").arg(&path));
        assert_eq!(out.status.code(), Some(1), "{text:?}: {out:?}");
        let line = one_line_failure(&out);
        assert!(
            line.contains(&format!("{}{expected}", path.display())),
            "{text:?}: {line}"
        );
    }
    let missing = dir.path().join("missing.toml");
    let out = run(ioshield().args(["daemon", "--config"]).arg(&missing));
    let line = one_line_failure(&out);
    assert!(
        line.contains("missing.toml") && line.contains("cannot read"),
        "{line}"
    );
    // A device section for an absent disk is a warning, not an error.
    std::fs::write(
        dir.path().join("ok.toml"),
        "[device.\"/dev/nosuchdisk\"]\nbandwidth = \"30MB/s\"\n",
    )
    .unwrap();
    let out = run(ioshield()
        .arg("check-config")
        .arg(dir.path().join("ok.toml")));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("[device.\"/dev/nosuchdisk\"]"));
}

#[test]
fn status_and_metrics_show_the_offender() {
    let dir = scratch();
    let port = free_port();
    let textfile = dir.path().join("ioshield.prom");
    let mut daemon = Daemon::start(
        dir.path(),
        &format!(
            "{CONFIG}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\ntextfile = \"{}\"\n",
            textfile.display()
        ),
    );
    let mut w = writer(dir.path(), 150.0, 6.0, 1, 0.0);
    let pid = w.id();
    assert!(
        daemon
            .wait_log("restrict pid", Duration::from_secs(5))
            .is_some()
    );
    std::thread::sleep(Duration::from_millis(1200));

    let out = run(ioshield()
        .args(["status", "--json", "--socket"])
        .arg(&daemon.socket));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let offender = status["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|d| d["offender"].as_object().cloned())
        .expect("an offender in status");
    assert_eq!(offender["pid"].as_u64(), Some(pid as u64));
    assert_eq!(offender["action"], "ioprio idle");
    assert!(
        status["recent_decisions"][0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("restrict pid {pid}"))
    );
    assert_eq!(status["features"]["dirty_mode"], "folio-bytes");
    let human = run(ioshield().args(["status", "--socket"]).arg(&daemon.socket));
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains(&format!("restricted: pid {pid} (python3)")),
        "{text}"
    );
    // Like systemctl: since when, how long ago; decisions with their time; the probe in words.
    assert!(
        text.contains("active since ") && text.contains(" ago"),
        "{text}"
    );
    assert!(
        text.contains("processes followed from kernel events"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(" ago) restrict pid") && l.trim_start().starts_with("20")),
        "{text}"
    );

    let restrict = "ioshield_actions_total{action=\"restrict\",method=\"ioprio\",result=\"ok\"} 1";
    let file = std::fs::read_to_string(&textfile).unwrap();
    assert!(file.contains(restrict), "{file}");
    // Labelled as node_exporter labels disks (`sda`, not `/dev/sda`), so the two join.
    let device = disk_label(dir.path()).replace("/dev/", "");
    assert!(
        file.contains(&format!("ioshield_offenders{{device=\"{device}\"}} 1")),
        "{file}"
    );
    assert!(file.contains("ioshield_build_info{version="), "{file}");
    // The time the restriction took, one observation under its method.
    assert!(
        file.contains("ioshield_restrict_seconds_count{method=\"ioprio\"} 1\n"),
        "{file}"
    );
    // node_exporter's textfile collector takes the classic format only, and all of it or nothing.
    let (ok, said) = promtool_check(&file);
    println!("promtool check metrics < textfile: ok={ok} {said:?}");
    assert!(ok, "promtool rejects the textfile: {said}\n{file}");
    assert!(!file.contains("# EOF"), "{file}");
    let mut http = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut http, b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut http, &mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    // The Content-Type says which format the body is in, and promtool checks that one.
    assert!(
        head.lines()
            .any(|l| l == "Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(
        body.contains(restrict) && body.contains("ioshield_dirtied_bytes_total"),
        "{body}"
    );
    let (ok, said) = promtool_check(body);
    println!("promtool check metrics < HTTP body: ok={ok} {said:?}");
    assert!(ok, "promtool rejects the HTTP body: {said}\n{body}");
    w.kill().unwrap();
    w.wait().unwrap();
    let socket = daemon.socket.clone();
    drop(daemon);
    let out = run(ioshield().args(["status", "--socket"]).arg(&socket));
    let line = one_line_failure(&out);
    assert!(line.contains("not running"), "{line}");
    // As `systemctl status` says of a unit that is not running.
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

/// The BDI knobs of the disk holding `path`: (strict_limit, max_ratio_fine, max_bytes).
fn bdi_knobs(path: &std::path::Path) -> (String, String, u64) {
    let dev = std::fs::read_to_string(format!(
        "/sys/block/{}/dev",
        disk_label(path).trim_start_matches("/dev/")
    ))
    .unwrap();
    let dir = format!("/sys/class/bdi/{}", dev.trim());
    let read = |k: &str| {
        std::fs::read_to_string(format!("{dir}/{k}"))
            .unwrap()
            .trim()
            .to_string()
    };
    (
        read("strict_limit"),
        read("max_ratio_fine"),
        read("max_bytes").parse().unwrap(),
    )
}

/// `max_dirty` caps the disk's dirty data in the kernel while the daemon runs, from start-up
/// (before anyone writes); SIGTERM, and the next start after a SIGKILL, put the knobs back.
#[test]
fn the_backlog_guard_holds_while_running_and_is_restored() {
    let dir = scratch();
    let before = bdi_knobs(dir.path());
    assert_eq!(before.0, "0", "the host's disk has a strict limit already");
    let config = "[device.default]\nmax_dirty = \"64MiB\"\n";
    let mut daemon = Daemon::start(dir.path(), config);
    let line = daemon.wait_log("backlog guard: ", Duration::from_secs(5));
    assert!(
        line.as_deref().is_some_and(|l| l.contains("67.1 MB")),
        "{line:?}"
    );
    let (strict, _, max_bytes) = bdi_knobs(dir.path());
    assert_eq!(strict, "1");
    // The kernel keeps a ratio of the global dirty threshold and shows it as bytes again.
    assert!(
        (60 << 20..68 << 20).contains(&max_bytes),
        "max_bytes {max_bytes}"
    );
    assert!(
        std::fs::read_to_string(&daemon.state_file)
            .unwrap()
            .contains("backlog_guard")
    );
    assert!(daemon.stop(Signal::SIGTERM));
    assert_eq!(bdi_knobs(dir.path()).0, before.0);
    assert_eq!(bdi_knobs(dir.path()).1, before.1);

    daemon.restart();
    assert!(
        daemon
            .wait_log("backlog guard: ", Duration::from_secs(5))
            .is_some()
    );
    assert!(!daemon.stop(Signal::SIGKILL));
    assert_eq!(
        bdi_knobs(dir.path()).0,
        "1",
        "a killed daemon restores nothing"
    );
    std::fs::write(
        &daemon.config,
        std::fs::read_to_string(&daemon.config)
            .unwrap()
            .replace("64MiB", "off"),
    )
    .unwrap();
    daemon.restart();
    let line = daemon
        .wait_log(
            "restored what a previous instance left",
            Duration::from_secs(5),
        )
        .unwrap();
    assert!(line.contains("1 restored"), "{line}");
    assert_eq!(bdi_knobs(dir.path()).0, before.0);
    assert_eq!(bdi_knobs(dir.path()).1, before.1);
    assert!(daemon.stop(Signal::SIGTERM));
}

/// An ext4 filesystem on a loop device over a file in a scratch directory, mounted without
/// delayed allocation: a file's blocks are allocated as it is written, so the next journal
/// commit writes its data first (ordered mode), and a commit after a large write takes long.
struct LoopExt4 {
    device: String,
    mount: std::path::PathBuf,
}

impl LoopExt4 {
    fn new(dir: &std::path::Path) -> LoopExt4 {
        let image = dir.join("ext4.img");
        let mount = dir.join("mnt");
        std::fs::create_dir_all(&mount).unwrap();
        let ok = |cmd: &mut Command| {
            let out = run(cmd);
            assert!(out.status.success(), "{cmd:?}: {}", one_line_failure(&out));
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        ok(Command::new("truncate").args(["-s", "2G"]).arg(&image));
        ok(Command::new("mkfs.ext4").arg("-q").arg(&image));
        let device = ok(Command::new("losetup").args(["-f", "--show"]).arg(&image));
        let fs = LoopExt4 { device, mount };
        ok(Command::new("mount")
            .args(["-o", "nodelalloc", &fs.device])
            .arg(&fs.mount));
        fs
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

/// Writes 4 KiB to `file` and waits for it with fsync; returns how long that took.
fn small_fsync(file: &std::path::Path) -> Duration {
    let start = std::time::Instant::now();
    let out = run(Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=4k",
            "count=1",
            "conv=fsync",
            "status=none",
        ])
        .arg(format!("of={}", file.display())));
    assert!(out.status.success(), "{}", one_line_failure(&out));
    start.elapsed()
}

/// The long commits of `device` in the metrics textfile, if counted yet.
fn long_commits_counted(textfile: &std::path::Path, device: &str) -> Option<f64> {
    let series = format!("ioshield_long_journal_commits_total{{device=\"{device}\"}} ");
    let text = std::fs::read_to_string(textfile).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

/// A loop ext4 filesystem in `dir`, its disk's name, and the daemon started with a metrics
/// textfile, with its "probes attached" line.
fn ext4_with_metrics(
    dir: &std::path::Path,
) -> (LoopExt4, String, std::path::PathBuf, Daemon, String) {
    let fs = LoopExt4::new(dir);
    let device = fs.device.trim_start_matches("/dev/").to_string();
    let textfile = dir.join("ioshield.prom");
    let config = format!(
        "{CONFIG}\n[metrics]\ntextfile = \"{}\"\n",
        textfile.display()
    );
    let mut daemon = Daemon::start(dir, &config);
    let features = daemon
        .wait_log("probes attached", Duration::from_secs(5))
        .expect("no 'probes attached' line");
    (fs, device, textfile, daemon, features)
}

/// A journal commit of 120 ms or more is counted for its filesystem's disk in the metrics (every
/// `fsync` there waited that long), and a short one is not.
#[test]
fn a_long_journal_commit_is_counted_and_a_short_one_is_not() {
    let dir = scratch();
    let (fs, device, textfile, mut daemon, features) = ext4_with_metrics(dir.path());
    assert!(features.contains("journal: true"), "{features}");

    // Short: an idle filesystem commits 4 KiB in milliseconds. Two ticks to count it.
    let short = small_fsync(&fs.mount.join("short"));
    std::thread::sleep(Duration::from_secs(2));
    let counted = long_commits_counted(&textfile, &device);
    println!("fsync of 4 KiB on an idle filesystem: {short:?}; counted: {counted:?}");
    assert!(
        std::fs::read_to_string(&textfile).is_ok_and(|t| t.contains("ioshield_build_info")),
        "no metrics written"
    );
    assert_eq!(
        counted.unwrap_or(0.0),
        0.0,
        "a commit of {short:?} counted as long"
    );

    // Long: 600 MiB allocated in the running transaction are written by its commit.
    let out = run(Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "count=600", "status=none"])
        .arg(format!("of={}", fs.mount.join("big").display())));
    assert!(out.status.success(), "{}", one_line_failure(&out));
    let long = small_fsync(&fs.mount.join("small"));
    // What makes the commit long is the kernel's, not the daemon's: say so if it changes.
    assert!(
        long >= Duration::from_millis(300),
        "the commit after 600 MiB took only {long:?}: this test needs a long one"
    );
    let waited = wait_for(Duration::from_secs(3), || {
        long_commits_counted(&textfile, &device).is_some_and(|n| n >= 1.0)
    });
    let counted = long_commits_counted(&textfile, &device);
    println!("fsync of 4 KiB after 600 MiB: {long:?}; counted: {counted:?} after {waited:?}");
    assert!(
        waited.is_some(),
        "a commit of {long:?} on {device} not counted: {:?}",
        std::fs::read_to_string(&textfile).map(|t| t
            .lines()
            .filter(|l| l.contains("journal"))
            .map(str::to_string)
            .collect::<Vec<_>>())
    );
    assert!(daemon.stop(Signal::SIGTERM), "{:?}", daemon.log);
}

/// Bytes the disk `device` wrote, from its counters.
fn disk_written(device: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/sys/block/{device}/stat")).unwrap();
    let sectors: u64 = stat.split_whitespace().nth(6).unwrap().parse().unwrap();
    sectors * 512
}

/// The bytes `device`'s journal logged in the metrics textfile, if counted yet.
fn journal_logged_counted(textfile: &std::path::Path, device: &str) -> Option<f64> {
    let series = format!("ioshield_journal_logged_bytes_total{{device=\"{device}\"}} ");
    let text = std::fs::read_to_string(textfile).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

/// What an ext4 journal logs is counted for its disk: written, never dirtied, it is what the
/// backlog must not take for dirty data written. Each `fsync` of a new file commits (a
/// descriptor, the metadata blocks and a commit block, 4 KiB each), and all of it is part of
/// what the disk wrote.
#[test]
fn what_a_journal_logs_is_counted_for_its_disk() {
    let dir = scratch();
    let (fs, device, textfile, mut daemon, features) = ext4_with_metrics(dir.path());
    assert!(features.contains("journal_logged: true"), "{features}");
    // Whatever mkfs and the mount left to write, written before counting.
    run(Command::new("sync").arg("-f").arg(&fs.mount));
    std::thread::sleep(Duration::from_secs(2));
    let before = (
        journal_logged_counted(&textfile, &device).unwrap_or(0.0),
        disk_written(&device),
    );
    const FSYNCS: u64 = 30;
    for i in 0..FSYNCS {
        small_fsync(&fs.mount.join(format!("f{i}")));
    }
    let least = (FSYNCS * 3 * 4096) as f64;
    let waited = wait_for(Duration::from_secs(3), || {
        journal_logged_counted(&textfile, &device).is_some_and(|n| n - before.0 >= least)
    });
    let logged = journal_logged_counted(&textfile, &device).unwrap_or(0.0) - before.0;
    let written = disk_written(&device) - before.1;
    println!(
        "{FSYNCS} fsyncs of new 4 KiB files: the journal logged {logged} bytes, the disk wrote \
         {written} (after {waited:?})"
    );
    assert!(
        waited.is_some(),
        "{FSYNCS} commits logged {logged} bytes, under {least}"
    );
    // The kernel counts a commit's blocks once they are written: the disk's counters, read
    // after the metrics, hold every one of them.
    assert!(
        logged <= written as f64,
        "the journal logged {logged} bytes, more than the {written} the disk wrote"
    );
    assert!(daemon.stop(Signal::SIGTERM), "{:?}", daemon.log);
}

/// A kernel without jbd2's tracepoints (no ext4 loaded) costs the counts, not the daemon.
#[test]
fn without_journal_tracepoints_the_daemon_runs_and_says_what_it_does_not_count() {
    let dir = scratch();
    let hide = [(
        "IOSHIELD_TEST_HIDE",
        "tracepoint:jbd2_start_commit,tracepoint:jbd2_run_stats",
    )];
    let mut daemon = Daemon::start_with(dir.path(), CONFIG, &hide, None);
    let features = daemon
        .wait_log("probes attached", Duration::from_secs(5))
        .expect("no 'probes attached' line");
    assert!(features.contains("journal: false"), "{features}");
    assert!(features.contains("journal_logged: false"), "{features}");
    for (what, why) in [
        (
            "long journal commits are not counted",
            "no usable jbd2 tracepoints",
        ),
        (
            "the journal's writes are not told from dirty data written",
            "no usable jbd2_run_stats tracepoint",
        ),
    ] {
        let said = daemon.wait_log(what, Duration::from_secs(1));
        assert!(
            said.is_some_and(|l| l.contains(why)),
            "{what}: {:?}",
            daemon.log
        );
    }
    assert!(daemon.alive());
    assert!(daemon.stop(Signal::SIGTERM), "{:?}", daemon.log);
}
