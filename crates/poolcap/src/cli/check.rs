//! `poolcap check`: reads capture files and checks the generator frames in them for loss,
//! duplicates and reordering. Several files are checked as one capture, in the order given
//! (the files of a rotation: `poolcap check cap.pcapng cap.pcapng1 cap.pcapng2`).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::seqcheck::SeqChecker;

/// Arguments of `poolcap check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// pcap or pcapng files, checked as one capture in this order.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Frames each generator sent; with it, any missing or duplicated frame fails the check.
    #[arg(long, value_parser = crate::units::parse_count)]
    expect: Option<u64>,
    /// Print the per-generator reports as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `poolcap check`.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let mut checker = SeqChecker::new();
    let mut packets = 0;
    for path in &args.files {
        let file = poolcap_format::read_file(path)
            .with_context(|| format!("cannot check {}", path.display()))?;
        packets += file.packets.len();
        for p in &file.packets {
            checker.observe(&p.data);
        }
    }
    let names: Vec<String> = args.files.iter().map(|p| p.display().to_string()).collect();
    let reports = checker.reports(args.expect);
    if args.json {
        let v = serde_json::json!({
            "files": args.files,
            "packets": packets,
            "untagged": checker.untagged(),
            "generators": reports,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} packets, {} without a generator tag",
            names.join(" "),
            packets,
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
