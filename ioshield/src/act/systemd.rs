//! systemd's D-Bus API, for the cgroup action on a host it runs: it owns the cgroup tree, so
//! limits are set as unit properties (`SetUnitProperties`, runtime only) and processes move
//! only into transient scopes it creates (`StartTransientUnit` with `PIDs`). systemd refuses to
//! move processes back into units without `Delegate=yes`, so a scope's processes moved aside
//! stay in their new scope until they exit; it is bound to the scope they were moved from.
use std::path::Path;

use anyhow::{Context as _, Result};
use zbus::{
    Connection,
    zvariant::{OwnedObjectPath, Value},
};

use super::{
    memory_headroom::{Writer, memory_high_for, memory_high_to_ask},
    method::{ScopeLimits, WriteControl},
    stopwatch::Stopwatch,
};
use crate::system::{cgroups, host};

/// How long a transient scope may take to start before the restriction counts as failed.
const JOB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often the state of a scope being started is looked at, besides waiting for systemd's
/// signal that its job ended.
const JOB_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// What systemd reads as "no limit" for bandwidth and memory properties, and as "not set" for
/// weights (the kernel's default, 100, applies).
const INFINITY: u64 = u64::MAX;

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_blocking = false
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

    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: zbus::zvariant::ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;

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
    /// `IOWeight=` (`u64::MAX` is "not set"); `None` in entries written before ioshield set
    /// weights, which never changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_weight: Option<u64>,
}

/// Settings of a unit that confine what its processes may do through cgroup-attached BPF
/// programs or device rules, or how much memory, how many tasks and how much CPU they may take:
/// a process moved out of the unit would lose them, so a new scope gets copies (never widen
/// what a process may do). Not the I/O settings and `MemoryHigh=`, which ioshield sets itself
/// on the units it holds.
const CONFINEMENT: [&str; 12] = [
    "IPAddressDeny",
    "IPAddressAllow",
    "DevicePolicy",
    "DeviceAllow",
    "SocketBindDeny",
    "SocketBindAllow",
    "RestrictNetworkInterfaces",
    "MemoryMax",
    "MemorySwapMax",
    "TasksMax",
    "CPUQuotaPerSecUSec",
    "CPUWeight",
];

/// Every call to systemd gives up after this: a hung PID 1 must not stop the daemon's ticks or
/// its SIGTERM handling for long. Calls are awaited on the daemon's tokio runtime (zbus's tokio
/// integration), so the status socket and the metrics endpoint keep answering meanwhile.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The managers ioshield talks to: PID 1 (`None`) and users' own managers (`Some(uid)`).
pub type Manager = Option<u32>;

pub struct Systemd {
    /// The unified hierarchy's mount: only its root's `io.cost.*` are written there by ioshield
    /// itself (no unit owns them).
    root: std::path::PathBuf,
    links: std::sync::Arc<Links>,
}

/// The connections to the managers, shared with the tasks that open them ahead.
#[derive(Default)]
struct Links {
    /// One connection per manager, opened on first use and again after any failed call:
    /// `systemctl restart dbus` leaves a dead connection behind, and every later lift would fail
    /// on it; a user manager comes and goes with the user's sessions.
    conns: std::sync::Mutex<std::collections::HashMap<Manager, Connection>>,
    /// One connect at a time per manager: a restriction that needs a connection being opened
    /// ahead waits for it instead of starting a second bridge.
    dialing: std::sync::Mutex<
        std::collections::HashMap<Manager, std::sync::Arc<tokio::sync::Mutex<()>>>,
    >,
    /// When a connection ahead to a user's manager may be tried again: each try runs a bridge,
    /// a transient unit in PID 1's log.
    ahead_after: std::sync::Mutex<std::collections::HashMap<u32, std::time::Instant>>,
}

/// How long after a connection ahead to a user's manager it may be tried again.
const AHEAD_RETRY: std::time::Duration = std::time::Duration::from_secs(60);
/// How long after one that failed: a user without a bus of their own (no `dbus-user-session`)
/// fails every time, and a restriction there tries by itself anyway.
const AHEAD_RETRY_FAILED: std::time::Duration = std::time::Duration::from_secs(3600);

impl Links {
    fn get(&self, m: Manager) -> Option<Connection> {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&m)
            .cloned()
    }

    /// The manager's connection, opened now if there is none.
    async fn connection(&self, m: Manager) -> Result<Connection> {
        if let Some(c) = self.get(m) {
            return Ok(c);
        }
        let gate = self
            .dialing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(m)
            .or_default()
            .clone();
        let _dialing = gate.lock().await;
        if let Some(c) = self.get(m) {
            return Ok(c);
        }
        let c = connect(m)
            .await
            .with_context(|| format!("connecting to {}", manager_name(m)))?;
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(m, c.clone());
        Ok(c)
    }

    fn forget(&self, m: Manager) {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&m);
    }
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

async fn connect(manager: Manager) -> Result<Connection> {
    let build = async {
        match manager {
            None => Ok(zbus::connection::Builder::system()?
                .method_timeout(CALL_TIMEOUT)
                .build()
                .await?),
            Some(uid) => {
                if !cgroups::user_manager_running(uid) {
                    anyhow::bail!("user {uid} has no systemd running (logged out?)");
                }
                connect_address(&user_bridge_address(uid))
                    .await
                    .with_context(|| {
                        format!("talking to user {uid}'s systemd through systemd-stdio-bridge")
                    })
            }
        }
    };
    within_call_timeout(build).await
}

async fn connect_address(address: &str) -> Result<Connection> {
    within_call_timeout(async {
        Ok(zbus::connection::Builder::address(address)?
            .method_timeout(CALL_TIMEOUT)
            .build()
            .await?)
    })
    .await
}

/// The handshake has no method timeout of its own: a peer that accepts and then says nothing
/// (a hung bus) would hold the connect forever.
async fn within_call_timeout<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {CALL_TIMEOUT:?}"))?
}

/// How a manager is named in messages.
pub fn manager_name(manager: Manager) -> String {
    manager.map_or("systemd".into(), |uid| format!("user {uid}'s systemd"))
}

impl Systemd {
    /// Connects when systemd runs this host with the unified cgroup hierarchy (where its IO*
    /// properties map to the io controller that throttles writeback), or says why not.
    pub async fn detect() -> Result<Systemd, String> {
        if !host::systemd_booted() {
            return Err("systemd is not running this host".into());
        }
        let root =
            cgroups::v2_mount().filter(|root| cgroups::controllers(root).iter().any(|c| c == "io"));
        let Some(root) = root else {
            return Err(
                "systemd runs this host without the unified cgroup hierarchy's io \
                        controller (cgroup v1 blkio cannot slow buffered writeback)"
                    .into(),
            );
        };
        let conn = connect(None)
            .await
            .map_err(|e| format!("cannot reach systemd over D-Bus: {e:#}"))?;
        let links = Links::default();
        links
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(None, conn);
        Ok(Systemd {
            root,
            links: std::sync::Arc::new(links),
        })
    }

    /// The cgroup hierarchy systemd runs, for the root's `io.cost.*`.
    pub fn hierarchy(&self) -> super::cgroup::Cgroupfs {
        super::cgroup::Cgroupfs {
            root: self.root.clone(),
        }
    }

    /// The manager's connection, opened now if there is none.
    async fn connection(&self, m: Manager) -> Result<Connection> {
        self.links.connection(m).await
    }

    /// Passes `result` on; after a failure the next call opens a new connection, unless the
    /// manager answered that it has no such unit: it is there to ask, and reopening a user's
    /// bridge costs 1.2 s.
    fn checked<T>(&self, m: Manager, result: Result<T>) -> Result<T> {
        // systemd's own answers (no such unit, a process gone) came over a live connection.
        if let Err(e) = &result
            && !e.downcast_ref::<zbus::Error>().is_some_and(no_such_unit)
            && !process_gone(e)
        {
            self.links.forget(m);
        }
        result
    }

    /// Opens the connection to user `uid`'s manager in the background, if there is none, so
    /// that a restriction there does not wait for it: reaching a user's systemd starts a bridge
    /// (`systemd-run` and `systemd-stdio-bridge`), which took 1.2-1.4 s in the e2e's emulated
    /// guest, all of it backlog the innocents paid for. Tried again [`AHEAD_RETRY`] after the
    /// last try at the earliest, [`AHEAD_RETRY_FAILED`] after one that failed.
    pub fn connect_ahead(&self, uid: u32) {
        if self.links.get(Some(uid)).is_some() {
            return;
        }
        let now = std::time::Instant::now();
        {
            let mut after = self
                .links
                .ahead_after
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if after.get(&uid).is_some_and(|t| now < *t) {
                return;
            }
            after.insert(uid, now + AHEAD_RETRY);
        }
        let links = self.links.clone();
        tokio::spawn(async move {
            match links.connection(Some(uid)).await {
                Ok(_) => tracing::info!(
                    "connected to user {uid}'s systemd ahead of a restriction there (its \
                     processes write)"
                ),
                Err(e) => {
                    links
                        .ahead_after
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(uid, std::time::Instant::now() + AHEAD_RETRY_FAILED);
                    tracing::debug!("connecting ahead to user {uid}'s systemd: {e:#}");
                }
            }
        });
    }

    async fn manager(&self, m: Manager) -> Result<ManagerProxy<'static>> {
        ManagerProxy::new(&self.connection(m).await?)
            .await
            .context("systemd manager proxy")
    }

    /// Moves `pids` into a new scope `unit` in `slice`, unlimited (the others of a scope whose
    /// writer is held there). The scope stops when `bound_to` stops (a session ending) and
    /// carries its confinement. `laps` times its steps.
    pub async fn start_scope(
        &self,
        m: Manager,
        unit: &str,
        slice: &str,
        bound_to: &str,
        pids: &[u32],
        laps: &mut Stopwatch,
    ) -> Result<()> {
        let mut props: Vec<(&str, Value<'_>)> = vec![
            (
                "Description",
                Value::from("moved aside by ioshield from a writer's scope it restricts"),
            ),
            ("Slice", Value::from(slice.to_string())),
            ("PIDs", Value::new(pids.to_vec())),
            // Gone from systemd's memory as soon as its last process exits.
            ("CollectMode", Value::from("inactive-or-failed")),
            ("BindsTo", Value::new(vec![bound_to.to_string()])),
            ("After", Value::new(vec![bound_to.to_string()])),
        ];
        props.extend(self.confinement(m, bound_to).await?);
        laps.lap("confinement read");
        let started = self.start_transient(m, unit, &props, laps).await;
        laps.lap("scope active");
        started
    }

    /// `StartTransientUnit`, and the wait for its job to end: the call returns once the job is
    /// queued, and whether the scope started (its processes moved) is known only then. systemd
    /// signals the end of a job (`JobRemoved`) to the client that queued it; the unit's state
    /// is also looked at every [`JOB_POLL`], should that signal not come through.
    async fn start_transient(
        &self,
        m: Manager,
        unit: &str,
        props: &[(&str, Value<'_>)],
        laps: &mut Stopwatch,
    ) -> Result<()> {
        use futures_util::StreamExt as _;
        let queued = async {
            let manager = self.manager(m).await?;
            // Asked for before the job exists: its end is signalled once.
            let removed = manager
                .receive_job_removed()
                .await
                .context("subscribing to systemd's job signals")?;
            let job = manager
                .start_transient_unit(unit, "fail", props, &[])
                .await
                .with_context(|| format!("starting scope {unit}"))?;
            anyhow::Ok((removed, job))
        };
        // A call that failed may have left a dead connection; a job that failed did not.
        let (mut removed, job) = self.checked(m, queued.await)?;
        laps.lap("scope job");
        let deadline = tokio::time::sleep(JOB_TIMEOUT);
        tokio::pin!(deadline);
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + JOB_POLL, JOB_POLL);
        loop {
            let state = tokio::select! {
                Some(signal) = removed.next() => {
                    let Ok(args) = signal.args() else { continue };
                    if args.job().as_str() != job.as_str() {
                        continue;
                    }
                    match *args.result() {
                        "done" => return Ok(()),
                        result => anyhow::bail!(
                            "systemd could not start {unit} (its job ended: {result})"
                        ),
                    }
                }
                _ = poll.tick() => {
                    let state = self.active_state(m, unit).await;
                    if state == "active" || self.job_pending(m, &job).await {
                        state
                    } else {
                        // The job ended without its signal reaching us (a scope whose processes
                        // could not be moved was seen to: 5 s of the daemon's time lost), or
                        // between the two reads.
                        let state = self.active_state(m, unit).await;
                        if state == "active" {
                            return Ok(());
                        }
                        anyhow::bail!(
                            "systemd could not start {unit} (its job ended, state {state:?})"
                        )
                    }
                }
                _ = &mut deadline => {
                    let state = self.active_state(m, unit).await;
                    if state == "active" {
                        return Ok(());
                    }
                    anyhow::bail!(
                        "systemd did not start {unit} within {JOB_TIMEOUT:?} (state {state:?})"
                    )
                }
            };
            match state.as_str() {
                "active" => return Ok(()),
                "failed" => anyhow::bail!("systemd could not start {unit} (its job failed)"),
                _ => {}
            }
        }
    }

    /// Whether systemd still has the job `job` (queued or running).
    async fn job_pending(&self, m: Manager, job: &OwnedObjectPath) -> bool {
        let state = async {
            let props = zbus::fdo::PropertiesProxy::builder(&self.connection(m).await?)
                .destination("org.freedesktop.systemd1")?
                .path(job.as_ref())?
                .build()
                .await?;
            let interface = zbus::names::InterfaceName::try_from("org.freedesktop.systemd1.Job")?;
            anyhow::Ok(props.get(interface, "State").await?)
        };
        state.await.is_ok()
    }

    /// The unit's `ActiveState`, empty when it cannot be read.
    async fn active_state(&self, m: Manager, unit: &str) -> String {
        self.properties(m, unit, "Unit", &["ActiveState"])
            .await
            .ok()
            .and_then(|mut v| v.pop())
            .and_then(|v| String::try_from(v).ok())
            .unwrap_or_default()
    }

    /// Properties of the unit's type-specific interface (`Service`, `Scope`, ...), in the order
    /// of `names`.
    async fn unit_properties(
        &self,
        m: Manager,
        unit: &str,
        names: &[&str],
    ) -> Result<Vec<zbus::zvariant::OwnedValue>> {
        let kind = unit.rsplit('.').next().unwrap_or("service");
        let mut chars = kind.chars();
        let kind: String = chars
            .next()
            .map(|c| c.to_uppercase().chain(chars).collect())
            .unwrap_or_default();
        self.properties(m, unit, &kind, names).await
    }

    /// Properties of one interface of the unit, every `Get` sent before any answer is awaited:
    /// asked one after the other, each waited for its round trip through the bus and PID 1
    /// (the 7 confinement settings took 148-299 ms in the e2e). The unit's object path is
    /// spelled out as systemd names it, without a `GetUnit` call.
    async fn properties(
        &self,
        m: Manager,
        unit: &str,
        kind: &str,
        names: &[&str],
    ) -> Result<Vec<zbus::zvariant::OwnedValue>> {
        let interface =
            zbus::names::InterfaceName::try_from(format!("org.freedesktop.systemd1.{kind}"))?;
        let props = zbus::fdo::PropertiesProxy::builder(&self.connection(m).await?)
            .destination("org.freedesktop.systemd1")?
            .path(unit_path(unit))?
            .build()
            .await?;
        let reads = names.iter().map(|&name| {
            let (props, interface) = (&props, interface.clone());
            async move {
                props
                    .get(interface, name)
                    .await
                    .with_context(|| format!("reading {name} of {unit}"))
            }
        });
        futures_util::future::try_join_all(reads).await
    }

    /// The unit's confinement settings that differ from the defaults.
    async fn confinement(
        &self,
        m: Manager,
        unit: &str,
    ) -> Result<Vec<(&'static str, Value<'static>)>> {
        let values = self.unit_properties(m, unit, &CONFINEMENT).await?;
        Ok(CONFINEMENT
            .into_iter()
            .zip(values)
            .filter(|(_, value)| !is_default(value))
            .map(|(name, value)| (name, Value::from(value)))
            .collect())
    }

    pub async fn unit_limits(&self, m: Manager, unit: &str) -> Result<UnitLimits> {
        let [write_bandwidth_max, memory_high, io_weight]: [_; 3] = self
            .unit_properties(m, unit, &["IOWriteBandwidthMax", "MemoryHigh", "IOWeight"])
            .await?
            .try_into()
            .map_err(|_| anyhow::anyhow!("systemd's answer for {unit} lacks a property"))?;
        let write_bandwidth_max = Vec::<(String, u64)>::try_from(write_bandwidth_max)
            .with_context(|| format!("IOWriteBandwidthMax of {unit}"))?;
        let memory_high =
            u64::try_from(memory_high).with_context(|| format!("MemoryHigh of {unit}"))?;
        let io_weight = u64::try_from(io_weight).with_context(|| format!("IOWeight of {unit}"))?;
        Ok(UnitLimits {
            write_bandwidth_max,
            memory_high,
            io_weight: Some(io_weight),
        })
    }

    /// Puts back `previous` exactly: an empty list first resets every write limit of the
    /// unit (ours included), then each entry it had is set again. A unit systemd no longer
    /// knows has nothing left to put back ([`Restored::UnitGone`]); one it can load again from
    /// its unit file (a service that stopped) is loaded and restored.
    pub async fn restore_unit_limits(
        &self,
        m: Manager,
        unit: &str,
        previous: &UnitLimits,
    ) -> Result<Restored> {
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
        if let Some(w) = previous.io_weight {
            props.push(("IOWeight", Value::from(w)));
        }
        match self
            .set_runtime_properties(m, unit, &props, "restoring")
            .await
        {
            Ok(()) => Ok(Restored::Yes),
            Err(e) if e.downcast_ref::<zbus::Error>().is_some_and(no_such_unit) => {
                Ok(Restored::UnitGone)
            }
            Err(e) => Err(e),
        }
    }

    /// `SetUnitProperties(runtime)`; `doing` names the change in the error ("setting").
    async fn set_runtime_properties(
        &self,
        m: Manager,
        unit: &str,
        props: &[(&str, Value<'_>)],
        doing: &str,
    ) -> Result<()> {
        let set = match self.manager(m).await {
            Ok(p) => p
                .set_unit_properties(unit, true, props)
                .await
                .with_context(|| format!("{doing} the limits of {unit}")),
            Err(e) => Err(e),
        };
        self.checked(m, set)
    }

    /// Sets the unit's write limit on the disk, or its weight (then without a write limit), and
    /// its MemoryHigh (none: unlimited): the page cache budget on top of what the unit's cgroup
    /// (`cgroup`, in the hierarchy) holds besides page cache ([`memory_high_for`]). A write
    /// limit leaves the weight as it is: the undo puts back the one the unit had. `writer`:
    /// whether the unit's writer is held already. `laps` times its steps.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_limits(
        &self,
        m: Manager,
        unit: &str,
        cgroup: Option<&Path>,
        limits: &ScopeLimits,
        writer: Writer,
        laps: &mut Stopwatch,
    ) -> Result<()> {
        // Writing memory.high below what a cgroup holds makes the writer of that file, PID 1,
        // reclaim the difference synchronously, dirty pages included: seconds under a
        // backlog, during which systemd answers nobody (seen in the e2e: SetUnitProperties
        // timed out). Never ask for less than the unit will hold when systemd writes it: the
        // offender's own allocations then meet the limit, in its own context; the daemon
        // lowers it over clean pages later (`Actuator::follow_memory`).
        let used = cgroup.and_then(|cg| cgroups::memory_use(&self.hierarchy().abs(cg)));
        let current = match used {
            Some(u) => Some(u.current),
            None if limits.memory_high.is_some() => self.memory_current(m, unit).await,
            None => None,
        };
        let memory_high = match (limits.memory_high, current) {
            (Some(budget), Some(now)) => {
                let wanted = memory_high_for(budget, used);
                let ask = memory_high_to_ask(wanted, now, writer);
                if ask != wanted {
                    tracing::info!(
                        "{unit}: MemoryHigh set at {} rather than {}: it holds {} (systemd \
                         would reclaim the difference itself, answering nobody meanwhile)",
                        crate::display::show_bytes(ask),
                        crate::display::show_bytes(wanted),
                        crate::display::show_bytes(now)
                    );
                }
                Some(ask)
            }
            (budget, _) => budget.map(|b| memory_high_for(b, used)),
        };
        laps.lap("memory read");
        let props = limit_properties(limits, memory_high);
        let set = self
            .set_runtime_properties(m, unit, &props, "setting")
            .await;
        laps.lap("unit set");
        set
    }

    /// Sets the unit's `MemoryHigh=` alone (`Actuator::follow_memory`).
    pub async fn set_memory_high(&self, m: Manager, unit: &str, bytes: u64) -> Result<()> {
        self.set_runtime_properties(m, unit, &[("MemoryHigh", Value::from(bytes))], "setting")
            .await
    }

    /// What the unit's cgroup holds in memory (`MemoryCurrent`; `u64::MAX` when not known).
    async fn memory_current(&self, m: Manager, unit: &str) -> Option<u64> {
        let value = self
            .unit_properties(m, unit, &["MemoryCurrent"])
            .await
            .ok()?
            .pop()?;
        u64::try_from(value).ok()
    }

    /// systemd's version, e.g. `252.38-1~deb12u1`.
    pub async fn version(&self) -> Option<String> {
        self.manager(None).await.ok()?.version().await.ok()
    }

    /// Whether `unit` is known to systemd now (a scope is gone once its last process exited).
    /// Only systemd's own "no such unit" answer means no: a manager that cannot be asked (the
    /// bus restarting) is an error, so that what it holds is not taken for gone.
    pub async fn exists(&self, m: Manager, unit: &str) -> Result<bool> {
        let asked = match self.manager(m).await {
            Ok(p) => match p.get_unit(unit).await {
                Ok(_) => Ok(true),
                Err(e) if no_such_unit(&e) => Ok(false),
                Err(e) => Err(anyhow::Error::new(e).context(format!("looking up {unit}"))),
            },
            Err(e) => Err(e),
        };
        self.checked(m, asked)
    }

    /// Connects to the manager now, so that one that cannot be reached (a user without a bus)
    /// is known before anything is recorded.
    pub async fn reach(&self, m: Manager) -> Result<()> {
        self.connection(m).await.map(|_| ())
    }

    /// Whether a user's manager is gone (the user logged out and nothing lingers): its units
    /// went with it.
    pub fn manager_gone(m: Manager) -> bool {
        m.is_some_and(|uid| !cgroups::user_manager_running(uid))
    }

    /// Lifts the scope's limits and weight; its processes stay in it until they exit.
    pub async fn lift(&self, m: Manager, unit: &str, device: &str) -> Result<()> {
        let props = [
            (
                "IOWriteBandwidthMax",
                Value::new(vec![(device.to_string(), INFINITY)]),
            ),
            ("IOWeight", Value::from(INFINITY)),
            ("MemoryHigh", Value::from(INFINITY)),
        ];
        self.set_runtime_properties(m, unit, &props, "lifting")
            .await
    }
}

/// What restoring a unit's limits came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Restored {
    Yes,
    /// systemd knows no unit of that name any more: a transient unit (`systemd-run`, a scope)
    /// is unloaded once it stopped, and its runtime settings, ours included, go with it. Kept
    /// pending instead, such an undo failed at every release and every 5 minutes for as long as
    /// the daemon ran, and again after each restart (seen in the e2e: the copy services of
    /// `systemd-run --wait`, gone before their release).
    UnitGone,
}

/// Whether `e` is the answer the bus or systemd gave by the error name `error`.
fn answered(e: &zbus::Error, error: &str) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _) if name.as_str() == error)
}

/// Whether `e` is systemd's own answer that it has no unit of that name (and cannot load one).
fn no_such_unit(e: &zbus::Error) -> bool {
    answered(e, "org.freedesktop.systemd1.NoSuchUnit")
}

/// Whether `e` is systemd's refusal of a process that does not exist (any more): one of the
/// PIDs a new scope was to take exited before the call.
pub fn process_gone(e: &anyhow::Error) -> bool {
    e.downcast_ref::<zbus::Error>()
        .is_some_and(|e| answered(e, "org.freedesktop.DBus.Error.UnixProcessIdUnknown"))
}

/// The object path systemd gives `unit`: its name with every character other than a letter
/// (or a digit after the first) escaped as `_` and two lowercase hex digits (sd-bus's
/// `bus_label_escape`), e.g. `/org/freedesktop/systemd1/unit/cron_2eservice`.
fn unit_path(unit: &str) -> String {
    let mut path = String::from("/org/freedesktop/systemd1/unit/");
    if unit.is_empty() {
        path.push('_');
    }
    for (i, b) in unit.bytes().enumerate() {
        if b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()) {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("_{b:02x}"));
        }
    }
    path
}

/// What `set_limits` sets on a unit: the write property, the write limit lifted where the
/// weight holds it, and `MemoryHigh=` if there is one. Without one MemoryHigh stays as it is:
/// "infinity" would lift a limit the administrator of a unit held in place set (never widen what
/// a process may do); a unit held before keeps ioshield's value until the release puts the
/// journaled one back.
fn limit_properties(
    limits: &ScopeLimits,
    memory_high: Option<u64>,
) -> Vec<(&'static str, Value<'static>)> {
    let mut props = vec![write_property(limits)];
    if let WriteControl::Weight { .. } = limits.write {
        props.push((
            "IOWriteBandwidthMax",
            Value::new(vec![(limits.device.clone(), INFINITY)]),
        ));
    }
    if let Some(high) = memory_high {
        props.push(("MemoryHigh", Value::from(high)));
    }
    props
}

/// The property that holds the offender's writes: `IOWriteBandwidthMax=` on the disk, or
/// `IOWeight=` (iocost on the disk does the holding).
fn write_property(limits: &ScopeLimits) -> (&'static str, Value<'static>) {
    match limits.write {
        WriteControl::Limit(wbps) => (
            "IOWriteBandwidthMax",
            Value::new(vec![(limits.device.clone(), wbps)]),
        ),
        WriteControl::Weight { weight, .. } => ("IOWeight", Value::from(u64::from(weight))),
    }
}

/// Empty lists, `auto`, structures ending in an empty list and `infinity` (or "not set", the
/// same `u64::MAX`) are systemd's defaults for the confinement settings: nothing to copy.
fn is_default(value: &Value<'_>) -> bool {
    match value {
        Value::U64(v) => *v == u64::MAX,
        Value::Array(a) => a.is_empty(),
        Value::Str(s) => s.as_str() == "auto" || s.is_empty(),
        Value::Structure(s) => s.fields().last().is_none_or(is_default),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn method_error(name: &str) -> zbus::Error {
        let reply = zbus::Message::method_call("/org/freedesktop/systemd1", "SetUnitProperties")
            .and_then(|b| b.build(&()))
            .expect("a message");
        zbus::Error::MethodError(
            zbus::names::OwnedErrorName::try_from(name).expect("an error name"),
            Some("Unit copy.service not found.".into()),
            reply,
        )
    }

    #[test]
    fn a_process_gone_is_told_from_other_refusals() {
        let gone = anyhow::Error::new(method_error(
            "org.freedesktop.DBus.Error.UnixProcessIdUnknown",
        ))
        .context("starting scope ioshield-1-r1-aside-2.scope");
        assert!(process_gone(&gone));
        let hung = anyhow::Error::new(method_error("org.freedesktop.DBus.Error.NoReply"));
        assert!(!process_gone(&hung));
        assert!(!process_gone(&anyhow::anyhow!(
            "systemd did not start it within 5s"
        )));
    }

    #[test]
    fn only_systemds_no_such_unit_answer_says_a_unit_is_gone() {
        assert!(no_such_unit(&method_error(
            "org.freedesktop.systemd1.NoSuchUnit"
        )));
        // Refused or failed: the unit is there, its undo stays pending.
        assert!(!no_such_unit(&method_error(
            "org.freedesktop.DBus.Error.AccessDenied"
        )));
        assert!(!no_such_unit(&method_error(
            "org.freedesktop.systemd1.UnitMasked"
        )));
        // Through the context the daemon adds to it, as `restore_unit_limits` sees it.
        let wrapped = anyhow::Error::new(method_error("org.freedesktop.systemd1.NoSuchUnit"))
            .context("restoring the limits of copy.service");
        assert!(
            wrapped
                .downcast_ref::<zbus::Error>()
                .is_some_and(no_such_unit)
        );
        assert!(!no_such_unit(&zbus::Error::InputOutput(
            std::io::Error::other("bus gone").into()
        )));
    }

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

    /// A bus that accepts and then never answers (a hung dbus-daemon or PID 1) costs one call
    /// timeout, during which the daemon's runtime keeps running its other tasks (status socket,
    /// metrics): nothing blocks the thread.
    #[tokio::test]
    async fn a_silent_bus_times_out_without_blocking_the_runtime() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bus");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let _peer = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = ticks.clone();
        let _ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        let started = std::time::Instant::now();
        let result = connect_address(&format!("unix:path={}", path.display())).await;
        let waited = started.elapsed();
        let err = result.expect_err("a silent bus cannot be connected to");
        assert!(format!("{err:#}").contains("no answer within"), "{err:#}");
        assert!(
            waited >= CALL_TIMEOUT && waited < CALL_TIMEOUT * 2,
            "gave up after {waited:?}"
        );
        // 100 ticks of 50 ms in 5 s; a blocked thread would run none of them.
        let ran = ticks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(ran >= 50, "only {ran} ticks ran while connecting");
    }

    /// A unit held by a write limit of 15 MB/s on /dev/vdb, no memory.high.
    fn limited() -> ScopeLimits {
        ScopeLimits {
            dev: crate::system::devices::DevId {
                major: 254,
                minor: 16,
            },
            device: "/dev/vdb".into(),
            write: WriteControl::Limit(15_000_000),
            memory_high: None,
        }
    }

    #[test]
    fn a_weight_is_set_as_ioweight_and_a_limit_per_disk() {
        let mut limits = limited();
        let (name, value) = write_property(&limits);
        assert_eq!(name, "IOWriteBandwidthMax");
        assert_eq!(
            value,
            Value::new(vec![("/dev/vdb".to_string(), 15_000_000u64)])
        );
        limits.write = WriteControl::Weight {
            weight: 1,
            model: Some(crate::act::iocost::Model::pinned(25_000_000)),
            fallback: 18_750_000,
        };
        assert_eq!(write_property(&limits), ("IOWeight", Value::from(1u64)));
    }

    /// `memory_high = "off"` on a unit held in place sets no MemoryHigh: writing "infinity"
    /// lifted what its administrator had set for as long as the restriction lasted.
    #[test]
    fn no_memory_high_leaves_the_units_own() {
        let limits = limited();
        let names = |props: Vec<(&'static str, Value<'static>)>| {
            props.into_iter().map(|(n, _)| n).collect::<Vec<_>>()
        };
        assert_eq!(
            names(limit_properties(&limits, None)),
            ["IOWriteBandwidthMax"]
        );
        let set = limit_properties(&limits, Some(32 << 20));
        assert_eq!(set[1], ("MemoryHigh", Value::from(32u64 << 20)));
    }

    /// Entries journaled before ioshield set weights have no `io_weight`: their undo leaves the
    /// unit's weight alone (it never changed it).
    #[test]
    fn limits_journaled_without_a_weight_leave_the_weight_alone() {
        let old: UnitLimits = serde_json::from_str(
            r#"{"write_bandwidth_max":[["/dev/vdb",1000]],"memory_high":18446744073709551615}"#,
        )
        .unwrap();
        assert_eq!(old.io_weight, None);
        let new = UnitLimits {
            io_weight: Some(u64::MAX),
            ..old
        };
        let back: UnitLimits = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);
    }

    /// A user whose manager cannot be reached (here: none runs) is not tried again for an
    /// hour: each try would start a bridge unit.
    #[tokio::test]
    async fn a_failed_connection_ahead_backs_off() {
        let uid = 3_999_999;
        let systemd = Systemd {
            root: std::path::PathBuf::from("/nonexistent"),
            links: std::sync::Arc::new(Links::default()),
        };
        let before = std::time::Instant::now();
        systemd.connect_ahead(uid);
        let after = || {
            systemd
                .links
                .ahead_after
                .lock()
                .unwrap()
                .get(&uid)
                .copied()
                .expect("tried")
        };
        assert!(after() <= before + AHEAD_RETRY + std::time::Duration::from_secs(1));
        let deadline = std::time::Instant::now() + CALL_TIMEOUT;
        while after() < before + AHEAD_RETRY_FAILED && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let failed = after();
        assert!(failed >= before + AHEAD_RETRY_FAILED, "not backed off");
        systemd.connect_ahead(uid);
        assert_eq!(after(), failed, "tried again within the hour");
        assert!(systemd.links.get(Some(uid)).is_none());
    }

    /// As systemd names them (`busctl tree org.freedesktop.systemd1`).
    #[test]
    fn unit_paths_are_spelled_as_systemd_spells_them() {
        let path = |unit| unit_path(unit).replace("/org/freedesktop/systemd1/unit/", "");
        assert_eq!(path("nightly-backup.service"), "nightly_2dbackup_2eservice");
        assert_eq!(path("user@1000.service"), "user_401000_2eservice");
        assert_eq!(path("session-c1.scope"), "session_2dc1_2escope");
        assert_eq!(path("1st.service"), "_31st_2eservice");
        assert_eq!(path(""), "_");
        for unit in ["a.service", "x-y_z@1.scope"] {
            zbus::zvariant::ObjectPath::try_from(unit_path(unit)).expect("a valid object path");
        }
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
        // MemoryMax=infinity and CPUWeight not set; TasksMax=77.
        assert!(is_default(&Value::U64(u64::MAX)));
        assert!(!is_default(&Value::U64(77)));
    }
}
