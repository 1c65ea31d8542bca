//! Ends periods and writes their reports. A period ends by switching the hub to the next
//! configuration, then collecting every worker's tally of the closed epoch; the records of
//! each rule go to the JSON Lines file (written a whole period at a time, so a reader sees
//! whole periods, and a period a full disk refused is counted: [`super::report_file`]) and a
//! table to stdout. With `--in-kernel`, the rules the eBPF program counts
//! get its counts for the period added to the merged tally before the records are made, so
//! the records are the same either way, and each JSON line says where its rule `ran`.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use poolcap_probe::report::{self, Accounting, Change, Period, RuleRecord};
use poolcap_probe::{Config, Hub};
use serde::Serialize;

use super::kernel::KernelRules;
use super::report_file::ReportFile;
use super::ProbeError;

/// How long the reporter waits for every worker's tally: a worker answers at its next chunk
/// boundary or within its idle wait, so this only bounds a stuck worker.
const COLLECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Empty periods in a row reported a record each; a longer run is one record.
const EMPTY_ONE_BY_ONE: u64 = 1000;

/// Called with each period's records once they are written (the exporters); it must not
/// wait for anything.
pub type PeriodHook = Box<dyn FnMut(&[RuleRecord]) + Send>;

/// The reporter's state between periods.
pub struct Reporter {
    hub: Arc<Hub>,
    start: SystemTime,
    changes: Vec<Change>,
    accounting_at_start: Accounting,
    jsonl: Option<ReportFile>,
    table: bool,
    hooks: Vec<PeriodHook>,
    kernel: Option<KernelRules>,
    /// Late packets of the current period (a file's).
    late: u64,
}

/// A JSON line: the record, with what only the file's reader needs.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    record: &'a RuleRecord,
    /// Where the rule ran, with `--in-kernel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    ran: Option<&'static str>,
    /// Earlier periods whose lines a full disk kept out of the file.
    #[serde(skip_serializing_if = "is_zero")]
    periods_unwritten: u64,
    /// Packets counted in this period though stamped before its start (a file whose time
    /// steps back).
    #[serde(skip_serializing_if = "is_zero")]
    late: u64,
    /// This record stands for this many empty periods in a row (a gap in a file).
    #[serde(skip_serializing_if = "is_zero")]
    empty_periods: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Reporter {
    /// A reporter whose first period starts at `start`; records go to `jsonl` (created now)
    /// and, with `table`, a table to stdout.
    pub fn new(
        hub: Arc<Hub>,
        start: SystemTime,
        jsonl: Option<&Path>,
        table: bool,
    ) -> Result<Self, ProbeError> {
        let jsonl = jsonl.map(ReportFile::create).transpose()?;
        Ok(Self {
            hub,
            start,
            changes: Vec::new(),
            accounting_at_start: Accounting::default(),
            jsonl,
            table,
            hooks: Vec::new(),
            kernel: None,
            late: 0,
        })
    }

    /// Adds the in-kernel rules' counts to every period from now on.
    pub fn set_kernel(&mut self, kernel: KernelRules) {
        self.kernel = Some(kernel);
    }

    /// Readies `next` to run: with in-kernel rules, places its rules and loads their
    /// program; an error (a rule the kernel cannot run, a refused program) changes nothing.
    pub fn prepare(&mut self, next: &mut Config) -> Result<(), String> {
        self.kernel.as_mut().map_or(Ok(()), |k| k.prepare(next))
    }

    /// The in-kernel program's own running totals, when there are in-kernel rules.
    pub fn kernel_accounting(&self) -> Option<Result<Accounting, ProbeError>> {
        self.kernel.as_ref().map(KernelRules::accounting)
    }

    /// Also hands every period's records to `hook`.
    pub fn on_period(&mut self, hook: PeriodHook) {
        self.hooks.push(hook);
    }

    /// The configuration the current period runs.
    pub fn running(&self) -> Arc<Config> {
        self.hub.current().1
    }

    /// Ends the current period at `now` (capture counters `accounting`, running totals);
    /// the next period runs `next`, and `change`, if any, is reported as taking effect at
    /// its start. `handover` runs between the switch and the collection (an analyzer on the
    /// reporter's own thread syncs there). Returns the time the change took effect.
    pub fn switch(
        &mut self,
        now: SystemTime,
        accounting: Accounting,
        next: Config,
        change: Option<String>,
        handover: &mut dyn FnMut(),
    ) -> Result<String, ProbeError> {
        // The kernel's period ends first: nothing between `now` and the flip.
        if let Some(k) = &mut self.kernel {
            k.install()?;
        }
        let (epoch, ran) = self.hub.switch(next);
        handover();
        let mut tally = self.hub.collect(epoch, &ran, false, COLLECT_TIMEOUT)?;
        if let Some(k) = &mut self.kernel {
            k.add_to(&ran, &mut tally, (self.start, now))?;
        }
        self.emit(&ran, &tally, now, accounting, false, 0)?;
        let at = report::time(now);
        if let Some(what) = change {
            self.changes.push(Change {
                at: at.clone(),
                what,
            });
        }
        Ok(at)
    }

    /// Adds `n` packets to the current period's late ones: counted in it though stamped
    /// before its start (a file whose time steps back).
    pub fn late(&mut self, n: u64) {
        self.late += n;
    }

    /// Reports `n` periods of `period` with no packet, from the current period's start,
    /// without a round through the workers (their open tally stays empty, so the next
    /// period's collect covers the next period alone). Up to `EMPTY_ONE_BY_ONE` get a
    /// record each; a longer run is one record per rule, with `empty_periods`, and a line
    /// on stderr.
    pub fn empty_periods(
        &mut self,
        n: u64,
        period: Duration,
        accounting: Accounting,
    ) -> Result<(), ProbeError> {
        let config = self.running();
        let none = poolcap_probe::tally::Tally::new(&config);
        if n <= EMPTY_ONE_BY_ONE {
            for _ in 0..n {
                let end = self.start + period;
                self.emit(&config, &none, end, accounting, false, 0)?;
            }
            return Ok(());
        }
        let span = Duration::from_nanos(
            u64::try_from(period.as_nanos())
                .unwrap_or(u64::MAX)
                .saturating_mul(n),
        );
        let end = self.start + span;
        log::info!(
            "probe: no packets from {} to {}: {n} empty periods reported as one",
            report::time(self.start),
            report::time(end)
        );
        self.emit(&config, &none, end, accounting, false, n)?;
        Ok(())
    }

    /// Ends the last period at `now` (or at its start, if `now` is earlier: a file whose
    /// last packets are stamped before the open period), once every worker has stopped;
    /// returns its records.
    pub fn finish(
        mut self,
        now: SystemTime,
        accounting: Accounting,
    ) -> Result<Vec<RuleRecord>, ProbeError> {
        let now = now.max(self.start);
        let (epoch, ran) = self.hub.current();
        let mut tally = self.hub.collect(epoch, &ran, true, COLLECT_TIMEOUT)?;
        if let Some(k) = &mut self.kernel {
            k.detach();
            k.add_to(&ran, &mut tally, (self.start, now))?;
        }
        let records = self.emit(&ran, &tally, now, accounting, true, 0)?;
        if let Some(file) = self.jsonl.take() {
            file.close()?;
        }
        Ok(records)
    }

    fn emit(
        &mut self,
        config: &Config,
        tally: &poolcap_probe::tally::Tally,
        end: SystemTime,
        accounting: Accounting,
        last: bool,
        empty_periods: u64,
    ) -> Result<Vec<RuleRecord>, ProbeError> {
        let late = std::mem::take(&mut self.late);
        let mut counted = accounting.since(&self.accounting_at_start);
        if self.hub.members() > 0 {
            // What the workers analysed in the period, cut at the same switch as the rules'
            // counts; the capture counters run ahead of the workers by what the pools hold.
            counted.captured = tally.analysed;
            counted.bytes = tally.analysed_bytes;
        }
        let period = Period {
            start: self.start,
            end,
            accounting: counted,
            changes: std::mem::take(&mut self.changes),
            last,
        };
        let records = report::records(config, tally, &period);
        let placed = self.kernel.is_some();
        if let Some(file) = &mut self.jsonl {
            let mut lines = Vec::new();
            for (record, rule) in records.iter().zip(&config.rules) {
                let line = Line {
                    record,
                    ran: placed.then_some(if rule.in_kernel { "kernel" } else { "user" }),
                    periods_unwritten: file.unwritten(),
                    late,
                    empty_periods,
                };
                serde_json::to_writer(&mut lines, &line)?;
                lines.push(b'\n');
            }
            file.write_period(&lines);
        }
        if self.table {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(report::table(&records, &period).as_bytes());
            let _ = stdout.flush();
        }
        for hook in &mut self.hooks {
            hook(&records);
        }
        self.start = end;
        self.accounting_at_start = accounting;
        Ok(records)
    }
}
