//! From TOML text to a validated [`Config`]. Spans are kept on every value that is checked
//! after parsing, so an out-of-range value is reported with its line.
use std::{fmt, ops::Range, path::Path};

use toml::Spanned;

use super::{
    ActionKind, Bandwidth, Config, DevicePolicy, MemoryHigh,
    raw::{RawConfig, RawDevice},
    units::{parse_bandwidth, parse_duration, parse_positive_duration},
};

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

pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        origin: origin.clone(),
        line: None,
        key: None,
        message: format!("cannot read the configuration: {e}"),
    })?;
    let mut config = parse(&text, &origin)?;
    config.source = Some(path.to_path_buf());
    Ok(config)
}

struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    fn line_of(&self, span: Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    fn err(
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
    fn value<T, U>(
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

pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let ctx = Ctx { text, origin };
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
        origin: origin.to_string(),
        line: e.span().map(|s| ctx.line_of(s)),
        key: None,
        message: e.message().trim().to_string(),
    })?;
    let mut config = Config::default();

    let d = &raw.daemon;
    if let Some(v) = ctx.value(&d.tick, "daemon.tick", |s: &String| {
        parse_positive_duration(s)
    })? {
        config.daemon.tick = v;
    }
    if let Some(v) = ctx.value(&d.tau, "daemon.tau", |s: &String| {
        parse_positive_duration(s)
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
    config.metrics.textfile = ctx.value(&raw.metrics.textfile, "metrics.textfile", absolute)?;
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
    config.exclude.comm = raw.exclude.comm.clone();
    config.exclude.uid = raw.exclude.uid.clone();
    config.exclude.cgroup = raw.exclude.cgroup.clone();

    let default_raw = raw.device.get("default").cloned().unwrap_or_default();
    config.default_device = device_policy(&ctx, "default", &default_raw, &config.default_device)?;
    for (name, section) in raw.device.iter().filter(|(n, _)| n.as_str() != "default") {
        let policy = device_policy(&ctx, name, section, &config.default_device)?;
        config.devices.push((name.clone(), policy));
    }
    Ok(config)
}

fn device_policy(
    ctx: &Ctx,
    name: &str,
    raw: &RawDevice,
    base: &DevicePolicy,
) -> Result<DevicePolicy, ConfigError> {
    let key = |k: &str| {
        if name.contains(['.', '/', ':']) {
            format!("device.\"{name}\".{k}")
        } else {
            format!("device.{name}.{k}")
        }
    };
    let fraction = |f: &f64| {
        if *f > 0.0 && *f <= 10.0 {
            Ok(*f)
        } else {
            Err(format!("{f} must be a positive fraction of the bandwidth"))
        }
    };
    let mut p = base.clone();
    if let Some(v) = ctx.value(&raw.bandwidth, &key("bandwidth"), |s: &String| {
        if s.trim() == "auto" {
            Ok(Bandwidth::Auto)
        } else {
            parse_bandwidth(s).map(Bandwidth::BytesPerSec)
        }
    })? {
        p.bandwidth = v;
    }
    if let Some(v) = ctx.value(&raw.restrict_at, &key("restrict_at"), fraction)? {
        p.restrict_at = v;
    }
    if let Some(v) = ctx.value(&raw.release_at, &key("release_at"), |f: &f64| {
        if *f >= 0.0 {
            Ok(*f)
        } else {
            Err(format!("{f} must not be negative"))
        }
    })? {
        p.release_at = v;
    }
    if p.release_at >= p.restrict_at {
        let span = raw
            .release_at
            .as_ref()
            .or(raw.restrict_at.as_ref())
            .map(|s| s.span());
        let k = if raw.release_at.is_some() {
            key("release_at")
        } else {
            key("restrict_at")
        };
        return Err(ctx.err(
            span,
            &k,
            format!(
                "release_at ({}) must be below restrict_at ({})",
                p.release_at, p.restrict_at
            ),
        ));
    }
    if let Some(v) = ctx.value(&raw.hold, &key("hold"), |s: &String| parse_duration(s))? {
        p.hold = v;
    }
    if let Some(v) = ctx.value(
        &raw.max_flush_seconds,
        &key("max_flush_seconds"),
        |f: &f64| {
            if *f >= 0.0 && f.is_finite() {
                Ok(*f)
            } else {
                Err(format!(
                    "{f} must be 0 (off) or a positive number of seconds"
                ))
            }
        },
    )? {
        p.max_flush_seconds = v;
    }
    if let Some(v) = ctx.value(&raw.action, &key("action"), |s: &String| {
        ActionKind::parse(s)
    })? {
        p.action = v;
    }
    if let Some(v) = ctx.value(&raw.limit, &key("limit"), |f: &f64| {
        if *f > 0.0 && *f <= 1.0 {
            Ok(*f)
        } else {
            Err(format!("{f} is not a fraction in (0, 1]"))
        }
    })? {
        p.limit = v;
    }
    if let Some(v) = ctx.value(
        &raw.memory_high,
        &key("memory_high"),
        |s: &String| match s.trim() {
            "auto" => Ok(MemoryHigh::Auto),
            "off" => Ok(MemoryHigh::Off),
            size => parse_bandwidth(size)
                .map(MemoryHigh::Bytes)
                .map_err(|e| format!("{e}; or \"auto\", \"off\"")),
        },
    )? {
        p.memory_high = v;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // The effective configuration round-trips through check-config's output.
        let again = parse(&c.to_toml(), "t").unwrap();
        assert_eq!(again.policy_for(Some("/dev/vdb")), vdb);
    }

    #[test]
    fn empty_text_is_the_defaults() {
        assert_eq!(parse("", "t").unwrap(), Config::default());
    }

    #[test]
    fn errors_name_file_line_and_key() {
        assert_eq!(
            err("[daemon]\ntick = \"1s\"\nbogus = 3\n"),
            "/etc/ioshield/ioshield.toml:3: unknown field `bogus`, expected one of `tick`, `tau`, \
             `parent_factor`, `action`, `state_file`, `socket`, `session_leaders`"
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
        assert!(e.starts_with("/etc/ioshield/ioshield.toml:2:"), "{e}");
        let e = err("[metrics]\nlisten = \"0.0.0.0:9814\"\n");
        assert!(
            e.starts_with("/etc/ioshield/ioshield.toml:2: metrics.listen:"),
            "{e}"
        );
        let e = err("[daemon]\naction = \"kill\"\n");
        assert!(e.contains("daemon.action") && e.contains("kill"), "{e}");
    }
}
