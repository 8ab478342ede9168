//! A restriction made where the decision says so: the method for the disk, at its onset's
//! weight, with the memory.high the writers beside it allow.
use std::time::Duration;

use super::{Engine, at_onset, disk_step::DiskTick, with_company};
use crate::{
    act::{Actuator, method::method_for},
    daemon::disk::{Effects, Plan},
    detect::{
        backlog::DiskBacklog,
        offender,
        policy::{Candidate, Trigger},
    },
};

impl Engine {
    pub(super) async fn restrict(
        &mut self,
        at: &DiskTick<'_>,
        offender: Candidate,
        trigger: Trigger,
        backlog: &DiskBacklog,
        actuator: &mut Actuator,
    ) {
        let DiskTick {
            disk, tree, policy, ..
        } = at;
        let Some(rt) = self.disks.get_mut(disk) else {
            return;
        };
        let (method, note) = method_for(disk, policy, at.estimate, &self.cgroup_action);
        let onset = at_onset(method.clone(), Duration::ZERO, self.kernel);
        let after_onset = (onset != method).then(|| method.weight()).flatten();
        let method = onset;
        let members = offender::members(tree, &self.eligibility, offender.pid, &at.elsewhere);
        if members.first() != Some(&offender.pid) {
            rt.use_method(disk, &method, note);
            tracing::info!(
                "pid {} now names another process than the writer (its exit was not seen): \
                 not restricted",
                offender.pid
            );
            return;
        }
        // Asked only where the answer changes the memory.high: it reads the unit's processes,
        // a few ms of the emulated guest's before the restriction is made.
        let limit_may_count = !at.estimate.capacity && method.io_max_limit().is_some();
        let in_place = limit_may_count && actuator.holds_in_place(offender.pid, &members, &method);
        let limit_counts = super::limit_counts(in_place, Duration::ZERO);
        let beside = at.company(
            &self.rates,
            &|p| members.contains(&p),
            &method,
            limit_counts,
        );
        if !limit_counts {
            let later = at.company(&self.rates, &|p| members.contains(&p), &method, true);
            if let Some(later) = later.clause().filter(|_| later != beside) {
                tracing::info!(
                    "{}: pid {}: held on its own unit, with the page cache it dirtied: {later} \
                     after its first {}s",
                    disk.label(),
                    offender.pid,
                    crate::act::method::ONSET.as_secs()
                );
            }
        }
        let (method, beside) = with_company(method, beside);
        if let Some(why) = beside {
            tracing::info!("{}: pid {}: {why}", disk.label(), offender.pid);
        }
        rt.use_method(disk, &method, note);
        if matches!(trigger, Trigger::FlushTime { .. }) {
            tracing::info!("{}: {}", disk.label(), backlog.describe());
        }
        let plan = Plan {
            offender,
            members: &members,
            method: &method,
            policy,
            bandwidth: at.bw(),
            trigger,
            after_onset,
            in_place,
        };
        let mut fx = Effects {
            actuator,
            metrics: &mut self.metrics,
            log: &mut self.log,
            limit: &mut self.limit,
        };
        rt.restrict(disk, plan, tree, &mut fx).await;
    }
}
