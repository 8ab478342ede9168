//! A `[device.NAME]` section (or `[device.default]`) over the policy it inherits.
use super::{
    ActionKind, Bandwidth, DevicePolicy, Iocost, MaxDirty, MemoryHigh,
    file::{ConfigError, Ctx, DAY},
    keys::segment,
    raw::RawDevice,
    units::{parse_bandwidth, parse_duration_within},
};

/// `max_flush_seconds` over an hour means the trigger never fires; say 0 to turn it off.
const MAX_FLUSH_SECONDS: f64 = 3600.0;
/// A window under 10 ms is noise from one large folio; over 10 s the tick has long acted.
const MIN_BURST_SECONDS: f64 = 0.01;
const MAX_BURST_SECONDS: f64 = 10.0;
/// A backlog guard of more than a minute of the disk's speed guards nothing.
const MAX_DIRTY_SECONDS: f64 = 60.0;
/// A `memory.high` under a few MiB does not slow the offender, it stops it dead.
const MEMORY_HIGH_MIN: u64 = 4 << 20;

pub(super) fn device_policy(
    ctx: &Ctx,
    name: &str,
    raw: &RawDevice,
    base: &DevicePolicy,
) -> Result<DevicePolicy, ConfigError> {
    let key = |k: &str| format!("device.{}.{k}", segment(name));
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
        if (0.0..=10.0).contains(f) {
            Ok(*f)
        } else {
            Err(format!(
                "{f} must be a fraction of the bandwidth, 0 or more"
            ))
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
    if let Some(v) = ctx.value(&raw.hold, &key("hold"), |s: &String| {
        parse_duration_within(s, std::time::Duration::ZERO, DAY)
    })? {
        p.hold = v;
    }
    if let Some(v) = ctx.value(
        &raw.max_flush_seconds,
        &key("max_flush_seconds"),
        |f: &f64| {
            if (0.0..=MAX_FLUSH_SECONDS).contains(f) {
                Ok(*f)
            } else {
                Err(format!(
                    "{f} must be 0 (off) or a number of seconds up to {MAX_FLUSH_SECONDS}"
                ))
            }
        },
    )? {
        p.max_flush_seconds = v;
    }
    if let Some(v) = ctx.value(&raw.burst_seconds, &key("burst_seconds"), |f: &f64| {
        if *f == 0.0 || (MIN_BURST_SECONDS..=MAX_BURST_SECONDS).contains(f) {
            Ok(*f)
        } else {
            Err(format!(
                "{f} must be 0 (off) or a number of seconds from {MIN_BURST_SECONDS} to \
                 {MAX_BURST_SECONDS}"
            ))
        }
    })? {
        p.burst_seconds = v;
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
            size => match parse_bandwidth(size) {
                Ok(b) if b >= MEMORY_HIGH_MIN => Ok(MemoryHigh::Bytes(b)),
                Ok(_) => Err(format!("`{size}` is less than 4 MiB")),
                Err(e) => Err(format!("{e}; or \"auto\", \"off\"")),
            },
        },
    )? {
        p.memory_high = v;
    }
    if let Some(v) = ctx.value(&raw.iocost, &key("iocost"), |s: &String| match s.trim() {
        "auto" => Ok(Iocost::Auto),
        "on" => Ok(Iocost::On),
        "off" => Ok(Iocost::Off),
        other => Err(format!("`{other}` is not \"auto\", \"on\" or \"off\"")),
    })? {
        p.iocost = v;
    }
    if let Some(v) = ctx.value(&raw.max_dirty, &key("max_dirty"), |s: &String| {
        parse_max_dirty(s)
    })? {
        p.max_dirty = v;
    }
    Ok(p)
}

/// "off", seconds of the disk's speed ("250ms", "0.5s"), or a size ("16MiB").
fn parse_max_dirty(s: &str) -> Result<MaxDirty, String> {
    let t = s.trim();
    if t == "off" {
        return Ok(MaxDirty::Off);
    }
    let seconds = match t.strip_suffix('s') {
        // "/s" makes it a rate, which is not what this key takes.
        Some(n) if !n.ends_with('/') && !n.ends_with('B') => {
            let parsed = match n.strip_suffix('m') {
                Some(ms) => ms.trim().parse::<f64>().map(|v| v / 1000.0),
                None => n.trim().parse::<f64>(),
            };
            Some(
                parsed
                    .map_err(|_| format!("`{t}` is not a duration like \"250ms\" or \"0.5s\""))?,
            )
        }
        _ => None,
    };
    match seconds {
        Some(v) if v > 0.0 && v <= MAX_DIRTY_SECONDS => Ok(MaxDirty::Seconds(v)),
        Some(_) => Err(format!(
            "`{t}` must be more than 0 and at most {MAX_DIRTY_SECONDS}s of the disk's speed"
        )),
        None => match parse_bandwidth(t) {
            _ if t.ends_with("/s") => Err(format!(
                "`{t}` is a rate; give seconds of the disk's speed (\"250ms\"), a size \
                 (\"16MiB\") or \"off\""
            )),
            Ok(b) if b >= MaxDirty::FLOOR => Ok(MaxDirty::Bytes(b)),
            Ok(_) => Err(format!("`{t}` is less than 4 MiB")),
            Err(e) => Err(format!(
                "{e}; or seconds of the disk's speed (\"250ms\"), \"off\""
            )),
        },
    }
}
