//! Man pages and shell completions, generated from the clap definitions in `cli` so they cannot
//! drift from the real options. `ioshield generate-assets DIR` (hidden) is what
//! `cargo xtask package` runs; distro packagers can run it too.
use std::path::Path;

use anyhow::{Context as _, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// Writes `ioshield.1`, `ioshield-SUBCOMMAND.1` for each visible subcommand, and the bash
/// (`ioshield.bash`), zsh (`_ioshield`) and fish (`ioshield.fish`) completions into `dir`.
pub fn generate(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut cmd = Cli::command();
    // build() propagates global options and names subcommands `ioshield-top` etc. for the pages.
    cmd.build();
    write_man(&cmd, dir)?;
    for sub in cmd.get_subcommands() {
        // The hidden generator and clap's own `help` get no page of their own.
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        write_man(sub, dir)?;
    }
    let mut shown = visible(&Cli::command());
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path =
            clap_complete::generate_to(shell, &mut shown, "ioshield", dir).with_context(|| {
                format!("cannot write the {shell} completion into {}", dir.display())
            })?;
        crate::output::print(&format!("{}\n", path.display()))?;
    }
    Ok(())
}

/// The command line as users see it. clap_complete, unlike clap_mangen, would otherwise offer
/// the hidden `generate-assets` (and `help generate-assets`) too.
fn visible(cmd: &clap::Command) -> clap::Command {
    clap::Command::new("ioshield")
        .version(env!("CARGO_PKG_VERSION"))
        .about(cmd.get_about().cloned().unwrap_or_default())
        .args(cmd.get_arguments().cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
}

fn write_man(cmd: &clap::Command, dir: &Path) -> Result<()> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name());
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .with_context(|| format!("cannot render the man page for {name}"))?;
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    crate::output::print(&format!("{}\n", path.display()))?;
    Ok(())
}
