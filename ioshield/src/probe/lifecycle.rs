//! Drains the fork/exit ring buffer once per tick.
use anyhow::{Context as _, Result};
use aya::{
    Ebpf,
    maps::{MapData, RingBuf},
};
use ioshield_common::{LifecycleEvent, lifecycle, names::map};

use crate::model::sample::Lifecycle;

pub struct LifecycleReader {
    ring: RingBuf<MapData>,
}

impl LifecycleReader {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let map = ebpf
            .take_map(map::LIFECYCLE)
            .with_context(|| format!("map {}", map::LIFECYCLE))?;
        Ok(Self {
            ring: RingBuf::try_from(map)?,
        })
    }

    pub fn drain(&mut self) -> Vec<Lifecycle> {
        let mut out = Vec::new();
        while let Some(item) = self.ring.next() {
            if item.len() < size_of::<LifecycleEvent>() {
                continue;
            }
            // SAFETY: the kernel side writes exactly one LifecycleEvent per record.
            let ev: LifecycleEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            let comm = comm_string(&ev.comm);
            out.push(match ev.kind {
                lifecycle::FORK => Lifecycle::Fork {
                    pid: ev.pid,
                    ppid: ev.ppid,
                    comm,
                },
                lifecycle::EXEC => Lifecycle::Exec { pid: ev.pid, comm },
                lifecycle::EXIT => Lifecycle::Exit { pid: ev.pid, comm },
                _ => continue,
            });
        }
        out
    }
}

fn comm_string(raw: &[u8; 16]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}
