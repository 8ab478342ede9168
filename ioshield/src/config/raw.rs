//! The configuration file's shape as TOML gives it: every key optional, spans kept on values that
//! are checked later so errors can name their line.
use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) daemon: RawDaemon,
    #[serde(default)]
    pub(super) exclude: RawExclude,
    #[serde(default)]
    pub(super) metrics: RawMetrics,
    #[serde(default)]
    pub(super) device: BTreeMap<String, RawDevice>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    pub(super) tick: Option<Spanned<String>>,
    pub(super) tau: Option<Spanned<String>>,
    pub(super) parent_factor: Option<Spanned<f64>>,
    pub(super) action: Option<Spanned<String>>,
    pub(super) state_file: Option<Spanned<String>>,
    pub(super) speeds_file: Option<Spanned<String>>,
    pub(super) socket: Option<Spanned<String>>,
    pub(super) session_leaders: Option<bool>,
    pub(super) refresh_dirty_counts: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExclude {
    #[serde(default)]
    pub(super) comm: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) uid: Vec<u32>,
    #[serde(default)]
    pub(super) cgroup: Vec<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) textfile: Option<Spanned<String>>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDevice {
    pub(super) bandwidth: Option<Spanned<String>>,
    pub(super) restrict_at: Option<Spanned<f64>>,
    pub(super) release_at: Option<Spanned<f64>>,
    pub(super) hold: Option<Spanned<String>>,
    pub(super) max_flush_seconds: Option<Spanned<f64>>,
    pub(super) burst_seconds: Option<Spanned<f64>>,
    pub(super) action: Option<Spanned<String>>,
    pub(super) limit: Option<Spanned<f64>>,
    pub(super) memory_high: Option<Spanned<String>>,
    pub(super) iocost: Option<Spanned<String>>,
    pub(super) max_dirty: Option<Spanned<String>>,
}
