//! The initramfs of the systemd guest (`cargo xtask vm e2e`): it loads the virtio disk driver,
//! mounts the Debian root image and switches to systemd (e2e-init.sh), carrying the files of the
//! test in `/e2e`; the runner boots it with the image attached.
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use super::{
    initramfs::{cpio, stage_base},
    kernels::Kernel,
    modules,
};

const INIT: &str = include_str!("e2e-init.sh");

pub enum FileSource {
    Path(PathBuf),
    Text(&'static str),
}

/// Builds the cpio archive at `out` with `files` under /e2e, staging in `staging`.
pub fn initrd(
    kernel: &Kernel,
    files: &[(&str, FileSource)],
    staging: &Path,
    out: &Path,
) -> Result<()> {
    stage_base(
        staging,
        &["e2e", "newroot"],
        kernel,
        modules::ROOT_DISK,
        INIT,
    )?;
    for (name, source) in files {
        let to = staging.join("e2e").join(name);
        match source {
            FileSource::Path(p) => {
                fs::copy(p, &to).with_context(|| format!("copying {}", p.display()))?;
            }
            FileSource::Text(t) => fs::write(&to, t)?,
        }
        fs::set_permissions(&to, fs::Permissions::from_mode(0o755))?;
    }
    cpio(staging, out)
}
