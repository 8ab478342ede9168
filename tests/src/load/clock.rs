//! Time stamps and the stop request shared by all loads.
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

/// Seconds on CLOCK_MONOTONIC. Absolute (not relative to the load's start) so that the records
/// of loads running side by side in one machine can be lined up with each other.
pub fn now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

extern "C" fn request_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGTERM and SIGINT end a load early but cleanly, so its record is still written: scenario
/// scripts stop loads with `kill` when they run for longer than planned.
pub fn stop_on_signals() {
    let handler = request_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
