//! `poolcap check`: reads capture files (plain, or compressed as `capture --compress` writes
//! them) and checks the generator frames in them for loss, duplicates and reordering. Several
//! files are checked as one capture, in the order given (the files of a rotation:
//! `poolcap check cap.pcapng cap.pcapng1 cap.pcapng2`). With `--expect N` the files must hold
//! exactly frames 0..N of every generator, each once: a check that passes a file holding more
//! than was sent would hide a capture that duplicates.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::seqcheck::GenReport;

use crate::seqcheck::SeqChecker;

/// Arguments of `poolcap check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// pcap or pcapng files, plain or compressed with zstd or gzip, checked as one capture in
    /// this order.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Frames each generator sent; with it, any missing, duplicated or extra frame (a
    /// sequence number of N or more) fails the check.
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
        let file = crate::capfile::read(path)
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
                "generator {}: {} frames, {} unique, {} missing, {} duplicates, {} reordered{}",
                r.gen_id,
                r.frames,
                r.unique,
                r.missing,
                r.duplicates,
                r.reordered,
                if args.expect.is_some() {
                    format!(", {} extra", r.extra)
                } else {
                    String::new()
                }
            );
        }
    }
    if let Some(n) = args.expect {
        if reports.is_empty() && n > 0 {
            anyhow::bail!("expected {n} frames per generator, found no generator frames");
        }
        if let Some(why) = reports.iter().find_map(|r| verdict(r, n)) {
            anyhow::bail!("{why}");
        }
    }
    Ok(())
}

/// Why generator `r` fails `--expect n`, if it does.
fn verdict(r: &GenReport, n: u64) -> Option<String> {
    let mut faults = Vec::new();
    if r.missing > 0 {
        faults.push(format!("{} missing", r.missing));
    }
    if r.duplicates > 0 {
        faults.push(format!("{} duplicated", r.duplicates));
    }
    if r.extra > 0 {
        faults.push(format!(
            "{} extra (sequence numbers {n} and above)",
            r.extra
        ));
    }
    (!faults.is_empty()).then(|| {
        format!(
            "generator {}: {} frames where exactly {n} were expected: {}",
            r.gen_id,
            r.frames,
            faults.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(frames: u64, missing: u64, duplicates: u64, extra: u64) -> GenReport {
        GenReport {
            gen_id: 1,
            frames,
            unique: frames - duplicates,
            duplicates,
            reordered: 0,
            reordered_in_flow: 0,
            missing,
            extra,
            max_seq: None,
        }
    }

    #[test]
    fn exactly_the_expected_frames_pass_and_anything_else_fails() {
        assert_eq!(verdict(&report(1000, 0, 0, 0), 1000), None);
        assert_eq!(
            verdict(&report(10000, 0, 0, 9000), 1000).as_deref(),
            Some(
                "generator 1: 10000 frames where exactly 1000 were expected: \
                 9000 extra (sequence numbers 1000 and above)"
            )
        );
        let both = verdict(&report(1000, 5, 5, 0), 1000).expect("fails");
        assert!(both.contains("5 missing, 5 duplicated"), "{both}");
    }
}
