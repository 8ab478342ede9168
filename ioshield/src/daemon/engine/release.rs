//! A restriction the decision releases: held on until what its writers left is written, then
//! undone.
use std::time::Duration;

use super::{
    Engine,
    disk_step::{DiskTick, Held},
};
use crate::{
    act::{Actuator, Method},
    daemon::{disk::Effects, probe_hearing::keep_room_proven},
    detect::drain::{self, Verdict},
    display::{show_bytes, show_rate},
};

impl Engine {
    pub(super) async fn release(
        &mut self,
        at: &DiskTick<'_>,
        root: u32,
        calm_for: Duration,
        held: &Held,
        actuator: &mut Actuator,
    ) {
        let DiskTick {
            disk, tree, policy, ..
        } = at;
        let Some(rt) = self.disks.get_mut(disk) else {
            return;
        };
        let mut fx = Effects {
            actuator,
            metrics: &mut self.metrics,
            log: &mut self.log,
            limit: &mut self.limit,
        };
        // Held until what its writers left is written: released with it, the backlog would
        // take the disk from everyone else at their weight.
        let backlog = rt.restriction.and_then(|id| fx.actuator.backlog(id));
        let delay = crate::system::vmstat::writeback_delay;
        let drained = match drain::judge(backlog, delay, at.now, &mut rt.drain) {
            Verdict::Wait { started } => {
                // The probe steps no more: a window open now would leave the backlog to the
                // kernel's latency control, which a deep queue of small writes pulls to a
                // quarter of the model (an untar's 150 MB written at 10 MB/s on the 25 MB/s
                // model, docs/bench/light-writer.md).
                if let Some(closed) = rt.method.as_ref().and_then(Method::window_closed) {
                    let why = "its backlog written at the rate held before the speed probe's \
                               window, no longer open";
                    rt.speed_probe.close_window();
                    rt.retune(disk, closed, why, &mut fx).await;
                }
                // Nothing of it lives to write again: it waits apart, and the disk's next
                // writer is judged meanwhile.
                let apart = if held.gone {
                    "; its processes gone, the disk's next writer is judged meanwhile"
                } else {
                    ""
                };
                if started {
                    tracing::info!(
                        "{}: pid {root} is due for release; held until the {} its writers \
                         left are written{apart}",
                        disk.label(),
                        show_bytes(backlog.unwrap_or(0))
                    );
                } else if held.gone {
                    tracing::info!(
                        "{}: pid {root}'s restriction still waits for the {} its writers \
                         left{apart}",
                        disk.label(),
                        show_bytes(backlog.unwrap_or(0))
                    );
                }
                if held.gone {
                    keep_room_proven(&mut self.bandwidth, disk, &rt.speed_probe);
                    rt.linger(root, tree);
                }
                return;
            }
            released => released.said(),
        };
        let why = if held.gone {
            format!("nothing of it is left{drained}")
        } else {
            format!(
                "tree {} < {:.0}% of {} for {:.0}s{drained}",
                show_rate(held.score),
                policy.release_at * 100.0,
                show_rate(at.bw()),
                calm_for.as_secs_f64()
            )
        };
        keep_room_proven(&mut self.bandwidth, disk, &rt.speed_probe);
        rt.release(disk, root, why, tree, &mut fx).await;
    }
}
