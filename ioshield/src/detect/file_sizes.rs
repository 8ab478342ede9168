//! Writers of many small files (an untar, a checkout, a package unpacking) told from copies by
//! the bytes they dirty per file they write from its first page.
//!
//! Held like a copy (io.weight 1, memory.high 32 MiB or less), an untar of 32 KiB files ran at
//! 0.44x of its unmitigated speed on 6.12 with the disk's speed known, while its innocents
//! paused at most 0.33 s without any restriction (docs/bench/small-files.md): memory.high,
//! which its new inodes and dentries fill, holds it, not the disk. Its page cache cannot flood
//! the disk the way a copy's does.
use super::rates::Rate;

/// At most this many bytes per file on average. The bench's untar writes 32 KiB files, its copy
/// one of 400 MB; a source tree or a mail folder averages tens of KiB, photos and media
/// megabytes. Those stay held as copies.
pub const SMALL_FILE_BYTES: f64 = 256.0 * 1024.0;

/// At least this many files a second: smoothed from zero, a copy's single file never gets
/// near it, and a writer of a few files is judged by its bytes.
pub const MANY_FILES_PER_SEC: f64 = 10.0;

/// Whether `rate` is that of a writer of many small files.
pub fn many_small_files(rate: Rate) -> bool {
    rate.files >= MANY_FILES_PER_SEC && rate.bytes <= SMALL_FILE_BYTES * rate.files
}

/// How the daemon's log says it: "N files a second, K KiB each".
pub fn describe(rate: Rate) -> String {
    format!(
        "{:.0} files a second, {:.0} KiB each",
        rate.files,
        rate.bytes / rate.files.max(1e-9) / 1024.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(bytes: f64, files: f64) -> Rate {
        Rate {
            bytes,
            files,
            ..Rate::default()
        }
    }

    #[test]
    fn an_untar_writes_many_small_files_and_a_copy_does_not() {
        // The bench's untar: 8192 files of 32 KiB at 8-19 MB/s.
        assert!(many_small_files(rate(8e6, 8e6 / 32768.0)));
        assert!(many_small_files(rate(19e6, 19e6 / 32768.0)));
        // A copy of one 400 MB file, smoothed from zero over ten 1 s ticks (tau 8 s).
        assert!(!many_small_files(rate(20e6, 0.7)));
        // Photos: 4 MB each, 6 a second.
        assert!(!many_small_files(rate(24e6, 6.0)));
        // Large files, many a second: a copy of a directory of 1 MiB files.
        assert!(!many_small_files(rate(40e6, 40.0)));
        // A few small files: too few to tell.
        assert!(!many_small_files(rate(40_000.0, 5.0)));
        assert_eq!(
            describe(rate(8e6, 8e6 / 32768.0)),
            "244 files a second, 32 KiB each"
        );
    }
}
