//! What a restriction's speed probe hears and keeps: the cgroups beside the restriction and the
//! disk, heard while a step asks, its steps taken back when they cost the others, and what it
//! showed of the disk's room kept for the restrictions after it.
use std::time::{Instant, SystemTime};

use super::{
    disk::DiskRuntime,
    speed_probe::{Room, SpeedProbe, TAKE_BACKS_KEPT, answer_to_keep},
    speeds::SpeedFile,
};
use crate::{
    act::Actuator,
    detect::bandwidth::BandwidthEstimator,
    display::show_rate,
    model::sample::DiskDelta,
    system::{devices::Disk, diskstats, pressure},
};

/// Hears how long the cgroups beside the restrictions waited on I/O, and what the disk did,
/// while the disk's speed probe asks ([`SpeedProbe::hears_others`]), at the ticks and every
/// [`HEAR_EVERY`](crate::detect::pressure::HEAR_EVERY) between them
/// ([`Engine::hear_between_ticks`](super::engine::Engine::hear_between_ticks)), and has it take
/// back the step that forced the rate up for room when they waited too long, or when the disk
/// queued without using the room ([`SpeedProbe::disk_queued`]): the window's room was not the
/// disk's. Returns whether it took the step back, or heard the disk keep up under it for
/// another span ([`SpeedProbe::room_ramp`]): either way the restriction is to change at once.
pub fn hear_others(disk: &Disk, rt: &mut DiskRuntime, actuator: &Actuator) -> bool {
    if !rt.speed_probe.hears_others() {
        rt.others.reset();
        rt.heard_disk = None;
        return false;
    }
    // Read again only when a reading would say something: the engine hears the others before
    // and after each step of the same tick, and between ticks.
    let now = Instant::now();
    if !rt.others.due(now) {
        return false;
    }
    let counters = diskstats::read().remove(&disk.id);
    // The others first: a span they waited in raises no memory.high, however the disk did.
    let totals = pressure::io_some_totals(&actuator.others());
    let stall = rt.others.observe(now, totals);
    if let Some(stall) = &stall {
        heard_others_wait(disk, rt, stall);
    }
    let ramp = rt.speed_probe.room_ramp();
    if let (Some((at, before)), Some(counters)) = (rt.heard_disk, counters) {
        let seconds = now.saturating_duration_since(at).as_secs_f64();
        rt.speed_probe
            .hear(&DiskDelta::between(&before, &counters), seconds);
    }
    rt.heard_disk = counters.map(|c| (now, c));
    if let Some(why) = rt.speed_probe.disk_queued() {
        took_back(disk, rt, &why);
        rt.others.reset();
        rt.heard_disk = None;
        return true;
    }
    let heard = ramp.is_some() && rt.speed_probe.room_ramp() != ramp;
    if heard {
        let (spans, (rate, queue)) = rt.speed_probe.kept_up();
        tracing::info!(
            "{}: the disk kept up under the rate forced {} ({} with {queue:.2} writes in \
             flight), {spans} span(s) of {:.2}s: the writer's memory.high goes up",
            disk.label(),
            rt.speed_probe.forced_for(),
            show_rate(rate),
            crate::detect::pressure::MIN_SPAN.as_secs_f64()
        );
    }
    let Some(stall) = stall else {
        return heard;
    };
    match rt.speed_probe.others_stalled(stall.share) {
        Some(why) => {
            took_back(disk, rt, &format!("{why} ({} waited most)", stall.most()));
            true
        }
        None => heard,
    }
}

/// Logs how long the others waited on I/O over the last span, and tells the speed probe, whose
/// memory.high holds on its way up while they wait ([`SpeedProbe::others_waited`]).
fn heard_others_wait(disk: &Disk, rt: &mut DiskRuntime, stall: &crate::detect::pressure::Stall) {
    let most = stall.most();
    // A target of its own, for the bench to log without the engine's other debug lines.
    tracing::debug!(
        target: "ioshield::others",
        "{}: others waited on I/O {:.0}% of the time (most: {most})",
        disk.label(),
        stall.share * 100.0
    );
    if rt.speed_probe.others_waited(stall.share) {
        let (spans, _) = rt.speed_probe.kept_up();
        tracing::info!(
            "{}: others waited on I/O {:.0}% of the time under the rate forced {} ({most} \
             most): the writer's memory.high holds at {spans} span(s) of its way up until they \
             wait less",
            disk.label(),
            stall.share * 100.0,
            rt.speed_probe.forced_for(),
        );
    }
}

/// Counts and logs a take-back of the speed probe's step for room.
fn took_back(disk: &Disk, rt: &mut DiskRuntime, why: &str) {
    rt.take_backs += 1;
    let answered = matches!(rt.speed_probe.room_shown(), Some(Room::TakenBackAt(_)));
    let kept = if answered && rt.take_backs < TAKE_BACKS_KEPT {
        "; the first take-back on this disk: its answer holds for this restriction only"
    } else {
        ""
    };
    tracing::info!("{}: {why}{kept}", disk.label());
}

/// Gives the estimator the lower bound a restriction's speed probe proved
/// ([`SpeedProbe::room_proven`]), saying so when it raises the disk's.
pub fn keep_room_proven(bandwidth: &mut BandwidthEstimator, disk: &Disk, probe: &SpeedProbe) {
    if let Some(rate) = probe.room_proven()
        && bandwidth.room_shown(disk.id, rate)
    {
        tracing::info!(
            "{}: at least {}: {ROOM_PROVEN}; later restrictions there start from it",
            disk.label(),
            show_rate(rate)
        );
    }
}

/// How the daemon's log says a speed probe proved a lower bound (the vm ci check looks for it).
const ROOM_PROVEN: &str = "the speed probe forced that rate for the room the disk showed, \
                           and the disk did not show its speed under it";

/// Keeps what the disk's speed probe showed of its room for the restrictions after this one
/// (and, under its identity, in the speeds file), saying so when that changes.
pub fn keep_room_shown(
    disk: &Disk,
    rt: &mut DiskRuntime,
    identity: Option<&str>,
    speeds: &mut SpeedFile,
) {
    let Some(no_room) = answer_to_keep(
        rt.speed_probe.room_shown(),
        rt.no_room,
        rt.take_backs,
        SystemTime::now(),
    ) else {
        return;
    };
    rt.no_room = no_room;
    if let Some(i) = identity {
        speeds.set_no_room(i, no_room);
    }
    let kept = if identity.is_some() {
        ", kept across restarts"
    } else {
        ""
    };
    match no_room.map(|n| n.rate) {
        Some(rate) => tracing::info!(
            "{}: no room to spare at {}: later restrictions there hold that rate without a \
             window for a day{kept}",
            disk.label(),
            show_rate(rate)
        ),
        None => tracing::info!(
            "{}: room to spare after all: later restrictions there look again",
            disk.label()
        ),
    }
}
