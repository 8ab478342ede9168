//! What the distro packages ship from `packaging/`: the default configuration must be valid and
//! equal to the built-in defaults, the unit must stay hardened, and the generated man pages and
//! completions must be complete and not mention the hidden generator. No root or BPF needed.
mod support;

use std::{path::PathBuf, process::Command};

use support::{ioshield, one_line_failure};

fn packaging(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging")
        .join(file)
}

/// `ioshield check-config FILE`: asserts success and returns the effective configuration printed
/// after the `# ... is valid` header line.
fn effective_config(file: &std::path::Path) -> String {
    let out = ioshield()
        .arg("check-config")
        .arg(file)
        .output()
        .expect("run ioshield");
    assert!(
        out.status.success(),
        "check-config {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let (header, config) = text.split_once('\n').expect("a header line");
    assert!(header.contains("is valid"), "{header}");
    config.to_string()
}

#[test]
fn packaged_config_is_valid() {
    effective_config(&packaging("ioshield.toml"));
}

#[test]
fn packaged_config_spells_out_the_builtin_defaults() {
    // An empty file is valid and means "all defaults", whatever is in /etc on this machine.
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    assert_eq!(
        effective_config(&packaging("ioshield.toml")),
        effective_config(&empty),
        "packaging/ioshield.toml differs from the built-in defaults"
    );
}

#[test]
fn unit_stays_hardened() {
    // 3.0 since CAP_SYS_PTRACE joined the unit (2.7 before): the one thing it adds is
    // packaging/ioshield.service's to explain.
    let analyze = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=30"])
        .arg(packaging("ioshield.service"))
        .output();
    // `cargo xtask test` installs systemd's tools; a test that skips itself proves nothing.
    let out = analyze.expect("systemd-analyze (Debian package systemd)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the unit's exposure went above 3.0:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kept in ["ProtectControlGroups=", "PrivateDevices="] {
        // These would break the daemon (see the comments in the unit); the analysis must see
        // them unset.
        assert!(
            text.lines().any(|l| l.starts_with('✗') && l.contains(kept)),
            "{kept} must stay unset:\n{text}"
        );
    }
}

#[test]
fn assets_cover_every_subcommand_and_hide_the_generator() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = ioshield()
        .arg("generate-assets")
        .arg(dir.path())
        .output()
        .expect("run ioshield");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "ioshield.8",
        "ioshield-top.8",
        "ioshield-daemon.8",
        "ioshield-check-config.8",
        "ioshield.toml.5",
        "ioshield.bash",
        "_ioshield",
        "ioshield.fish",
    ] {
        let text = std::fs::read_to_string(dir.path().join(name))
            .unwrap_or_else(|e| panic!("{name} was not written: {e}"));
        assert!(
            !text.contains("generate-assets"),
            "{name} mentions the hidden generate-assets"
        );
    }
    assert!(!dir.path().join("ioshield-generate-assets.8").exists());
    assert!(!dir.path().join("ioshield-help.8").exists());
    let main = std::fs::read_to_string(dir.path().join("ioshield.8")).unwrap();
    for section in [".SH FILES", ".SH SIGNALS", ".SH EXIT STATUS"] {
        assert!(main.contains(section), "ioshield(8) lacks {section}");
    }
    // ioshield.toml(5) describes every key of the effective configuration.
    let page = std::fs::read_to_string(dir.path().join("ioshield.toml.5")).unwrap();
    let effective: toml::Table =
        toml::from_str(&effective_config(&packaging("ioshield.toml"))).unwrap();
    let mut keys = vec![
        "listen".to_string(),
        "textfile".to_string(),
        "socket".to_string(),
    ];
    for table in effective.values().filter_map(|v| v.as_table()) {
        for (key, value) in table {
            match value.as_table() {
                // [device.default]: its keys
                Some(inner) => keys.extend(inner.keys().cloned()),
                None => keys.push(key.clone()),
            }
        }
    }
    for key in keys {
        assert!(
            page.contains(&format!("\\fB{}\\fR", key.replace('-', "\\-"))),
            "ioshield.toml(5) has no entry for {key}"
        );
    }
    // groff renders every page without a warning.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if !path.extension().is_some_and(|e| e == "5" || e == "8") {
            continue;
        }
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&path)
            .output()
            .expect("groff (Debian package groff-base)");
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && warnings.trim().is_empty(),
            "{}: {warnings}",
            path.display()
        );
    }
}

/// The rpm enables the service through presets (as Fedora's %systemd_post does), not with an
/// unconditional `systemctl enable` in a scriptlet, and ships the preset that says so.
#[test]
fn the_rpm_enables_through_presets() {
    let manifest = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ioshield/Cargo.toml"),
    )
    .unwrap();
    let post = manifest
        .split("post_install_script = \"\"\"")
        .nth(1)
        .and_then(|s| s.split("\"\"\"").next())
        .expect("an rpm post-install script");
    assert!(
        post.contains("systemctl --no-reload preset ioshield.service"),
        "{post}"
    );
    assert!(
        !post.contains("systemctl enable") && !post.contains("enable --now"),
        "enabling is the presets' decision: {post}"
    );
    assert!(
        manifest.contains("dest = \"/usr/lib/systemd/system-preset/90-ioshield.preset\""),
        "the preset is shipped"
    );
    let preset = std::fs::read_to_string(packaging("90-ioshield.preset")).unwrap();
    assert!(
        preset
            .lines()
            .any(|l| l.trim() == "enable ioshield.service"),
        "{preset}"
    );
}

/// What another package would do: drop a file into `ioshield.toml.d/` next to the packaged
/// config. Its exclusions add to the main file's, its keys replace, and a bad drop-in is named.
#[test]
fn a_drop_in_file_extends_the_packaged_config() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("ioshield.toml");
    std::fs::copy(packaging("ioshield.toml"), &main).unwrap();
    let drop_ins = dir.path().join("ioshield.toml.d");
    std::fs::create_dir(&drop_ins).unwrap();
    std::fs::write(
        drop_ins.join("50-backup.toml"),
        "[exclude]\ncomm = [\"borg\"]\n[device.default]\nrestrict_at = 0.9\n",
    )
    .unwrap();
    let out = ioshield().arg("check-config").arg(&main).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines().next().unwrap().contains("50-backup.toml"),
        "{text}"
    );
    let effective: toml::Table = toml::from_str(text.split_once('\n').unwrap().1).unwrap();
    assert_eq!(
        effective["exclude"]["comm"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .as_str(),
        Some("borg"),
        "{text}"
    );
    assert_eq!(
        effective["device"]["default"]["restrict_at"].as_float(),
        Some(0.9)
    );

    std::fs::write(
        drop_ins.join("60-typo.toml"),
        "[device.default]\nrestrict = 0.9\n",
    )
    .unwrap();
    let out = ioshield().arg("check-config").arg(&main).output().unwrap();
    let line = one_line_failure(&out);
    assert!(line.contains("60-typo.toml:2"), "{line}");
}
