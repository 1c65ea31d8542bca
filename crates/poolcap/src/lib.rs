//! poolcap: a lossless packet-capture engine and traffic probe for commodity Linux.
//!
//! The crate is organised along the data path of `shared/design.md`:
//! - [`frame`], [`flows`], [`gen`]: the traffic generator that feeds the lab (crate
//!   `poolcap-lab`) and real interfaces with numbered frames, and [`seqcheck`] that checks
//!   what arrived;
//! - [`units`]: the human units the command line speaks (`300k`, `1Gbit`, `2s`);
//! - [`probe`]: running the probe's rules (crate `poolcap-probe`) beside the engine;
//! - [`cli`]: the `poolcap` command.
//!
//! File formats live in `poolcap-format`; all kernel access, with its raw pointers, lives in
//! `poolcap-sys`, and this crate forbids `unsafe_code`.
#![forbid(unsafe_code)]

pub mod bench;
pub mod calibrate;
pub mod capfile;
pub mod capture;
pub mod cli;
pub mod console;
pub mod flows;
pub mod frame;
pub mod gen;
pub mod memlimit;
pub mod netdev;
pub mod outfile;
pub mod plot;
pub mod probe;
pub mod seqcheck;
pub mod sim;
pub mod units;
