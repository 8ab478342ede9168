//! Every decision gets one log line (with the pid and action as structured fields, which the
//! journal keeps) and is kept for `ioshield status`.
use std::collections::VecDeque;

use super::status::DecisionRecord;

/// Decisions kept for `ioshield status`.
const RECENT: usize = 20;

#[derive(Default)]
pub struct DecisionLog {
    recent: VecDeque<DecisionRecord>,
}

impl DecisionLog {
    pub fn decided(&mut self, pid: u32, action: &'static str, message: String) {
        tracing::info!(pid, action, "{message}");
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.recent.push_front(DecisionRecord { at, message });
        self.recent.truncate(RECENT);
    }

    /// Most recent first.
    pub fn recent(&self) -> Vec<DecisionRecord> {
        self.recent.iter().cloned().collect()
    }
}
