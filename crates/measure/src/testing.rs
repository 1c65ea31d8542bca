//! Fixtures for tests of this crate and of the rig built on it (feature `testing`).

use crate::point::Record;

/// A run of a burst point: 3 bursts of 1000 frames with 0.495 s idle after each but the
/// last, sent in 1 s.
pub fn record(point: &str, tool: &str, loss: f64) -> Record {
    serde_json::from_value(serde_json::json!({
        "suite": "burst", "point": point, "subject": tool, "poolcap": tool == "poolcap",
        "run": 1, "rps": false,
        "traffic": {"size": 64, "count": 3000, "rate": null, "burst": 1000, "idle": 495.0,
                    "flows": 1, "skew": null, "batch": null},
        "generator": "poolcap",
        "capture": {"tool": tool, "buffer_kib": 512, "write": false, "pcap_ns": false,
                    "pool": [64, 256], "load": 3000, "snaplen": null, "compress": null,
                    "queues": null, "workers": null, "offload": null, "wait": null,
                    "backend": null, "cpus": null, "taskset": null},
        "sent": {"frames": 3000, "pps": 3000.0, "seconds": 1.0, "batch": null},
        "counts": null, "in_file": null, "loss": loss, "cpu_s": null, "cpu_total_s": null,
        "spacing": null, "syscalls": null, "voluntary_switches": null,
        "involuntary_switches": null, "wall_s": 2.0, "busy_before": null, "error": null
    }))
    .unwrap()
}
