//! `poolcap doctor`, `predict`, `calibrate` and the capture-start warning, end to end in a
//! lab: the doctor judges a veth it can inspect (and sees an RPS mask the test sets), predict
//! answers in JSON and refuses bad input, calibrate measures a lab interface that the
//! generator feeds (the profile's mean frame size is the one sent) and a lab of its own, and
//! capture warns exactly when the profile predicts loss.

use std::path::Path;

use libtest_mimic::Trial;

use crate::common::{bin, capture, lab, netns_command, poolcap_in, tempdir, trial, Background};

pub(crate) fn trials() -> Vec<Trial> {
    vec![
        trial(
            "doctor_judges_a_veth_and_sees_rps_on_the_capture_cpu",
            doctor_judges_a_veth_and_sees_rps_on_the_capture_cpu,
        ),
        trial(
            "predict_gives_loss_keys_in_json_and_refuses_bad_input",
            predict_gives_loss_keys_in_json_and_refuses_bad_input,
        ),
        trial(
            "predict_knows_the_disk_for_a_run_of_a_given_duration",
            predict_knows_the_disk_for_a_run_of_a_given_duration,
        ),
        trial(
            "capture_warns_at_start_only_when_the_profile_predicts_loss",
            capture_warns_at_start_only_when_the_profile_predicts_loss,
        ),
        trial(
            "calibrate_on_an_interface_measures_the_traffic_sent_to_it",
            calibrate_on_an_interface_measures_the_traffic_sent_to_it,
        ),
        trial(
            "calibrate_in_its_own_lab_saves_a_profile_predict_reads",
            calibrate_in_its_own_lab_saves_a_profile_predict_reads,
        ),
    ]
}

fn findings(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "doctor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor json: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn finding<'a>(v: &'a [serde_json::Value], check: &str) -> &'a serde_json::Value {
    v.iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no finding {check}: {v:?}"))
}

fn doctor_judges_a_veth_and_sees_rps_on_the_capture_cpu() {
    let lab = lab(1);
    let (ns, iface) = (&lab.probe.netns, lab.probe.iface.as_str());
    let v = findings(&poolcap_in(
        ns,
        &["doctor", "-i", iface, "--cpus", "1", "--json"],
    ));
    for f in &v {
        assert!(
            ["ok", "warn", "bad"].contains(&f["status"].as_str().unwrap_or("")),
            "{f}"
        );
        assert!(f["fix"].is_string() && f["evidence"].is_string(), "{f}");
        assert_eq!(
            f["status"] == "ok",
            f["fix"] == "",
            "a fix exactly when needed: {f}"
        );
    }
    // The evidence is what the kernel says, read independently.
    let rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap();
    let r = finding(&v, "net.core.rmem_max");
    assert!(
        r["evidence"].as_str().unwrap().starts_with(rmem.trim()),
        "{r}"
    );
    let z = finding(&v, &format!("{iface} af_xdp zero-copy"));
    assert_eq!(z["status"], "warn", "veth has no zero-copy: {z}");
    assert!(
        z["evidence"].as_str().unwrap().contains("driver veth"),
        "{z}"
    );
    let irq = finding(&v, &format!("{iface} irq affinity"));
    assert_eq!(irq["status"], "ok");
    assert!(irq["evidence"]
        .as_str()
        .unwrap()
        .starts_with("no interrupts"));
    assert_eq!(finding(&v, &format!("{iface} rps"))["status"], "ok");

    // Steer the probe's receive work to CPU 1, the capture CPU: now RPS is bad.
    let rps = format!("/sys/class/net/{iface}/queues/rx-0/rps_cpus");
    let st = netns_command(ns, "sh")
        .args(["-c", &format!("echo 2 > {rps}")])
        .status()
        .unwrap();
    assert!(st.success());
    let v = findings(&poolcap_in(
        ns,
        &["doctor", "-i", iface, "--cpus", "1", "--json"],
    ));
    let r = finding(&v, &format!("{iface} rps"));
    assert_eq!(r["status"], "bad", "{r}");
    assert!(r["evidence"].as_str().unwrap().starts_with("rx-0:1"), "{r}");
    assert!(r["fix"].as_str().unwrap().contains("echo 0 >"), "{r}");
    // Not pinned to CPU 1: nothing to judge.
    let v = findings(&poolcap_in(
        ns,
        &["doctor", "-i", iface, "--cpus", "0", "--json"],
    ));
    assert_eq!(finding(&v, &format!("{iface} rps"))["status"], "ok");

    // Text output lists the same checks; a missing interface is a one-line usage error.
    let text = poolcap_in(ns, &["doctor", "-i", iface, "--cpus", "1"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("[bad ] {iface} rps: rx-0:1")),
        "{text}"
    );
    assert!(text.lines().last().unwrap().ends_with("bad"), "{text}");
    let bad = poolcap_in(ns, &["doctor", "-i", "nosuch0"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("nosuch0"), "{err}");
}

fn predict(args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin())
        .arg("predict")
        .args(args)
        .env("POOLCAP_PROFILE", "/nonexistent/poolcap-profile.json")
        .output()
        .expect("run poolcap predict")
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("predict json")
}

fn predict_gives_loss_keys_in_json_and_refuses_bad_input() {
    let low = json(&predict(&["--rate", "1k", "--size", "64", "--json"]));
    assert_eq!(low["loss"], 0.0);
    assert!(low["profile"].as_str().unwrap().starts_with("built-in"));
    // 100000 x-loop iterations per packet cannot keep up with 300k pps.
    let high = json(&predict(&[
        "--rate", "300k", "--size", "imix", "--load", "100000", "--json",
    ]));
    let (loss, k, a) = (
        high["loss"].as_f64().unwrap(),
        high["kernel_loss"].as_f64().unwrap(),
        high["app_loss"].as_f64().unwrap(),
    );
    assert!(loss > 0.9 && loss <= 1.0, "{high}");
    assert!((loss - k - a).abs() < 1e-9, "{high}");
    assert_eq!(high["bottleneck"], "x-loop");
    // A burst the buffers hold is not lost; ten times as long a burst is.
    let burst = |n: &str| {
        json(&predict(&[
            "--rate", "300k", "--size", "64", "--load", "10000", "--burst", n, "--idle", "2s",
            "--json",
        ]))["app_loss"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(burst("20k"), 0.0);
    assert!(burst("200k") > 0.0);
    // A probe configuration's rules cost what as many --rules cost, on top of the pool copy.
    let dir = tempdir();
    let config = dir.path().join("probe.toml");
    std::fs::write(
        &config,
        "period = \"1s\"\n[[rule]]\nname = \"a\"\nfilter = \"ip\"\nactions = [\"count\", \"flows\"]\n\
         [[rule]]\nname = \"b\"\nfilter = \"udp\"\nactions = [\"sizes\"]\n\
         [[rule]]\nname = \"c\"\nfilter = \"tcp port 80\"\nactions = [\"count\"]\n",
    )
    .unwrap();
    let stage = |v: &serde_json::Value, name: &str| {
        v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stage"] == name)
            .map(|s| s["ns"].as_f64().unwrap())
    };
    let probe = ["--rate", "100k", "--size", "64", "--json"];
    let from_file = json(&predict(
        &[&probe[..], &["--probe", config.to_str().unwrap()]].concat(),
    ));
    let counted = json(&predict(&[&probe[..], &["--rules", "3"]].concat()));
    let one = json(&predict(&[&probe[..], &["--rules", "1"]].concat()));
    assert_eq!(from_file, counted);
    assert!(stage(&counted, "pool copy").is_some(), "{counted}");
    assert!(
        stage(&counted, "probe rules") > stage(&one, "probe rules"),
        "{counted}"
    );
    // pcapng (the default, as for capture) has a cost of its own in the built-in profile.
    let write = |extra: &[&str]| {
        let v = json(&predict(
            &[
                &["--rate", "1k", "--size", "1514", "-w", "--json"][..],
                extra,
            ]
            .concat(),
        ));
        stage(&v, "write").unwrap()
    };
    assert_ne!(write(&[]), write(&["--format", "pcap"]));
    // dumpcap behind the receive work: between its capacity once behind and its capacity
    // keeping up (the built-in profile has both), a run may go either way, and `edge` says
    // so; beyond both it falls behind for sure.
    let dumpcap = |rate: &str, json_out: bool| {
        let mut args = vec![
            "--rate",
            rate,
            "--size",
            "64",
            "--tool",
            "dumpcap",
            "--kernel-on-cpu",
        ];
        if json_out {
            args.push("--json");
        }
        predict(&args)
    };
    let top = json(&dumpcap("5M", true));
    assert!(top["edge"].is_null(), "{top}");
    let behind = top["app_capacity_pps"].as_f64().unwrap();
    let rate = format!("{:.0}", behind * 1.1);
    let at = json(&dumpcap(&rate, true));
    assert!(at["loss"].as_f64().unwrap() > 0.0, "{at}");
    assert_eq!(at["edge"]["loss_keeping_up"], 0.0, "{at}");
    // An endless capture falls behind sooner or later: the loss is the one behind.
    assert_eq!(at["edge"]["falls_behind"], 1.0, "{at}");
    assert_eq!(at["edge"]["loss_behind"], at["loss"], "{at}");
    let up = at["edge"]["keeps_up_to_pps"].as_f64().unwrap();
    assert!(up > behind * 1.1 && up < 5e6, "{at}");
    let text = String::from_utf8(dumpcap(&rate, false).stdout).unwrap();
    assert!(text.contains("\nat the edge: keeping up"), "{text}");
    for bad in [
        &[
            "--rate",
            "1k",
            "--size",
            "64",
            "--probe",
            "/nonexistent.toml",
        ][..],
        &["--rate", "1k", "--size", "64", "--rules", "0"],
        &[
            "--rate", "1k", "--size", "64", "--tool", "tcpdump", "--rules", "5",
        ],
        &["--rate", "1k", "--size", "64", "--format", "pcap"],
        &["--rate", "1k", "--size", "59"][..],
        &["--rate", "fast", "--size", "64"],
        &[
            "--rate", "1k", "--size", "64", "--tool", "tcpdump", "--load", "5",
        ],
        &[
            "--rate",
            "1k",
            "--size",
            "64",
            "--profile",
            "/nonexistent.json",
        ],
    ] {
        let out = predict(bad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{bad:?}");
        assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
    }
}

fn predict_knows_the_disk_for_a_run_of_a_given_duration() {
    // 800k frames of 1514 B a second, pcapng records of 1548 B: 1.24 GB/s, faster than the
    // built-in profile's page-cache write-back. Thirty seconds of it overflow the page
    // cache's dirty limit and lose; one second fits in it and loses nothing.
    let run = |extra: &[&str]| {
        json(&predict(
            &[
                &["--rate", "800k", "--size", "1514", "-w", "--json"][..],
                extra,
            ]
            .concat(),
        ))
    };
    let long = run(&["--io", "buffered", "--duration", "30s"]);
    let loss = long["loss"].as_f64().unwrap();
    assert!(loss > 0.2, "{long}");
    assert_eq!(long["bottleneck"], "disk", "{long}");
    assert_eq!(long["disk"]["io"], "buffered", "{long}");
    let short = run(&["--io", "buffered", "--duration", "1s"]);
    assert_eq!(short["loss"], 0.0, "{short}");
    // As many frames given by count: the same prediction.
    assert_eq!(run(&["--io", "buffered", "-c", "24M"]), long);
    // Direct I/O (poolcap's default): the device takes the 1.24 GB/s, nothing lost.
    let direct = run(&["--duration", "30s"]);
    assert_eq!(direct["disk"]["io"], "direct", "{direct}");
    assert_eq!(direct["loss"], 0.0, "{direct}");
    // The text says what the disk takes and when its buffer is full.
    let out = predict(&[
        "--rate",
        "800k",
        "--size",
        "1514",
        "-w",
        "--io",
        "buffered",
        "--duration",
        "30s",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("disk (through the page cache)") && text.contains("full after"),
        "{text}"
    );
    assert!(text.contains("bottleneck: disk"), "{text}");
    for bad in [
        &["--duration", "30s", "-c", "1k"][..],
        &["--io", "direct", "--tool", "tcpdump", "--duration", "1s"],
        &["--io", "sideways"],
    ] {
        let out = predict(&[&["--rate", "800k", "--size", "1514", "-w"][..], bad].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{bad:?}");
        assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
    }
}

fn capture_warns_at_start_only_when_the_profile_predicts_loss() {
    let lab = lab(1);
    let started = |args: &[&str]| -> String {
        let mut cmd = netns_command(&lab.probe.netns, bin());
        cmd.args(["capture", "-i", &lab.probe.iface, "-q"])
            .args(args)
            .env("POOLCAP_PROFILE", "/nonexistent/poolcap-profile.json");
        let bg = Background::start(cmd, "listening on");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (code, err) = bg.stop("INT");
        assert_eq!(code, Some(0), "{err}");
        err
    };
    let err = started(&["--load", "100000"]);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("bottleneck x-loop"), "{err}");
    assert!(warnings[0].contains("--load"), "{err}");
    let err = started(&[]);
    assert!(!err.contains("warning"), "counting only keeps up: {err}");
    // The fixture `capture` helper still works with the warning in place.
    let c = capture(&lab, &[]);
    let (code, _) = c.stop("INT");
    assert_eq!(code, Some(0));

    // The probe warns as the capture does, for its rules on the worker: 1000 rules do not
    // keep up with the lab's top speed (about 30 ns each), one rule does.
    let dir = tempdir();
    let probe = |rules: usize| -> String {
        let config = dir.path().join(format!("probe-{rules}.toml"));
        let mut text = String::from("period = \"1s\"\n");
        for i in 0..rules {
            text.push_str(&format!(
                "[[rule]]\nname = \"r{i}\"\nfilter = \"udp dst port {}\"\nactions = [\"count\"]\n",
                i + 1
            ));
        }
        std::fs::write(&config, text).unwrap();
        let mut cmd = netns_command(&lab.probe.netns, bin());
        cmd.args(["probe", "-i", &lab.probe.iface, "-q", "-c"])
            .arg(&config)
            .env("POOLCAP_PROFILE", "/nonexistent/poolcap-profile.json");
        let bg = Background::start(cmd, "probing on");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (code, err) = bg.stop("INT");
        assert_eq!(code, Some(0), "{err}");
        err
    };
    let err = probe(1000);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("this probe is predicted to lose"),
        "{err}"
    );
    assert!(warnings[0].contains("bottleneck probe rules"), "{err}");
    let err = probe(1);
    assert!(!err.contains("warning"), "one rule keeps up: {err}");
}

/// The generator in the background, stopped (by its PID) when the test is done with it.
struct Sender(std::process::Child);

impl Drop for Sender {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn read_profile(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("profile json: {e}: {text}"))
}

fn calibrate_on_an_interface_measures_the_traffic_sent_to_it() {
    let lab = lab(1);
    let dir = tempdir();
    let out = dir.path().join("live.json");
    let mut gen = netns_command(&lab.sender.netns, bin());
    gen.args(["gen", "-i", &lab.sender.iface, "--size", "100"])
        .args(["--rate", "20k", "--duration", "60s"])
        .stdout(std::process::Stdio::null());
    let sender = Sender(gen.spawn().expect("start poolcap gen"));
    let run = poolcap_in(
        &lab.probe.netns,
        &[
            "calibrate",
            "-i",
            &lab.probe.iface,
            "--window",
            "1s",
            "--levels",
            "none",
            "--no-peers",
            "--no-disk",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    drop(sender);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    let p = read_profile(&out);
    let source = p["source"].as_str().unwrap();
    assert!(
        source.contains(&format!("-i {}", lab.probe.iface)),
        "{source}"
    );
    assert!(source.contains("mean frame 100 B"), "{source}");
    assert!(
        source.contains("sender, kernel"),
        "not measured live: {source}"
    );
    // Thirteen windows: five configurations at two snaplengths, each with frames counted,
    // and the probe (whole frames) with 1 and 100 rules and 100 flows rules once each.
    let windows: Vec<&str> = err.lines().filter(|l| l.contains("B captured:")).collect();
    assert_eq!(windows.len(), 13, "{err}");
    assert!(windows[1].contains("at 100 B captured"), "{err}");
    assert!(
        windows[10].starts_with("calibrate: probe 1r at 100 B"),
        "{err}"
    );
    assert!(
        windows[11].starts_with("calibrate: probe 100r at 100 B"),
        "{err}"
    );
    assert!(
        windows[12].starts_with("calibrate: probe 100f at 100 B"),
        "{err}"
    );
    assert!(p["probe"]["per_rule"].is_object(), "{p}");
    // What it printed is what it saved.
    let printed: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(printed, p);
}

fn calibrate_in_its_own_lab_saves_a_profile_predict_reads() {
    let dir = tempdir();
    let out = dir.path().join("lab.json");
    let run = std::process::Command::new(bin())
        .args([
            "calibrate",
            "--frames",
            "20k",
            "--levels",
            "none",
            "--no-peers",
        ])
        .args(["--quiet-wait", "0s"])
        .args([
            "--disk-dir",
            dir.path().to_str().unwrap(),
            "--disk-bytes",
            "32M",
        ])
        .arg("-o")
        .arg(&out)
        .output()
        .expect("run poolcap calibrate");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    let p = read_profile(&out);
    let source = p["source"].as_str().unwrap();
    assert!(
        source.starts_with("poolcap calibrate in a veth lab"),
        "{source}"
    );
    let not_measured = source.split("not measured").nth(1).unwrap_or("");
    assert!(
        !not_measured.contains("sender") && !not_measured.contains("kernel"),
        "the sender and the kernel are measured in a lab: {source}"
    );
    // The sender's cost is 1e9 / its rate: positive at both sizes.
    let sender = &p["sender"];
    let at = |b: f64| {
        sender["ns_per_packet"].as_f64().unwrap() + b * sender["ns_per_byte"].as_f64().unwrap()
    };
    assert!(at(64.0) > 0.0 && at(1514.0) > 0.0, "{sender}");
    assert!(p["x_loop_ns"].as_f64().unwrap() > 0.0);
    let runs = err
        .lines()
        .filter(|l| l.contains("ns per packet") || l.contains("sender alone"))
        .count();
    assert_eq!(
        runs, 33,
        "count with rps on; sender, count, null, copy, write, pcapng, probe 1r, 100r and \
         100f, saturated at 64, 512 and 1514 B: {err}"
    );
    // The ring point: poolcap analysing, stopped while the frames came; a ring it measured
    // full is kept beside the rule (20k frames fill it below about 700k pps).
    let ring: Vec<&str> = err.lines().filter(|l| l.contains("ring held")).collect();
    assert_eq!(ring.len(), 1, "{err}");
    for r in p["rings"].as_array().into_iter().flatten() {
        let (held, rule) = (r["held"].as_f64().unwrap(), r["rule"].as_f64().unwrap());
        assert!(held < 20_000.0 && rule > 0.0, "{r}");
        assert_eq!(r["capture"], "poolcap analysing", "{r}");
    }
    // The rps-on points measured the receive work as CPU time on the tool's CPU.
    assert!(p["kernel_rps"].is_object(), "{p}");
    // The disk, measured in --disk-dir: the direct rate and the dirty limit land; 32 MB
    // through the page cache are within its dirty limit, so no rate of the disk, and it
    // says so; the files are gone.
    let disk = &p["disk"];
    assert_eq!(disk["dir"], dir.path().to_str().unwrap(), "{disk}");
    assert!(disk["direct_bytes_per_s"].as_f64().unwrap() > 0.0, "{disk}");
    assert!(disk["dirty_limit_bytes"].as_f64().unwrap() > 32e6, "{disk}");
    assert!(disk["buffered_bytes_per_s"].is_null(), "{disk}");
    assert!(
        err.contains("did not pass the page cache's dirty limit"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("disk"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let kept = source.rsplit(": ").next().unwrap();
    assert!(!kept.contains("disk"), "measured, not kept: {kept}");
    let with_profile = |extra: &[&str]| {
        let base = [
            "--profile",
            out.to_str().unwrap(),
            "--rate",
            "1k",
            "--size",
            "64",
        ];
        let pred = predict(&[&base[..], extra].concat());
        let err = String::from_utf8_lossy(&pred.stderr);
        assert!(pred.status.success(), "{err}");
        String::from_utf8_lossy(&pred.stdout).into_owned()
    };
    let text = with_profile(&[]);
    assert!(
        text.starts_with("profile: poolcap calibrate in a veth lab"),
        "{text}"
    );
    assert!(text.contains("predicted loss 0 (kernel 0,"), "{text}");
    // The probe's rules were measured: 100 of them cost more than one.
    let probe = &p["probe"];
    let rule = probe["per_rule"]["ns_per_packet"].as_f64().unwrap()
        + 64.0 * probe["per_rule"]["ns_per_byte"].as_f64().unwrap();
    assert!(rule > 0.0, "{probe}");
    let text = with_profile(&["--rules", "100"]);
    assert!(text.contains("probe rules"), "{text}");
    // Written through the page cache, whose rate it did not measure: predict says so. A
    // profile from before the disk was measured reads, and says the same.
    let text = with_profile(&["-w", "--io", "buffered"]);
    assert!(text.contains("note: the disk is not modelled"), "{text}");
    let mut old = p.clone();
    old.as_object_mut().unwrap().remove("disk");
    let old_file = dir.path().join("old.json");
    std::fs::write(&old_file, old.to_string()).unwrap();
    let pred = predict(&[
        "--profile",
        old_file.to_str().unwrap(),
        "--rate",
        "1k",
        "--size",
        "64",
        "-w",
    ]);
    let text = String::from_utf8_lossy(&pred.stdout);
    assert!(
        pred.status.success(),
        "{}",
        String::from_utf8_lossy(&pred.stderr)
    );
    assert!(text.contains("no disk measurement"), "{text}");
}
