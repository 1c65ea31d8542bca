//! `poolcap-bench validate DIR` (`poolcap predict --validate DIR`): predicted against
//! measured loss for every point of a bench result, with `--profile`, else the profile the
//! run calibrated itself (`bench predict`; saved as `profile.json` there), else the default
//! one; writes predict.csv and predict.png there.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use poolcap::cli::predict::load_profile;
use poolcap::cli::usage;
use poolcap_bench::meta::Meta;
use poolcap_bench::plot::Chart;
use poolcap_bench::report;
use poolcap_bench::validate::{of_run, series};
use poolcap_measure::calibrate::validate;

/// Arguments of `poolcap-bench validate`.
#[derive(Debug, Args)]
pub(super) struct ValidateArgs {
    /// A bench result directory (raw.jsonl, meta.json).
    dir: PathBuf,
    /// Profile from `poolcap calibrate` (default: the run's own calibration, else
    /// $POOLCAP_PROFILE, /var/lib/poolcap/profile.json, else the built-in one).
    #[arg(long)]
    profile: Option<PathBuf>,
}

/// Runs `poolcap-bench validate`.
pub(super) fn run(args: ValidateArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    let raw = dir.join("raw.jsonl");
    if !raw.is_file() {
        return Err(usage(format!(
            "no {} (not a bench result directory)",
            raw.display()
        )));
    }
    let rows = report::aggregate(&report::read_raw(&raw)?);
    let own = match &args.profile {
        Some(_) => None,
        None => Meta::read(dir).ok().and_then(|m| of_run(&m, &rows)),
    };
    let (profile, note) = match own {
        Some(p) => {
            let file = dir.join("profile.json");
            let text = serde_json::to_string_pretty(&p)? + "\n";
            poolcap::outfile::write(&file, text.as_bytes())
                .with_context(|| format!("cannot write {}", file.display()))?;
            let note = format!("profile: {} (saved to {})", p.source, file.display());
            (p, note)
        }
        None => load_profile(args.profile.as_deref())?,
    };
    let compared = validate::compare(&rows, &profile);
    println!("{note}");
    print!("{}", validate::markdown(&compared));
    println!("{}", validate::Tally::of(&compared).line());
    let csv = dir.join("predict.csv");
    poolcap::outfile::write(&csv, validate::csv(&compared).as_bytes())
        .with_context(|| format!("cannot write {}", csv.display()))?;
    Chart::new(
        "Predicted against measured loss",
        "measured loss (%)",
        "predicted loss (%)",
    )
    .draw(&dir.join("predict.png"), &series(&compared))?;
    log::info!(
        "wrote {} and {}",
        dir.join("predict.csv").display(),
        dir.join("predict.png").display()
    );
    Ok(())
}
