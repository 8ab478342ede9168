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

fn all_threads_idle(pid: u32) -> bool {
    let tids = threads(pid);
    !tids.is_empty() && tids.iter().all(|&t| ioprio(t) == Some(IOPRIO_IDLE))
}

#[test]
fn a_dd_is_restricted_within_the_bound() {
    let dir = scratch();
    let mut daemon = Daemon::start(dir.path(), CONFIG);
    // dd fed at about 160 MB/s for 6 s: long-lived, buffered, and named dd.
    let mut feed = Command::new("sh")
        .arg("-c")
        .arg("for i in $(seq 60); do head -c 16M /dev/zero; sleep 0.1; done")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let mut dd = Command::new("dd")
        .arg(format!("of={}/dd.out", dir.path().display()))
        .args(["bs=1M", "iflag=fullblock", "status=none"])
        .stdin(feed.stdout.take().unwrap())
        .spawn()
        .unwrap();
    let pid = dd.id();
    let latency = wait_for(Duration::from_secs(8), || ioprio(pid) == Some(IOPRIO_IDLE));
    let line = daemon.wait_log("restrict pid", Duration::from_secs(2));
    println!("dd restricted after {latency:?} (from spawn); daemon said: {line:?}");
    let latency = latency.expect("dd was never restricted");
    assert!(
        latency < Duration::from_secs(5),
        "the thesis's bound is 5 s"
    );
    assert!(start.elapsed() > latency);
    let line = line.unwrap();
    assert!(line.contains(&format!("restrict pid {pid} (dd)")), "{line}");
    assert!(line.contains("ioprio idle"), "{line}");
    let _ = feed.kill();
    let _ = feed.wait();
    let _ = dd.kill();
    let _ = dd.wait();
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
    let line = daemon.wait_log("restrict pid", Duration::from_secs(8));
    println!("{line:?}");
    assert!(
        line.as_deref()
            .is_some_and(|l| l.contains(&format!("restrict pid {pid} (sh)"))),
        "the loop's shell is the offender: {line:?}"
    );
    assert!(wait_for(Duration::from_secs(2), || ioprio(pid) == Some(IOPRIO_IDLE)).is_some());
    shell.kill().unwrap();
    shell.wait().unwrap();
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
    // Let the writer go quiet so the new instance has no reason to restrict it again.
    std::thread::sleep(Duration::from_secs(3));
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
        good.replace("hold = \"2s\"", "hold = \"3s\""),
    )
    .unwrap();
    daemon.signal(Signal::SIGHUP);
    assert!(
        daemon
            .wait_log("configuration reloaded", Duration::from_secs(3))
            .is_some()
    );
    // Still working after both reloads.
    let mut w = writer(dir.path(), 150.0, 3.0, 1, 0.0);
    assert!(
        daemon
            .wait_log("restrict pid", Duration::from_secs(5))
            .is_some()
    );
    w.wait().unwrap();
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
    assert!(line.contains("cannot reach the daemon"), "{line}");
}
