//! One measured run of a capture tool, and the cost calibration built on it.
//!
//! Why a crate of its own: `poolcap calibrate` (a user command that writes `poolcap doctor`'s
//! and `poolcap predict`'s profile) and the bench rig (`poolcap-bench`) must measure the same
//! way, but the installed `poolcap` must not carry the rig's suites, figures and progress bars.
//! This crate is what both need and nothing more:
//!
//! - [`point`] and [`child`]: one measured run (start the tool in the probe namespace, wait
//!   for its ready line, send from CPU 0, drain, read its CPU time, context switches and
//!   syscalls, SIGINT, collect), with every child killed if anything goes wrong;
//!   [`filecount`] counts what a tool really wrote, streaming files of any size; [`sampler`]
//!   reads a running tool's memory, open files and threads from `/proc`;
//! - [`peer`]: how to start each tool and read its final counts (recorded outputs are its
//!   unit tests); [`probe_peers`] and [`forward_peers`] the same for the analysis tools and
//!   the forwarders; [`tool`] what all three share (which tool, its settings, its counts);
//! - [`stenotype`]: Google Stenographer's writer as a peer of `capture --store`, and its
//!   files counted from their ring blocks;
//! - [`stats`] and [`report`]: min / median / max over runs, `raw.jsonl`, the aggregated rows;
//! - [`scratch`]: the scratch directory with a copy of the executable under test;
//! - [`calibrate`]: this machine's per-stage costs as a `poolcap_doctor` profile, and
//!   ([`calibrate::validate`]) that profile's predictions against measured loss.

#![forbid(unsafe_code)]

pub mod calibrate;
pub mod child;
pub mod filecount;
pub mod forward_peers;
pub mod peer;
pub mod point;
pub mod probe_peers;
pub mod report;
pub mod sampler;
pub mod scratch;
pub mod stats;
pub mod stenotype;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tool;
