//! One launch sequence for the commands that open a live capture (`capture`, `forward`,
//! `probe`), so they check, open and give up privileges in the same order and cannot drift
//! apart: check what the configuration needs ([`Needs`]) -> decide the privilege drop (`-Z`)
//! -> bind `--metrics`, connect to the service manager, open `--stats-json`, register the
//! stop signals -> (the command opens its engine) -> drop privileges, handing the files made
//! so far to `-Z`'s user -> say `READY=1` -> run -> write the statistics, or, if the engine
//! never started, remove the statistics file this run created.
//!
//! Everything that can fail on a bad argument or a missing privilege fails here, in one
//! line, before a socket, ring, XDP program or capture file exists.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use poolcap_sys::SysError;
use serde::Serialize;

use crate::capture::needs::{Doing, Needs};
use crate::capture::{CaptureError, Engine};
use crate::cli::export::{bind_metrics, MetricsArgs, MetricsPlan};
use crate::cli::privdrop::{self, Plan};
use crate::cli::readiness::Readiness;
use crate::cli::statsfile::StatsFile;
use crate::cli::usage;

/// What a command asks of the launch.
pub(super) struct Launch<'a> {
    /// What its configuration needs ([`Needs::of`]).
    pub needs: Needs,
    /// What it does with its sockets, as the missing-privilege error says it.
    pub doing: Doing,
    /// `-Z USER`.
    pub user: Option<&'a str>,
    /// `--stats-json FILE`.
    pub stats_json: Option<&'a Path>,
    /// `--metrics`.
    pub metrics: &'a MetricsArgs,
    /// The signals that stop the run.
    pub stop_on: &'a [i32],
}

/// A launch under way: what was opened before the engine, held until it runs.
pub(super) struct Launched {
    plan: Plan,
    stats: Option<StatsFile>,
    metrics: Option<MetricsPlan>,
    readiness: Readiness,
    stop: Arc<AtomicBool>,
    stop_on: Vec<i32>,
}

/// A capture error as the exit code wants it: a filter that does not compile is bad input
/// (exit code 2), anything else a runtime failure.
pub(super) fn engine_error(e: CaptureError) -> anyhow::Error {
    match e {
        CaptureError::Filter(f) => usage(f.to_string()),
        e => anyhow::Error::new(e),
    }
}

impl Launch<'_> {
    /// Checks and opens everything the engine does not: see the module docs for the order.
    pub(super) fn prepare(self) -> anyhow::Result<Launched> {
        self.needs.check(self.doing)?;
        let plan = match self.needs {
            // Nothing privileged to open (a file): the capabilities go all the same.
            Needs::Nothing => Plan::Stay,
            _ => privdrop::prepare(self.user)?,
        };
        let metrics = bind_metrics(self.metrics)?;
        let readiness = Readiness::connect()?;
        let stats = self.stats_json.map(StatsFile::open).transpose()?;
        let stop = crate::cli::flag_on(self.stop_on)?;
        Ok(Launched {
            plan,
            stats,
            metrics,
            readiness,
            stop,
            stop_on: self.stop_on.to_vec(),
        })
    }
}

impl Launched {
    /// The flag the stop signals raise.
    pub(super) fn stop(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Makes the stop signals wake `engine`'s supervisor, so it sees a stop at once.
    pub(super) fn wake(&self, engine: &Engine) {
        crate::cli::ring_on(&self.stop_on, engine);
    }

    /// Gives up privileges (the engine's `after_open` step), handing `owned` and the
    /// statistics file to `-Z`'s user.
    pub(super) fn drop_privileges(&self, owned: &[&Path]) -> Result<(), SysError> {
        let stats = self.stats.as_ref().map(StatsFile::path);
        let owned: Vec<&Path> = owned.iter().copied().chain(stats).collect();
        privdrop::apply(&self.plan, &owned)
    }

    /// The outcome of opening the engine: on an error the run is over before it began, so
    /// the stop flag is raised (for engines already started) and the statistics file this
    /// run created is removed.
    pub(super) fn opened<T>(&mut self, opened: anyhow::Result<T>) -> anyhow::Result<T> {
        if opened.is_err() {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(s) = self.stats.take() {
                s.abandon();
            }
        }
        opened
    }

    /// The bound `--metrics` endpoint, to serve once the engine runs.
    pub(super) fn take_metrics(&mut self) -> Option<MetricsPlan> {
        self.metrics.take()
    }

    /// Tells the service manager the process is ready: sockets open, privileges dropped.
    pub(super) fn ready(&self) {
        self.readiness.ready();
    }

    /// Writes the run's `report` to `--stats-json`, if given.
    pub(super) fn finish(self, report: &impl Serialize) -> anyhow::Result<()> {
        self.stats.map_or(Ok(()), |s| s.write(report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::capture::{config, CaptureArgs};
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Argv {
        #[command(flatten)]
        capture: CaptureArgs,
    }

    fn needs(argv: &[&str]) -> Needs {
        let a = Argv::try_parse_from(std::iter::once("capture").chain(argv.iter().copied()))
            .expect("parses");
        Needs::of(&config(&a.capture).expect("config"))
    }

    #[test]
    fn the_backend_and_the_input_decide_what_is_needed() {
        assert_eq!(needs(&["-r", "in.pcap"]), Needs::Nothing);
        assert_eq!(needs(&["-i", "lo", "--queues", "1"]), Needs::RawSockets);
        // Two queues of 64 x 16 frames of 2 KiB (-s 2048 caps the cell below lo's MTU).
        assert_eq!(
            needs(&[
                "-i",
                "lo",
                "--queues",
                "2",
                "--backend",
                "af_xdp",
                "--pool",
                "64,16",
                "-s",
                "2048"
            ]),
            Needs::AfXdp {
                umem_bytes: 2 * 64 * 16 * 2048
            }
        );
    }
}
