//! The loads of the 2020 thesis, used to measure stalls: innocent loads that should run like
//! clockwork (`control`, `write`, `multiwrite`) and an `offender` that floods the page cache.
//! Each load records when its cycles end; pauses are computed afterwards from those timestamps.
pub mod clock;
pub mod innocent;
pub mod metrics;
pub mod offender;
pub mod record;
pub mod summary;
pub mod tarball;
pub mod units;
