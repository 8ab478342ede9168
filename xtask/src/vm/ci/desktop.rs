//! The desktop's stick case (the "ioshield-desktop stick" check): a copy floods a slow disk
//! never measured (a USB stick) while the innocents, a download among them, write to a second
//! disk with no throttle (the system disk). Only the stick's writer may be restricted: until
//! stop 51 the backlog trigger weighed the machine's whole dirty memory (the stick's) against the
//! system disk, judged at the assumed 25 MB/s, restricted the download there and paused it 2.1 s
//! on 6.12 (docs/bench/stick.md). The system disk says it is solid-state (the guest's init.sh
//! marks the fast disk so, as NVMe and SATA SSDs are): there a backlog the disk has not begun to
//! write does not count against the assumed speed, while on the stick (rotational, as virtio
//! disks say) it does from the start (stop 62). A flush of the download's pages that keeps the
//! fast disk busy for one sample, writing under the assumed speed as the emulated disk now and
//! then does, is not a backlog either: it counts from the second busy sample in a row (stop 66,
//! docs/bench/stick.md).
use std::{fs, path::Path};

use anyhow::{Context as _, Result, bail};
use ioshield_tests::load::record::LoadRecord;

use super::{daemon_log, decisions};

/// The stick: qemu's throttle at 10 MB/s.
pub(super) const STICK_BPS: u64 = 10_000_000;

/// stall.sh's environment for the run: the shipped `bandwidth = "auto"`, the innocents on the
/// fast disk, and `bulk` (1 MiB through the page cache every 100 ms: a download) among them.
pub(super) const ENV: &[&str] = &[
    "BANDWIDTH=auto",
    "INNOCENTS_ON=fast",
    "LOADS=control write multiwrite commit bulk",
];

/// What stall.sh says of where the innocents wrote: "... write to /mnt/fast (/dev/vdc)".
const FAST_LINE: &str = "stall: the innocent loads write to ";

/// The stick's writer was restricted, and nothing on the fast disk.
pub(super) fn only_the_stick_restricted(run: &Path) -> Result<String> {
    let results = run.join("results");
    let data = fs::read_to_string(results.join("data-dev")).context("reading data-dev")?;
    let data = data.trim();
    let log = fs::read_to_string(results.join("scenario.log")).context("reading scenario.log")?;
    let fast = log
        .lines()
        .find_map(|l| l.strip_prefix(FAST_LINE))
        .and_then(|rest| rest.split_once('(')?.1.split_once(')').map(|(d, _)| d))
        .filter(|d| !d.is_empty())
        .context("stall.sh did not say which disk the innocents wrote to")?
        .to_string();
    let text = daemon_log(run)?;
    let restricted = decisions(&text, &["restrict pid"]);
    let on = |dev: &str| {
        let needle = format!(" on {dev}");
        move |l: &&&str| {
            l.match_indices(&needle)
                .any(|(i, _)| !l[i + needle.len()..].starts_with(|c: char| c.is_alphanumeric()))
        }
    };
    if let Some(wrong) = restricted.iter().find(on(&fast)) {
        bail!("a writer on the fast disk {fast} was restricted: {wrong}");
    }
    let Some(stick) = restricted.iter().find(on(data)) else {
        bail!(
            "the stick's writer was not restricted on {data}; the daemon's restrictions: {}",
            restricted.join(" | ")
        );
    };
    let bulk = LoadRecord::load(&results.join("bulk.json"))?
        .metrics
        .context("bulk.json has no metrics")?;
    Ok(format!(
        "{}; nothing on {fast}, where the download's longest pause was {:.2} s",
        stick.split(" INFO ").nth(1).unwrap_or(stick),
        bulk.longest_pause_s
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_with(restrictions: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "ioshield-desktop-{}-{}",
            std::process::id(),
            restrictions.len()
        ));
        let results = dir.join("results");
        fs::create_dir_all(&results).unwrap();
        fs::write(results.join("data-dev"), "/dev/vda\n").unwrap();
        fs::write(
            results.join("scenario.log"),
            "stall: scenario=ioshield\nstall: the innocent loads write to /mnt/fast (/dev/vdc)\n",
        )
        .unwrap();
        fs::write(results.join("daemon.log"), restrictions).unwrap();
        LoadRecord::new("bulk", 0.1, 10.0, vec![10.1, 10.25], 2 << 20)
            .save(&results.join("bulk.json"))
            .unwrap();
        dir
    }

    const STICK: &str = "2026-11-28T14:46:54.327644Z  INFO restrict pid 212 (ioshield-load) \
                         dirtied 6.3 MB in 93 ms on /dev/vda, faster than the disk's 25.0 MB/s\n";
    const DOWNLOAD: &str = "2026-11-28T14:26:12.227830Z  INFO restrict pid 209 (ioshield-load) \
                            tree 5.1 MB/s on /dev/vdc, whose dirty backlog would take 3.4s to \
                            flush > 1s\n";

    #[test]
    fn the_stick_alone_passes_the_download_fails() {
        let ok = run_with(STICK);
        let said = only_the_stick_restricted(&ok).unwrap();
        assert!(said.starts_with("restrict pid 212"), "{said}");
        assert!(said.contains("nothing on /dev/vdc"), "{said}");
        assert!(said.contains("0.05 s"), "{said}");
        let both = run_with(&format!("{STICK}{DOWNLOAD}"));
        let err = only_the_stick_restricted(&both).unwrap_err().to_string();
        assert!(err.contains("fast disk /dev/vdc was restricted"), "{err}");
        let none = run_with("");
        let err = only_the_stick_restricted(&none).unwrap_err().to_string();
        assert!(err.contains("was not restricted on /dev/vda"), "{err}");
        for dir in [ok, both, none] {
            fs::remove_dir_all(dir).unwrap();
        }
    }
}
