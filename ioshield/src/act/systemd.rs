//! The cgroup action on a host run by systemd: systemd owns the cgroup tree, so the offender's
//! subtree moves into a transient scope under `ioshield.slice` through systemd's D-Bus API, with
//! `IOWriteBandwidthMax=` (and optionally `MemoryHigh=`); release lifts the limits with
//! `SetUnitProperties`. The processes then stay in the (unlimited) scope until they exit: systemd
//! refuses to move processes into a unit without `Delegate=yes`, which login-session and service
//! units do not have ("Process migration not available on non-delegated units").
use anyhow::{Context as _, Result};
use zbus::{
    blocking::Connection,
    zvariant::{OwnedObjectPath, Value},
};

use crate::system::{cgroups, host};

pub const SLICE: &str = "ioshield.slice";
/// What systemd reads as "no limit" for bandwidth and memory properties.
const INFINITY: u64 = u64::MAX;

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_async = false,
    blocking_name = "ManagerProxyBlocking"
)]
trait Manager {
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[(&str, Value<'_>)],
        aux: &[(&str, &[(&str, Value<'_>)])],
    ) -> zbus::Result<OwnedObjectPath>;

    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[(&str, Value<'_>)],
    ) -> zbus::Result<()>;
}

pub struct Systemd {
    conn: Connection,
}

impl Systemd {
    /// Connects when systemd runs this host with the unified cgroup hierarchy (where its IO*
    /// properties map to the io controller that throttles writeback), or says why not.
    pub fn detect() -> Result<Systemd, String> {
        if !host::systemd_booted() {
            return Err("systemd is not running this host".into());
        }
        let io = cgroups::v2_mount()
            .is_some_and(|root| cgroups::controllers(&root).iter().any(|c| c == "io"));
        if !io {
            return Err(
                "systemd runs this host without the unified cgroup hierarchy's io \
                        controller (cgroup v1 blkio cannot slow buffered writeback)"
                    .into(),
            );
        }
        let conn =
            Connection::system().map_err(|e| format!("cannot reach systemd over D-Bus: {e}"))?;
        Ok(Systemd { conn })
    }

    fn manager(&self) -> Result<ManagerProxyBlocking<'_>> {
        ManagerProxyBlocking::new(&self.conn).context("systemd manager proxy")
    }

    /// Moves `pids` into a new scope `unit` under ioshield.slice, limited as given.
    pub fn start_scope(
        &self,
        unit: &str,
        pids: &[u32],
        device: &str,
        write_bps: u64,
        memory_high: Option<u64>,
    ) -> Result<()> {
        let mut props: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from("I/O-restricted by ioshield")),
            ("Slice", Value::from(SLICE)),
            ("PIDs", Value::new(pids.to_vec())),
            ("IOAccounting", Value::from(true)),
            (
                "IOWriteBandwidthMax",
                Value::new(vec![(device.to_string(), write_bps)]),
            ),
            // Gone from systemd's memory as soon as its last process exits.
            ("CollectMode", Value::from("inactive-or-failed")),
        ];
        if let Some(m) = memory_high {
            props.push(("MemoryHigh", Value::from(m)));
        }
        self.manager()?
            .start_transient_unit(unit, "fail", &props, &[])
            .with_context(|| format!("starting scope {unit}"))?;
        Ok(())
    }

    /// Sets the scope's write limit on `device` and its MemoryHigh (none: unlimited).
    pub fn set_limits(
        &self,
        unit: &str,
        device: &str,
        write_bps: u64,
        memory_high: Option<u64>,
    ) -> Result<()> {
        let props = [
            (
                "IOWriteBandwidthMax",
                Value::new(vec![(device.to_string(), write_bps)]),
            ),
            ("MemoryHigh", Value::from(memory_high.unwrap_or(INFINITY))),
        ];
        self.manager()?
            .set_unit_properties(unit, true, &props)
            .with_context(|| format!("setting the limits of {unit}"))
    }

    /// Lifts the scope's limits; its processes stay in it until they exit.
    pub fn lift(&self, unit: &str, device: &str) -> Result<()> {
        self.set_limits(unit, device, INFINITY, None)
            .with_context(|| format!("lifting the limits of {unit}"))
    }
}
