//! Detection: samples -> smoothed rates -> offenders -> decisions. Pure logic with no system
//! access; the daemon feeds it and carries its decisions out through `act`.
pub mod backlog;
pub mod bandwidth;
pub mod company;
pub mod drain;
pub mod eligibility;
pub mod file_sizes;
pub mod offender;
pub mod policy;
pub mod pressure;
pub mod rates;
