//! The process tree, kept current from fork/exit events. Exited processes stay (marked) until
//! pruned, so bytes they dirtied are still credited to their ancestors.
use std::{collections::HashMap, path::PathBuf};

use super::sample::Lifecycle;
use crate::system::procfs::ProcInfo;

/// Where the tree learns what events did not tell it: /proc in the daemon and `top`
/// (`system::procfs::Procfs`), a fixed table in tests. The tree itself never touches the system.
pub trait ProcessSource {
    fn read(&self, pid: u32) -> Option<ProcInfo>;
    fn scan(&self) -> Vec<ProcInfo>;
    /// The process's cgroup v2 path (as in /proc/PID/cgroup), for exclusion rules.
    fn cgroup(&self, pid: u32) -> Option<PathBuf>;
}

/// A source that knows no processes: for trees built only from events (tests).
pub struct NoProcesses;

impl ProcessSource for NoProcesses {
    fn read(&self, _: u32) -> Option<ProcInfo> {
        None
    }
    fn scan(&self) -> Vec<ProcInfo> {
        Vec::new()
    }
    fn cgroup(&self, _: u32) -> Option<PathBuf> {
        None
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    pub ppid: u32,
    pub session: u32,
    pub comm: String,
    pub uid: Option<u32>,
    pub start_time: u64,
    pub kernel_thread: bool,
    pub exited: bool,
}

impl From<ProcInfo> for Node {
    fn from(p: ProcInfo) -> Self {
        Self {
            ppid: p.ppid,
            session: p.session,
            comm: p.comm,
            uid: p.uid,
            start_time: p.start_time,
            kernel_thread: p.kernel_thread,
            exited: false,
        }
    }
}

/// Guards walks up the tree against a corrupt parent chain.
const MAX_DEPTH: usize = 256;

pub struct ProcessTree {
    nodes: HashMap<u32, Node>,
    source: Box<dyn ProcessSource>,
    /// Each writer's cgroup and its ancestors', as read by [`Self::learn_cgroups`]: where a
    /// subtree ends ([`Self::ancestry_in_unit`]).
    cgroups: HashMap<u32, PathBuf>,
}

impl Default for ProcessTree {
    fn default() -> Self {
        Self {
            nodes: HashMap::new(),
            source: Box::new(NoProcesses),
            cgroups: HashMap::new(),
        }
    }
}

impl ProcessTree {
    /// Every process `source` lists now; later changes come from events (or rescans).
    pub fn scan(source: Box<dyn ProcessSource>) -> Self {
        Self {
            nodes: source
                .scan()
                .into_iter()
                .map(|p| (p.pid, p.into()))
                .collect(),
            source,
            cgroups: HashMap::new(),
        }
    }

    pub fn cgroup_of(&self, pid: u32) -> Option<PathBuf> {
        self.source.cgroup(pid)
    }

    pub fn get(&self, pid: u32) -> Option<&Node> {
        self.nodes.get(&pid)
    }

    /// Whether `pid` now names another process than the one the tree knows by it: the kernel
    /// reused the pid after an exit whose event was lost. Such a pid must not be acted on (it
    /// may be anyone's, root's included). A process that is gone, or whose start was never
    /// seen, is not known to be someone else.
    pub fn reused(&self, pid: u32) -> bool {
        self.nodes.get(&pid).is_some_and(|n| {
            n.start_time != 0
                && self
                    .source
                    .read(pid)
                    .is_some_and(|now| now.start_time != n.start_time)
        })
    }

    #[cfg(test)]
    pub fn insert(&mut self, pid: u32, node: Node) {
        self.nodes.insert(pid, node);
    }

    /// `pid`'s cgroup as if read by [`Self::learn_cgroups`].
    #[cfg(test)]
    pub fn set_cgroup(&mut self, pid: u32, cgroup: &str) {
        self.cgroups.insert(pid, cgroup.into());
    }

    /// Makes sure `pid` is known, reading /proc for a process that started before we looked.
    pub fn ensure(&mut self, pid: u32) -> &Node {
        self.nodes
            .entry(pid)
            .or_insert_with(|| match self.source.read(pid) {
                Some(p) => p.into(),
                None => Node {
                    ppid: 0,
                    session: 0,
                    comm: String::from("?"),
                    uid: None,
                    start_time: 0,
                    kernel_thread: false,
                    exited: true,
                },
            })
    }

    pub fn apply(&mut self, event: &Lifecycle) {
        match event {
            Lifecycle::Fork { pid, ppid, comm } => {
                let uid = self.nodes.get(ppid).and_then(|p| p.uid);
                // A forked child runs its parent's image until it execs: take its current name
                // and start time from /proc if it is still there, but keep the parent the event
                // named (by the time we read /proc, it may have been re-parented).
                let node = match self.source.read(*pid) {
                    Some(p) => Node {
                        ppid: *ppid,
                        ..Node::from(p)
                    },
                    None => Node {
                        ppid: *ppid,
                        session: self.nodes.get(ppid).map_or(0, |p| p.session),
                        comm: comm.clone(),
                        uid,
                        start_time: 0,
                        kernel_thread: false,
                        exited: false,
                    },
                };
                self.nodes.insert(*pid, node);
                self.cgroups.remove(pid);
            }
            Lifecycle::Exec { pid, comm } => {
                self.ensure(*pid);
                if let Some(node) = self.nodes.get_mut(pid) {
                    node.comm = comm.clone();
                }
            }
            Lifecycle::Exit { pid, comm } => {
                self.ensure(*pid);
                if let Some(node) = self.nodes.get_mut(pid) {
                    node.exited = true;
                    if node.comm == "?" && !comm.is_empty() {
                        node.comm = comm.clone();
                    }
                }
            }
        }
    }

    /// Brings the tree up to date after a sample: from its lifecycle events or, on kernels where
    /// the probe gets none, from a fresh look at the source (which misses short-lived
    /// processes). `events_lost`: the kernel dropped events (a fork storm filled the ring
    /// buffer), so the events alone may miss a new process or an exit; look again too.
    pub fn follow(&mut self, events: &[Lifecycle], from_events: bool, events_lost: bool) {
        if from_events {
            for event in events {
                self.apply(event);
            }
            if !events_lost {
                return;
            }
        }
        let live: HashMap<u32, ProcInfo> =
            self.source.scan().into_iter().map(|p| (p.pid, p)).collect();
        for (pid, node) in &mut self.nodes {
            match live.get(pid) {
                // The same process: its name may have changed by an exec whose event was lost.
                Some(p) if p.start_time == node.start_time => node.comm.clone_from(&p.comm),
                _ => node.exited = true,
            }
        }
        for (pid, info) in live {
            let known = self
                .nodes
                .get(&pid)
                .is_some_and(|n| n.start_time == info.start_time);
            if !known {
                self.nodes.insert(pid, info.into());
                self.cgroups.remove(&pid);
            }
        }
    }

    /// Makes sure every process in `pids` (e.g. everyone who dirtied pages this tick) is known,
    /// even if the event of its birth was lost.
    pub fn know(&mut self, pids: impl IntoIterator<Item = u32>) {
        for pid in pids {
            self.ensure(pid);
        }
    }

    /// Forgets exited processes, and re-reads the parent of live processes they left behind
    /// (the kernel re-parented those to a subreaper or init).
    pub fn prune_exited(&mut self) {
        self.nodes.retain(|_, n| !n.exited);
        self.cgroups.retain(|pid, _| self.nodes.contains_key(pid));
        let orphans: Vec<u32> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.ppid != 0 && !self.nodes.contains_key(&n.ppid))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in orphans {
            match self.source.read(pid) {
                Some(p) => {
                    self.nodes.insert(pid, p.into());
                }
                None => {
                    self.nodes.remove(&pid);
                }
            }
        }
    }

    /// `pid`, its parent, grandparent, ... up to the root.
    pub fn ancestry(&self, pid: u32) -> impl Iterator<Item = u32> + '_ {
        let mut next = Some(pid);
        let mut depth = 0;
        std::iter::from_fn(move || {
            let pid = next?;
            depth += 1;
            next = self
                .nodes
                .get(&pid)
                .map(|n| n.ppid)
                .filter(|&pp| pp != 0 && pp != pid && depth < MAX_DEPTH);
            Some(pid)
        })
    }

    /// Reads the cgroup of each of `pids` (the writers of a sample) and of its ancestors, where
    /// not read yet; a process that has exited keeps what was read while it lived.
    pub fn learn_cgroups(&mut self, pids: impl IntoIterator<Item = u32>) {
        for pid in pids {
            // Every writer of every sample comes here: most are known already.
            if self.cgroups.contains_key(&pid) {
                continue;
            }
            let chain: Vec<u32> = self.ancestry(pid).collect();
            for p in chain {
                // Its ancestors were read with it.
                if self.cgroups.contains_key(&p) {
                    break;
                }
                if self.nodes.get(&p).is_some_and(|n| n.exited) {
                    continue;
                }
                if let Some(cg) = self.source.cgroup(p) {
                    self.cgroups.insert(p, cg);
                }
            }
        }
    }

    /// Forgets every cgroup read: processes were moved (a restriction made or lifted).
    pub fn forget_cgroups(&mut self) {
        self.cgroups.clear();
    }

    /// `pid` and its ancestors up to the first one in another cgroup, as far as their cgroups
    /// were read ([`Self::learn_cgroups`]; one not read is taken to be in its child's). A
    /// process that systemd or a container engine put in a unit of its own (`systemd-run
    /// --scope`, a terminal's tab, a container) is a job of its own: the shell that started it
    /// is not to blame for what it writes, nor to be moved with it.
    pub fn ancestry_in_unit(&self, pid: u32) -> impl Iterator<Item = u32> + '_ {
        let mut below: Option<&PathBuf> = None;
        self.ancestry(pid)
            .take_while(move |p| match self.cgroups.get(p) {
                Some(cg) => {
                    let same = below.is_none_or(|b| b == cg);
                    below = Some(cg);
                    same
                }
                None => true,
            })
    }

    /// Each process's own value plus `factor` times its children's totals, i.e. the sum over its
    /// subtree of `factor^depth * own`, within a unit ([`Self::ancestry_in_unit`]). `factor = 1`
    /// gives plain subtree sums; the thesis used 0.7 so a busy parent outranks one of many
    /// children.
    pub fn subtree_totals(&self, own: &HashMap<u32, f64>, factor: f64) -> HashMap<u32, f64> {
        let mut totals: HashMap<u32, f64> = HashMap::new();
        for (&pid, &value) in own {
            let mut weight = 1.0;
            for ancestor in self.ancestry_in_unit(pid) {
                *totals.entry(ancestor).or_default() += value * weight;
                weight *= factor;
            }
        }
        totals
    }

    /// `root` and every live process below it, root first.
    pub fn subtree(&self, root: u32) -> Vec<u32> {
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (&pid, n) in &self.nodes {
            if !n.exited && pid != n.ppid {
                children.entry(n.ppid).or_default().push(pid);
            }
        }
        let mut out = vec![root];
        let mut i = 0;
        while i < out.len() && out.len() < 100_000 {
            if let Some(c) = children.get(&out[i]) {
                out.extend(c.iter().copied().filter(|p| *p != root));
            }
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ppid: u32) -> Node {
        Node {
            ppid,
            session: 1,
            comm: format!("child-of-{ppid}"),
            uid: Some(0),
            start_time: 1,
            kernel_thread: false,
            exited: false,
        }
    }

    /// Processes as /proc would list them now.
    struct Table(Vec<ProcInfo>);

    impl ProcessSource for Table {
        fn read(&self, pid: u32) -> Option<ProcInfo> {
            self.0.iter().find(|p| p.pid == pid).cloned()
        }
        fn scan(&self) -> Vec<ProcInfo> {
            self.0.clone()
        }
        fn cgroup(&self, _: u32) -> Option<PathBuf> {
            None
        }
    }

    fn info(pid: u32, start_time: u64) -> ProcInfo {
        ProcInfo {
            pid,
            ppid: 1,
            session: 1,
            comm: "p".into(),
            uid: Some(0),
            start_time,
            kernel_thread: false,
        }
    }

    #[test]
    fn a_reused_pid_is_told_from_the_process_the_tree_knew() {
        let mut t = ProcessTree::scan(Box::new(Table(vec![
            info(10, 100),
            info(11, 100),
            info(12, 100),
        ])));
        // Later, /proc shows 11 started again (another process got the pid) and 12 gone.
        t.source = Box::new(Table(vec![info(10, 100), info(11, 900)]));
        assert!(!t.reused(10), "the same process");
        assert!(t.reused(11), "another process with the same pid");
        assert!(!t.reused(12), "gone is not someone else");
        assert!(!t.reused(13), "unknown to the tree");
    }

    fn tree() -> ProcessTree {
        // 1 -> 10 -> 20 -> 30, and 10 -> 21
        let mut t = ProcessTree::default();
        t.insert(1, node(0));
        t.insert(10, node(1));
        t.insert(20, node(10));
        t.insert(21, node(10));
        t.insert(30, node(20));
        t
    }

    /// cgroups as /proc/PID/cgroup shows them.
    struct Cgroups(HashMap<u32, &'static str>);

    impl ProcessSource for Cgroups {
        fn read(&self, _: u32) -> Option<ProcInfo> {
            None
        }
        fn scan(&self) -> Vec<ProcInfo> {
            Vec::new()
        }
        fn cgroup(&self, pid: u32) -> Option<PathBuf> {
            self.0.get(&pid).map(PathBuf::from)
        }
    }

    /// A script's shell (10, in its service) started 20 in a scope of its own (`systemd-run
    /// --scope`), which writes through 30; 21 is the script's own writer.
    #[test]
    fn a_writer_in_a_unit_of_its_own_is_not_its_parents() {
        let mut t = tree();
        let service = "/system.slice/backup.service";
        let scope = "/user.slice/term-2.scope";
        t.source = Box::new(Cgroups(HashMap::from([
            (1, "/init.scope"),
            (10, service),
            (20, scope),
            (21, service),
            (30, scope),
        ])));
        let own = HashMap::from([(30, 100.0), (21, 10.0)]);
        // Not read yet: the whole chain, as before.
        assert_eq!(t.subtree_totals(&own, 1.0)[&10], 110.0);
        t.learn_cgroups([30, 21]);
        assert_eq!(t.ancestry_in_unit(30).collect::<Vec<_>>(), [30, 20]);
        assert_eq!(t.ancestry_in_unit(21).collect::<Vec<_>>(), [21, 10]);
        let totals = t.subtree_totals(&own, 1.0);
        assert_eq!(totals[&20], 100.0);
        assert_eq!(totals[&10], 10.0);
        assert!(!totals.contains_key(&1));
        // An exited writer keeps the cgroup read while it lived.
        t.apply(&Lifecycle::Exit {
            pid: 30,
            comm: "dd".into(),
        });
        t.source = Box::new(NoProcesses);
        t.learn_cgroups([30]);
        assert_eq!(t.subtree_totals(&own, 1.0)[&10], 10.0);
        // A pid used again is another process, its cgroup not read yet.
        t.apply(&Lifecycle::Fork {
            pid: 30,
            ppid: 20,
            comm: "cp".into(),
        });
        assert_eq!(t.ancestry_in_unit(30).collect::<Vec<_>>(), [30, 20]);
        t.forget_cgroups();
        assert_eq!(t.ancestry_in_unit(30).collect::<Vec<_>>(), [30, 20, 10, 1]);
    }

    #[test]
    fn subtree_totals_weight_by_depth() {
        let t = tree();
        let own = HashMap::from([(30, 100.0), (21, 10.0), (10, 1.0)]);
        let plain = t.subtree_totals(&own, 1.0);
        assert_eq!(plain[&10], 111.0);
        assert_eq!(plain[&20], 100.0);
        assert_eq!(plain[&1], 111.0);
        let weighted = t.subtree_totals(&own, 0.5);
        assert_eq!(weighted[&20], 50.0);
        assert_eq!(weighted[&10], 1.0 + 5.0 + 25.0);
        assert!(!weighted.contains_key(&99));
    }

    #[test]
    fn exited_children_still_count_until_pruned() {
        let mut t = tree();
        t.apply(&Lifecycle::Exit {
            pid: 30,
            comm: "dd".into(),
        });
        assert!(t.get(30).unwrap().exited);
        let totals = t.subtree_totals(&HashMap::from([(30, 8.0)]), 1.0);
        assert_eq!(totals[&10], 8.0);
        t.prune_exited();
        assert!(t.get(30).is_none());
        assert!(t.get(20).is_some());
    }

    #[test]
    fn subtree_lists_live_descendants_root_first() {
        let mut t = tree();
        let mut s = t.subtree(10);
        assert_eq!(s[0], 10);
        s.sort_unstable();
        assert_eq!(s, vec![10, 20, 21, 30]);
        t.apply(&Lifecycle::Exit {
            pid: 21,
            comm: String::new(),
        });
        assert!(!t.subtree(10).contains(&21));
    }

    #[test]
    fn ancestry_stops_on_a_cycle() {
        let mut t = ProcessTree::default();
        t.insert(5, node(6));
        t.insert(6, node(5));
        assert_eq!(t.ancestry(5).count(), MAX_DEPTH);
    }
}
