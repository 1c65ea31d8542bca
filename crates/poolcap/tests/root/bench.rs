//! `poolcap bench` end to end: a smoke run of one suite in its own lab, checking that every
//! packet is accounted for and that the result files exist (never speed), then `bench report`
//! rebuilding a BENCHMARKS.md from that result directory.

use std::path::Path;

use libtest_mimic::Trial;

use crate::common::{bin, tempdir, trial};

fn read_records(path: &Path) -> Vec<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn num(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut x = v;
    for k in path {
        x = &x[*k];
    }
    x.as_u64()
        .or_else(|| x.as_f64().map(|f| f as u64))
        .unwrap_or_else(|| panic!("no {path:?} in {v}"))
}

/// Runs `poolcap bench SUITE --smoke --runs 1 --out OUT`, asserts it succeeded, and returns
/// its records and its stderr.
fn smoke(suite: &str, out: &Path) -> (Vec<serde_json::Value>, String) {
    let run = std::process::Command::new(bin())
        .args(["bench", suite, "--smoke", "--runs", "1", "--out"])
        .arg(out)
        .output()
        .expect("run poolcap bench");
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "bench failed: {err}");
    (read_records(&out.join("raw.jsonl")), err)
}

fn rates_smoke_run_accounts_for_every_packet_and_writes_its_files() {
    let dir = tempdir();
    let results = dir.path().join("results");
    let out = results.join("rates-20260101-000000");
    let (records, err) = smoke("rates", &out);
    for f in ["raw.jsonl", "results.csv", "summary.md", "meta.json"] {
        assert!(out.join(f).is_file(), "{f} missing: {err}");
    }
    assert_eq!(records.len(), 2, "one run of each subject: {err}");
    for r in &records {
        assert!(r["error"].is_null(), "run failed: {r}");
        let sent = num(r, &["sent", "frames"]);
        assert_eq!(sent, 20_000, "{r}");
        let captured = num(r, &["counts", "captured"]);
        let dropped = num(r, &["counts", "dropped"]);
        let filtered = num(r, &["counts", "extra", "filtered"]);
        assert_eq!(
            sent,
            captured + dropped + filtered,
            "sent = captured + drops + filtered: {r}"
        );
        assert_eq!(
            dropped,
            num(r, &["counts", "extra", "dropped_kernel"])
                + num(r, &["counts", "extra", "dropped_pool"]),
            "{r}"
        );
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("x=1000 reader 1q"), "{summary}");

    let md = dir.path().join("BENCHMARKS.md");
    let report = std::process::Command::new(bin())
        .args(["bench", "report", "--results"])
        .arg(&results)
        .arg("--markdown")
        .arg(&md)
        .output()
        .expect("run poolcap bench report");
    assert!(
        report.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("## rates:"), "{text}");
    assert!(
        text.contains("Not included: gen: no result directory yet"),
        "{text}"
    );
    assert!(dir.path().join("docs/bench").is_dir());
}

fn soak_smoke_run_samples_the_capture_and_accounts_for_every_packet() {
    let dir = tempdir();
    let out = dir.path().join("soak-20260101-000000");
    let (records, err) = smoke("soak", &out);
    assert_eq!(records.len(), 1, "one run: {err}");
    let r = &records[0];
    assert!(r["error"].is_null(), "run failed: {r}");
    let sent = num(r, &["sent", "frames"]);
    assert_eq!(sent, 200_000, "{r}");
    let terms: u64 = [
        &["counts", "captured"][..],
        &["counts", "dropped"],
        &["counts", "extra", "filtered"],
        &["counts", "extra", "not_taken"],
    ]
    .iter()
    .map(|p| num(r, p))
    .sum();
    assert_eq!(
        sent, terms,
        "sent = captured + drops + filtered + not_taken: {r}"
    );
    assert_eq!(
        num(r, &["counts", "captured"]),
        num(r, &["counts", "extra", "written"]),
        "{r}"
    );
    // 4 s sampled every 500 ms: one row per sample, each with the tool's RSS, files, threads.
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert!(rows.len() >= 6, "{csv}");
    for row in &rows {
        let [rss, fds, threads] = [4, 5, 6].map(|i| row[i].parse::<u64>().unwrap());
        assert!(rss > 1000 && fds >= 4 && threads >= 2, "{csv}");
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("open files after warm-up vary by at most one"),
        "{summary}"
    );
}

fn predict_smoke_run_calibrates_first_and_predicts_every_other_point() {
    let dir = tempdir();
    let out = dir.path().join("predict-20260101-000000");
    let (records, err) = smoke("predict", &out);
    let points: Vec<&str> = records
        .iter()
        .map(|r| r["point"].as_str().unwrap())
        .collect();
    // poolcap counting with rps on; the sender alone and count, /dev/null, copy, write (pcap
    // and pcapng), the probe with 1 and 100 rules and 100 flows rules, and the saturated
    // worker at 64 B; poolcap analysing, stopped, at the ring point; then poolcap and tcpdump
    // at S1 64B.
    assert_eq!(
        points,
        ["calibrate rps 64B"]
            .into_iter()
            .chain(["calibrate 64B"; 10])
            .chain(["calibrate ring 64B"])
            .chain(["S1 64B"; 2])
            .collect::<Vec<_>>(),
        "{err}"
    );
    for r in &records {
        assert!(r["error"].is_null(), "run failed: {r}");
        assert_eq!(num(r, &["sent", "frames"]), 20_000, "{r}");
        if r["capture"].is_null() {
            continue;
        }
        // The tool's scheduler statistics over the window: it ran, in timeslices.
        let sched = &r["sched"][0];
        assert!(
            num(sched, &["run_ns"]) > 0 && num(sched, &["slices"]) > 0,
            "{r}"
        );
        let counted = num(r, &["counts", "captured"]) + num(r, &["counts", "dropped"]);
        if r["capture"]["tool"] == "poolcap" {
            assert_eq!(counted, 20_000, "sent = captured + dropped: {r}");
        } else {
            // libpcap may leave a partly filled block unread at exit.
            assert!(counted <= 20_000, "{r}");
        }
    }
    // Rebuilt from raw.jsonl by predict --validate with the run's own calibration (saved as
    // profile.json); the calibration rows themselves are not validated.
    let v = std::process::Command::new(bin())
        .args(["predict", "--validate"])
        .arg(&out)
        .output()
        .expect("run poolcap predict");
    let text = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let csv = std::fs::read_to_string(out.join("predict.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    assert!(
        rows[0].starts_with("S1 64B,poolcap,poolcap,true,1,"),
        "{csv}"
    );
    assert!(
        rows[1].starts_with("S1 64B,tcpdump,tcpdump,true,1,"),
        "{csv}"
    );
    assert!(text.contains("2 points: "), "{text}");
    let profile = std::fs::read_to_string(out.join("profile.json")).unwrap();
    assert!(
        profile.contains("poolcap bench predict calibration points (smoke run"),
        "{profile}"
    );
    // The CPU each calibrated configuration got, from those runs' schedstat.
    let cpu: serde_json::Value = serde_json::from_str(&profile).unwrap();
    for key in ["count", "copy", "write", "saturated"] {
        let share = cpu["cpu"]["sharing"][key]["share"].as_f64();
        assert!(
            share.is_some_and(|s| s > 0.0 && s <= 1.0),
            "{key}: {profile}"
        );
    }

    // pcapng's cost, and the probe's: 99 more rules cost more than nothing.
    assert!(cpu["pcapng"]["ns_per_packet"].is_number(), "{profile}");
    let per_rule = cpu["probe"]["per_rule"]["ns_per_packet"].as_f64();
    assert!(per_rule.is_some_and(|ns| ns > 0.0), "{profile}");

    // The receive work with rps on, as the tool CPU's busy time per frame less poolcap's:
    // measured (the rps calibration points ran) and less than the sender's 20k frames' whole
    // run. It may be 0 here: idle time comes in 10 ms ticks, and a smoke run's 20k frames
    // take few.
    let rps = cpu["kernel_rps"]["ns_per_packet"].as_f64();
    assert!(rps.is_some_and(|ns| (0.0..1e6).contains(&ns)), "{profile}");

    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    for part in [
        "## Predicted against measured loss",
        "| S1 64B | poolcap | on | 1 |",
        "| S1 64B | tcpdump | on | 1 |",
        "source: poolcap bench predict calibration points (smoke run",
    ] {
        assert!(summary.contains(part), "{part}: {summary}");
    }
    assert!(out.join("predict-loss.png").is_file() || summary.contains("not drawn"));
}

/// The probe suite's smoke point: poolcap probe, pmacctd and tshark on the same 20k frames;
/// each analysed packet is counted once and every frame is either analysed or dropped where
/// the tool says.
fn probe_smoke_run_accounts_for_every_analysed_packet() {
    let dir = tempdir();
    let out = dir.path().join("probe-20260101-000000");
    let (records, err) = smoke("probe", &out);
    let subjects: Vec<&str> = records
        .iter()
        .map(|r| r["subject"].as_str().unwrap())
        .collect();
    assert_eq!(
        subjects,
        [
            "probe 10r basic",
            "probe 10r in-kernel",
            "pmacctd",
            "tshark"
        ],
        "one run of each: {err}"
    );
    for r in &records {
        assert!(r["error"].is_null(), "run failed: {r}");
        let sent = num(r, &["sent", "frames"]);
        assert_eq!(sent, 20_000, "{r}");
        let analysed = num(r, &["counts", "captured"]);
        let dropped = num(r, &["counts", "dropped"]);
        match r["subject"].as_str().unwrap() {
            // The rules saw every packet the engine did not drop, each once.
            // In the kernel (flow tables included): every frame, nothing dropped.
            "probe 10r basic" | "probe 10r in-kernel" => {
                assert_eq!(analysed + dropped, sent, "{r}")
            }
            // pmacctd's flow records hold at most what its pcap handle received; with the
            // smoke run's short drain, a last block may still wait in the ring at exit.
            "pmacctd" => assert!(analysed <= num(r, &["counts", "received"]) - dropped, "{r}"),
            // tshark's conversations hold every frame it captured (the lab carries no other).
            _ => assert_eq!(analysed, num(r, &["counts", "received"]), "{r}"),
        }
        assert!(analysed <= sent && analysed > 0, "{r}");
        assert!(r["cpu_s"].as_f64().is_some(), "{r}");
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("The paper's conclusion"), "{summary}");
    assert!(out.join("probe-10r-analysis.png").is_file());
}

/// `bench export --smoke`: each of the three flow exporters sends IPFIX records to nfcapd;
/// poolcap's records, read back with nfdump, hold every frame sent and one record per flow;
/// the peers' rows are there with records; the summary has the scrape cost.
fn export_smoke_run_compares_the_flow_exporters() {
    let dir = tempdir();
    let out = dir.path().join("export");
    let run = std::process::Command::new(bin())
        .args(["bench", "export", "--smoke", "--out"])
        .arg(&out)
        .output()
        .expect("run poolcap bench");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "bench failed: {err}");
    let csv = std::fs::read_to_string(out.join("rows.csv")).expect("rows.csv");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(names, ["poolcap", "softflowd", "pmacctd-nfprobe"], "{csv}");
    let n = |r: &[&str], i: usize| r[i].parse::<u64>().unwrap_or_else(|_| panic!("{csv}"));
    // exporter,flows,rate,sent,seconds,records,packets,bytes,distinct,...
    let p = &rows[0];
    assert!(n(p, 3) > 0, "{csv}");
    assert_eq!(
        n(p, 6),
        n(p, 3),
        "poolcap's records hold every frame: {csv}"
    );
    assert_eq!((n(p, 5), n(p, 8)), (100, 100), "one record per flow: {csv}");
    for peer in &rows[1..] {
        assert!(n(peer, 5) > 0 && n(peer, 6) <= n(peer, 3), "{csv}");
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("Prometheus scrape of a running probe"),
        "{summary}"
    );
}

/// The forward suite's smoke point: poolcap forward with both backends through the
/// three-host lab. For each run the forwarder's equation holds exactly, what it forwarded is
/// what left `prb1`, and the sink's check counted every frame that left once, with no flow
/// reordered (whatever the speed: drops are in the terms, never missing from them).
fn forward_smoke_run_accounts_exactly_and_the_sink_sees_each_frame_once() {
    let dir = tempdir();
    let out = dir.path().join("forward");
    let (records, err) = smoke("forward", &out);
    for f in ["raw.jsonl", "results.csv", "summary.md", "meta.json"] {
        assert!(out.join(f).is_file(), "{f} missing: {err}");
    }
    assert_eq!(
        records.len(),
        3,
        "one run of each backend and the XDP redirect: {err}"
    );
    for r in &records {
        assert!(r["error"].is_null(), "run failed: {r}");
        let x = |k: &str| num(r, &["counts", "extra", k]);
        let sent = num(r, &["sent", "frames"]);
        assert_eq!(sent, 4_000, "{r}");
        if r["capture"]["tool"] == "xdp-redirect" {
            assert_eq!(num(r, &["counts", "captured"]), sent, "redirected all: {r}");
            assert_eq!(x("out_tx"), sent, "prb1 sent every frame: {r}");
            assert_eq!(x("sink_unique") + x("sink_dropped"), sent, "{r}");
            assert_eq!((x("sink_duplicates"), x("reordered")), (0, 0), "{r}");
            continue;
        }
        assert_eq!(x("received"), sent, "received = frames sent: {r}");
        let terms: u64 = poolcap_measure::forward_peers::TERMS
            .iter()
            .map(|k| x(k))
            .sum();
        assert_eq!(x("not_taken"), 0, "the forwarder took every frame: {r}");
        assert_eq!(terms, sent, "received = the seven terms: {r}");
        assert_eq!(x("in_flight"), 0, "{r}");
        assert_eq!(
            x("out_tx"),
            x("forwarded"),
            "prb1 sent what was forwarded: {r}"
        );
        assert_eq!(
            x("sink_frames") + x("sink_dropped"),
            x("out_tx"),
            "the sink saw every frame that left prb1: {r}"
        );
        assert_eq!(x("sink_unique"), x("sink_frames"), "each frame once: {r}");
        assert_eq!(x("sink_duplicates"), 0, "{r}");
        assert_eq!(x("reordered"), 0, "no flow reordered: {r}");
        assert_eq!(num(r, &["in_file"]), x("sink_unique"), "{r}");
        if x("sink_frames") > 0 {
            let lat: Vec<f64> = ["lat_p50_us", "lat_p99_us", "lat_p999_us", "lat_max_us"]
                .iter()
                .map(|k| r["counts"]["extra"][k].as_f64().expect("latency"))
                .collect();
            assert!(lat[0] > 0.0, "latency is positive: {r}");
            assert!(
                lat.windows(2).all(|w| w[0] <= w[1]),
                "percentiles ordered: {r}"
            );
        }
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("poolcap forward's accounting"),
        "{summary}"
    );
    assert!(summary.contains("Worst point and median"), "{summary}");
}

pub(crate) fn trials() -> Vec<Trial> {
    vec![
        trial(
            "bench_rates_smoke_run_accounts_for_every_packet_and_writes_its_files",
            rates_smoke_run_accounts_for_every_packet_and_writes_its_files,
        ),
        trial(
            "bench_soak_smoke_run_samples_the_capture_and_accounts_for_every_packet",
            soak_smoke_run_samples_the_capture_and_accounts_for_every_packet,
        ),
        trial(
            "bench_predict_smoke_run_calibrates_first_and_predicts_every_other_point",
            predict_smoke_run_calibrates_first_and_predicts_every_other_point,
        ),
        trial(
            "bench_probe_smoke_run_accounts_for_every_analysed_packet",
            probe_smoke_run_accounts_for_every_analysed_packet,
        ),
        trial(
            "bench_export_smoke_run_compares_the_flow_exporters",
            export_smoke_run_compares_the_flow_exporters,
        ),
        trial(
            "bench_forward_smoke_run_accounts_exactly_and_the_sink_sees_each_frame_once",
            forward_smoke_run_accounts_exactly_and_the_sink_sees_each_frame_once,
        ),
    ]
}
