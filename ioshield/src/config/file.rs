//! From TOML text to a validated [`Config`]. Spans are kept on every value that is checked
//! after parsing, so an out-of-range value is reported with its line.
use std::{
    fmt,
    ops::Range,
    path::{Path, PathBuf},
    time::Duration,
};

use toml::Spanned;

use super::{
    ActionKind, Config, RefreshDirtyCounts, device::device_policy, exclude::exclude, keys::key_at,
    raw::RawConfig, units::parse_duration_within,
};

/// `tick`: under 100 ms the daemon is a busy loop for nothing (rates move over seconds); over a
/// minute it no longer protects anyone.
const TICK: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(60));
/// `refresh_dirty_counts`: each read costs a flush of the cgroup's counters; more often than
/// every 5 ms is CPU for nothing, less often than every second no better than the kernel's 2 s.
const REFRESH: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));
/// `tau` (and a device's `hold`, in device.rs): longer than a day is a typo.
pub(super) const DAY: Duration = Duration::from_secs(86_400);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub origin: String,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The main file, then every `*.toml` in its drop-in directory (`FILE.d/`) in name order: a
/// package or a configuration manager adds its own exclusions or a disk's section in a file of
/// its own instead of editing the main one. `main` may be absent (built-in defaults).
pub fn load(main: Option<&Path>, drop_in_dir: &Path) -> Result<Config, ConfigError> {
    let mut files: Vec<PathBuf> = main.map(Path::to_path_buf).into_iter().collect();
    files.extend(drop_ins(drop_in_dir)?);
    let mut texts = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            origin: path.display().to_string(),
            line: None,
            key: None,
            message: format!("cannot read the configuration: {e}"),
        })?;
        texts.push((text, path.display().to_string()));
    }
    let layers: Vec<(&str, &str)> = texts
        .iter()
        .map(|(t, o)| (t.as_str(), o.as_str()))
        .collect();
    let mut config = parse_layers(&layers)?;
    config.source = main.map(Path::to_path_buf);
    config.drop_ins = files
        .into_iter()
        .skip(usize::from(main.is_some()))
        .collect();
    Ok(config)
}

/// `*.toml` files of the drop-in directory, by name; none when it does not exist.
fn drop_ins(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ConfigError {
                origin: dir.display().to_string(),
                line: None,
                key: None,
                message: format!("cannot read the drop-in directory: {e}"),
            });
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

pub(super) struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    pub(super) fn line_of(&self, span: Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    pub(super) fn err(
        &self,
        span: Option<Range<usize>>,
        key: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            origin: self.origin.to_string(),
            line: span.map(|s| self.line_of(s)),
            key: Some(key.to_string()),
            message: message.into(),
        }
    }

    /// Applies `parse` to a spanned value, reporting failures at its line under `key`.
    pub(super) fn value<T, U>(
        &self,
        v: &Option<Spanned<T>>,
        key: &str,
        parse: impl Fn(&T) -> Result<U, String>,
    ) -> Result<Option<U>, ConfigError> {
        match v {
            None => Ok(None),
            Some(s) => parse(s.get_ref())
                .map(Some)
                .map_err(|m| self.err(Some(s.span()), key, m)),
        }
    }
}

#[cfg(test)]
pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    parse_layers(&[(text, origin)])
}

/// Files (text, origin) applied in order over the built-in defaults: a key a later file sets
/// replaces the earlier value, `exclude` lists add up, and a `[device.NAME]` section starts from
/// the final `[device.default]` with each file's keys for that disk applied in order.
pub fn parse_layers(layers: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut parsed = Vec::new();
    for &(text, origin) in layers {
        let ctx = Ctx { text, origin };
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
            origin: origin.to_string(),
            line: e.span().map(|s| ctx.line_of(s)),
            key: e.span().and_then(|s| key_at(text, s.start)),
            message: e.message().trim().to_string(),
        })?;
        parsed.push((ctx, raw));
    }
    let mut config = Config::default();
    for (ctx, raw) in &parsed {
        apply(ctx, raw, &mut config)?;
    }
    let mut names: Vec<&String> = Vec::new();
    for (_, raw) in &parsed {
        for name in raw.device.keys().filter(|n| n.as_str() != "default") {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    for name in names {
        let mut policy = config.default_device.clone();
        for (ctx, raw) in &parsed {
            if let Some(section) = raw.device.get(name) {
                policy = device_policy(ctx, name, section, &policy)?;
            }
        }
        config.devices.push((name.clone(), policy));
    }
    Ok(config)
}

/// One file's `[daemon]`, `[metrics]`, `[exclude]` and `[device.default]` over `config`.
fn apply(ctx: &Ctx, raw: &RawConfig, config: &mut Config) -> Result<(), ConfigError> {
    let d = &raw.daemon;
    if let Some(v) = ctx.value(&d.tick, "daemon.tick", |s: &String| {
        parse_duration_within(s, TICK.0, TICK.1)
    })? {
        config.daemon.tick = v;
    }
    if let Some(v) = ctx.value(&d.tau, "daemon.tau", |s: &String| {
        parse_duration_within(s, TICK.0, DAY)
    })? {
        config.daemon.tau = v;
    }
    if let Some(v) = ctx.value(&d.parent_factor, "daemon.parent_factor", |&f| {
        if (0.0..=1.0).contains(&f) {
            Ok(f)
        } else {
            Err(format!("{f} is not between 0 and 1"))
        }
    })? {
        config.daemon.parent_factor = v;
    }
    if let Some(v) = ctx.value(&d.action, "daemon.action", |s| ActionKind::parse(s))? {
        config.daemon.action = v;
        config.default_device.action = v;
    }
    let absolute = |s: &String| {
        if Path::new(s).is_absolute() {
            Ok(std::path::PathBuf::from(s))
        } else {
            Err(format!("`{s}` is not an absolute path"))
        }
    };
    if let Some(v) = ctx.value(&d.state_file, "daemon.state_file", absolute)? {
        config.daemon.state_file = v;
    }
    if let Some(v) = ctx.value(&d.socket, "daemon.socket", absolute)? {
        config.daemon.socket = v;
    }
    if let Some(v) = ctx.value(&d.speeds_file, "daemon.speeds_file", absolute)? {
        config.daemon.speeds_file = v;
    }
    config.metrics.textfile = ctx.value(&raw.metrics.textfile, "metrics.textfile", |s| {
        let path = absolute(s)?;
        // node_exporter's textfile collector reads only *.prom files.
        if path.extension().is_some_and(|e| e == "prom") {
            Ok(path)
        } else {
            Err(format!(
                "`{s}` does not end in .prom, so node_exporter would not read it"
            ))
        }
    })?;
    config.metrics.listen = ctx.value(&raw.metrics.listen, "metrics.listen", |s: &String| {
        let addr: std::net::SocketAddr = s
            .parse()
            .map_err(|_| format!("`{s}` is not an address like \"127.0.0.1:9814\""))?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "`{s}` is not a loopback address; metrics stay on this host"
            ));
        }
        Ok(addr)
    })?;
    if let Some(v) = d.session_leaders {
        config.daemon.session_leaders = v;
    }
    if let Some(v) = ctx.value(
        &d.refresh_dirty_counts,
        "daemon.refresh_dirty_counts",
        |s: &String| match s.as_str() {
            "auto" => Ok(RefreshDirtyCounts::Auto),
            "off" => Ok(RefreshDirtyCounts::Off),
            _ => parse_duration_within(s, REFRESH.0, REFRESH.1)
                .map(RefreshDirtyCounts::Every)
                .map_err(|e| format!("{e} (or \"auto\", \"off\")")),
        },
    )? {
        config.daemon.refresh_dirty_counts = v;
    }
    let more = exclude(ctx, &raw.exclude)?;
    config.exclude.comm.extend(more.comm);
    config.exclude.uid.extend(more.uid);
    config.exclude.cgroup.extend(more.cgroup);
    if let Some(section) = raw.device.get("default") {
        config.default_device = device_policy(ctx, "default", section, &config.default_device)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Bandwidth, DevicePolicy, MemoryHigh};

    fn err(text: &str) -> String {
        parse(text, "/etc/ioshield/ioshield.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_documented_example_parses() {
        let c = parse(
            r#"
[daemon]
tick = "1s"
tau = "8s"
parent_factor = 0.7
action = "auto"
state_file = "/run/ioshield/state.json"
[exclude]
comm = ["sshd"]
uid = [1001]
cgroup = ["/system.slice/x.service"]
[device.default]
bandwidth = "auto"
restrict_at = 0.7
release_at = 0.2
hold = "10s"
[device."/dev/vdb"]
bandwidth = "30MB/s"
action = "cgroup"
"#,
            "t",
        )
        .unwrap();
        assert_eq!(c.exclude.comm, vec!["sshd"]);
        assert_eq!(c.metrics, super::super::Metrics::default());
        let vdb = c.policy_for(Some("/dev/vdb"));
        assert_eq!(vdb.bandwidth, Bandwidth::BytesPerSec(30_000_000));
        assert_eq!(vdb.action, ActionKind::Cgroup);
        assert_eq!(vdb.hold, std::time::Duration::from_secs(10));
        assert_eq!(vdb.memory_high, MemoryHigh::Auto);
        assert_eq!(
            MemoryHigh::Auto.bytes(30e6, 1.0),
            Some(MemoryHigh::FLOOR),
            "30 MB/s x 1 s is under the floor"
        );
        assert_eq!(MemoryHigh::Auto.bytes(500e6, 1.0), Some(500_000_000));
        let off = parse("[device.default]\nmemory_high = \"off\"\n", "t").unwrap();
        assert_eq!(off.default_device.memory_high.bytes(30e6, 1.0), None);
        let fixed = parse("[device.default]\nmemory_high = \"64MiB\"\n", "t").unwrap();
        assert_eq!(
            fixed.default_device.memory_high,
            MemoryHigh::Bytes(64 << 20)
        );
        assert_eq!(c.policy_for(None).action, ActionKind::Auto);
        assert_eq!(c.policy_for(None).iocost, crate::config::Iocost::Auto);
        let no_iocost = parse("[device.vdb]\niocost = \"off\"\n", "t").unwrap();
        assert_eq!(
            no_iocost.policy_for(Some("vdb")).iocost,
            crate::config::Iocost::Off
        );
        let iocost_on = parse("[device.vdb]\niocost = \"on\"\n", "t").unwrap();
        assert_eq!(
            iocost_on.policy_for(Some("vdb")).iocost,
            crate::config::Iocost::On
        );
        use crate::config::MaxDirty;
        assert_eq!(c.policy_for(None).max_dirty, MaxDirty::Off);
        for (text, want) in [
            ("250ms", MaxDirty::Seconds(0.25)),
            ("0.5s", MaxDirty::Seconds(0.5)),
            ("2 s", MaxDirty::Seconds(2.0)),
            ("16MiB", MaxDirty::Bytes(16 << 20)),
            ("off", MaxDirty::Off),
        ] {
            let guarded = parse(&format!("[device.vdb]\nmax_dirty = \"{text}\"\n"), "t").unwrap();
            assert_eq!(guarded.policy_for(Some("vdb")).max_dirty, want, "{text}");
            let again = parse(&guarded.to_toml(), "t").unwrap();
            assert_eq!(again.policy_for(Some("vdb")).max_dirty, want, "{text}");
        }
        // Seconds of the disk's speed, never less than the floor.
        assert_eq!(MaxDirty::Seconds(0.25).bytes(30e6), Some(7_500_000));
        assert_eq!(MaxDirty::Seconds(0.25).bytes(1e6), Some(MaxDirty::FLOOR));
        assert_eq!(MaxDirty::Off.bytes(30e6), None);
        // The effective configuration round-trips through check-config's output.
        let again = parse(&c.to_toml(), "t").unwrap();
        assert_eq!(again.policy_for(Some("/dev/vdb")), vdb);
    }

    #[test]
    fn drop_ins_replace_keys_add_exclusions_and_keep_device_inheritance() {
        let main = "[daemon]\ntick = \"1s\"\n[exclude]\ncomm = [\"rsync\"]\n\
                    [device.sda]\nhold = \"7s\"\n";
        let first =
            "[exclude]\ncomm = [\"borg\"]\nuid = [1000]\n[device.default]\nrestrict_at = 0.8\n";
        let second = "[daemon]\ntick = \"2s\"\n[device.sda]\nbandwidth = \"30MB/s\"\n";
        let c = parse_layers(&[(main, "main"), (first, "10-a"), (second, "20-b")]).unwrap();
        assert_eq!(c.daemon.tick, Duration::from_secs(2), "the later file wins");
        assert_eq!(c.exclude.comm, ["rsync", "borg"], "exclusions add up");
        assert_eq!(c.exclude.uid, [1000]);
        let sda = c.policy_for(Some("sda"));
        assert_eq!(sda.hold, Duration::from_secs(7), "kept from the main file");
        assert_eq!(
            sda.bandwidth,
            super::super::Bandwidth::BytesPerSec(30_000_000)
        );
        assert_eq!(sda.restrict_at, 0.8, "inherits the final default");
        assert_eq!(c.policy_for(None).restrict_at, 0.8);

        let bad = "\n[device.sda]\nrestrict_at = -1\n";
        let e = parse_layers(&[(main, "main"), (bad, "/etc/x.toml.d/30-bad.toml")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/x.toml.d/30-bad.toml:3: device.sda.restrict_at: -1 must be a positive fraction \
             of the bandwidth"
        );
    }

    #[test]
    fn the_drop_in_directory_is_read_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("ioshield.toml");
        std::fs::write(&main, "[exclude]\ncomm = [\"a\"]\n").unwrap();
        let d = super::super::drop_in_dir(&main);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("20-c.toml"), "[exclude]\ncomm = [\"c\"]\n").unwrap();
        std::fs::write(d.join("10-b.toml"), "[exclude]\ncomm = [\"b\"]\n").unwrap();
        std::fs::write(d.join("README"), "not toml").unwrap();
        std::fs::write(d.join("99-x.toml.dpkg-old"), "not = toml = at all").unwrap();
        let c = Config::load(Some(&main)).unwrap();
        assert_eq!(c.exclude.comm, ["a", "b", "c"]);
        assert_eq!(c.drop_ins, [d.join("10-b.toml"), d.join("20-c.toml")]);
        assert!(c.origin().ends_with("20-c.toml"), "{}", c.origin());

        // Without the main file, the drop-ins still apply over the defaults.
        let c = load(None, &d).unwrap();
        assert_eq!(c.exclude.comm, ["b", "c"]);
    }

    #[test]
    fn empty_text_is_the_defaults() {
        assert_eq!(parse("", "t").unwrap(), Config::default());
    }

    #[test]
    fn errors_name_file_line_and_key() {
        assert_eq!(
            err("[daemon]\ntick = \"1s\"\nbogus = 3\n"),
            "/etc/ioshield/ioshield.toml:3: daemon.bogus: unknown field `bogus`, expected one of \
             `tick`, `tau`, `parent_factor`, `action`, `state_file`, `speeds_file`, `socket`, \
             `session_leaders`, `refresh_dirty_counts`"
        );
        assert_eq!(
            err("[device.default]\nrestrict_at = 0.5\nrelease_at = 0.6\n"),
            "/etc/ioshield/ioshield.toml:3: device.default.release_at: release_at (0.6) must be \
             below restrict_at (0.5)"
        );
        let e = err("[device.\"/dev/vdb\"]\nbandwidth = \"0MB/s\"\n");
        assert!(
            e.starts_with("/etc/ioshield/ioshield.toml:2: device.\"/dev/vdb\".bandwidth:"),
            "{e}"
        );
        let e = err("[daemon]\ntau = \"-8s\"\n");
        assert!(
            e.starts_with("/etc/ioshield/ioshield.toml:2: daemon.tau:"),
            "{e}"
        );
        let e = err("[daemon]\nparent_factor = \"high\"\n");
        assert!(
            e.starts_with("/etc/ioshield/ioshield.toml:2: daemon.parent_factor: invalid type"),
            "{e}"
        );
        let e = err("[metrics]\nlisten = \"0.0.0.0:9814\"\n");
        assert!(
            e.starts_with("/etc/ioshield/ioshield.toml:2: metrics.listen:"),
            "{e}"
        );
        let e = err("[daemon]\naction = \"kill\"\n");
        assert!(e.contains("daemon.action") && e.contains("kill"), "{e}");
    }

    #[test]
    fn dirty_counts_are_refreshed_every_20ms_on_kernels_that_leave_them_stale() {
        let ms = |n| Some(Duration::from_millis(n));
        let auto = parse("", "t").unwrap().daemon.refresh_dirty_counts;
        assert_eq!(auto, RefreshDirtyCounts::Auto);
        assert_eq!(auto.interval(Some((6, 12))), ms(20));
        assert_eq!(auto.interval(Some((6, 8))), ms(20));
        assert_eq!(auto.interval(Some((6, 1))), None);
        assert_eq!(
            auto.interval(None),
            ms(20),
            "an unknown kernel is taken as new"
        );
        let set = |v: &str| {
            parse(&format!("[daemon]\nrefresh_dirty_counts = \"{v}\"\n"), "t")
                .unwrap()
                .daemon
                .refresh_dirty_counts
        };
        assert_eq!(set("50ms").interval(Some((6, 1))), ms(50));
        assert_eq!(set("off").interval(Some((6, 12))), None);
        assert_eq!(set("auto"), RefreshDirtyCounts::Auto);
        // Current where the daemon refreshes them, or the kernel keeps them so itself; not
        // where neither does (6.8 and later with the refresh off).
        assert!(auto.counts_current(Some((6, 12))));
        assert!(auto.counts_current(Some((6, 1))));
        assert!(auto.counts_current(None));
        assert!(set("off").counts_current(Some((6, 1))));
        assert!(!set("off").counts_current(Some((6, 8))));
        assert!(!set("off").counts_current(None));
    }

    #[test]
    fn every_value_is_bounded_and_every_error_names_its_key() {
        let cases = [
            (
                "[daemon]\ntick = \"1e20\"\n",
                "2: daemon.tick: `1e20` is not between 100ms and 1m",
            ),
            (
                "[daemon]\ntick = \"1ns\"\n",
                "2: daemon.tick: `1ns` is not between",
            ),
            ("[daemon]\ntick = \"2m\"\n", "2: daemon.tick:"),
            (
                "[daemon]\nrefresh_dirty_counts = \"1ms\"\n",
                "2: daemon.refresh_dirty_counts: `1ms` is not between 5ms and 1s (or \"auto\", \"off\")",
            ),
            (
                "[daemon]\nrefresh_dirty_counts = \"never\"\n",
                "2: daemon.refresh_dirty_counts:",
            ),
            (
                "[daemon]\ntau = \"99999999999999999999\"\n",
                "2: daemon.tau:",
            ),
            ("[daemon]\ntau = \"2days\"\n", "2: daemon.tau:"),
            (
                "[device.default]\nhold = \"99999999999999999999\"\n",
                "2: device.default.hold: `99999999999999999999` is not between 0s and 1day",
            ),
            (
                "[device.sda]\nhold = \"99999999999999999999s\"\n",
                "2: device.sda.hold:",
            ),
            (
                "[device.sda]\nhold = 10\n",
                "2: device.sda.hold: invalid type",
            ),
            (
                "[device.sda]\nmax_flush_seconds = 1e300\n",
                "2: device.sda.max_flush_seconds:",
            ),
            (
                "[device.sda]\nmemory_high = \"1kB\"\n",
                "2: device.sda.memory_high:",
            ),
            (
                "[device.sda]\niocost = \"yes\"\n",
                "2: device.sda.iocost: `yes` is not",
            ),
            (
                "[device.sda]\nmax_dirty = \"30MB/s\"\n",
                "2: device.sda.max_dirty: `30MB/s` is a rate",
            ),
            (
                "[device.sda]\nmax_dirty = \"1MiB\"\n",
                "2: device.sda.max_dirty: `1MiB` is less than 4 MiB",
            ),
            (
                "[device.sda]\nmax_dirty = \"0s\"\n",
                "2: device.sda.max_dirty: `0s` must be more than 0",
            ),
            (
                "[device.sda]\nmax_dirty = \"2m\"\n",
                "2: device.sda.max_dirty:",
            ),
            (
                "[device.sda]\nmax_dirty = \"soon\"\n",
                "2: device.sda.max_dirty:",
            ),
            (
                "[device.sda]\nbandwidth = \"1e9GB/s\"\n",
                "2: device.sda.bandwidth:",
            ),
            (
                "[device.sda]\nrelease_at = 1e300\n",
                "2: device.sda.release_at:",
            ),
            (
                "[exclude]\ncomm = [\"sshd\",\n  \"a-name-too-long-to-match\"]\n",
                "3: exclude.comm: `a-name-too-long-to-match` can never match",
            ),
            (
                "[exclude]\ncomm = [\"sshd\", 5]\n",
                "2: exclude.comm: invalid type",
            ),
            ("[exclude]\nuid = [-1]\n", "2: exclude.uid:"),
            (
                "[exclude]\ncgroup = [\"system.slice/x.service\"]\n",
                "2: exclude.cgroup: `system.slice/x.service` can never match",
            ),
            (
                "[metrics]\ntextfile = \"/var/lib/x.txt\"\n",
                "2: metrics.textfile:",
            ),
            (
                "[nonsense]\nx = 1\n",
                "1: nonsense: unknown field `nonsense`",
            ),
        ];
        for (text, expected) in cases {
            let e = err(text);
            assert!(
                e.starts_with(&format!("/etc/ioshield/ioshield.toml:{expected}")),
                "{text:?}: {e}"
            );
        }
        let ok = parse(
            "[daemon]\ntick = \"100ms\"\ntau = \"1d\"\n[exclude]\ncomm = [\"exactly15chars!\"]\n\
             [device.default]\nhold = \"0s\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(ok.daemon.tick, std::time::Duration::from_millis(100));
        assert_eq!(ok.default_device.hold, std::time::Duration::ZERO);
        let _: &DevicePolicy = &ok.default_device;
    }

    /// Lines a configuration file could have: every section, every key, and values of every
    /// shape (huge and tiny numbers, units, bad strings).
    fn config_line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let section = prop_oneof![
            Just("[daemon]".to_string()),
            Just("[exclude]".to_string()),
            Just("[metrics]".to_string()),
            Just("[device.default]".to_string()),
            "\\[device\\.\"[ -~]{0,12}\"\\]",
        ];
        let key = prop_oneof![
            Just("tick"),
            Just("tau"),
            Just("parent_factor"),
            Just("action"),
            Just("state_file"),
            Just("speeds_file"),
            Just("socket"),
            Just("session_leaders"),
            Just("refresh_dirty_counts"),
            Just("comm"),
            Just("uid"),
            Just("cgroup"),
            Just("listen"),
            Just("textfile"),
            Just("bandwidth"),
            Just("restrict_at"),
            Just("release_at"),
            Just("hold"),
            Just("max_flush_seconds"),
            Just("burst_seconds"),
            Just("limit"),
            Just("memory_high"),
            Just("iocost"),
            Just("max_dirty"),
            Just("bogus"),
        ];
        let value = prop_oneof![
            "-?[0-9]{0,25}(\\.[0-9]{0,5})?([eE]-?[0-9]{1,4})?",
            "\"-?[0-9.eE]{0,22} ?(ns|ms|s|m|h|d|B|KiB|MiB|GiB|MB/s|GB/s|kB/s|PB|[a-z]{0,3})?\"",
            "\"[ -~]{0,30}\"",
            Just("true".to_string()),
            Just("[]".to_string()),
            "\\[\"[ -~]{0,20}\"\\]",
            "\\[[0-9]{0,12}\\]",
        ];
        prop_oneof![
            section,
            (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
            "[ -~]{0,30}",
        ]
    }

    proptest::proptest! {
        /// Any text, and any mix of real sections, keys and values: an error naming the file,
        /// or a configuration, never a panic. `cargo xtask fuzz` runs a million cases.
        #[test]
        fn any_text_parses_without_panic(text in "\\PC{0,300}") {
            let _ = parse(&text, "/etc/ioshield/ioshield.toml");
        }

        #[test]
        fn any_config_shaped_text_parses_without_panic(lines in proptest::collection::vec(config_line(), 0..16)) {
            let text = lines.join("\n");
            if let Err(e) = parse(&text, "/etc/ioshield/ioshield.toml") {
                proptest::prop_assert!(e.to_string().starts_with("/etc/ioshield/ioshield.toml"));
                proptest::prop_assert!(!e.to_string().contains('\n'), "one line: {e}");
            }
        }
    }
}
