//! The daemon as a service among other processes: one instance per state file, and sockets that
//! idle clients cannot use to starve it of file descriptors.
mod support;

use std::{
    net::TcpStream,
    os::unix::net::UnixStream,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use support::*;

const CONFIG: &str = r#"
[daemon]
action = "ioprio"
[device.default]
bandwidth = "20MB/s"
hold = "2s"
"#;

#[test]
fn a_second_daemon_on_the_same_state_file_is_refused_in_one_line() {
    let dir = scratch();
    let mut first = Daemon::start(dir.path(), CONFIG);
    let started = Instant::now();
    let out = run_within(
        ioshield().args(["daemon", "--config"]).arg(&first.config),
        Duration::from_secs(10),
    )
    .expect("the second daemon kept running next to the first");
    println!("second daemon refused after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let line = one_line_failure(&out);
    let lock = format!("{}.lock", first.state_file.display());
    assert!(
        line.contains(&lock) && line.contains(&format!("pid {}", first.pid())),
        "{line}"
    );
    // The first keeps running and keeps its socket: nothing of it was undone or removed.
    assert!(first.alive());
    assert!(first.socket.exists());
    let status = run_within(
        ioshield()
            .args(["status", "--json", "--socket"])
            .arg(&first.socket),
        Duration::from_secs(5),
    )
    .expect("status answers");
    assert!(status.status.success(), "{status:?}");
    assert!(
        first
            .wait_log("restored what a previous instance left", Duration::ZERO)
            .is_none()
    );
}

/// Opens `n` connections to each socket from a helper thread, so a server that stopped
/// accepting (a full backlog blocks connect) shows up as a count that stops growing. A connect
/// that fails is tried again (for up to 40 s in all): a SYN dropped while the listener's backlog
/// was briefly full is retransmitted after 1 s and 3 s, past the 2 s timeout, and once cost a
/// run its 3000th connection (2999 after 30 s) with the daemon accepting throughout.
fn hold_connections(
    socket: &std::path::Path,
    port: u16,
    n: usize,
) -> Arc<Mutex<Vec<Box<dyn Send>>>> {
    let held: Arc<Mutex<Vec<Box<dyn Send>>>> = Arc::default();
    let (socket, sink) = (socket.to_path_buf(), held.clone());
    std::thread::spawn(move || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(40);
        let keep = |s: Box<dyn Send>| sink.lock().unwrap().push(s);
        for _ in 0..n {
            while Instant::now() < deadline {
                if let Ok(s) = UnixStream::connect(&socket) {
                    keep(Box::new(s));
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            while Instant::now() < deadline {
                if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    keep(Box::new(s));
                    break;
                }
            }
        }
    });
    held
}

#[test]
fn idle_connections_do_not_exhaust_the_daemon() {
    const EACH: usize = 1500;
    allow_open_files(4 * EACH as u64);
    let dir = scratch();
    let port = free_port();
    // The default soft limit of a process not started by systemd: 3000 idle clients exceed it.
    let mut daemon = Daemon::start_with(
        dir.path(),
        &format!("{CONFIG}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
        &[],
        Some(1024),
    );
    let held = hold_connections(&daemon.socket, port, EACH);
    let opened = wait_for(Duration::from_secs(30), || {
        held.lock().unwrap().len() >= 2 * EACH
    });
    println!(
        "{} idle connections open after {opened:?}",
        held.lock().unwrap().len()
    );
    assert!(opened.is_some(), "the daemon stopped accepting connections");

    // With all of them still open, status answers at once...
    let started = Instant::now();
    let out = run_within(
        ioshield()
            .args(["status", "--json", "--socket"])
            .arg(&daemon.socket),
        Duration::from_secs(5),
    )
    .expect("status did not answer within 5 s");
    println!("status answered in {:?}", started.elapsed());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ...and the daemon still does its job.
    let mut w = writer(dir.path(), 150.0, 4.0, 1, 0.0);
    let line = daemon.wait_log("restrict pid", Duration::from_secs(6));
    assert!(
        line.as_deref()
            .is_some_and(|l| l.contains(&format!("restrict pid {}", w.id()))),
        "{line:?}"
    );
    // Idle metrics clients are dropped after their timeout, so a scrape gets through again.
    let scraped = wait_for(Duration::from_secs(10), || {
        let Ok(mut http) = TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let _ = http.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = std::io::Write::write_all(&mut http, b"GET /metrics HTTP/1.0\r\n\r\n");
        let mut response = String::new();
        let _ = std::io::Read::read_to_string(&mut http, &mut response);
        response.starts_with("HTTP/1.1 200 OK")
    });
    println!("scrape answered after {scraped:?}");
    assert!(scraped.is_some(), "no scrape got through");
    w.wait().unwrap();
    drop(held);
    assert!(daemon.alive());
    let _ = daemon.wait_log("\u{0}", Duration::from_millis(500));
    // Not even the accept loops ran out of descriptors, let alone /proc reads or the journal.
    assert!(
        !daemon.log.iter().any(|l| l.contains("Too many open files")),
        "{:#?}",
        daemon.log
    );
}
