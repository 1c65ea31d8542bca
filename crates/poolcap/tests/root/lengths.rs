//! Length filters on packets cut short: `greater`, `less` and `len` read a packet's length on
//! the wire, not the bytes a snaplen kept, in every place poolcap runs libpcap's filter over
//! a file (capture -r, probe -r), as `tcpdump -r` does.

use std::path::Path;
use std::process::Command;

use libtest_mimic::Trial;

use crate::common::{bin, capture, gen, lab, num, path_str, stats, tcpdump_count, tempdir, trial};
use crate::probe::{probe_file, totals};

/// The filters compared, each selecting some but not all of an imix file cut to 100 bytes.
const FILTERS: [&str; 3] = ["greater 1000", "less 100", "len > 500"];

/// Generated imix traffic captured whole, then cut to 100 bytes a packet by `editcap -s 100`
/// (wire lengths kept): capture -r and probe -r select what `tcpdump -r` selects on the cut
/// file, for each length filter.
fn length_filters_read_the_wire_length_of_cut_packets() {
    let lab = lab(1);
    let dir = tempdir();
    let (full, cut) = (dir.path().join("full.pcap"), dir.path().join("cut.pcap"));
    let bg = capture(&lab, &["--format", "pcap", "-w", path_str(&full)]);
    gen(
        &lab,
        &[
            "--count", "6000", "--rate", "20k", "--flows", "8", "--size", "imix",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, err) = bg.stop("INT");
    assert_eq!(code, Some(0), "capture: {err}");
    let out = Command::new("editcap")
        .args(["-s", "100"])
        .arg(&full)
        .arg(&cut)
        .output()
        .expect("editcap");
    assert!(out.status.success(), "editcap -s 100: {out:?}");
    let total = tcpdump_count(&cut, &[]);
    assert!(total > 0, "nothing captured");
    assert_eq!(
        tcpdump_count(&cut, &["greater", "101"]),
        tcpdump_count(&full, &["greater", "101"]),
        "the cut file keeps the wire lengths"
    );
    let rules: String = FILTERS
        .iter()
        .enumerate()
        .map(|(i, f)| {
            format!("[[rule]]\nname = \"r{i}\"\nfilter = \"{f}\"\nactions = [\"count\"]\n")
        })
        .collect();
    let cfg = dir.path().join("probe.toml");
    std::fs::write(&cfg, format!("period = \"1h\"\n{rules}")).expect("write probe.toml");
    let report = dir.path().join("report.jsonl");
    let recs = probe_file(&cfg, &report, &["-r", path_str(&cut)], None);
    for (i, filter) in FILTERS.iter().enumerate() {
        let expected = tcpdump_count(&cut, &[filter]);
        assert!(
            expected > 0 && expected < total,
            "`{filter}` selects some of {total}: {expected}"
        );
        assert_eq!(
            capture_file_selects(&cut, filter, dir.path()),
            expected,
            "capture -r `{filter}` vs tcpdump -r"
        );
        assert_eq!(
            totals(&recs, &format!("r{i}")).0,
            expected,
            "probe -r rule `{filter}` vs tcpdump -r"
        );
    }
}

/// Packets `poolcap capture -r FILE FILTER` captures.
fn capture_file_selects(file: &Path, filter: &str, dir: &Path) -> u64 {
    let json = dir.join("capture-r.json");
    let out = Command::new(bin())
        .args(["capture", "-q", "-r", path_str(file), "--stats-json"])
        .arg(&json)
        .arg(filter)
        .output()
        .expect("poolcap capture -r");
    assert!(
        out.status.success(),
        "capture -r {filter}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = stats(&json);
    assert_eq!(
        num(&s, "captured") + num(&s, "filtered"),
        tcpdump_count(file, &[]),
        "every packet read: {s}"
    );
    num(&s, "captured")
}

pub(crate) fn trials() -> Vec<Trial> {
    vec![trial(
        "filter_lengths_read_the_wire_length_of_cut_packets",
        length_filters_read_the_wire_length_of_cut_packets,
    )]
}
