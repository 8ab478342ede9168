//! Detection: samples -> smoothed rates -> offenders -> decisions. Pure logic; the daemon feeds
//! it and carries its decisions out through `act`.
pub mod bandwidth;
pub mod eligibility;
pub mod policy;
pub mod rates;
