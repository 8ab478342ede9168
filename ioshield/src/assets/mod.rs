//! Man pages and shell completions, generated from the clap definitions in `cli` so they cannot
//! drift from the real options, and `ioshield.toml(5)` from the commented default configuration.
//! `ioshield generate-assets DIR` (hidden) is what `cargo xtask package` runs; distro packagers
//! can run it too. The commands are in section 8: everything but `check-config` needs root.
mod config_page;

use std::path::Path;

use anyhow::{Context as _, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// Writes `ioshield.8`, `ioshield-SUBCOMMAND.8` for each visible subcommand, `ioshield.toml.5`,
/// and the bash (`ioshield.bash`), zsh (`_ioshield`) and fish (`ioshield.fish`) completions into
/// `dir`.
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
    let page = dir.join("ioshield.toml.5");
    std::fs::write(&page, config_page::render(env!("CARGO_PKG_VERSION")))
        .with_context(|| format!("cannot write {}", page.display()))?;
    crate::output::print(&format!("{}\n", page.display()))?;
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
    let path = dir.join(format!("{name}.8"));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .manual("System Administration")
        .render(&mut page)
        .with_context(|| format!("cannot render the man page for {name}"))?;
    page.extend_from_slice(extra_sections(name).as_bytes());
    std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
    crate::output::print(&format!("{}\n", path.display()))?;
    Ok(())
}

/// What clap does not know: the files, signals and exit codes of each command, in roff.
fn extra_sections(page: &str) -> String {
    let files = ".SH FILES\n\
        .TP\n/etc/ioshield/ioshield.toml\n\
        The configuration; see \\fBioshield.toml\\fR(5).\n\
        .TP\n/etc/ioshield/ioshield.toml.d/*.toml\n\
        Drop-in configuration files, read after the main file in name order.\n\
        .TP\n/run/ioshield/state.json\n\
        Every change the daemon made, recorded before it is made; a start after a crash undoes \
        what it lists.\n\
        .TP\n/run/ioshield/ioshield.sock\n\
        The daemon's root-only socket that \\fBioshield status\\fR and \\fBioshield explain\\fR \
        ask.\n\
        .TP\n/var/lib/ioshield/disks.json\n\
        Each disk's measured write speed (or a lower bound of it, or the rate at which it showed \
        no room to spare), kept across restarts.\n\
        .TP\n/usr/lib/systemd/system/user@.service.d/50-ioshield.conf\n\
        Delegates the io controller to users' own systemd, so writers in a user's session can be \
        limited through it.\n";
    let signals = ".SH SIGNALS\n\
        .TP\nSIGTERM, SIGINT\n\
        The daemon undoes every change it made (limits lifted, unit properties put back, its \
        cgroups removed) and exits.\n\
        .TP\nSIGHUP\n\
        The daemon reads its configuration again; a bad file is logged and the old configuration \
        kept.\n";
    let exit = ".SH EXIT STATUS\n\
        .TP\n0\nSuccess.\n\
        .TP\n1\nAn error, said in one line on standard error (a bad configuration value names \
        the file, line and key); \\fBdoctor\\fR: ioshield cannot protect this machine.\n\
        .TP\n3\n\\fBstatus\\fR, \\fBexplain\\fR: no daemon answers (as \\fBsystemctl status\\fR \
        exits for a unit that is not running).\n";
    let see_also = ".SH SEE ALSO\n\\fBioshield.toml\\fR(5), \\fBsystemd.resource\\-control\\fR(5), \
        \\fBiotop\\fR(8)\n";
    match page {
        "ioshield" => format!("{files}{signals}{exit}{see_also}"),
        "ioshield-daemon" => format!("{files}{signals}{see_also}"),
        "ioshield-status" | "ioshield-explain" | "ioshield-doctor" => format!("{exit}{see_also}"),
        _ => see_also.to_string(),
    }
}
