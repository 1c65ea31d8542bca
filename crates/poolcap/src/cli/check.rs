//! `poolcap check`: reads a capture file and checks the generator frames in it for loss,
//! duplicates and reordering.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::seqcheck::SeqChecker;

/// Arguments of `poolcap check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A pcap or pcapng file.
    file: PathBuf,
    /// Frames each generator sent; with it, any missing or duplicated frame fails the check.
    #[arg(long, value_parser = crate::units::parse_count)]
    expect: Option<u64>,
    /// Print the per-generator reports as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `poolcap check`.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let file = poolcap_format::read_file(&args.file)
        .with_context(|| format!("cannot check {}", args.file.display()))?;
    let mut checker = SeqChecker::new();
    for p in &file.packets {
        checker.observe(&p.data);
    }
    let reports = checker.reports(args.expect);
    if args.json {
        let v = serde_json::json!({
            "file": args.file,
            "packets": file.packets.len(),
            "untagged": checker.untagged(),
            "generators": reports,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} packets, {} without a generator tag",
            args.file.display(),
            file.packets.len(),
            checker.untagged()
        );
        for r in &reports {
            println!(
                "generator {}: {} frames, {} unique, {} missing, {} duplicates, {} reordered",
                r.gen_id, r.frames, r.unique, r.missing, r.duplicates, r.reordered
            );
        }
    }
    if let Some(n) = args.expect {
        if reports.is_empty() && n > 0 {
            anyhow::bail!("expected {n} frames per generator, found no generator frames");
        }
        if let Some(bad) = reports.iter().find(|r| r.missing > 0 || r.duplicates > 0) {
            anyhow::bail!(
                "generator {}: {} missing and {} duplicated of {n} expected frames",
                bad.gen_id,
                bad.missing,
                bad.duplicates
            );
        }
    }
    Ok(())
}
