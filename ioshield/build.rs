use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

/// Builds the BPF object with the nightly toolchain and bpf-linker; `main.rs` embeds it.
fn main() -> anyhow::Result<()> {
    let cargo_metadata::Metadata { packages, .. } = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("MetadataCommand::exec")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "ioshield-ebpf")
        .ok_or_else(|| anyhow!("ioshield-ebpf package not found"))?;
    let root = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root.as_str(),
            ..Default::default()
        }],
        Toolchain::default(),
    )
}
