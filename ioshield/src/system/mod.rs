//! Read-only views of /proc and /sys: processes, block devices, cgroups, dirty memory, disk
//! counters and the running kernel's features. Every read of those trees lives here, so the
//! layers above (`model`, `detect`) stay pure and can be tested without a kernel.
pub mod bdi;
pub mod cgroups;
pub mod devices;
pub mod diskstats;
pub mod host;
pub mod kernel;
pub mod open_files;
pub mod pressure;
pub mod procfs;
pub mod vmstat;
