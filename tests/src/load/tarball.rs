//! The untar offender's source: a tar archive of many small files (and, for `tarbig`, one large
//! one after them), written in one pass. Made in the guest by awk writing 8192 files and
//! `tar -c` reading them back, it took about 40 s of the emulated VM before every untar run.
use std::{
    fs::File,
    io::{self, BufWriter, Read as _, Write as _},
    path::Path,
};

use anyhow::{Context as _, Result};

/// What the archive holds: `small/f0000` ... of `file_size` bytes each (spaces, as the awk
/// that made them before wrote), then `big` of `big` zero bytes if asked.
#[derive(Clone, Copy, Debug)]
pub struct Contents {
    pub files: u32,
    pub file_size: u64,
    pub big: Option<u64>,
}

pub fn write(out: &Path, c: Contents) -> Result<()> {
    let file = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut tar = tar::Builder::new(BufWriter::with_capacity(1 << 20, file));
    tar.mode(tar::HeaderMode::Deterministic);
    let mut dir = header(0, tar::EntryType::Directory, 0o755);
    tar.append_data(&mut dir, "small/", io::empty())?;
    for i in 0..c.files {
        let mut h = header(c.file_size, tar::EntryType::Regular, 0o644);
        let data = io::repeat(b' ').take(c.file_size);
        tar.append_data(&mut h, format!("small/f{i:04}"), data)?;
    }
    if let Some(size) = c.big {
        let mut h = header(size, tar::EntryType::Regular, 0o644);
        tar.append_data(&mut h, "big", io::repeat(0).take(size))?;
    }
    let mut w = tar.into_inner()?;
    w.flush()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

fn header(size: u64, kind: tar::EntryType, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_size(size);
    h.set_entry_type(kind);
    h.set_mode(mode);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_files_then_the_big_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("files.tar");
        write(
            &path,
            Contents {
                files: 3,
                file_size: 32 << 10,
                big: Some(100_000),
            },
        )
        .unwrap();
        let mut archive = tar::Archive::new(File::open(&path).unwrap());
        let entries: Vec<(String, u64, Vec<u8>)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = e.path().unwrap().display().to_string();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                (name, e.header().size().unwrap(), data)
            })
            .collect();
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            ["small/", "small/f0000", "small/f0001", "small/f0002", "big"]
        );
        assert_eq!(entries[1].1, 32 << 10);
        assert!(entries[1].2.iter().all(|&b| b == b' '));
        assert_eq!(entries[4].1, 100_000);
        assert!(entries[4].2.iter().all(|&b| b == 0));
        // And the system's tar reads it the same.
        let listed = std::process::Command::new("tar")
            .arg("-tvf")
            .arg(&path)
            .output()
            .unwrap();
        let listed = String::from_utf8(listed.stdout).unwrap();
        assert_eq!(listed.lines().count(), 5, "{listed}");
        assert!(listed.contains("32768"), "{listed}");
    }
}
