//! Repeated log lines (a failing write, a lost event) are shown at most once per period per key.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

pub struct RateLimit {
    every: Duration,
    last: HashMap<String, Instant>,
}

impl RateLimit {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: HashMap::new(),
        }
    }

    pub fn allow(&mut self, key: impl Into<String>) -> bool {
        let now = Instant::now();
        let key = key.into();
        match self.last.get(&key) {
            Some(t) if now.duration_since(*t) < self.every => false,
            _ => {
                self.last.insert(key, now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn once_per_period_per_key() {
        let mut r = super::RateLimit::new(std::time::Duration::from_secs(60));
        assert!(r.allow("a"));
        assert!(!r.allow("a"));
        assert!(r.allow("b"));
    }
}
