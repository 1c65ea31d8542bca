//! `poolcap check`: reads capture files (plain, or compressed as `capture --compress` writes
//! them) packet by packet, never whole, and checks the generator frames in them for loss, duplicates and reordering. Several
//! files are checked as one capture, in the order given (the files of a rotation:
//! `poolcap check cap.pcapng cap.pcapng1 cap.pcapng2`). With `--expect N` the files must hold
//! exactly frames 0..N of every generator, each once: a check that passes a file holding more
//! than was sent would hide a capture that duplicates. Frames that carry their send time give
//! one-way latency percentiles (capture time minus send time, on the same clock).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use poolcap_format::LinkType;

use crate::capture::linktype::Sll2;

use crate::seqcheck::{GenReport, LatencyReport, SeqChecker};

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

/// `packet` of `linktype` as the Ethernet frame the generator sent (the checker reads
/// Ethernet): as it is, or its network layer behind a made-up Ethernet header in `scratch`
/// (a capture on every interface, or on a raw IP device).
fn as_ethernet<'a>(
    linktype: LinkType,
    packet: &'a [u8],
    scratch: &'a mut Vec<u8>,
) -> anyhow::Result<&'a [u8]> {
    let (ethertype, payload) = match linktype {
        LinkType::ETHERNET => return Ok(packet),
        LinkType::LINUX_SLL2 => match Sll2::parse(packet) {
            Some(sll) => (sll.protocol.to_be_bytes(), sll.payload),
            None => ([0, 0], &[][..]),
        },
        LinkType::LINUX_SLL if packet.len() >= 16 => ([packet[14], packet[15]], &packet[16..]),
        LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => match packet.first().map(|b| b >> 4) {
            Some(6) => ([0x86, 0xdd], packet),
            _ => ([0x08, 0x00], packet),
        },
        LinkType::LINUX_SLL => ([0, 0], &[][..]),
        _ => {
            anyhow::bail!("generator frames are checked in Ethernet, raw IP or Linux cooked files")
        }
    };
    scratch.clear();
    scratch.extend_from_slice(&[0; 12]);
    scratch.extend_from_slice(&ethertype);
    scratch.extend_from_slice(payload);
    Ok(scratch)
}

/// Runs `poolcap check`.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let mut checker = SeqChecker::new();
    let mut packets = 0;
    for path in &args.files {
        let cannot = || format!("cannot check {}", path.display());
        let mut file = crate::capfile::stream(path).with_context(cannot)?;
        let linktype = LinkType(file.linktype() as u16);
        let mut frame = Vec::new();
        while let Some(p) = file.next_packet().with_context(cannot)? {
            packets += 1;
            let data = as_ethernet(linktype, p.data, &mut frame)
                .with_context(|| format!("{}: link type {linktype}", cannot()))?;
            checker.observe_at(data, p.ts_ns);
        }
    }
    let reports = checker.reports(args.expect);
    print_reports(&args, packets, &checker, &reports)?;
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

/// Prints what `check` found: one line for the files, one per generator (or JSON).
fn print_reports(
    args: &CheckArgs,
    packets: u64,
    checker: &SeqChecker,
    reports: &[GenReport],
) -> anyhow::Result<()> {
    let names: Vec<String> = args.files.iter().map(|p| p.display().to_string()).collect();
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
        for r in reports {
            println!(
                "generator {}: {} frames, {} unique, {} missing, {} duplicates, {} reordered \
                 ({} within a flow){}",
                r.gen_id,
                r.frames,
                r.unique,
                r.missing,
                r.duplicates,
                r.reordered,
                r.reordered_in_flow,
                if args.expect.is_some() {
                    format!(", {} extra", r.extra)
                } else {
                    String::new()
                }
            );
            if let Some(l) = &r.latency {
                println!("  {}", latency_line(l));
            }
        }
    }
    Ok(())
}

/// The latency percentiles of one generator, in microseconds.
fn latency_line(l: &LatencyReport) -> String {
    let us = |ns: i64| format!("{:.1}", ns as f64 / 1e3);
    format!(
        "latency over {} stamped frames (us): min {}, p50 {}, p99 {}, p99.9 {}, max {}",
        l.frames,
        us(l.min_ns),
        us(l.p50_ns),
        us(l.p99_ns),
        us(l.p999_ns),
        us(l.max_ns)
    )
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
            latency: None,
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

    #[test]
    fn latency_line_shows_each_percentile_in_microseconds() {
        let l = LatencyReport {
            frames: 1000,
            min_ns: 8_000,
            p50_ns: 12_340,
            p99_ns: 45_000,
            p999_ns: 120_000,
            max_ns: 2_500_000,
        };
        assert_eq!(
            latency_line(&l),
            "latency over 1000 stamped frames (us): min 8.0, p50 12.3, p99 45.0, p99.9 120.0, \
             max 2500.0"
        );
    }
}
