//! The traffic-analysis tools of the `probe` suite, described as [`super::peer`] describes
//! the capture tools: how to start each, which line says it is ready, and how to read how
//! many packets it analysed. Each does the same job over the same period (1 s): per-flow and
//! per-host packet and byte totals.
//!
//! - poolcap probe: `probing on ...` on stderr when ready; the rules' records go to a JSON
//!   Lines report, one line per rule and period. Analysed packets are the first rule's
//!   (`ip`, which every generator frame matches) summed over the periods; at exit the engine
//!   prints `N packets dropped by kernel` and `N packets dropped by pool` on stderr.
//! - pmacctd (pmacct): two `print` plugins, one aggregating per flow (5-tuple), one per
//!   source host, each refreshed every period into a CSV file it appends to
//!   (`SRC_IP,...,PACKETS,BYTES`). It logs `[IF,0] link type is: 1` once its pcap handle
//!   is open, and at exit (SIGINT, after a last purge of its caches)
//!   `[IF,0] received_packets=R dropped_packets=D`. Analysed packets are the flow file's
//!   PACKETS summed. Its plugins are child processes; the rig charges their CPU to it, and
//!   they may write the last purge just after the core exits.
//! - tshark `-q -z conv,ip`: `Capturing on 'IF'` on stderr; at exit the IPv4 conversation
//!   table on stdout (per conversation: frames and bytes each way, then in total) and `N
//!   packets captured` (and, if any, `N packets dropped`) on stderr. Analysed packets are the
//!   conversations' total frames summed. It captures through a dumpcap child writing a
//!   temporary file (under the scratch folder here); the rig charges dumpcap's CPU to it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};

use std::sync::atomic::AtomicBool;

use super::child::{Finished, Running};
use super::tool::{check_exit, number_before, CaptureSpec, Counts, Launch, Tool};

/// The report period of every analysis tool, in seconds.
pub const PERIOD_S: u32 = 1;
/// Longest wait for pmacctd's plugins to write their last purge after the core has exited.
const PMACCT_PURGE_WAIT: Duration = Duration::from_secs(5);
/// The rule every generated rule set starts with: every generator frame matches it.
pub const FIRST_RULE: &str = "all";

/// The period and the first rule of every generated rule set: counts and tracks the flows
/// of all IP traffic.
fn first_rule() -> String {
    format!(
        "period = \"{PERIOD_S}s\"\n[[rule]]\nname = \"{FIRST_RULE}\"\nfilter = \"ip\"\nactions = [\"count\", \"flows\"]\n"
    )
}

/// The probe configuration with `n` rules that each track the flows of all IP traffic:
/// every packet updates `n` flow tables (what `poolcap calibrate` measures a flows rule by).
pub fn flows_rule_set(n: usize) -> String {
    let mut s = first_rule();
    for i in 1..n {
        let _ = write!(
            s,
            "[[rule]]\nname = \"f{i}\"\nfilter = \"ip\"\nactions = [\"flows\"]\n"
        );
    }
    s
}

/// The probe configuration with `n` rules over distinct filters: the first counts and
/// tracks flows of all IP traffic; the others cycle through filters on the generator's
/// ports and frame lengths and actions count, sizes and flows.
pub fn rule_set(n: usize) -> String {
    let mut s = first_rule();
    for i in 1..n {
        let filter = match i % 3 {
            0 => format!("udp src port {}", 10_000 + i),
            1 => format!("udp dst port {i}"),
            _ => format!("ip and greater {}", 60 + i),
        };
        let actions = ["\"count\"", "\"sizes\"", "\"flows\""][i % 3];
        let _ = write!(
            s,
            "[[rule]]\nname = \"r{i}\"\nfilter = \"{filter}\"\nactions = [{actions}]\n"
        );
    }
    s
}

/// The pmacctd configuration: flows and source hosts, printed every period into files in
/// `dir`.
fn pmacct_config(iface: &str, dir: &Path) -> String {
    let mut s = format!("daemonize: false\npcap_interface: {iface}\nplugins: print[flow], print[host]\naggregate[flow]: src_host, dst_host, src_port, dst_port, proto\naggregate[host]: src_host\n");
    for p in ["flow", "host"] {
        let _ = write!(
            s,
            "print_refresh_time[{p}]: {PERIOD_S}\nprint_output[{p}]: csv\nprint_output_file[{p}]: {}\nprint_output_file_append[{p}]: true\n",
            dir.join(format!("pmacct-{p}.csv")).display()
        );
    }
    s
}

fn report_path(dir: &Path) -> PathBuf {
    dir.join("probe-report.jsonl")
}

fn flow_file(dir: &Path) -> PathBuf {
    dir.join("pmacct-flow.csv")
}

/// How to start `tool` (one of this module's) on `iface`, with its configuration and output
/// files in `dir` (written now, the old ones removed); `exe` is poolcap.
pub fn launch(
    tool: Tool,
    spec: &CaptureSpec,
    iface: &str,
    dir: &Path,
    exe: &Path,
) -> anyhow::Result<Launch> {
    let s = |x: &Path| x.to_string_lossy().into_owned();
    let mut v: Vec<String> = Vec::new();
    let mut push = |xs: &[&str]| v.extend(xs.iter().map(|x| (*x).to_owned()));
    match tool {
        Tool::Probe => {
            let config = dir.join("probe.toml");
            let rules = spec.rules.unwrap_or(1);
            let set = if spec.all_flows {
                flows_rule_set(rules)
            } else {
                rule_set(rules)
            };
            std::fs::write(&config, set)
                .with_context(|| format!("cannot write {}", config.display()))?;
            let report = report_path(dir);
            let _ = std::fs::remove_file(&report);
            push(&[&s(exe), "probe", "-i", iface, "-q", "-c", &s(&config)]);
            push(&["--report", &s(&report), "--queues", "1", "--workers", "1"]);
            if let Some((m, r)) = spec.pool {
                push(&["--pool", &format!("{m},{r}")]);
            }
            if let Some(o) = &spec.offload {
                push(&["--offload", o]);
            }
            // auto: rules beyond what the kernel programs hold run on the worker.
            if spec.in_kernel {
                push(&["--in-kernel=auto"]);
            }
        }
        Tool::Pmacct => {
            let config = dir.join("pmacct.conf");
            for p in ["flow", "host"] {
                let _ = std::fs::remove_file(dir.join(format!("pmacct-{p}.csv")));
            }
            std::fs::write(&config, pmacct_config(iface, dir))
                .with_context(|| format!("cannot write {}", config.display()))?;
            push(&["pmacctd", "-f", &s(&config)]);
        }
        Tool::Tshark => {
            let mib = spec.buffer_kib.div_ceil(1024).max(1).to_string();
            // tshark's dumpcap writes every packet to a temporary file: keep it off /tmp.
            push(&["env", &format!("TMPDIR={}", dir.display())]);
            push(&[
                "tshark", "-i", iface, "-n", "-q", "-B", &mib, "-z", "conv,ip",
            ]);
        }
        other => anyhow::bail!("{} is not an analysis tool", other.name()),
    }
    Ok(Launch {
        argv: v,
        pipe: None,
    })
}

/// Reads what `tool` analysed from its output and its files in `dir`.
pub fn parse(tool: Tool, output: &str, dir: &Path) -> anyhow::Result<Counts> {
    match tool {
        Tool::Probe => {
            let path = report_path(dir);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("the probe wrote no {}", path.display()))?;
            let analysed = probe_analysed(&text)?;
            let kernel = number_before(output, "packets dropped by kernel")?;
            let pool = number_before(output, "packets dropped by pool")?;
            Ok(Counts {
                captured: analysed,
                dropped: kernel + pool,
                received: None,
                extra: BTreeMap::from([
                    ("dropped_kernel".to_owned(), kernel as f64),
                    ("dropped_pool".to_owned(), pool as f64),
                ]),
            })
        }
        Tool::Pmacct => {
            let (received, dropped) = pmacct_totals(output)?;
            let analysed = pmacct_final_packets(&flow_file(dir), received - dropped.min(received))?;
            Ok(Counts {
                captured: analysed,
                dropped,
                received: Some(received),
                extra: BTreeMap::from([("dropped_kernel".to_owned(), dropped as f64)]),
            })
        }
        Tool::Tshark => {
            let dropped = number_before(output, "packets dropped").unwrap_or(0);
            Ok(Counts {
                captured: tshark_conv_frames(output)?,
                dropped,
                received: number_before(output, "packets captured").ok(),
                extra: BTreeMap::from([("dropped_kernel".to_owned(), dropped as f64)]),
            })
        }
        other => anyhow::bail!("{} is not an analysis tool", other.name()),
    }
}

/// Packets of the first rule over every period of a probe report.
fn probe_analysed(jsonl: &str) -> anyhow::Result<u64> {
    let mut total = 0;
    let mut periods = 0;
    for line in jsonl.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).context("probe report line")?;
        if v["rule"] == FIRST_RULE {
            total += v["packets"]
                .as_u64()
                .ok_or_else(|| anyhow!("probe report without packets: {line}"))?;
            periods += 1;
        }
    }
    if periods == 0 {
        anyhow::bail!("the probe report has no period of rule `{FIRST_RULE}`");
    }
    Ok(total)
}

/// PACKETS summed over the records of pmacct's CSV files (header lines skipped).
fn pmacct_packets(csv: &str) -> anyhow::Result<u64> {
    let mut lines = csv.lines();
    let header = lines.next().ok_or_else(|| anyhow!("empty pmacct file"))?;
    let col = header
        .split(',')
        .position(|c| c == "PACKETS")
        .ok_or_else(|| anyhow!("no PACKETS column in pmacct's `{header}`"))?;
    Ok(lines
        .filter_map(|l| l.split(',').nth(col)?.parse::<u64>().ok())
        .sum())
}

/// PACKETS of pmacct's flow file once its last purge is written. The plugins write it after
/// the core process has exited, so this reads until the file holds every packet the core
/// received, or for at most [`PMACCT_PURGE_WAIT`] (then what it holds: packets the plugins
/// never got are lost to analysis).
fn pmacct_final_packets(path: &Path, received: u64) -> anyhow::Result<u64> {
    let deadline = Instant::now() + PMACCT_PURGE_WAIT;
    loop {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("pmacctd wrote no {}", path.display()))?;
        let n = pmacct_packets(&text)?;
        if n >= received || Instant::now() >= deadline {
            return Ok(n);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What pmacctd's counter lines hold (at exit, and when asked with SIGUSR1).
const PMACCT_COUNTERS: &str = "received_packets=";

/// Stops pmacctd ([`Tool::stop`]): asks for its counters (SIGUSR1) and waits for them
/// before SIGINT, and takes an exit status 1 as a clean stop when `pmacct_stopped`.
pub fn stop_pmacct(
    mut running: Running,
    finish: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<Finished> {
    running.ask_stats()?;
    running.wait_for(PMACCT_COUNTERS, "counters", Duration::from_secs(5), stop)?;
    let fin = running.interrupt(finish)?;
    if !pmacct_stopped(&fin) {
        check_exit(Tool::Pmacct.name(), &fin)?;
    }
    Ok(fin)
}

/// True when pmacctd, asked to stop, exited with status 1 because its plugins quit first,
/// after it had printed its counters. Its SIGINT handler tells the plugins to purge and
/// quit, reaps one and only then prints the counters; a plugin whose exit it notices first
/// (its SIGCHLD handler interrupts the SIGINT one) makes it log "no more plugins active"
/// and exit with 1 at once, without them (seen once in CI). The bench asks
/// for the counters (SIGUSR1) after the drain, before stopping it, so nothing is lost then:
/// the counters are printed and the plugins have purged their caches.
fn pmacct_stopped(fin: &Finished) -> bool {
    fin.status.code() == Some(1)
        && fin.text.contains("no more plugins active")
        && pmacct_totals(&fin.text).is_ok()
}

/// pmacctd's own pcap counters, the last it printed: (received, dropped).
fn pmacct_totals(output: &str) -> anyhow::Result<(u64, u64)> {
    let field = |k: &str| -> Option<u64> {
        let l = output.lines().rev().find(|l| l.contains(k))?;
        l[l.find(k)? + k.len()..]
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Ok((
        field(PMACCT_COUNTERS).ok_or_else(|| anyhow!("pmacctd printed no received_packets"))?,
        field("dropped_packets=").ok_or_else(|| anyhow!("pmacctd printed no dropped_packets"))?,
    ))
}

/// Total frames summed over the conversations of tshark's `-z conv,ip` table.
fn tshark_conv_frames(output: &str) -> anyhow::Result<u64> {
    let start = output
        .find("IPv4 Conversations")
        .ok_or_else(|| anyhow!("tshark printed no IPv4 conversation table"))?;
    // Per line: A <-> B, then frames, bytes and unit for each direction and in total.
    Ok(output[start..]
        .lines()
        .filter_map(|l| {
            let rest = l.split_once("<->")?.1;
            rest.split_whitespace().nth(7)?.parse::<u64>().ok()
        })
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_sets_have_distinct_filters_and_load() {
        for n in [1, 10, 100, 1000] {
            let load = |text: &str| {
                let dir = tempfile::tempdir().unwrap();
                let p = dir.path().join("p.toml");
                std::fs::write(&p, text).unwrap();
                poolcap_probe::config::load(&p).unwrap()
            };
            let c = load(&rule_set(n));
            assert_eq!(c.rules.len(), n);
            let mut filters: Vec<&str> = c.rules.iter().map(|r| r.filter.as_str()).collect();
            filters.sort_unstable();
            filters.dedup();
            assert_eq!(filters.len(), n, "distinct filters");
            // The flows set: as many rules, every one tracking flows of all IP traffic.
            let flows = load(&flows_rule_set(n));
            assert_eq!(flows.rules.len(), n);
            assert!(flows
                .rules
                .iter()
                .all(|r| r.filter == "ip" && r.flows.is_some()));
        }
    }

    #[test]
    fn reads_the_tools_outputs() {
        let report = "{\"rule\":\"all\",\"packets\":700}\n{\"rule\":\"r1\",\"packets\":3}\n\
                      {\"rule\":\"all\",\"packets\":300,\"last\":true}\n";
        assert_eq!(probe_analysed(report).unwrap(), 1000);
        assert!(probe_analysed("").is_err());
        // Recorded from pmacctd 1.7.7 in a lab (20000 frames, 4 flows).
        let csv = "SRC_IP,DST_IP,SRC_PORT,DST_PORT,PROTOCOL,PACKETS,BYTES\n\
                   10.77.0.1,10.77.0.2,10003,9,udp,684,34200\n\
                   10.77.0.1,10.77.0.2,10001,9,udp,675,33750\n";
        assert_eq!(pmacct_packets(csv).unwrap(), 1359);
        let log = "INFO ( default/core ): OK, Exiting ...\nNOTICE ( default/core ): +++\n\
                   NOTICE ( default/core ): [prb0,0] received_packets=20000 dropped_packets=7\n";
        assert_eq!(pmacct_totals(log).unwrap(), (20000, 7));
        // Asked for its counters, then stopped: its plugins quit first, and it exited with 1.
        use std::os::unix::process::ExitStatusExt;
        let asked = "NOTICE ( default/core ): stats [prb0,0] time=1 received_packets=20000 \
                     dropped_packets=0\nWARN ( default/core ): connection lost to 'host-print'; \
                     closing connection.\nWARN ( default/core ): no more plugins active. \
                     Shutting down.\n";
        let fin = |code: i32, text: &str| Finished {
            status: std::process::ExitStatus::from_raw(code << 8),
            text: text.to_owned(),
        };
        assert!(pmacct_stopped(&fin(1, asked)));
        assert_eq!(pmacct_totals(asked).unwrap(), (20000, 0));
        // Without its counters, or for another failure, it did not stop cleanly.
        let cut = asked.lines().skip(1).collect::<Vec<_>>().join("\n");
        assert!(!pmacct_stopped(&fin(1, &cut)));
        assert!(!pmacct_stopped(&fin(2, asked)));
        assert!(!pmacct_stopped(&fin(1, log)));
        // Recorded from tshark 4.0 in a lab.
        let ts = "Capturing on 'prb0'\n20000 packets captured\n\
================================================================================\n\
IPv4 Conversations\nFilter:<No Filter>\n\
                                               |       <-      | |       ->      | |     Total     |    Relative    |   Duration   |\n\
                                               | Frames  Bytes | | Frames  Bytes | | Frames  Bytes |      Start     |              |\n\
10.77.0.1            <-> 10.77.0.2                  0 0 bytes     20000 1280 kB     20000 1280 kB       0.000000000         2.2883\n\
10.77.0.3            <-> 10.77.0.2                  5 320 bytes     7 448 bytes     12 768 bytes       0.000000000         2.2883\n\
================================================================================\n";
        assert_eq!(tshark_conv_frames(ts).unwrap(), 20012);
        assert_eq!(number_before(ts, "packets captured").unwrap(), 20000);
        assert!(tshark_conv_frames("nothing").is_err());
    }
}
