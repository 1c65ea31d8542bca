//! poolcap's probe (Zabala et al.'s Adviser, in user space): rules made of a
//! tcpdump filter and actions (count, flows, sizes, alert), run by the capture engine's
//! workers on every packet, merged and reported once per period.
//!
//! Pure logic, no I/O but reading the configuration file: [`config`] parses and checks it,
//! [`hub`] gives each worker an [`hub::Analyzer`] whose per-packet path takes no lock and
//! allocates only when a flow or key table grows, and switches periods and rule sets without losing or double-counting
//! a packet; [`tally`] and [`flows`] hold the counts, [`report`] turns merged tallies into
//! JSON Lines records and tables, and [`control`] is the language of `poolcap ctl`.
#![forbid(unsafe_code)]

pub mod config;
pub mod control;
pub mod flows;
pub mod hub;
pub mod packet;
pub mod report;
pub mod tally;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use config::{Config, ConfigError, Rule};
pub use hub::{Analyzer, Hub};
