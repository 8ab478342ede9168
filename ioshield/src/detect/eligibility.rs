//! Who may be chosen as an offender, and who is never touched.
use std::collections::HashSet;

use crate::{
    config::Exclude,
    model::tree::{Node, ProcessTree},
};

pub struct Eligibility {
    exclude: Exclude,
    session_leaders: bool,
    /// ioshield and its ancestors: demoting the shell or service manager that runs us is wrong.
    protected: HashSet<u32>,
}

impl Eligibility {
    pub fn new(exclude: Exclude, session_leaders: bool, tree: &ProcessTree) -> Self {
        Self::protecting(std::process::id(), exclude, session_leaders, tree)
    }

    /// The rules with `me` and its ancestors protected instead of this process: a test's tree
    /// of made-up pids must not depend on the pid the test runs as (a test binary that ran as
    /// pid 400 found the tree's `dd` 400 protected).
    pub fn protecting(
        me: u32,
        exclude: Exclude,
        session_leaders: bool,
        tree: &ProcessTree,
    ) -> Self {
        Self {
            exclude,
            session_leaders,
            protected: tree.ancestry(me).collect(),
        }
    }

    /// Never touched at all, not even as part of an offender's subtree.
    pub fn excluded(&self, tree: &ProcessTree, pid: u32, node: &Node) -> Option<&'static str> {
        if pid <= 1 {
            return Some("pid 1");
        }
        if node.kernel_thread {
            return Some("a kernel thread");
        }
        if self.protected.contains(&pid) {
            return Some("ioshield or one of its ancestors");
        }
        if self.exclude.comm.contains(&node.comm) {
            return Some("excluded by comm");
        }
        if node.uid.is_some_and(|u| self.exclude.uid.contains(&u)) {
            return Some("excluded by uid");
        }
        if !self.exclude.cgroup.is_empty()
            && let Some(cg) = tree.cgroup_of(pid)
            && self.exclude.cgroup.iter().any(|e| cg.starts_with(e))
        {
            return Some("excluded by cgroup");
        }
        None
    }

    /// May be chosen as the root of a restriction.
    pub fn choosable(&self, tree: &ProcessTree, pid: u32, node: &Node) -> Result<(), &'static str> {
        if node.exited {
            return Err("exited");
        }
        if let Some(why) = self.excluded(tree, pid, node) {
            return Err(why);
        }
        Ok(())
    }

    /// A session leader is blamed only for what it writes itself, never for its descendants: a
    /// login shell or `systemd --user` must not become the root of a restriction because one of
    /// its jobs writes. But systemd calls setsid() for every service's main process, and anyone
    /// can run `setsid dd ...`, so a leader that writes heavily itself may still be chosen.
    pub fn judged_alone(&self, pid: u32, node: &Node) -> bool {
        node.session == pid && !self.session_leaders
    }
}
