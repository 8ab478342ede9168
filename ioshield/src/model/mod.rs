//! The data that flows from the probe to the views and the daemon: samples, the process tree, and
//! rates derived from them. Pure data and arithmetic, no system access.
pub mod sample;
pub mod sliding_span;
pub mod tree;
