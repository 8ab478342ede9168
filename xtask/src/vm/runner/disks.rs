//! The guest's disks: `data` (ext4, the slow disk under test), `results` (a raw tar the guest
//! writes at the end) and, for busybox guests, `fast` (ext4 with no throttle). All are fresh
//! sparse files for every boot.
use std::{fs, io::Read as _, path::Path};

use anyhow::{Context as _, Result, bail};

use crate::cmd::run;

/// Room for a 50 s offender at full speed plus the innocent loads' files.
pub const DATA_SIZE: u64 = 8 << 30;
pub const RESULTS_SIZE: u64 = 256 << 20;
/// Room for the innocent loads' files.
pub const FAST_SIZE: u64 = 2 << 30;

pub fn create(data: &Path, results: &Path, fast: Option<&Path>) -> Result<()> {
    let mut disks = vec![(data, DATA_SIZE), (results, RESULTS_SIZE)];
    disks.extend(fast.map(|f| (f, FAST_SIZE)));
    for (path, size) in disks {
        let _ = fs::remove_file(path);
        let f = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        f.set_len(size)?;
    }
    // Default ext4 features and journal, as a distribution installs them. The inode tables of a
    // fresh sparse file are already zero, so they need no initialisation.
    let mut file_systems = vec![(data, "data")];
    file_systems.extend(fast.map(|f| (f, "fast")));
    for (path, label) in file_systems {
        run(std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", label])
            .arg(path))?;
    }
    Ok(())
}

/// Unpacks the tar the guest wrote to the results disk into `dest`.
pub fn extract_results(results: &Path, dest: &Path) -> Result<()> {
    fs::create_dir_all(dest)?;
    let mut head = [0u8; 512];
    fs::File::open(results)
        .and_then(|mut f| f.read_exact(&mut head))
        .with_context(|| format!("reading {}", results.display()))?;
    if head.iter().all(|&b| b == 0) {
        bail!("the guest wrote no results (results disk is empty)");
    }
    run(std::process::Command::new("tar")
        .arg("-xf")
        .arg(results)
        .arg("-C")
        .arg(dest))
}
