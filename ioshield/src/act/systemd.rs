//! systemd's D-Bus API, for the cgroup action on a host it runs: it owns the cgroup tree, so
//! limits are set as unit properties (`SetUnitProperties`, runtime only) and processes move
//! only into transient scopes it creates (`StartTransientUnit` with `PIDs`). systemd refuses to
//! move processes back into units without `Delegate=yes`, so a split-off scope keeps its
//! processes, limits lifted, until they exit; it is bound to the unit it was split from.
use anyhow::{Context as _, Result};
use zbus::{
    blocking::Connection,
    zvariant::{OwnedObjectPath, Value},
};

use super::method::ScopeLimits;
use crate::system::{cgroups, host};

/// How long a transient scope may take to start before the restriction counts as failed.
const JOB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
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

    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
}

/// A unit's write limits as they were before ioshield changed them, to be put back exactly.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnitLimits {
    /// Every `IOWriteBandwidthMax=` entry (device, bytes per second).
    pub write_bandwidth_max: Vec<(String, u64)>,
    /// `MemoryHigh=` (`u64::MAX` is "infinity").
    pub memory_high: u64,
}

/// Settings of a unit that confine what its processes may do through cgroup-attached BPF
/// programs or device rules: a process moved out of the unit would lose them, so a new scope
/// gets copies (never widen what a process may do).
const CONFINEMENT: [&str; 7] = [
    "IPAddressDeny",
    "IPAddressAllow",
    "DevicePolicy",
    "DeviceAllow",
    "SocketBindDeny",
    "SocketBindAllow",
    "RestrictNetworkInterfaces",
];

/// Every call to systemd gives up after this: a hung PID 1 must not stop the daemon's ticks or
/// its SIGTERM handling for long.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The managers ioshield talks to: PID 1 (`None`) and users' own managers (`Some(uid)`).
pub type Manager = Option<u32>;

pub struct Systemd {
    /// One connection per manager, opened on first use and again after any failed call:
    /// `systemctl restart dbus` leaves a dead connection behind, and every later lift would fail
    /// on it; a user manager comes and goes with the user's sessions.
    conns: std::sync::Mutex<std::collections::HashMap<Manager, Connection>>,
}

/// A user's systemd is on that user's bus, in the user's runtime directory, which only the user
/// may enter (and ioshield keeps no capability to override that). So, as sd-bus does for
/// `systemctl --user -M USER@`: PID 1 runs `systemd-stdio-bridge` as that user, on that user's bus, and this
/// end talks over the bridge's standard input and output to the user's bus, where the user's
/// systemd answers. Everything is then done with the user's own rights, through the user's own
/// manager. Needs the user's bus (dbus-user-session, as desktops have).
fn user_bridge_address(uid: u32) -> String {
    let runtime = format!("/run/user/{uid}");
    let argv = [
        "systemd-run".to_string(),
        "--quiet".into(),
        "--pipe".into(),
        "--collect".into(),
        format!("--uid={uid}"),
        format!("--description=ioshield: bridge to user {uid}'s systemd"),
        "--property=NoNewPrivileges=yes".into(),
        format!("--setenv=XDG_RUNTIME_DIR={runtime}"),
        "/usr/bin/systemd-stdio-bridge".into(),
        // The address spelled out: systemd 252's bridge connects to the system bus despite
        // `--user` when run this way (seen in the e2e: PID 1 answered "not loaded").
        format!("--bus-path=unix:path={runtime}/bus"),
    ];
    // zbus takes unixexec values as they are (no percent-decoding) up to the next comma, so
    // the arguments above must hold neither `,` nor `%`.
    let mut address = "unixexec:path=/usr/bin/systemd-run".to_string();
    for (i, arg) in argv.iter().enumerate() {
        address.push_str(&format!(",argv{i}={arg}"));
    }
    address
}

fn connect(manager: Manager) -> Result<Connection> {
    match manager {
        None => Ok(zbus::blocking::connection::Builder::system()?
            .method_timeout(CALL_TIMEOUT)
            .build()?),
        Some(uid) => {
            if !cgroups::user_manager_running(uid) {
                anyhow::bail!("user {uid} has no systemd running (logged out?)");
            }
            Ok(
                zbus::blocking::connection::Builder::address(user_bridge_address(uid).as_str())?
                    .method_timeout(CALL_TIMEOUT)
                    .build()
                    .with_context(|| {
                        format!("talking to user {uid}'s systemd through systemd-stdio-bridge")
                    })?,
            )
        }
    }
}

/// How a manager is named in messages.
pub fn manager_name(manager: Manager) -> String {
    manager.map_or("systemd".into(), |uid| format!("user {uid}'s systemd"))
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
        let conn = connect(None).map_err(|e| format!("cannot reach systemd over D-Bus: {e:#}"))?;
        Ok(Systemd {
            conns: std::sync::Mutex::new([(None, conn)].into_iter().collect()),
        })
    }

    fn connection(&self, m: Manager) -> Result<Connection> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = conns.get(&m) {
            return Ok(c.clone());
        }
        let c = connect(m).with_context(|| format!("connecting to {}", manager_name(m)))?;
        conns.insert(m, c.clone());
        Ok(c)
    }

    /// Passes `result` on; after a failure the next call opens a new connection.
    fn checked<T>(&self, m: Manager, result: Result<T>) -> Result<T> {
        if result.is_err() {
            self.conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&m);
        }
        result
    }

    fn manager(&self, m: Manager) -> Result<ManagerProxyBlocking<'static>> {
        ManagerProxyBlocking::new(&self.connection(m)?).context("systemd manager proxy")
    }

    /// Moves `pids` into a new scope `unit` in `slice`, limited as given. The scope stops when
    /// `bound_to` stops (a session ending, a service stopped) and carries its confinement.
    pub fn start_scope(
        &self,
        m: Manager,
        unit: &str,
        slice: &str,
        bound_to: &str,
        pids: &[u32],
        limits: &ScopeLimits,
    ) -> Result<()> {
        let mut props: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from("I/O-restricted by ioshield")),
            ("Slice", Value::from(slice.to_string())),
            ("PIDs", Value::new(pids.to_vec())),
            ("IOAccounting", Value::from(true)),
            (
                "IOWriteBandwidthMax",
                Value::new(vec![(limits.device.clone(), limits.wbps)]),
            ),
            // Gone from systemd's memory as soon as its last process exits.
            ("CollectMode", Value::from("inactive-or-failed")),
            ("BindsTo", Value::new(vec![bound_to.to_string()])),
            ("After", Value::new(vec![bound_to.to_string()])),
        ];
        if let Some(m) = limits.memory_high {
            props.push(("MemoryHigh", Value::from(m)));
        }
        props.extend(self.confinement(m, bound_to)?);
        let started = self.manager(m).and_then(|p| {
            p.start_transient_unit(unit, "fail", &props, &[])
                .with_context(|| format!("starting scope {unit}"))
        });
        self.checked(m, started)?;
        self.wait_active(m, unit)
    }

    /// `StartTransientUnit` returns once the job is queued; whether the scope started (and the
    /// processes moved) is known only when the unit is active, or failed.
    fn wait_active(&self, m: Manager, unit: &str) -> Result<()> {
        let deadline = std::time::Instant::now() + JOB_TIMEOUT;
        loop {
            let state = self
                .property_of(m, unit, "Unit", "ActiveState")
                .ok()
                .and_then(|v| String::try_from(v).ok())
                .unwrap_or_default();
            match state.as_str() {
                "active" => return Ok(()),
                "failed" => anyhow::bail!("systemd could not start {unit} (its job failed)"),
                _ if std::time::Instant::now() >= deadline => anyhow::bail!(
                    "systemd did not start {unit} within {JOB_TIMEOUT:?} (state {state:?})"
                ),
                _ => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    }

    /// A property of the unit's type-specific interface (`Service`, `Scope`, ...).
    fn unit_property(
        &self,
        m: Manager,
        unit: &str,
        name: &str,
    ) -> Result<zbus::zvariant::OwnedValue> {
        let kind = unit.rsplit('.').next().unwrap_or("service");
        let mut chars = kind.chars();
        let kind: String = chars
            .next()
            .map(|c| c.to_uppercase().chain(chars).collect())
            .unwrap_or_default();
        self.property_of(m, unit, &kind, name)
    }

    fn property_of(
        &self,
        m: Manager,
        unit: &str,
        kind: &str,
        name: &str,
    ) -> Result<zbus::zvariant::OwnedValue> {
        let path = self
            .manager(m)?
            .get_unit(unit)
            .with_context(|| format!("looking up {unit}"))?;
        let interface =
            zbus::names::InterfaceName::try_from(format!("org.freedesktop.systemd1.{kind}"))?;
        let props = zbus::blocking::fdo::PropertiesProxy::builder(&self.connection(m)?)
            .destination("org.freedesktop.systemd1")?
            .path(path)?
            .build()?;
        props
            .get(interface, name)
            .with_context(|| format!("reading {name} of {unit}"))
    }

    /// The unit's confinement settings that differ from the defaults.
    fn confinement(&self, m: Manager, unit: &str) -> Result<Vec<(&'static str, Value<'static>)>> {
        let mut out = Vec::new();
        for name in CONFINEMENT {
            let value = self.unit_property(m, unit, name)?;
            if !is_default(&value) {
                out.push((name, Value::from(value)));
            }
        }
        Ok(out)
    }

    pub fn unit_limits(&self, m: Manager, unit: &str) -> Result<UnitLimits> {
        let write_bandwidth_max =
            Vec::<(String, u64)>::try_from(self.unit_property(m, unit, "IOWriteBandwidthMax")?)
                .with_context(|| format!("IOWriteBandwidthMax of {unit}"))?;
        let memory_high = u64::try_from(self.unit_property(m, unit, "MemoryHigh")?)
            .with_context(|| format!("MemoryHigh of {unit}"))?;
        Ok(UnitLimits {
            write_bandwidth_max,
            memory_high,
        })
    }

    /// Puts back `previous` exactly: an empty list first resets every write limit of the
    /// unit (ours included), then each entry it had is set again.
    pub fn restore_unit_limits(&self, m: Manager, unit: &str, previous: &UnitLimits) -> Result<()> {
        let mut props: Vec<(&str, Value<'_>)> = vec![(
            "IOWriteBandwidthMax",
            Value::new(Vec::<(String, u64)>::new()),
        )];
        if !previous.write_bandwidth_max.is_empty() {
            props.push((
                "IOWriteBandwidthMax",
                Value::new(previous.write_bandwidth_max.clone()),
            ));
        }
        props.push(("MemoryHigh", Value::from(previous.memory_high)));
        let set = self.manager(m).and_then(|p| {
            p.set_unit_properties(unit, true, &props)
                .with_context(|| format!("restoring the limits of {unit}"))
        });
        self.checked(m, set)
    }

    /// Sets the unit's write limit on `device` and its MemoryHigh (none: unlimited).
    pub fn set_limits(
        &self,
        m: Manager,
        unit: &str,
        device: &str,
        write_bps: u64,
        memory_high: Option<u64>,
    ) -> Result<()> {
        // Writing memory.high below what a cgroup holds makes the writer of that file, PID 1,
        // reclaim the difference synchronously, dirty pages included: seconds under a
        // backlog, during which systemd answers nobody (seen in the e2e: SetUnitProperties
        // timed out). Never ask for less than the unit holds now: the offender's own
        // allocations then meet the limit, in its own context.
        let memory_high =
            memory_high.map(|high| high.max(self.memory_current(m, unit).unwrap_or(0)));
        let props = [
            (
                "IOWriteBandwidthMax",
                Value::new(vec![(device.to_string(), write_bps)]),
            ),
            ("MemoryHigh", Value::from(memory_high.unwrap_or(INFINITY))),
        ];
        let set = self.manager(m).and_then(|p| {
            p.set_unit_properties(unit, true, &props)
                .with_context(|| format!("setting the limits of {unit}"))
        });
        self.checked(m, set)
    }

    /// What the unit's cgroup holds in memory (`MemoryCurrent`; `u64::MAX` when not known).
    fn memory_current(&self, m: Manager, unit: &str) -> Option<u64> {
        u64::try_from(self.unit_property(m, unit, "MemoryCurrent").ok()?).ok()
    }

    /// systemd's version, e.g. `252.38-1~deb12u1`.
    pub fn version(&self) -> Option<String> {
        self.manager(None).ok()?.version().ok()
    }

    /// Whether `unit` is known to systemd now (a scope is gone once its last process exited).
    pub fn exists(&self, m: Manager, unit: &str) -> bool {
        self.manager(m).is_ok_and(|p| p.get_unit(unit).is_ok())
    }

    /// Connects to the manager now, so that one that cannot be reached (a user without a bus)
    /// is known before anything is recorded.
    pub fn reach(&self, m: Manager) -> Result<()> {
        self.connection(m).map(|_| ())
    }

    /// Whether a user's manager is gone (the user logged out and nothing lingers): its units
    /// went with it.
    pub fn manager_gone(m: Manager) -> bool {
        m.is_some_and(|uid| !cgroups::user_manager_running(uid))
    }

    /// Lifts the scope's limits; its processes stay in it until they exit.
    pub fn lift(&self, m: Manager, unit: &str, device: &str) -> Result<()> {
        self.set_limits(m, unit, device, INFINITY, None)
            .with_context(|| format!("lifting the limits of {unit}"))
    }
}

/// Empty lists, `auto` and structures ending in an empty list are systemd's defaults for the
/// confinement settings: nothing to copy.
fn is_default(value: &Value<'_>) -> bool {
    match value {
        Value::Array(a) => a.is_empty(),
        Value::Str(s) => s.as_str() == "auto" || s.is_empty(),
        Value::Structure(s) => s.fields().last().is_none_or(is_default),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_address_runs_the_bridge_as_the_user() {
        let a = user_bridge_address(1000);
        let address: zbus::Address = a.as_str().try_into().expect("a valid D-Bus address");
        assert!(address.to_string().starts_with("unixexec:"), "{address}");
        assert!(a.contains(",argv4=--uid=1000,"), "{a}");
        assert!(
            a.contains(",argv7=--setenv=XDG_RUNTIME_DIR=/run/user/1000,"),
            "{a}"
        );
        assert!(
            a.ends_with(",argv9=--bus-path=unix:path=/run/user/1000/bus"),
            "{a}"
        );
        assert_eq!(a.matches(',').count(), 10, "one comma per argument: {a}");
    }

    #[test]
    fn only_settings_that_confine_are_copied() {
        assert!(is_default(&Value::new(Vec::<(String, String)>::new())));
        assert!(is_default(&Value::from("auto")));
        assert!(!is_default(&Value::from("closed")));
        assert!(!is_default(&Value::new(vec![(
            "/dev/null".to_string(),
            "rw".to_string()
        )])));
        assert!(is_default(&Value::new((false, Vec::<String>::new()))));
        assert!(!is_default(&Value::new((true, vec!["lo".to_string()]))));
    }
}
