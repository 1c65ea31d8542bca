//! `poolcap-bench` (`poolcap bench`): the measuring rig that puts poolcap beside the tools people use today,
//! in the same lab, on the same frames, in the same run.
//!
//! Why a rig and not a script: claims such as "loses nothing where tcpdump loses nothing" or
//! "costs less CPU per packet than netsniff-ng" only mean something when every tool is started,
//! pinned, fed, drained and stopped the same way, each point is repeated with the tools
//! interleaved (so drift on a shared machine hits all of them alike), and the raw numbers are
//! kept. It follows the manager / agents / formatters split of Zabala et al.'s rig:
//!
//! - [`manager`] and [`suites`]: the manager — one lab per suite, calibration, the interleaved
//!   runs (a line each and, on a terminal, a progress bar: [`progress`]), Ctrl-C; each suite
//!   ([`suites::SuiteDef`], one file each) its points, figures and the targets its summary
//!   checks. What a run is ([`setup`]: suite, scale, calibration) is plain data both use; the
//!   import graph runs setup ← meta ← suites ← doc ← manager, with no way back;
//! - [`point`] and [`child`] (from `poolcap-measure`, shared with `poolcap calibrate`): the agents — one measured run (start the tool in the probe
//!   namespace, wait for its ready line, send from CPU 0, drain, read its CPU time, context
//!   switches and syscalls, SIGINT, collect), with every child killed if anything goes wrong;
//!   [`filecount`] counts what a tool really wrote, streaming files of any size; [`sampler`]
//!   reads a running tool's memory, open files and threads from `/proc` (soak runs);
//! - [`peer`]: how to start each tool and read its final counts (recorded outputs are its
//!   unit tests); [`probe_peers`] the same for the analysis tools (poolcap probe, pmacctd,
//!   tshark);
//! - [`stats`], [`report`], [`figure`] and [`doc`]: the formatters — min / median / max over
//!   runs, `raw.jsonl`, `results.csv`, PNG figures, `summary.md` and BENCHMARKS.md. A result
//!   directory's `meta.json` ([`meta`]) and `raw.jsonl` are enough to rebuild everything else
//!   (`poolcap bench report`).
//!
//! Facts about the lab that shape the method (veth, kernel receive work on the sender's CPU,
//! `rps_cpus` to move it to the tool's CPU) are in `docs/design.md`.
//!
//! Beside the rig: [`calibrate`] (`poolcap-measure`) measures this machine's per-stage costs
//! for `poolcap predict` and [`validate`] checks them against bench results, [`sim`] drives
//! the capture thread's own decisions and offload policies (`poolcap-core`) over modelled
//! traffic (`poolcap sim`), and [`plot`] draws every figure. The executable's command line is
//! `src/cli/` (`src/main.rs`).

#![forbid(unsafe_code)]

pub mod doc;
pub mod figure;
pub mod flowpeers;
pub mod manager;
pub mod meta;
pub mod plot;
pub mod progress;
pub mod setup;
pub mod sim;
pub mod suites;
pub mod validate;
pub mod xdp_redirect;

// The agents and formatters this rig shares with `poolcap calibrate`, under their rig names.
pub use poolcap_measure::{
    calibrate, child, filecount, forward_peers, peer, point, probe_peers, report, sampler, stats,
};

pub use manager::{run, Options};
pub use setup::{Scale, Suite};
