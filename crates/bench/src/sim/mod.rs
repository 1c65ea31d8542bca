//! `poolcap sim`: the capture engine's offload and congestion policies in virtual time.
//!
//! Why a simulator: the lab machines have two cores, so the questions the WireCAP paper
//! asks with 4 to 6 queues (Figures 11 and 12: loss against the number of queues and against
//! the offload threshold T), and what happens at 16 or 64 queues, cannot be measured here.
//! The simulator runs the engine's own capture threads: their shells, decisions, pools and
//! offload policies ([`poolcap_engine::capture::sim`], the engine's `sim` feature) over
//! in-memory sources in virtual time, so what it predicts is what the engine's code does;
//! only the traffic and the workers (a cost per packet) are modelled.
//!
//! - [`model`]: the configuration of a run and the default regime;
//! - [`arrivals`]: per-queue arrival processes (constant, Poisson, on/off, Zipf flows);
//! - [`engine`]: the discrete-event loop around the engine's capture threads;
//! - [`closed_form`]: M/D/1/K blocking, the exact result the engine is checked against;
//! - [`report`]: counters, the terminal table and CSV rows;
//! - [`sweep`]: the experiments (loss vs queues, loss vs T), run in parallel, to CSV and PNG.

pub mod arrivals;
pub mod closed_form;
pub mod engine;
pub mod model;
pub mod report;
pub mod sweep;

pub use engine::{run, Engine};
pub use model::{Arrivals, Config, Shape, Split};
pub use report::{QueueReport, Report};
