//! A restriction kept: each tick its method is made again from what is known of the disk now
//! (measured, probed a step further, or still assumed), the writers beside it and the files it
//! writes, and retuned where that changed.
use std::collections::HashSet;

use super::{
    Engine, at_onset,
    disk_step::{DiskTick, Held},
    with_company,
};
use crate::{
    act::{Actuator, Method, method::method_for},
    config::MemoryHigh,
    daemon::{
        disk::Effects,
        light_writer::lighten,
        probe_hearing::{hear_others, keep_room_shown},
    },
    detect::{file_sizes, offender},
    display::{show_bytes, show_rate},
};

impl Engine {
    pub(super) async fn hold(
        &mut self,
        at: &DiskTick<'_>,
        root: u32,
        held: &Held,
        actuator: &mut Actuator,
    ) {
        let DiskTick {
            disk,
            tree,
            policy,
            estimate,
            ..
        } = at;
        let bw = at.bw();
        let Some(rt) = self.disks.get_mut(disk) else {
            return;
        };
        let mut fx = Effects {
            actuator,
            metrics: &mut self.metrics,
            log: &mut self.log,
            limit: &mut self.limit,
        };
        let members = offender::members(tree, &self.eligibility, root, &at.elsewhere);
        rt.sweep(&members, &mut fx);
        let (method, _) = method_for(disk, policy, *estimate, &self.cgroup_action);
        // A limit from the assumed speed keeps a faster disk from ever being busy enough to be
        // measured: after a while, let the writer show the disk's speed, a step at a time, held
        // by memory.high throughout.
        let held_for = rt.offender.as_ref().map(|o| o.since.elapsed());
        let method = match held_for {
            Some(held_for) => at_onset(method, held_for, self.kernel),
            None => method,
        };
        let held_method = method.clone();
        if estimate.capacity {
            rt.speed_probe.disk_measured();
        }
        let probed = held_for
            .filter(|_| !estimate.capacity)
            .and_then(|held_for| {
                hear_others(disk, rt, fx.actuator);
                let probed = rt
                    .speed_probe
                    .step(method.clone(), *estimate, policy, held_for);
                // A step that forced the rate up starts what the others are heard against.
                hear_others(disk, rt, fx.actuator);
                probed
            });
        let identity = self.known.get(&disk.id).and_then(|k| k.identity.as_deref());
        keep_room_shown(disk, rt, identity, &mut self.speeds);
        let (method, why) = match probed {
            Some(probed) => probed,
            None => {
                let why = if estimate.capacity {
                    format!("the disk now measures {}", show_rate(bw))
                } else if estimate.measured {
                    format!("the disk is at least {}", show_rate(bw))
                } else {
                    format!(
                        "the disk's speed is not measured: held at the assumed {}",
                        show_rate(bw)
                    )
                };
                (method, why)
            }
        };
        // Also a probe's step and window ([`super::held_speed`]); a forced rate keeps the
        // memory.high that lets the writer use it.
        let inside = |p: u32| members.contains(&p) || held.live.iter().flatten().any(|m| *m == p);
        let in_place = rt.offender.as_ref().is_some_and(|o| o.in_place);
        let limit_counts = super::limit_counts(in_place, held_for.unwrap_or_default());
        let beside = at.company(&self.rates, &inside, &method, limit_counts);
        let (method, why) = match with_company(method, beside) {
            (method, Some(clause)) => (method, format!("{why}; {clause}")),
            (method, None) => (method, why),
        };
        // Under a step that forced the rate up, the writer's memory.high goes its own way up
        // from the one it had at the step, as the disk is heard keeping up; the others beside
        // it, as the held rate would judge them, said for the log.
        let (method, why) = match rt.speed_probe.room_ramp() {
            Some(share) => {
                // Only what the others make of it: the held method itself is not applied here.
                let clause = held_method
                    .memory_high()
                    .and(
                        at.company(&self.rates, &inside, &held_method, limit_counts)
                            .clause(),
                    )
                    .map_or_else(String::new, |c| format!("; {c}"));
                let current = rt.method.as_ref().and_then(Method::memory_high);
                let from = rt.speed_probe.ramp_base(current);
                let method = method.with_memory_high_on_the_way(from, share);
                let why = format!(
                    "{why}; memory.high {:.0}% of the way from the {} it had at the step to the \
                     forced rate's, raised each {:.2}s the disk is heard keeping up{clause}",
                    share * 100.0,
                    from.map_or_else(|| "none".to_string(), show_bytes),
                    crate::detect::pressure::MIN_SPAN.as_secs_f64()
                );
                (method, why)
            }
            None => (method, why),
        };
        let (method, why) = match rt.speed_probe.taken_back_to() {
            Some(most) if method.memory_high().is_some_and(|m| m > most) => (
                method.with_memory_high_at_most(most),
                format!(
                    "{why}; memory.high kept at the {} it had at the step taken back",
                    show_bytes(most)
                ),
            ),
            _ => (method, why),
        };
        // Every process in the restriction, as the held score counts them.
        let processes: HashSet<u32> = members
            .iter()
            .chain(held.live.iter().flatten())
            .copied()
            .collect();
        let written = self.rates.of(disk, processes);
        if file_sizes::many_small_files(written) {
            rt.speed_probe
                .saw_small_files(|| file_sizes::describe(written));
        }
        let auto = policy.memory_high == MemoryHigh::Auto;
        let (method, why) = lighten(rt, method, why, held.score, bw, auto);
        rt.retune(disk, method, &why, &mut fx).await;
    }
}
