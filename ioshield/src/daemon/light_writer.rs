//! A restriction whose writers turned out light (many small files, or a speed-probe window
//! they used too little of): lightened while they stay so, held as heavy writers once not.
use super::disk::DiskRuntime;
use crate::{act::Method, display::show_rate};

/// A writer a speed-probe window saw use too little of its rate is lightened only while it
/// dirties less than this share of the rate the disk is judged at: at weight 1 under 32 MiB the
/// untar dirtied about 8 MB/s of the assumed 25 (a third), a held copy 14-21 MB/s, and a copy
/// on 6.12's fast disk may use too little in its first window only (`speed_probe` tests).
const LIGHT_SHARE: f64 = 0.5;

/// For a writer seen light (many small files, or a speed-probe window it used too little of),
/// `method` lightened ([`Method::lightened`]) once it dirties less than [`LIGHT_SHARE`] of the
/// rate the disk is judged at (`bw`), and while it dirties less than `bw`; once it dirties
/// faster it is held at weight 1 (or by its write limit) for the rest of the restriction,
/// keeping the light writer's memory.high ([`super::speed_probe::SpeedProbe::heavy`]). Under a
/// write limit (systemd hosts, `iocost = "off"`) that memory.high is all that changes, so a
/// size the configuration sets leaves such a writer as it is.
pub fn lighten(
    rt: &mut DiskRuntime,
    method: Method,
    why: String,
    dirtying: f64,
    bw: f64,
    auto_memory_high: bool,
) -> (Method, String) {
    // A memory.high the configuration sets stays what it says.
    let raise = |m: Method| {
        if auto_memory_high {
            m.with_light_memory_high()
        } else {
            m
        }
    };
    if rt.speed_probe.heavy() {
        let why = format!("{why}; memory.high kept from when its writers were light");
        return (raise(method), why);
    }
    let Some(light) = method.lightened().filter(|_| rt.speed_probe.light()) else {
        // Once raised, memory.high stays so (see `SpeedProbe::heavy`), whatever holds it now.
        if rt.speed_probe.lifted() {
            return (raise(method), why);
        }
        return (method, why);
    };
    let light = raise(light);
    // Under a write limit only an "auto" memory.high lightens it: nothing else to change.
    if light == method {
        return (method, why);
    }
    if !rt.speed_probe.is_lightened() && dirtying >= LIGHT_SHARE * bw {
        return (method, why);
    }
    if dirtying >= bw {
        rt.speed_probe.turned_heavy();
        let held = match method.weight() {
            Some(w) => format!("held at weight {w} again"),
            None => "held by their write limit as heavy writers".into(),
        };
        let why = format!(
            "{why}; its writers dirty {}, not less than {}: {held}, with the memory.high they \
             had while light",
            show_rate(dirtying),
            show_rate(bw)
        );
        return (raise(method), why);
    }
    let held = match light.weight() {
        Some(w) => format!("held at io.weight {w}"),
        // Under a write limit only memory.high changed (`light != method` above): it is set.
        None => format!(
            "memory.high {}M under their write limit",
            light.memory_high().unwrap_or_default() >> 20
        ),
    };
    let why = format!(
        "{why}; {} and dirty {}, under {}: {held} while they do",
        rt.speed_probe.seen_as(),
        show_rate(dirtying),
        show_rate(bw)
    );
    rt.speed_probe.lightened();
    (light, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::devices::DevId;

    /// A writer seen light is lightened once it dirties under half the rate, stays so under
    /// the rate, and once over it is held at weight 1 for good, keeping its 128 MiB.
    #[test]
    fn a_light_writer_is_lightened_then_held_at_weight_1_once_heavy() {
        use crate::{
            act::{CgroupLimits, WriteControl, iocost, method::LIGHT_WRITER_MEMORY_HIGH},
            daemon::speed_probe::SpeedProbe,
        };
        let held = Method::Cgroup(CgroupLimits {
            dev: DevId {
                major: 254,
                minor: 16,
            },
            write: WriteControl::Weight {
                weight: 1,
                model: Some(iocost::Model::held(25_000_000)),
                fallback: 18_750_000,
            },
            memory_high: Some(32 << 20),
        });
        let mut rt = DiskRuntime {
            method: Some(held.clone()),
            ..DiskRuntime::default()
        };
        let tick = |rt: &mut DiskRuntime, dirtying: f64| {
            let (m, why) = lighten(rt, held.clone(), "held".into(), dirtying, 25e6, true);
            rt.method = Some(m.clone());
            (m, why)
        };
        // Not seen light: as it was.
        assert_eq!(tick(&mut rt, 1e6).0, held);
        rt.speed_probe = SpeedProbe::seen_light();
        // Over half the rate: not yet.
        assert_eq!(tick(&mut rt, 13e6).0, held);
        let mh = Some(LIGHT_WRITER_MEMORY_HIGH);
        let (m, why) = tick(&mut rt, 8e6);
        assert_eq!((m.weight(), m.memory_high()), (Some(10), mh), "{why}");
        assert!(why.contains("dirty 8.0 MB/s, under 25.0 MB/s"), "{why}");
        // Under the rate it stays light.
        assert_eq!(tick(&mut rt, 20e6).0.weight(), Some(10));
        let (m, why) = tick(&mut rt, 30e6);
        assert_eq!((m.weight(), m.memory_high()), (Some(1), mh), "{why}");
        assert!(
            why.contains("held at weight 1 again, with the memory.high they had while light"),
            "{why}"
        );
        // For good, slow or not.
        let (m, _) = tick(&mut rt, 1e6);
        assert_eq!((m.weight(), m.memory_high()), (Some(1), mh));
        // A memory.high the configuration sets (not "auto") stays as it says.
        rt.speed_probe = SpeedProbe::seen_light();
        rt.method = Some(held.clone());
        let (m, _) = lighten(&mut rt, held.clone(), "held".into(), 8e6, 25e6, false);
        assert_eq!((m.weight(), m.memory_high()), (Some(10), Some(32 << 20)));
        // Under a rate the probe forced for room the latency control's weight (25) is the
        // probe's; a light writer there is still lightened to 10.
        let forced = held.clone().listening().with_rate_at_least(40_000_000);
        assert_eq!(forced.weight(), Some(25));
        rt.speed_probe = SpeedProbe::seen_light();
        rt.method = Some(forced.clone());
        let (m, _) = lighten(&mut rt, forced, "forced".into(), 8e6, 40e6, true);
        assert_eq!((m.weight(), m.memory_high()), (Some(10), mh));
        assert_eq!(m.rate_range(), Some((40_000_000, 40_000_000)));
    }

    /// Under a write limit (a systemd unit's `IOWriteBandwidthMax=`) a light writer keeps its
    /// limit and gets the light writer's memory.high; heavy again, it keeps that; with a
    /// memory.high the configuration sets there is nothing to lighten.
    #[test]
    fn a_light_writer_under_a_write_limit_gets_128m_only() {
        use crate::{
            act::{ScopeLimits, WriteControl, method::LIGHT_WRITER_MEMORY_HIGH},
            daemon::speed_probe::SpeedProbe,
        };
        let held = Method::SystemdScope(ScopeLimits {
            dev: DevId {
                major: 254,
                minor: 16,
            },
            device: "/dev/vdb".into(),
            write: WriteControl::Limit(18_750_000),
            memory_high: Some(8 << 20),
        });
        let mut rt = DiskRuntime {
            method: Some(held.clone()),
            speed_probe: SpeedProbe::seen_light(),
            ..DiskRuntime::default()
        };
        let tick = |rt: &mut DiskRuntime, dirtying: f64, auto: bool| {
            let (m, why) = lighten(rt, held.clone(), "held".into(), dirtying, 25e6, auto);
            rt.method = Some(m.clone());
            (m, why)
        };
        let mh = Some(LIGHT_WRITER_MEMORY_HIGH);
        let (m, why) = tick(&mut rt, 6e6, true);
        assert_eq!((m.write_limit(), m.memory_high()), (Some(18_750_000), mh));
        assert!(
            why.contains("under 25.0 MB/s: memory.high 128M under their write limit while"),
            "{why}"
        );
        assert!(rt.speed_probe.is_lightened());
        // Over half the rate, under the rate: still light (no flapping back to 8 MiB).
        assert_eq!(tick(&mut rt, 16e6, true).0.memory_high(), mh);
        let (m, why) = tick(&mut rt, 30e6, true);
        assert_eq!((m.write_limit(), m.memory_high()), (Some(18_750_000), mh));
        assert!(
            why.contains("held by their write limit as heavy writers"),
            "{why}"
        );
        assert!(rt.speed_probe.heavy());
        // A size the configuration sets: as it was, and not counted as lightened.
        rt.speed_probe = SpeedProbe::seen_light();
        rt.method = Some(held.clone());
        let (m, _) = tick(&mut rt, 6e6, false);
        assert_eq!(m, held);
        assert!(!rt.speed_probe.is_lightened());
    }
}
