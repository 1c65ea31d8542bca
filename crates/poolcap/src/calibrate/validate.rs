//! Predicted against measured loss: every point of a bench result directory (`raw.jsonl`)
//! is turned back into the scenario it measured (tool, frame size, offered rate, snaplen,
//! buffers, load, file, compression, bursts, `--rps`) and predicted with a profile.
//!
//! The offered rate is what the generator achieved (on veth the capture's kernel work slows
//! the sender, so the nominal rate would overstate it); within bursts it is the frames over
//! the sending time without the idle gaps. Runs of one point and subject are summarised by
//! their median loss. The target (issue 16): relative error at most 20% where the measured
//! loss is at least 1%, and "no loss" predicted where none was measured; points with a
//! measured loss between 0 and 1% are shown but not judged.

use std::collections::BTreeMap;

use poolcap_doctor::predict::{self, Scenario, Tool as ModelTool};
use poolcap_doctor::profile::Profile;
use serde::Serialize;

use crate::bench::peer::Tool;
use crate::bench::point::Record;

/// How a prediction compares with the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Within 20% (measured ≥ 1%), or no loss predicted where none was measured.
    Hit,
    /// Off by more than 20%, or a wrong loss / no-loss verdict.
    Miss,
    /// Measured loss between 0 and 1%: not judged.
    Unjudged,
}

/// Judges `predicted` against `measured` (fractions).
pub fn verdict(measured: f64, predicted: f64) -> Verdict {
    if measured >= 0.01 {
        if (predicted - measured).abs() <= 0.2 * measured {
            Verdict::Hit
        } else {
            Verdict::Miss
        }
    } else if measured == 0.0 {
        if predicted < 1e-6 {
            Verdict::Hit
        } else {
            Verdict::Miss
        }
    } else {
        Verdict::Unjudged
    }
}

/// One point and subject.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    /// Suite.
    pub suite: String,
    /// Point id.
    pub point: String,
    /// Subject name.
    pub subject: String,
    /// The tool.
    pub tool: String,
    /// Runs summarised.
    pub runs: usize,
    /// Median measured loss.
    pub measured: f64,
    /// Predicted loss.
    pub predicted: f64,
    /// Predicted kernel share.
    pub kernel: f64,
    /// Predicted application share.
    pub app: f64,
    /// The verdict.
    pub verdict: Verdict,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// The scenario a run measured, with the offered rate `pps` (`None`: the tool or setting is
/// outside the model: netsniff-ng, the analysis tools, several queues, AF_XDP, the in-place
/// reader, flows with skew).
pub fn scenario(rec: &Record, pps: f64) -> Option<Scenario> {
    let c = rec.capture.as_ref()?;
    let tool = match c.tool {
        Tool::Poolcap => ModelTool::Poolcap,
        Tool::Tcpdump => ModelTool::Tcpdump,
        Tool::Dumpcap => ModelTool::Dumpcap,
        Tool::NetsniffNg | Tool::Probe | Tool::Pmacct | Tool::Tshark => return None,
    };
    let multi = c.queues.is_some_and(|q| q > 1) || c.workers.is_some_and(|w| w > 1);
    if multi || c.inplace || c.backend.as_deref() == Some("af_xdp") {
        return None;
    }
    let t = &rec.traffic;
    let burst = t.burst.zip(t.idle).map(|(b, i)| (b, i.as_secs_f64()));
    Some(Scenario {
        tool,
        rate_pps: pps,
        sizes: vec![(t.size as f64, 1.0)],
        snaplen: c.snaplen.unwrap_or(262_144),
        buffer_bytes: c.buffer_kib * 1024,
        pool: c.pool.unwrap_or((256, 64)),
        load: c.load,
        write: c.write || (c.dev_null && tool == ModelTool::Poolcap),
        compress: c.compress.clone(),
        burst,
        count: rec.sent.as_ref().map(|s| s.frames),
        kernel_on_app_cpu: rec.rps,
    })
}

/// The offered rate of a run: frames per second of sending, without the idle gaps of
/// bursts.
fn offered_pps(rec: &Record) -> Option<f64> {
    let s = rec.sent.as_ref()?;
    let t = &rec.traffic;
    let idle = match (t.burst, t.idle) {
        (Some(b), Some(i)) if b > 0 => i.as_secs_f64() * (s.frames / b).saturating_sub(1) as f64,
        _ => 0.0,
    };
    let busy = s.seconds - idle;
    if busy > 0.0 && s.frames > 0 {
        Some(s.frames as f64 / busy)
    } else {
        (s.pps > 0.0).then_some(s.pps)
    }
}

/// Compares every (point, subject) of `records` that the model describes.
pub fn compare(records: &[Record], profile: &Profile) -> Vec<Compared> {
    let mut groups: BTreeMap<(String, String, String), Vec<&Record>> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.error.is_none() && r.loss.is_some())
    {
        groups
            .entry((r.suite.clone(), r.point.clone(), r.subject.clone()))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for ((suite, point, subject), runs) in groups {
        let (Some(measured), Some(pps)) = (
            median(runs.iter().filter_map(|r| r.loss).collect()),
            median(runs.iter().filter_map(|r| offered_pps(r)).collect()),
        ) else {
            continue;
        };
        let Some(s) = scenario(runs[0], pps) else {
            continue;
        };
        let Ok(p) = predict::predict(profile, &s) else {
            continue;
        };
        out.push(Compared {
            suite,
            point,
            subject,
            tool: format!("{:?}", s.tool).to_lowercase(),
            runs: runs.len(),
            measured: measured.max(0.0),
            predicted: p.loss,
            kernel: p.kernel_loss,
            app: p.app_loss,
            verdict: verdict(measured.max(0.0), p.loss),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_issue_targets() {
        assert_eq!(verdict(0.10, 0.119), Verdict::Hit);
        assert_eq!(verdict(0.10, 0.121), Verdict::Miss);
        assert_eq!(verdict(0.10, 0.081), Verdict::Hit);
        assert_eq!(verdict(0.0, 0.0), Verdict::Hit);
        assert_eq!(verdict(0.0, 0.02), Verdict::Miss);
        assert_eq!(verdict(0.005, 0.3), Verdict::Unjudged);
        assert_eq!(verdict(0.02, 0.0), Verdict::Miss);
    }

    /// A run of a burst point: 3 bursts of 1000 frames with 0.5 s idle after each but the
    /// last, sent in 1.01 s.
    fn record(tool: &str, loss: f64) -> Record {
        serde_json::from_value(serde_json::json!({
            "suite": "burst", "point": "B=1000", "subject": tool, "poolcap": tool == "poolcap",
            "run": 1, "rps": false,
            "traffic": {"size": 64, "count": 3000, "rate": null, "burst": 1000, "idle": 500.0,
                        "flows": 1, "skew": null, "batch": null},
            "generator": "poolcap",
            "capture": {"tool": tool, "buffer_kib": 512, "write": false, "pcap_ns": false,
                        "pool": [64, 256], "load": 3000, "snaplen": null, "compress": null,
                        "queues": null, "workers": null, "offload": null, "wait": null,
                        "backend": null, "cpus": null, "taskset": null},
            "sent": {"frames": 3000, "pps": 2970.0, "seconds": 1.01, "batch": null},
            "counts": null, "in_file": null, "loss": loss, "cpu_s": null, "cpu_total_s": null,
            "spacing": null, "syscalls": null, "voluntary_switches": null,
            "involuntary_switches": null, "wall_s": 2.0, "busy_before": null, "error": null
        }))
        .unwrap()
    }

    #[test]
    fn a_bench_run_becomes_the_scenario_it_measured() {
        let r = record("poolcap", 0.0);
        let pps = offered_pps(&r).unwrap();
        assert!(
            (pps - 3000.0 / 0.01).abs() < 1e-6,
            "bursts sent in 10 ms: {pps}"
        );
        let s = scenario(&r, pps).unwrap();
        assert_eq!(s.tool, ModelTool::Poolcap);
        assert_eq!(
            (s.buffer_bytes, s.pool, s.load),
            (512 * 1024, (64, 256), 3000)
        );
        assert_eq!(s.burst, Some((1000, 0.5)));
        assert_eq!(
            (s.count, s.write, s.kernel_on_app_cpu),
            (Some(3000), false, false)
        );
        assert!(scenario(&record("netsniff-ng", 0.0), pps).is_none());
        let rows = compare(&[r, record("poolcap", 0.2)], &Profile::built_in());
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].runs, rows[0].measured), (2, 0.2));
    }

    #[test]
    fn medians_pick_the_middle_run() {
        assert_eq!(median(vec![0.3, 0.1, 0.2]), Some(0.2));
        assert_eq!(median(vec![]), None);
    }
}
