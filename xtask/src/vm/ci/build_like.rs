//! The "ioshield build memory" check: a held writer whose processes then need memory, as a
//! build's compilers do (tests/vm/build-like.sh). `memory.high` counts all of a cgroup's
//! memory: held at its page cache budget alone, the 256 MiB allocation waited for up to 2 s
//! every 256 KiB; the daemon lifts it once the writer's processes hold more of their own.
use std::{fs, path::Path};

use anyhow::{Context as _, Result, bail};

use super::{daemon_log, last_line};

/// Seconds the held allocation may take: alone it takes well under one in the guest; the
/// daemon lifts `memory.high` at its next tick, after one wait of the kernel's (up to 2 s).
const MAX_HELD_S: f64 = 10.0;

/// The allocation's seconds from `alloc.txt` ("alone 0.31", "held 2.40", "again 0.35") under
/// `key`: `None` when it was killed at 60 s, or not run.
fn seconds(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(' ')?
            .trim()
            .parse::<f64>()
            .ok()
    })
}

/// What a retune after the lift and a reload of the configuration left of it, from
/// `restricted.txt`: its `memory.high` must still be "max", or the next compiler waits for the
/// follower again. A reload with no retune within the script's 20 s fails too: the reload turns
/// iocost off, which moves the held writer from its weight to `io.max` at the next tick, and a
/// reload that made the daemon forget the restriction's method skipped every retune until the
/// release (stop 59). `None` when the script neither reloaded nor saw a retune.
fn after_retune(restricted: &str, alloc: &str) -> Option<Result<String>> {
    let Some(high) = restricted
        .lines()
        .find_map(|l| l.strip_prefix("memory.high after the retune:"))
    else {
        return restricted.lines().any(|l| l == "reloaded").then(|| {
            Err(anyhow::anyhow!(
                "no retune to io.max within 20 s of a reload of the configuration with iocost off"
            ))
        });
    };
    let high = high.trim();
    let again = seconds(alloc, "again").map_or("?".to_string(), |s| format!("{s:.2}"));
    Some(if high == "max" {
        Ok(format!(
            "retuned after a reload, still lifted (256 MiB again in {again} s)"
        ))
    } else {
        Err(anyhow::anyhow!(
            "a retune after the lift set memory.high to {high} (256 MiB again in {again} s)"
        ))
    })
}

pub(super) fn memory_followed(results: &Path, status: i32) -> Result<String> {
    if status != 0 {
        bail!(
            "build-like.sh exited {status}: {}",
            last_line(&results.join("scenario.log"))
        );
    }
    let text = fs::read_to_string(results.join("alloc.txt")).context("reading alloc.txt")?;
    let (alone, held) = (seconds(&text, "alone"), seconds(&text, "held"));
    let restricted = fs::read_to_string(results.join("restricted.txt")).unwrap_or_default();
    let retuned = match after_retune(&restricted, &text) {
        Some(result) => result?,
        None => "no reload, no retune".into(),
    };
    let alone = alone.map_or("?".to_string(), |s| format!("{s:.2}"));
    let lifted = daemon_log(results.parent().unwrap_or(results))?
        .lines()
        .find(|l| l.contains("memory.high lifted"))
        .map(|l| {
            l.split_once("memory.high")
                .map_or(l, |(_, rest)| rest)
                .to_string()
        });
    match held {
        Some(s) if s <= MAX_HELD_S => Ok(format!(
            "256 MiB allocated in {s:.2} s held ({alone} s alone); memory.high{}; {retuned}",
            lifted.unwrap_or_else(|| " not lifted".into())
        )),
        Some(s) => bail!("256 MiB took {s:.2} s held, over {MAX_HELD_S} s ({alone} s alone)"),
        None => bail!("256 MiB not allocated within 60 s held ({alone} s alone)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_times_and_a_kill() {
        let text = "alone 0.31\nheld 2.40\nagain 0.35\n";
        assert_eq!(seconds(text, "alone"), Some(0.31));
        assert_eq!(seconds(text, "held"), Some(2.40));
        assert_eq!(seconds(text, "again"), Some(0.35));
        assert_eq!(seconds("alone 0.31\n", "held"), None);
        assert_eq!(seconds("alone \nheld x\n", "alone"), None);
        assert_eq!(seconds("alone \nheld x\n", "held"), None);
    }

    #[test]
    fn a_retune_must_leave_memory_high_lifted() {
        let cgroup = "0::/ioshield/r2-194\nmemory.high after: max\n";
        assert!(after_retune(cgroup, "").is_none());
        let reloaded = format!("{cgroup}reloaded\n");
        let err = after_retune(&reloaded, "")
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no retune to io.max within 20 s of a reload"),
            "{err}"
        );
        let kept = format!("{reloaded}memory.high after the retune: max\n");
        let said = after_retune(&kept, "again 0.40\n").unwrap().unwrap();
        assert_eq!(
            said,
            "retuned after a reload, still lifted (256 MiB again in 0.40 s)"
        );
        let set = format!("{reloaded}memory.high after the retune: 35651584\n");
        let err = after_retune(&set, "").unwrap().unwrap_err().to_string();
        assert!(err.contains("set memory.high to 35651584"), "{err}");
    }
}
