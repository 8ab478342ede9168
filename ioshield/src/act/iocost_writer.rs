//! The thread that writes iocost's settings for a restriction while the restriction goes on
//! placing the offender (`Actuator::begin_hold`): the `io.cost.qos` write that turns iocost on
//! sleeps until the disk's writes in flight complete. The thread is made with the actuator:
//! one made at the restriction, on the blocking pool, took 10-28 ms of its time on the
//! emulated bench guest (the step before the move, against 4-13 ms for the journal entry and
//! the write made inline; docs/bench/alongside.md).
#[cfg(test)]
use std::sync::Mutex;
use std::{
    path::Path,
    sync::{Arc, mpsc},
};

use anyhow::Result;
use tokio::sync::{Notify, oneshot};

use super::{cgroup::Cgroupfs, stopwatch::Stopwatch};

/// The `io.cost.*` lines a restriction writes to the root cgroup, journaled already.
pub(super) struct IocostWrites {
    pub fs: Cgroupfs,
    pub model: Option<String>,
    pub qos: Option<String>,
}

impl IocostWrites {
    /// The model first: the rate control the qos line sets is relative to it.
    pub fn make(&self, laps: &mut Stopwatch) -> Result<()> {
        let root = Path::new("/");
        if let Some(line) = &self.model {
            self.fs.write_file(root, "io.cost.model", line)?;
            laps.lap("iocost model");
        }
        if let Some(line) = &self.qos {
            self.fs.write_file(root, "io.cost.qos", line)?;
            laps.lap("iocost qos");
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.model.is_none() && self.qos.is_none()
    }
}

/// What the writes came to, with their steps' times.
pub(super) type Made = (Result<()>, Stopwatch);

struct Job {
    writes: IocostWrites,
    done: oneshot::Sender<Made>,
}

pub(super) struct IocostWriter {
    /// `None` where the thread could not be made: the writes are then made inline.
    jobs: Option<mpsc::Sender<Job>>,
    /// Told after each job: a retune waiting for its writes ends without the daemon's loop
    /// waiting for them (`Actuator::finish_retunes`).
    made: Arc<Notify>,
    /// Held by a test that needs writes still being made.
    #[cfg(test)]
    gate: Arc<Mutex<()>>,
}

impl IocostWriter {
    pub fn start() -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        let made = Arc::new(Notify::new());
        let told = made.clone();
        #[cfg(test)]
        let gate = Arc::new(Mutex::new(()));
        #[cfg(test)]
        let gated = gate.clone();
        let spawned = std::thread::Builder::new()
            .name("iocost-writer".into())
            .spawn(move || {
                // Ends when the actuator, and with it the sender, is dropped.
                for job in queue {
                    #[cfg(test)]
                    drop(gated.lock());
                    let mut laps = Stopwatch::start();
                    let made = job.writes.make(&mut laps);
                    // The restriction may have stopped waiting (it failed): nobody to tell.
                    let _ = job.done.send((made, laps));
                    told.notify_one();
                }
            });
        let jobs = match spawned {
            Ok(_) => Some(jobs),
            Err(e) => {
                tracing::warn!(
                    "no thread for iocost's writes ({e}): a restriction makes them itself"
                );
                None
            }
        };
        Self {
            jobs,
            made,
            #[cfg(test)]
            gate,
        }
    }

    /// What is told each time a job's writes are made.
    pub fn made(&self) -> Arc<Notify> {
        self.made.clone()
    }

    /// What holds the writes handed over while it is locked, as a disk's frozen queue would.
    #[cfg(test)]
    pub fn gate(&self) -> Arc<Mutex<()>> {
        self.gate.clone()
    }

    /// Hands `writes` to the thread; gives them back where there is none.
    pub fn hand_over(
        &self,
        writes: IocostWrites,
    ) -> std::result::Result<oneshot::Receiver<Made>, IocostWrites> {
        let Some(jobs) = &self.jobs else {
            return Err(writes);
        };
        let (done, made) = oneshot::channel();
        jobs.send(Job { writes, done })
            .map(|()| made)
            .map_err(|mpsc::SendError(job)| job.writes)
    }
}
