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

/// The allocation's seconds alone and held, from `alloc.txt` ("alone 0.31", "held 2.40"); held
/// is `None` when it was killed at 60 s.
fn seconds(text: &str) -> (Option<f64>, Option<f64>) {
    let of = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<f64>().ok())
    };
    (of("alone "), of("held "))
}

pub(super) fn memory_followed(results: &Path, status: i32) -> Result<String> {
    if status != 0 {
        bail!(
            "build-like.sh exited {status}: {}",
            last_line(&results.join("scenario.log"))
        );
    }
    let text = fs::read_to_string(results.join("alloc.txt")).context("reading alloc.txt")?;
    let (alone, held) = seconds(&text);
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
            "256 MiB allocated in {s:.2} s held ({alone} s alone); memory.high{}",
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
    fn reads_both_times_and_a_kill() {
        assert_eq!(seconds("alone 0.31\nheld 2.40\n"), (Some(0.31), Some(2.40)));
        assert_eq!(seconds("alone 0.31\n"), (Some(0.31), None));
        assert_eq!(seconds("alone \nheld x\n"), (None, None));
    }
}
