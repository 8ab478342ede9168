//! Which rows `top` shows and in what order: iotop's `-p`, `-u`, `-o` and `--sort`, shared by
//! the table, the JSON and the live view.
use super::report::{ProcessRow, Report};

/// Columns `top` can sort by; each sorts the way a person reading it wants first (biggest
/// rates first, names and pids ascending).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// The process's own dirty rate.
    #[default]
    Dirty,
    /// The rate of the process and its descendants.
    Tree,
    /// Time the kernel paused it in balance_dirty_pages.
    Throttled,
    Pid,
    User,
    Command,
    Device,
    /// Its systemd unit (or cgroup).
    Unit,
}

impl SortKey {
    pub const ALL: [SortKey; 8] = [
        SortKey::Dirty,
        SortKey::Tree,
        SortKey::Throttled,
        SortKey::Pid,
        SortKey::User,
        SortKey::Command,
        SortKey::Device,
        SortKey::Unit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Dirty => "dirty",
            SortKey::Tree => "tree",
            SortKey::Throttled => "throttled",
            SortKey::Pid => "pid",
            SortKey::User => "user",
            SortKey::Command => "command",
            SortKey::Device => "device",
            SortKey::Unit => "unit",
        }
    }

    /// The next (`step` = 1) or previous (`step` = -1) column, wrapping around.
    pub fn step(self, step: isize) -> SortKey {
        let n = Self::ALL.len() as isize;
        let at = Self::ALL.iter().position(|k| *k == self).unwrap_or(0) as isize;
        Self::ALL[(at + step).rem_euclid(n) as usize]
    }
}

#[derive(Clone, Debug, Default)]
pub struct View {
    /// Only these processes (`-p`, repeatable); empty = all.
    pub pids: Vec<u32>,
    /// Only processes of this user (`-u`).
    pub uid: Option<u32>,
    /// Only processes that dirtied pages or were throttled themselves (`-o`), not ancestors
    /// shown for their descendants' writes.
    pub only_active: bool,
    pub sort: SortKey,
    pub reverse: bool,
}

impl View {
    fn keeps(&self, row: &ProcessRow) -> bool {
        (self.pids.is_empty() || self.pids.contains(&row.pid))
            && self.uid.is_none_or(|uid| row.uid == Some(uid))
            && (!self.only_active
                || row.dirty_bytes_per_sec > 0.0
                || row.throttled_ms_per_sec > 0.0)
    }

    /// Whether any filter is set, so that an empty result can say why.
    pub fn filters(&self) -> bool {
        !self.pids.is_empty() || self.uid.is_some() || self.only_active
    }

    /// The report's rows kept and sorted; the rest of the report unchanged.
    pub fn apply(&self, report: &mut Report) {
        report.processes.retain(|r| self.keeps(r));
        self.sort(&mut report.processes);
    }

    /// The rows [`View::apply`] would leave, for a view that keeps the whole report.
    pub fn rows(&self, report: &Report) -> Vec<ProcessRow> {
        let mut rows: Vec<ProcessRow> = report
            .processes
            .iter()
            .filter(|r| self.keeps(r))
            .cloned()
            .collect();
        self.sort(&mut rows);
        rows
    }

    pub fn sort(&self, rows: &mut [ProcessRow]) {
        let key = self.sort;
        rows.sort_by(|a, b| {
            let order = match key {
                SortKey::Dirty => b.dirty_bytes_per_sec.total_cmp(&a.dirty_bytes_per_sec),
                SortKey::Tree => b
                    .tree_dirty_bytes_per_sec
                    .total_cmp(&a.tree_dirty_bytes_per_sec),
                SortKey::Throttled => b.throttled_ms_per_sec.total_cmp(&a.throttled_ms_per_sec),
                SortKey::Pid => a.pid.cmp(&b.pid),
                SortKey::User => a.user.cmp(&b.user),
                SortKey::Command => a.comm.cmp(&b.comm),
                SortKey::Device => a.device.cmp(&b.device),
                SortKey::Unit => a.unit.cmp(&b.unit),
            }
            // Ties by the default order, so rows do not jump between refreshes.
            .then(b.dirty_bytes_per_sec.total_cmp(&a.dirty_bytes_per_sec))
            .then(a.pid.cmp(&b.pid));
            if self.reverse { order.reverse() } else { order }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::devices::DevId;

    fn row(pid: u32, uid: u32, dirty: f64, tree: f64) -> ProcessRow {
        ProcessRow {
            pid,
            ppid: 1,
            comm: format!("p{pid}"),
            cmdline: format!("p{pid} --arg"),
            unit: None,
            user: format!("u{uid}"),
            uid: Some(uid),
            device: "/dev/vda".into(),
            dev: DevId {
                major: 254,
                minor: 0,
            },
            dirty_bytes_per_sec: dirty,
            tree_dirty_bytes_per_sec: tree,
            throttled_ms_per_sec: 0.0,
            files_per_sec: 0.0,
            exited: false,
        }
    }

    fn pids(rows: &[ProcessRow]) -> Vec<u32> {
        rows.iter().map(|r| r.pid).collect()
    }

    #[test]
    fn filters_and_sorts_like_iotop() {
        let rows = vec![
            row(10, 0, 0.0, 9.0),
            row(11, 1000, 5.0, 5.0),
            row(12, 0, 9.0, 9.0),
        ];
        let mut shown = rows.clone();
        View::default().sort(&mut shown);
        assert_eq!(pids(&shown), [12, 11, 10]);

        let only = View {
            only_active: true,
            ..View::default()
        };
        let mut kept: Vec<ProcessRow> = rows.iter().filter(|r| only.keeps(r)).cloned().collect();
        only.sort(&mut kept);
        assert_eq!(pids(&kept), [12, 11], "the ancestor row goes with -o");

        let user = View {
            uid: Some(1000),
            ..View::default()
        };
        assert_eq!(
            pids(
                &rows
                    .iter()
                    .filter(|r| user.keeps(r))
                    .cloned()
                    .collect::<Vec<_>>()
            ),
            [11]
        );
        let by_pid = View {
            pids: vec![10, 12],
            sort: SortKey::Pid,
            reverse: true,
            ..View::default()
        };
        let mut kept: Vec<ProcessRow> = rows.iter().filter(|r| by_pid.keeps(r)).cloned().collect();
        by_pid.sort(&mut kept);
        assert_eq!(pids(&kept), [12, 10]);

        let tree = View {
            sort: SortKey::Tree,
            ..View::default()
        };
        let mut shown = rows;
        tree.sort(&mut shown);
        assert_eq!(pids(&shown), [12, 10, 11], "ties broken by the own rate");
    }

    #[test]
    fn sort_keys_cycle_both_ways() {
        assert_eq!(SortKey::Dirty.step(1), SortKey::Tree);
        assert_eq!(SortKey::Dirty.step(-1), SortKey::Unit);
        assert_eq!(SortKey::Unit.step(1), SortKey::Dirty);
    }
}
