//! `poolcap probe -r FILE`: the workers' analysis over a capture file, with the same
//! [`Analyzer`](poolcap_probe::Analyzer), hub and reporter as a live probe, so offline and
//! live reports agree. Periods are cut by the packets' timestamps (a 10 s period holds 10 s
//! of recorded traffic), and the accounting counts the file's packets.
//!
//! The capture engine has no file source yet: when it gets one, `probe -r` becomes a live
//! probe whose source is the file (the engine's workers then run these analyzers) and this
//! module reduces to the timestamp clock.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use poolcap_probe::report::{time_ns, Accounting, RuleRecord};
use poolcap_probe::{Config, Hub};

use super::reporter::Reporter;

/// Runs `config`'s rules over the capture file at `file`; returns the final records.
pub fn run(
    file: &Path,
    config: Config,
    report: Option<&Path>,
    table: bool,
) -> anyhow::Result<Vec<RuleRecord>> {
    let capture = poolcap_format::read_file(file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    if capture.linktype != 1 {
        anyhow::bail!(
            "{}: link type {} is not Ethernet",
            file.display(),
            capture.linktype
        );
    }
    let first = capture.packets.first().map_or(0, |p| p.ts_ns);
    let hub = Hub::new(config);
    let mut analyzer = hub.attach();
    let mut reporter = Reporter::new(hub, time_ns(first), report, table)?;
    let mut totals = Accounting::default();
    let mut period_end = first.saturating_add(nanos(reporter.running().period));
    for p in &capture.packets {
        while p.ts_ns >= period_end {
            let next = (*reporter.running()).clone();
            reporter.switch(time_ns(period_end), totals, next, None, &mut || {
                analyzer.sync()
            })?;
            period_end = period_end.saturating_add(nanos(reporter.running().period));
        }
        analyzer.observe(&p.data, p.orig_len, p.ts_ns);
        totals.captured += 1;
        totals.bytes += u64::from(p.orig_len);
    }
    drop(analyzer);
    let end = capture.packets.last().map_or(first, |p| p.ts_ns);
    reporter.finish(time_ns(end), totals)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}
