//! What a run is before anything is measured: which suite, at which scale, and what the
//! manager calibrated first. Plain data that `meta.json` records ([`super::meta`]) and the
//! suites read; it depends on no other part of the rig, so the suites, the manager and the
//! formatters all depend on it and not on each other. Each suite's behaviour is its
//! [`super::suites::SuiteDef`] (`Suite::def`).

use serde::{Deserialize, Serialize};

use crate::point::TOOL_CPU;

/// A suite of points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Suite {
    /// poolcap gen against trafgen: top speed, rate accuracy, spacing.
    Gen,
    /// poolcap capture against tcpdump, netsniff-ng and dumpcap: loss, CPU, sender rate.
    Capture,
    /// Burst absorption for several (M,R) with R*M fixed, under an x-loop load.
    Burst,
    /// Capture and analysis throughput vs offered rate (x = 0, 1000, 25000; 1 and 2 workers;
    /// basic and congestion control).
    Rates,
    /// Skewed flows on 2 queues: basic vs buddy offloading vs the plain fanout reader; and
    /// congestion control vs basic.
    Imbalance,
    /// Loss vs frame size, snaplen and kernel buffer size (poolcap, tcpdump, dumpcap).
    Sizes,
    /// Loss vs compression level of the written file (application load).
    Appload,
    /// Syscalls per packet and loss of the wait strategies and of the peers.
    Wait,
    /// AF_XDP (copy mode on veth) against AF_PACKET: CPU, sender rate, loss.
    Backends,
    /// Writing to disk against tcpdump, dumpcap and netsniff-ng with equal memory; the
    /// sustained rate against the device's own limit.
    Disk,
    /// A long capture at 80% of the top rate into a rotated file set: growth of memory, open
    /// files and threads, and the accounting at the end.
    Soak,
    /// Calibrate, then predicted against measured loss: paper 002's sessions, bursts, loads.
    Predict,
    /// `poolcap probe` with 1..1000 rules, basic and congestion control, against pmacctd and
    /// tshark: capture and analysis throughput vs offered rate.
    Probe,
    /// Forwarding through the probe (three hosts): rate, loss, reordering and latency at the
    /// sink against netsniff-ng and the Linux bridge.
    Forward,
    /// The packet store: capture with `--store` against `-w` alone, then queries against
    /// `tcpdump -r` over every file and the disk's read limit.
    Store,
}

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scale {
    /// One tiny point, for tests: counts add up, files exist.
    Smoke,
    /// A few minutes per suite.
    Quick,
    /// Every point.
    Full,
}

impl Scale {
    /// `quick`, `smoke` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Smoke => "smoke",
            Scale::Quick => "quick",
            Scale::Full => "full",
        }
    }

    /// Picks one of three values.
    pub fn pick<T>(self, smoke: T, quick: T, full: T) -> T {
        match self {
            Scale::Smoke => smoke,
            Scale::Quick => quick,
            Scale::Full => full,
        }
    }
}

impl Suite {
    /// Every suite, in the order `bench all` runs them.
    pub const ALL: [Suite; 15] = [
        Suite::Gen,
        Suite::Capture,
        Suite::Burst,
        Suite::Rates,
        Suite::Imbalance,
        Suite::Sizes,
        Suite::Appload,
        Suite::Wait,
        Suite::Backends,
        Suite::Disk,
        Suite::Soak,
        Suite::Predict,
        Suite::Probe,
        Suite::Forward,
        Suite::Store,
    ];

    /// Its name on the command line and in result directories.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Gen => "gen",
            Suite::Capture => "capture",
            Suite::Burst => "burst",
            Suite::Rates => "rates",
            Suite::Imbalance => "imbalance",
            Suite::Sizes => "sizes",
            Suite::Appload => "appload",
            Suite::Wait => "wait",
            Suite::Backends => "backends",
            Suite::Disk => "disk",
            Suite::Soak => "soak",
            Suite::Predict => "predict",
            Suite::Probe => "probe",
            Suite::Forward => "forward",
            Suite::Store => "store",
        }
    }
}

/// What a suite calibrates before its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalibrationKind {
    /// Only the x-loop cost (cheap, in-process).
    Iterations,
    /// The x-loop cost and the generator's top speed of 64-byte frames over `flows` flows.
    TopSpeed {
        /// Flows of the calibration traffic.
        flows: usize,
    },
    /// The x-loop cost and the disk's own write limit (`dd oflag=direct`).
    Device,
}

/// Top speed assumed where none was measured (smoke runs).
pub const ASSUMED_TOP_PPS: f64 = 500_000.0;

/// What the manager measured before the points.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// x-loop cost per iteration over a 64-byte packet, on the tool CPU.
    pub ns_per_iteration: f64,
    /// Offered top speed of 64-byte frames (median), when measured.
    pub top_pps: Option<f64>,
    /// The scratch disk's own write limit in MB/s (`dd oflag=direct`), when measured.
    #[serde(default)]
    pub disk_mb_s: Option<f64>,
}

impl Calibration {
    /// The top speed, measured or assumed.
    pub fn top(&self) -> f64 {
        self.top_pps.unwrap_or(ASSUMED_TOP_PPS)
    }

    /// x-loop iterations with which one core analyses `pps` packets per second.
    pub fn load_for(&self, pps: f64) -> u32 {
        (1e9 / (pps * self.ns_per_iteration)).round().max(1.0) as u32
    }

    /// Packets per second one core analyses at `load` iterations per packet.
    pub fn pps_at(&self, load: u32) -> f64 {
        1e9 / (f64::from(load) * self.ns_per_iteration)
    }

    /// The load with which one core analyses half the top speed.
    pub fn half_load(&self) -> u32 {
        self.load_for(self.top() / 2.0)
    }

    /// How a suite's notes begin: `calibration: x-loop 1.400 ns per iteration on CPU 1`.
    pub fn x_loop_note(&self) -> String {
        format!(
            "calibration: x-loop {:.3} ns per iteration on CPU {TOOL_CPU}",
            self.ns_per_iteration
        )
    }

    /// [`Calibration::x_loop_note`] and the top speed, sent over `flows` (`""` or
    /// `" over 16 flows"`): `...; offered top speed of 64 B frames 350000 pps (median)`.
    pub fn top_speed_note(&self, flows: &str) -> String {
        format!(
            "{}; offered top speed of 64 B frames{flows} {:.0} pps ({})",
            self.x_loop_note(),
            self.top(),
            if self.top_pps.is_some() {
                "median"
            } else {
                "assumed"
            }
        )
    }
}
