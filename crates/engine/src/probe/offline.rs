//! `poolcap probe -r FILE`: the clock of a probe whose source is a capture file. The file
//! goes through the capture engine as `capture -r` reads it (pool, workers running the
//! rules, `--workers`, `--speed`, standard input), so offline and live reports come from
//! the same code; only the period clock differs.
//!
//! Periods follow the packets' timestamps (a 10 s period holds 10 s of recorded traffic),
//! not the wall clock: the file source's [`Gate`] lets one period's packets through, this
//! clock waits until the workers have analysed all of them (every chunk is back in the
//! pool), ends the period at its recorded end time, and only then opens the gate for the
//! next one. So a period holds exactly the packets recorded in it, however many workers
//! share them and however fast they go.
//!
//! A file whose time steps back (files appended one after another) has packets stamped
//! before the open period: the file is read in its order, so such a packet is counted in
//! the period open when it is read, and as `late` there. Periods with no packet (a gap in
//! the file) are reported at once, a long run of them as one record.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use poolcap_probe::report::{time_ns, RuleRecord};
use poolcap_probe::{Config, Hub};

use super::live::accounting;
use super::report_file::Unwritten;
use super::reporter::{PeriodHook, Reporter};
use super::ProbeError;
use crate::capture::account::QueueCounters;
use crate::capture::file::{FileSource, Gate};
use crate::capture::pool::Pool;
use crate::capture::{CaptureConfig, CaptureReport, Engine, Input};

/// Runs `config`'s rules over the file `cfg` reads (`Input::File`, as `capture -r`
/// resolves it), records to `report` and, with `table`, stdout, and hands every period's
/// records to `hooks` (the exporters: their flow timeouts run on the periods' ends, so in
/// the file's time); returns the engine's report once the file is read and the last period
/// written, and the periods a full disk kept out of `report`.
pub fn run(
    mut cfg: CaptureConfig,
    config: Config,
    report: Option<&Path>,
    table: bool,
    stop: Arc<AtomicBool>,
    hooks: Vec<PeriodHook>,
) -> Result<(CaptureReport, Option<Unwritten>), ProbeError> {
    let Input::File { path, speed } = std::mem::replace(&mut cfg.input, Input::Live) else {
        return Err(ProbeError::Input("probe -r needs a file".into()));
    };
    let mut source = FileSource::open(&path, None, speed)?;
    // Rules are compiled for, and flows read from, Ethernet frames.
    if source.linktype() != poolcap_format::LinkType::ETHERNET {
        return Err(ProbeError::Input(format!(
            "{}: the probe reads Ethernet captures; this file is {}",
            path.display(),
            source.linktype()
        )));
    }
    let gate = source.gated();
    cfg.input = Input::Sources(vec![Box::new(source)]);
    let hub = Hub::new(config);
    cfg.probe = Some(Arc::clone(&hub));
    let engine = Engine::start(cfg, Arc::clone(&stop), |_| Ok(()))?;
    let mut reporter = Reporter::new(hub, time_ns(FileClock::start_ns(&gate)), report, table)?;
    for hook in hooks {
        reporter.on_period(hook);
    }
    let engine_done = Arc::new(AtomicBool::new(false));
    let clock = FileClock {
        reporter,
        gate,
        counters: engine.counters(),
        pools: engine.pools(),
        engine_done: Arc::clone(&engine_done),
        stop: Arc::clone(&stop),
    };
    let clock = std::thread::Builder::new()
        .name("probe-clock".into())
        .spawn(move || {
            // A clock that fails (a report it cannot write) would hold the file forever.
            let r = clock.run();
            if r.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            r
        })?;
    let report = engine.run();
    engine_done.store(true, Ordering::Release);
    let clocked = clock
        .join()
        .map_err(|_| ProbeError::Panicked("probe clock"))?;
    match clocked {
        Ok(_) => Ok((report, None)),
        Err(ProbeError::Unwritten(u)) => Ok((report, Some(u))),
        Err(e) => Err(e),
    }
}

/// How often the clock looks at the gate and the pools.
const TICK: Duration = Duration::from_micros(500);

/// What the file clock needs.
pub struct FileClock {
    /// Writes the reports; its first period starts at the file's first packet.
    pub reporter: Reporter,
    /// The file source's gate.
    pub gate: Arc<Gate>,
    /// The engine's counters.
    pub counters: Arc<Vec<Arc<QueueCounters>>>,
    /// The engine's pools: a period's packets are analysed once every chunk is free.
    pub pools: Arc<Vec<Arc<Pool>>>,
    /// Set once the engine has drained.
    pub engine_done: Arc<AtomicBool>,
    /// Set by a stop (SIGINT, SIGTERM): the file is read no further, so no period ends
    /// after the packets read.
    pub stop: Arc<AtomicBool>,
}

impl FileClock {
    /// The first period's start: the file's first packet (the epoch for an empty file).
    pub fn start_ns(gate: &Gate) -> u64 {
        gate.next().unwrap_or(0)
    }

    /// Cuts periods until the engine is done; returns the final period's records.
    pub fn run(mut self) -> Result<Vec<RuleRecord>, ProbeError> {
        let start = Self::start_ns(&self.gate);
        let mut period_end = start.saturating_add(self.period_ns());
        self.gate.open(start, period_end);
        let mut late_before = 0;
        while !self.engine_done.load(Ordering::Acquire) {
            let next = self.gate.next();
            let at_boundary =
                next.is_some_and(|t| t >= period_end) && !self.stop.load(Ordering::Relaxed);
            if !at_boundary || self.pools.iter().any(|p| p.in_use() > 0) {
                std::thread::sleep(TICK);
                continue;
            }
            let late = self.gate.late();
            self.reporter.late(late - late_before);
            late_before = late;
            let running = (*self.reporter.running()).clone();
            let acc = accounting(&self.counters);
            self.reporter
                .switch(time_ns(period_end), acc, running, None, &mut || {})?;
            let period = self.period_ns();
            // The periods before the next packet's are empty: reported at once, without a
            // round through the workers each (the workers' open tally stays empty).
            let empty = next.map_or(0, |t| (t - period_end) / period);
            if empty > 0 {
                self.reporter
                    .empty_periods(empty, Duration::from_nanos(period), acc)?;
                period_end = period_end.saturating_add(empty.saturating_mul(period));
            }
            let from = period_end;
            period_end = period_end.saturating_add(period);
            self.gate.open(from, period_end);
        }
        let late = self.gate.late();
        self.reporter.late(late - late_before);
        let acc = accounting(&self.counters);
        self.reporter.finish(time_ns(self.gate.last()), acc)
    }

    fn period_ns(&self) -> u64 {
        let d = self.reporter.running().period;
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
    }
}
