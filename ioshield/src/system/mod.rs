//! Read-only views of /proc and /sys: processes, block devices, dirty memory and disk counters.
pub mod bdi;
pub mod devices;
pub mod diskstats;
pub mod procfs;
pub mod vmstat;
