//! The periodic action manager beside a live capture: one thread that ends a period when
//! its time is up, applies `poolcap ctl` commands and SIGHUP reloads (each ends the current
//! period at once, so every period runs one rule set and the report says when each change
//! took effect), and writes the final report once the engine has drained.
//!
//! Capture never waits for it: workers only look at the hub's epoch at chunk boundaries.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use poolcap_probe::control::{self, Command};
use poolcap_probe::report::{Accounting, RuleRecord};
use poolcap_probe::Config;

use super::control::{ControlServer, ControlSocket};
use super::reporter::Reporter;
use super::ProbeError;
use crate::capture::account::{self, QueueCounters};

/// How often the manager looks at the clock, the socket and the flags.
const TICK: Duration = Duration::from_millis(20);

/// The engine's running totals as report accounting.
pub fn accounting(counters: &[Arc<QueueCounters>]) -> Accounting {
    let t = account::total(&account::snapshots(counters));
    Accounting {
        captured: t.captured,
        bytes: t.bytes,
        dropped_kernel: t.dropped_kernel,
        dropped_pool: t.dropped_pool,
        filtered: t.filtered,
    }
}

/// What the manager needs.
pub struct Manager {
    /// Writes the reports.
    pub reporter: Reporter,
    /// The configuration file, for reloads.
    pub config_path: PathBuf,
    /// The engine's counters; none when no capture runs (every rule in the kernel), and
    /// the accounting is then the in-kernel program's own total.
    pub counters: Arc<Vec<Arc<QueueCounters>>>,
    /// The control socket, if any.
    pub socket: Option<ControlSocket>,
    /// Set by SIGHUP.
    pub hangup: Arc<AtomicBool>,
    /// Set once the engine has drained (every worker has handed over its last tally).
    pub engine_done: Arc<AtomicBool>,
}

impl Manager {
    /// Runs until the engine is done; returns the final period's records.
    pub fn run(mut self) -> Result<Vec<RuleRecord>, ProbeError> {
        let server = self.socket.take().map(ControlSocket::serve).transpose()?;
        let mut period_started = Instant::now();
        while !self.engine_done.load(Ordering::Acquire) {
            std::thread::sleep(TICK);
            let running = self.reporter.running();
            if period_started.elapsed() >= running.period {
                self.switch((*running).clone(), None)?;
                period_started = Instant::now();
            }
            if self.hangup.swap(false, Ordering::Relaxed) {
                let reply = self.command(Command::Reload)?;
                log::info!("SIGHUP: {reply}");
                if reply.starts_with("ok") {
                    period_started = Instant::now();
                }
            }
            for request in server.iter().flat_map(ControlServer::pending) {
                match control::parse(&request.line).map(|c| self.command(c)) {
                    Err(e) => request.answer(format!("error: {e}")),
                    Ok(Ok(reply)) => {
                        if reply.starts_with("ok") {
                            period_started = Instant::now();
                        }
                        request.answer(reply);
                    }
                    Ok(Err(e)) => {
                        request.answer(format!("error: {e}"));
                        return Err(e);
                    }
                }
            }
        }
        let now = SystemTime::now();
        let acc = self.accounting()?;
        self.reporter.finish(now, acc)
    }

    fn accounting(&self) -> Result<Accounting, ProbeError> {
        match self.reporter.kernel_accounting() {
            Some(kernel) if self.counters.is_empty() => kernel,
            _ => Ok(accounting(&self.counters)),
        }
    }

    fn switch(&mut self, mut next: Config, change: Option<String>) -> Result<String, ProbeError> {
        self.reporter
            .prepare(&mut next)
            .map_err(ProbeError::Kernel)?;
        let acc = self.accounting()?;
        self.reporter
            .switch(SystemTime::now(), acc, next, change, &mut || {})
    }

    /// Applies one command; `Ok` holds the reply (an `error` reply changed nothing), `Err`
    /// a failure of the probe itself (a report it could not write).
    fn command(&mut self, cmd: Command) -> Result<String, ProbeError> {
        let running = self.reporter.running();
        let (next, what) = match &cmd {
            Command::Status => return Ok(format!("ok {}", control::status(&running))),
            Command::Reload => match poolcap_probe::config::load(&self.config_path) {
                Ok(c) => {
                    let what = format!("reload: {}", control::status(&c));
                    (c, what)
                }
                Err(e) => {
                    return Ok(format!(
                        "error: reload failed, keeping the running rules: {e}"
                    ))
                }
            },
            other => match control::apply(&running, other) {
                Ok(x) => x,
                Err(e) => return Ok(format!("error: {e}")),
            },
        };
        let mut next = next;
        if let Err(e) = self.reporter.prepare(&mut next) {
            return Ok(format!("error: {e}"));
        }
        let at = self.switch(next, Some(what.clone()))?;
        Ok(format!("ok {what}, in effect from {at}"))
    }
}
