//! The `poolcap` command: a thin command line over the workspace's crates.
//!
//! - [`cli`]: the subcommands, their options and what each prints;
//! - [`units`]: the human units the command line speaks (`300k`, `1Gbit`, `2s`).
//!
//! What the commands run lives in its own crate, re-exported here under the names the
//! command line uses:
//! - `poolcap-engine` ([`capture`], [`probe`], [`outfile`], [`memlimit`], [`console`]): the
//!   capture engine, forwarding and the probe;
//! - `poolcap-gen` ([`gen`], [`frame`], [`flows`], [`seqcheck`], [`capfile`]): the traffic
//!   generator and the check of what arrived;
//! - `poolcap-measure` ([`calibrate`]): the cost calibration and the measured runs it shares
//!   with the rig (the rig itself, the simulator and the figures are the `poolcap-bench`
//!   executable, which `poolcap bench` and `poolcap sim` run: [`cli::rig`]);
//! - `poolcap-sys` ([`netdev`]): kernel access; `poolcap-format`, `poolcap-lab`,
//!   `poolcap-probe`, `poolcap-export` and `poolcap-doctor` are used by name.
//!
//! This crate forbids `unsafe_code`.
#![forbid(unsafe_code)]

pub mod cli;
pub mod units;

pub use poolcap_engine::{capture, console, memlimit, outfile, probe, say, store};
pub use poolcap_gen::{self as gen, capfile, flows, frame, seqcheck};
pub use poolcap_measure::calibrate;
pub use poolcap_sys::netdev;
