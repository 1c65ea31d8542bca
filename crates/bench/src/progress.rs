//! What the operator sees while a suite runs: one line per finished run (which point, subject
//! and run, and what it measured), so a log of a bench tells the whole story, and on a
//! terminal a progress bar under those lines with the runs done, the time taken and an
//! estimate of the time left (a quick suite still takes minutes, a full one hours).
//!
//! Without a terminal on stderr (tests, CI, `2> log`) there is no bar and the lines are
//! printed as before the bar existed: the run's label when it starts, its result when it ends,
//! so a log shows which run hung.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::point::Record;

/// The bar: elapsed time, the bar, runs done of all runs, time left, the current run.
const TEMPLATE: &str =
    "[{elapsed_precise}] {bar:30.cyan/blue} {pos}/{len} runs, ETA {eta} · {wide_msg}";

/// Progress over the runs of one [`super::manager`] call.
pub struct Progress {
    /// The bar, on a terminal only.
    bar: Option<ProgressBar>,
    /// `[i/n] point · subject · run r/R` of the run under way.
    label: String,
}

impl Progress {
    /// Progress over `runs` runs: a bar when stderr is a terminal, plain lines otherwise.
    pub fn new(runs: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(runs).with_style(
                ProgressStyle::with_template(TEMPLATE)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            // Redraw every second, so the elapsed time moves during a long run.
            bar.enable_steady_tick(Duration::from_secs(1));
            bar
        });
        Progress {
            bar,
            label: String::new(),
        }
    }

    /// A run starts: run `run` of `runs` of `subject` at point `index` (from 1) of `points`.
    pub fn start(
        &mut self,
        (index, points): (usize, usize),
        point: &str,
        subject: &str,
        (run, runs): (usize, usize),
    ) {
        let what = format!("{point} · {subject} · run {run}/{runs}");
        self.label = format!("[{index}/{points}] {what}");
        match &self.bar {
            Some(bar) => bar.set_message(what),
            None => eprint!("{}: ", self.label),
        }
    }

    /// The run under way finished with `r`.
    pub fn done(&self, r: &Record) {
        match &self.bar {
            Some(bar) => {
                bar.println(format!("{}: {}", self.label, outcome(r)));
                bar.inc(1);
            }
            None => log::info!("{}", outcome(r)),
        }
    }

    /// The run under way was interrupted (Ctrl-C): the bar stays as it is, and no more runs
    /// follow.
    pub fn interrupted(self) {
        match self.bar {
            Some(bar) => {
                bar.println(format!("{}: interrupted", self.label));
                bar.abandon();
            }
            None => log::info!("interrupted"),
        }
    }

    /// Every run is done (or Ctrl-C came between two runs).
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.abandon();
        }
    }
}

/// What a run measured, in one line: `sent 20000 at 350 kpps, captured 20000, loss 0.000%, ...`.
fn outcome(r: &Record) -> String {
    if let Some(e) = &r.error {
        return format!("FAILED: {e}");
    }
    let mut s = String::new();
    if let Some(sent) = &r.sent {
        let _ = write!(s, "sent {} at {:.0} kpps", sent.frames, sent.pps / 1e3);
    }
    if let Some(c) = r.captured() {
        let _ = write!(s, ", captured {c}");
    }
    if let Some(l) = r.loss {
        let _ = write!(s, ", loss {:.3}%", l * 100.0);
    }
    if let Some(cpu) = r.cpu_s {
        let _ = write!(s, ", tool CPU {cpu:.2} s");
    }
    if let Some(n) = r.syscalls {
        let _ = write!(s, ", {n} syscalls");
    }
    if let Some(sp) = r.spacing {
        let _ = write!(s, ", longest back-to-back {}", sp.max_back_to_back);
    }
    let _ = write!(s, " ({:.1} s)", r.wall_s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_template_is_valid() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
    }
}
