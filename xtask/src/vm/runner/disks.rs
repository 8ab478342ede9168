//! The guest's two disks: `data` (ext4, the slow disk under test) and `results` (a raw tar the
//! guest writes at the end). Both are fresh sparse files for every boot.
use std::{fs, io::Read as _, path::Path};

use anyhow::{Context as _, Result, bail};

use crate::cmd::run;

/// Room for a 50 s offender at full speed plus the innocent loads' files.
pub const DATA_SIZE: u64 = 8 << 30;
pub const RESULTS_SIZE: u64 = 256 << 20;

pub fn create(data: &Path, results: &Path) -> Result<()> {
    for (path, size) in [(data, DATA_SIZE), (results, RESULTS_SIZE)] {
        let _ = fs::remove_file(path);
        let f = fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        f.set_len(size)?;
    }
    // Default ext4 features and journal, as a distribution installs them. The inode tables of a
    // fresh sparse file are already zero, so they need no initialisation.
    run(std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "data"])
        .arg(data))
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
