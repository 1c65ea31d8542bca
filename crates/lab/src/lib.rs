//! Test hosts in which every frame can be counted.
//!
//! A lab is a handful of network namespaces joined by veth pairs: a *sender*, a *probe* (where
//! poolcap captures) and, with three hosts, a *sink* behind the probe. Each namespace is its
//! own host with its own interfaces, so tests and demos run on a real kernel data path without
//! touching the machine's network. The wire is kept quiet (no IPv6, no multicast, static
//! neighbours) so the only frames on it are the ones a test sends, and its interface counters
//! can be checked against them exactly.
//!
//! Everything is built with the `ip` command, so what a lab does can be reproduced and
//! inspected by hand. A [`Lab`] removes its namespaces when dropped, also while a test unwinds
//! from a panic; [`Lab::persist`] keeps it for `poolcap lab up`.
#![forbid(unsafe_code)]

mod cmd;
mod counters;
mod error;
mod lab;
mod layout;

pub use cmd::netns_command;
pub use counters::{if_counters, IfCounters};
pub use error::LabError;
pub use lab::{Host, HostInfo, Lab, LabInfo, LabSpec};
pub use layout::{Role, MAX_QUEUES};
