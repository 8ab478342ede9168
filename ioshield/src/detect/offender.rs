//! Which subtree to blame on one disk, and which processes restricting it covers. Pure: it takes
//! the tree, the eligibility rules and the roots other disks' restrictions hold.
use std::collections::{HashMap, HashSet};

use super::{eligibility::Eligibility, policy::Candidate};
use crate::model::tree::ProcessTree;

/// How much each process and each subtree adds to a disk's dirty data.
#[derive(Debug, Default)]
pub struct Scores {
    /// Each process's own rate, without excluded processes.
    pub own: HashMap<u32, f64>,
    /// A process's rate plus `parent_factor` times its children's subtree scores.
    pub subtree: HashMap<u32, f64>,
}

/// Scores from each process's own rate on a disk (`own`). An excluded writer is never touched,
/// and its parent is not to blame for it either, so its rate counts nowhere.
pub fn scores(
    tree: &ProcessTree,
    eligibility: &Eligibility,
    mut own: HashMap<u32, f64>,
    parent_factor: f64,
) -> Scores {
    own.retain(|pid, _| {
        tree.get(*pid)
            .is_none_or(|n| eligibility.excluded(tree, *pid, n).is_none())
    });
    let subtree = tree.subtree_totals(&own, parent_factor);
    Scores { own, subtree }
}

/// The best-scoring subtree whose root may be chosen and is not already held by another disk's
/// restriction. A session leader competes with its own rate only (see
/// [`Eligibility::judged_alone`]). Ties go to the lower pid, so the choice is stable from tick
/// to tick.
pub fn choose(
    tree: &ProcessTree,
    eligibility: &Eligibility,
    scores: &Scores,
    held_elsewhere: &HashSet<u32>,
) -> Option<Candidate> {
    scores
        .subtree
        .iter()
        .filter(|(pid, _)| !held_elsewhere.contains(pid))
        .filter_map(|(&pid, _)| {
            let node = tree.get(pid)?;
            eligibility.choosable(tree, pid, node).ok()?;
            let score = score_of(tree, eligibility, scores, pid);
            (score > 0.0).then_some(Candidate { pid, score })
        })
        .max_by(|a, b| a.score.total_cmp(&b.score).then(b.pid.cmp(&a.pid)))
}

/// What `pid` is judged by in `scores`: its subtree's, or its own for a session leader.
pub fn score_of(tree: &ProcessTree, eligibility: &Eligibility, scores: &Scores, pid: u32) -> f64 {
    let alone = tree
        .get(pid)
        .is_some_and(|node| eligibility.judged_alone(pid, node));
    let from = if alone { &scores.own } else { &scores.subtree };
    from.get(&pid).copied().unwrap_or(0.0)
}

/// The processes a restriction of `root` covers: its live subtree, root first, without anything
/// excluded, without subtrees another disk's restriction holds (moving those again would undo
/// that restriction's cgroup or scope) and without those in a unit of their own
/// ([`ProcessTree::ancestry_in_unit`]). A pid that now names another process than the tree's
/// (reused after a lost exit) is left out, the root included: then the list does not start
/// with `root`, and nothing may be done.
pub fn members(
    tree: &ProcessTree,
    eligibility: &Eligibility,
    root: u32,
    held_elsewhere: &HashSet<u32>,
) -> Vec<u32> {
    tree.subtree(root)
        .into_iter()
        .filter(|p| !tree.reused(*p))
        .filter(|p| {
            *p == root
                || (tree
                    .get(*p)
                    .is_some_and(|n| eligibility.excluded(tree, *p, n).is_none())
                    && !tree
                        .ancestry(*p)
                        .take_while(|a| *a != root)
                        .any(|a| held_elsewhere.contains(&a))
                    && tree.ancestry_in_unit(*p).any(|a| a == root))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config::Exclude, model::tree::Node};

    fn node(ppid: u32, session: u32, comm: &str) -> Node {
        Node {
            ppid,
            session,
            comm: comm.into(),
            uid: Some(1000),
            start_time: 1,
            kernel_thread: false,
            exited: false,
        }
    }

    /// 1 (init) -> 100 (login shell, session leader) -> 200 (tar) -> 300 (gzip)
    ///                                              -> 201 (backup, excluded) -> 301 (dd)
    ///                                              -> 202 (sh) -> 302 (cp)
    fn tree() -> ProcessTree {
        let mut t = ProcessTree::default();
        t.insert(1, node(0, 1, "systemd"));
        t.insert(100, node(1, 100, "bash"));
        t.insert(200, node(100, 100, "tar"));
        t.insert(300, node(200, 100, "gzip"));
        t.insert(201, node(100, 100, "backup"));
        t.insert(301, node(201, 100, "dd"));
        t.insert(202, node(100, 100, "sh"));
        t.insert(302, node(202, 100, "cp"));
        t
    }

    /// The daemon's own pid in these tests: none of the tree's.
    const NOT_IN_TREE: u32 = 999_999;

    fn rules(t: &ProcessTree) -> Eligibility {
        let exclude = Exclude {
            comm: vec!["backup".into()],
            ..Exclude::default()
        };
        Eligibility::protecting(NOT_IN_TREE, exclude, false, t)
    }

    /// The daemon (here as gzip, 300) and its ancestors are never chosen nor counted.
    #[test]
    fn the_daemon_and_its_ancestors_are_protected() {
        let t = tree();
        let e = Eligibility::protecting(300, Exclude::default(), false, &t);
        let s = scores(&t, &e, HashMap::from([(300, 50.0), (302, 10.0)]), 1.0);
        assert_eq!(s.subtree.get(&300), None);
        assert_eq!(choose(&t, &e, &s, &HashSet::new()).unwrap().pid, 202);
        assert_eq!(
            e.excluded(&t, 200, t.get(200).unwrap()),
            Some("ioshield or one of its ancestors")
        );
    }

    #[test]
    fn an_excluded_writer_counts_for_nobody() {
        let t = tree();
        let s = scores(
            &t,
            &rules(&t),
            HashMap::from([(201, 50.0), (300, 10.0)]),
            1.0,
        );
        assert_eq!(s.subtree.get(&201), None);
        assert_eq!(s.subtree[&100], 10.0);
        assert_eq!(s.subtree[&200], 10.0);
    }

    #[test]
    fn a_session_leader_that_writes_itself_is_chosen() {
        let mut t = tree();
        // `setsid dd` in a terminal, or a service's main process (systemd calls setsid()).
        t.insert(400, node(1, 400, "dd"));
        let e = rules(&t);
        let s = scores(&t, &e, HashMap::from([(400, 40.0), (300, 10.0)]), 1.0);
        let c = choose(&t, &e, &s, &HashSet::new()).unwrap();
        assert_eq!((c.pid, c.score), (400, 40.0));
        // The login shell writing a little itself while its job writes a lot: the job's subtree
        // is chosen, and the shell is judged by its own 2.0 only.
        let s = scores(&t, &e, HashMap::from([(100, 2.0), (300, 10.0)]), 1.0);
        assert_eq!(s.subtree[&100], 12.0);
        assert_eq!(choose(&t, &e, &s, &HashSet::new()).unwrap().pid, 200);
        let s = scores(&t, &e, HashMap::from([(100, 30.0), (300, 10.0)]), 1.0);
        let c = choose(&t, &e, &s, &HashSet::new()).unwrap();
        assert_eq!((c.pid, c.score), (100, 30.0));
        // With session_leaders = true a leader is judged by its whole subtree.
        let all = Eligibility::protecting(NOT_IN_TREE, Exclude::default(), true, &t);
        let s = scores(&t, &all, HashMap::from([(100, 2.0), (300, 10.0)]), 1.0);
        assert_eq!(choose(&t, &all, &s, &HashSet::new()).unwrap().pid, 100);
    }

    #[test]
    fn the_session_leader_is_not_blamed_for_its_children() {
        let t = tree();
        let e = rules(&t);
        let s = scores(&t, &e, HashMap::from([(300, 10.0), (302, 8.0)]), 1.0);
        // bash's subtree scores 18 but it leads the session: tar's subtree is chosen.
        assert_eq!(s.subtree[&100], 18.0);
        let c = choose(&t, &e, &s, &HashSet::new()).unwrap();
        assert_eq!((c.pid, c.score), (200, 10.0));
        // Held by another disk's restriction: the next best (its child gzip scores as much).
        let c = choose(&t, &e, &s, &HashSet::from([200])).unwrap();
        assert_eq!((c.pid, c.score), (300, 10.0));
        let c = choose(&t, &e, &s, &HashSet::from([200, 300])).unwrap();
        assert_eq!(c.pid, 202);
        // Ties go to the lower pid.
        let s = scores(&t, &e, HashMap::from([(300, 5.0), (302, 5.0)]), 0.5);
        assert_eq!(choose(&t, &e, &s, &HashSet::new()).unwrap().pid, 300);
    }

    #[test]
    fn members_skip_excluded_processes_and_subtrees_held_elsewhere() {
        let t = tree();
        let e = rules(&t);
        let mut m = members(&t, &e, 100, &HashSet::new());
        assert_eq!(m[0], 100);
        m.sort_unstable();
        // backup (excluded) is left out; its child dd is not excluded itself.
        assert_eq!(m, [100, 200, 202, 300, 301, 302]);
        let mut m = members(&t, &e, 100, &HashSet::from([202]));
        m.sort_unstable();
        assert_eq!(m, [100, 200, 300, 301]);
        // The root itself is always a member, even if another disk holds it.
        assert_eq!(members(&t, &e, 202, &HashSet::from([202]))[0], 202);
    }

    /// A shell (202, not a session leader: a script) whose copies each run in a scope of their
    /// own (`systemd-run --scope`): a copy that ended (302) and the next one (303) do not add up
    /// to the shell, which is neither chosen nor moved with them.
    #[test]
    fn a_job_in_a_unit_of_its_own_is_not_its_parents() {
        let mut t = tree();
        t.insert(202, node(1, 202, "bash"));
        t.insert(302, node(202, 202, "dd"));
        t.insert(303, node(202, 202, "dd"));
        t.apply(&crate::model::sample::Lifecycle::Exit {
            pid: 302,
            comm: "dd".into(),
        });
        let e = Eligibility::protecting(NOT_IN_TREE, Exclude::default(), true, &t);
        let own = HashMap::from([(302, 20.0), (303, 2.0)]);
        // Without the units read, the shell's subtree wins over the new copy.
        let s = scores(&t, &e, own.clone(), 0.7);
        assert_eq!(choose(&t, &e, &s, &HashSet::new()).unwrap().pid, 202);
        t.set_cgroup(202, "/system.slice/backup.service");
        t.set_cgroup(302, "/user.slice/term-1.scope");
        t.set_cgroup(303, "/user.slice/term-2.scope");
        let s = scores(&t, &e, own, 0.7);
        assert_eq!(s.subtree.get(&202), None);
        assert_eq!(choose(&t, &e, &s, &HashSet::new()).unwrap().pid, 303);
        assert_eq!(members(&t, &e, 202, &HashSet::new()), [202]);
    }
}
