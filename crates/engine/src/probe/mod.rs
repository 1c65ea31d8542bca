//! Running the probe (`poolcap probe`): the engine's workers run the rules
//! ([`poolcap_probe`]), and this module closes periods, writes the reports and serves the
//! control socket.
//!
//! - [`reporter`]: ends a period (switches the hub's epoch, collects and merges the
//!   workers' tallies) and writes its JSON Lines records and table;
//! - [`report_file`]: the `--report` file, written a whole period at a time, and what a
//!   full disk kept out of it;
//! - [`live`]: the periodic action manager beside a running capture: the period clock, the
//!   control socket, SIGHUP, and the final report after the engine has drained;
//! - [`error`]: [`ProbeError`], why a probe failed;
//! - [`control`]: the control socket itself (mode 0600) and the `poolcap ctl` client;
//! - [`kernel`]: `--in-kernel`, count, size and flow rules as eBPF programs at tc ingress;
//! - [`offline`]: `probe -r FILE`, the engine reading a capture file, with a period clock
//!   that follows the packets' own timestamps.

pub mod control;
pub mod error;
pub mod kernel;
pub mod live;
pub mod offline;
pub mod report_file;
pub mod reporter;

pub use error::ProbeError;
