//! poolcap's engine: capture queues, pools, capture threads, workers and sinks (file writer,
//! forwarder), with the offload policies of WireCAP and the congestion control of Zabala et
//! al. (see `docs/design.md`), and the probe that runs its rules on the engine's workers.
//!
//! - [`capture`]: the engine itself, from the kernel's rings to the sinks, and its exact
//!   accounting;
//! - [`probe`]: `poolcap probe`'s periods, reports, control socket, offline input and the
//!   in-kernel rules, beside a running engine (the rules themselves are `poolcap-probe`);
//! - [`store`]: the packet store: indexed capture files, retention and queries;
//! - [`outfile`]: creating the files a capture writes without following planted links;
//! - [`memlimit`]: how much memory a pool may still take (`MemAvailable`, cgroup limits);
//! - [`console`]: the status line and accounting, which never end the process ([`say!`]);
//!   messages about a run go through the `log` facade.
//!
//! The engine knows nothing of the lab, the bench rig or plotting (crates `poolcap-lab`,
//! `poolcap-bench`); all kernel access, with its raw pointers, is in `poolcap-sys`, and this
//! crate forbids `unsafe_code`.
#![forbid(unsafe_code)]

pub mod capture;
pub mod console;
pub mod memlimit;
pub mod outfile;
pub mod probe;
pub mod store;
