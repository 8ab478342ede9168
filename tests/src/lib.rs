//! Support code for ioshield's tests and benchmarks.
pub mod load;
