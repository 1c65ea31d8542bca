//! poolcap-doctor: why a capture on this machine would lose packets, before it runs.
//!
//! Two halves, both pure logic over values the caller supplies, so every rule is unit-tested
//! without root, without a lab and without this machine's settings:
//! - [`system`], [`ethtool`] and [`checks`]: `poolcap doctor`. Every check reads the kernel's
//!   settings through one small [`system::System`] layer (files under /proc and /sys, and the
//!   output of `ethtool`), which has a real implementation and a fake tree for tests. Checks
//!   only read; each finding carries its evidence and the command that would fix it.
//! - [`profile`] and [`predict`]: `poolcap predict`. A [`profile::Profile`] holds the costs
//!   `poolcap calibrate` measured per stage (kernel delivery, ring read, copy into the pool,
//!   writing, compression, x-loop); [`predict::predict`] turns a capture scenario into
//!   kernel and application loss with a fluid model of stages and buffers, at the CPU share
//!   the tool gets on a shared machine ([`share`]).
#![forbid(unsafe_code)]

pub mod checks;
pub mod ethtool;
pub mod predict;
pub mod profile;
pub mod share;
pub mod system;
