//! Prometheus metrics: the engine's per-queue counters, the probe's rule counters and the
//! exporters' delivery counters, as OpenMetrics text (prometheus-client).
//!
//! The engine's counters are not copied into metric objects as they change: a
//! [`Collector`] reads them when Prometheus scrapes, through the closure the engine gives
//! ([`QueueSample`]s from its relaxed atomics). The capture path therefore does nothing
//! for metrics, and a scrape sees the same values the final report prints.
//!
//! Names follow the Prometheus conventions: counters end in `_total`, quantities carry
//! their base unit (`_bytes`, `_seconds`), causes are labels (`cause="kernel"|"pool"`).
//! `poolcap_packets_dropped_total` is loss only, what an alert on loss should see: frames
//! the operator asked the forwarder to drop (`--drop`) are counted apart, in
//! `poolcap_packets_policy_dropped_total`. `poolcap_build_info{version,backend}` (always 1)
//! and the standard process metrics (read from `/proc`) say what runs.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use poolcap_probe::report::RuleRecord;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Registry, Unit};

use crate::exporter::ExportCounters;
use crate::process::ProcessCollector;

/// One receive queue's counters at a scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueSample {
    /// Receive queue index.
    pub queue: usize,
    /// Packets handed to the pipeline.
    pub captured: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Dropped by the kernel (ring full).
    pub dropped_kernel: u64,
    /// Dropped by the pool (no free chunk).
    pub dropped_pool: u64,
    /// Rejected by a user-space filter stage.
    pub filtered: u64,
    /// Kernel ring freezes.
    pub freezes: u64,
    /// Wait syscalls of the capture thread.
    pub wait_syscalls: u64,
    /// Chunks sealed.
    pub chunks_sealed: u64,
    /// Chunks of the pool in use now.
    pub pool_in_use: u64,
    /// Chunks in the pool.
    pub pool_chunks: u64,
    /// Most chunks in use at once so far.
    pub pool_peak: u64,
    /// Packets of this queue's chunks sent to a buddy's workers.
    pub offloaded_out: u64,
    /// Packets of buddies' chunks taken in by this queue's workers.
    pub offloaded_in: u64,
    /// Milliseconds paused by congestion control.
    pub paused_ms: u64,
    /// Forwarding counters (`poolcap forward` only).
    pub forward: Option<ForwardSample>,
}

/// One receive queue's forwarding counters at a scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForwardSample {
    /// Frames sent out of OUT.
    pub forwarded: u64,
    /// Their bytes.
    pub forwarded_bytes: u64,
    /// Frames removed by the `--drop` rule.
    pub dropped_by_rule: u64,
    /// Frames OUT did not take.
    pub dropped_tx: u64,
}

type ReadQueues = Box<dyn Fn() -> Vec<QueueSample> + Send + Sync>;

/// Reads the engine's counters at each scrape.
struct EngineCollector(ReadQueues);

impl fmt::Debug for EngineCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EngineCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

/// Writes one metric family; nothing when it has no samples.
fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    samples: impl IntoIterator<Item = (Labels, M)>,
) -> fmt::Result {
    let mut samples = samples.into_iter().peekable();
    let Some((_, first)) = samples.peek() else {
        return Ok(());
    };
    let kind = first.metric_type();
    let mut m = enc.encode_descriptor(name, help, unit, kind)?;
    for (labels, metric) in samples {
        metric.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn queue(q: &QueueSample) -> Labels {
    vec![("queue", q.queue.to_string())]
}

impl Collector for EngineCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let qs = (self.0)();
        let counter = |f: fn(&QueueSample) -> u64| {
            qs.iter()
                .map(move |q| (queue(q), ConstCounter::new(f(q))))
                .collect::<Vec<_>>()
        };
        let gauge = |f: fn(&QueueSample) -> u64| {
            qs.iter()
                .map(move |q| {
                    (
                        queue(q),
                        ConstGauge::new(i64::try_from(f(q)).unwrap_or(i64::MAX)),
                    )
                })
                .collect::<Vec<_>>()
        };
        let e = &mut enc;
        family(
            e,
            "poolcap_packets_captured",
            "Packets handed to the pipeline.",
            None,
            counter(|q| q.captured),
        )?;
        family(
            e,
            "poolcap_captured",
            "Wire bytes of the captured packets.",
            Some(&Unit::Bytes),
            counter(|q| q.bytes),
        )?;
        let dropped = qs.iter().flat_map(|q| {
            let engine = [("kernel", q.dropped_kernel), ("pool", q.dropped_pool)];
            let forward = q.forward.map(|f| [("tx", f.dropped_tx)]);
            engine
                .into_iter()
                .chain(forward.into_iter().flatten())
                .map(|(cause, n)| {
                    let mut l = queue(q);
                    l.push(("cause", cause.to_string()));
                    (l, ConstCounter::new(n))
                })
        });
        family(
            e,
            "poolcap_packets_dropped",
            "Packets lost, by cause: kernel (ring full) or pool (no free chunk); when forwarding also tx (OUT did not take them).",
            None,
            dropped,
        )?;
        let forwarded = |f: fn(&ForwardSample) -> u64| {
            qs.iter()
                .filter_map(move |q| Some((queue(q), ConstCounter::new(f(q.forward.as_ref()?)))))
                .collect::<Vec<_>>()
        };
        family(
            e,
            "poolcap_packets_forwarded",
            "Frames sent out of the forwarding interface.",
            None,
            forwarded(|f| f.forwarded),
        )?;
        family(
            e,
            "poolcap_forwarded",
            "Bytes of the forwarded frames.",
            Some(&Unit::Bytes),
            forwarded(|f| f.forwarded_bytes),
        )?;
        family(
            e,
            "poolcap_packets_policy_dropped",
            "Frames the forwarder dropped because the operator asked to (--drop): policy, not loss.",
            None,
            forwarded(|f| f.dropped_by_rule),
        )?;
        family(
            e,
            "poolcap_packets_filtered",
            "Packets rejected by a user-space filter stage.",
            None,
            counter(|q| q.filtered),
        )?;
        family(
            e,
            "poolcap_ring_freezes",
            "Times the kernel ring was full.",
            None,
            counter(|q| q.freezes),
        )?;
        family(
            e,
            "poolcap_wait_syscalls",
            "Wait syscalls (poll, sleep) of the capture thread.",
            None,
            counter(|q| q.wait_syscalls),
        )?;
        family(
            e,
            "poolcap_chunks_sealed",
            "Chunks sealed by the capture thread.",
            None,
            counter(|q| q.chunks_sealed),
        )?;
        family(
            e,
            "poolcap_pool_chunks_in_use",
            "Chunks of the pool in use now.",
            None,
            gauge(|q| q.pool_in_use),
        )?;
        family(
            e,
            "poolcap_pool_chunks",
            "Chunks in the pool (R).",
            None,
            gauge(|q| q.pool_chunks),
        )?;
        family(
            e,
            "poolcap_pool_chunks_peak",
            "Most chunks in use at once.",
            None,
            gauge(|q| q.pool_peak),
        )?;
        let offloaded = qs.iter().flat_map(|q| {
            [("out", q.offloaded_out), ("in", q.offloaded_in)].map(|(dir, n)| {
                let mut l = queue(q);
                l.push(("direction", dir.to_string()));
                (l, ConstCounter::new(n))
            })
        });
        family(
            e,
            "poolcap_packets_offloaded",
            "Packets of chunks moved between buddy queues: out (to a buddy's workers) or in.",
            None,
            offloaded,
        )?;
        let paused = qs
            .iter()
            .map(|q| (queue(q), ConstCounter::new(q.paused_ms as f64 / 1e3)));
        family(
            e,
            "poolcap_paused",
            "Time the capture was paused by congestion control.",
            Some(&Unit::Seconds),
            paused,
        )?;
        Ok(())
    }
}

/// What a capture's file writer has written, at a scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WrittenSample {
    /// Packets in the output files.
    pub packets: u64,
    /// Bytes of the output files, every file of a rotated set: file headers and packet
    /// records as the capture format lays them out, before `--compress`. For an
    /// uncompressed pcap file this is its size once its packets are written; a pcapng
    /// file ends with a statistics block written at close, which is not counted.
    pub bytes: u64,
}

type ReadWritten = Box<dyn Fn() -> WrittenSample + Send + Sync>;

/// Reads the file writer's counters at each scrape.
struct WrittenCollector(ReadWritten);

impl fmt::Debug for WrittenCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WrittenCollector")
    }
}

impl Collector for WrittenCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let w = (self.0)();
        let written = [
            (
                "poolcap_written_packets",
                "Packets written to the capture files.",
                None,
                w.packets,
            ),
            (
                "poolcap_written",
                "Bytes written to the capture files (headers and records, before compression; a pcapng file's closing statistics block not counted).",
                Some(&Unit::Bytes),
                w.bytes,
            ),
        ];
        for (name, help, unit, n) in written {
            let c = ConstCounter::new(n);
            c.encode(enc.encode_descriptor(name, help, unit, c.metric_type())?)?;
        }
        Ok(())
    }
}

/// Reads an exporter's delivery counters at each scrape.
#[derive(Debug)]
struct ExportCollector(Vec<(&'static str, Arc<ExportCounters>)>);

impl Collector for ExportCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let samples = self.0.iter().flat_map(|(name, c)| {
            [
                ("exported", c.exported.load(Ordering::Relaxed)),
                ("dropped", c.dropped.load(Ordering::Relaxed)),
            ]
            .map(|(outcome, n)| {
                (
                    vec![
                        ("exporter", name.to_string()),
                        ("outcome", outcome.to_string()),
                    ],
                    ConstCounter::new(n),
                )
            })
        });
        family(
            &mut enc,
            "poolcap_export_flow_records",
            "Flow records handed to the collector (exported) or lost (dropped: channel full, send failed, collector gone).",
            None,
            samples,
        )
    }
}

/// The probe's rule counters, added to at the end of every period.
#[derive(Debug, Clone, Default)]
pub struct RuleCounters {
    packets: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    alerts: Family<Labels, Counter>,
}

impl RuleCounters {
    /// Adds one period's records.
    pub fn add_period(&self, records: &[RuleRecord]) {
        for r in records {
            let l = vec![("rule", r.rule.clone())];
            self.packets.get_or_create(&l).inc_by(r.packets);
            self.bytes.get_or_create(&l).inc_by(r.bytes);
            let alerts = r.alerts.as_ref().map_or(0, |a| a.len() as u64);
            self.alerts.get_or_create(&l).inc_by(alerts);
        }
    }
}

/// Everything `/metrics` serves.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    rules: RuleCounters,
}

impl Metrics {
    /// Metrics of an engine running `backend` whose queues `read` returns at each scrape;
    /// `exporters` are the delivery counters of the running exporters, by name. The
    /// process's own metrics and `poolcap_build_info` come with them.
    pub fn new(
        backend: &str,
        read: impl Fn() -> Vec<QueueSample> + Send + Sync + 'static,
        exporters: Vec<(&'static str, Arc<ExportCounters>)>,
    ) -> Self {
        let mut registry = Registry::default();
        let build = Family::<Labels, Gauge>::default();
        build
            .get_or_create(&vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("backend", backend.to_string()),
            ])
            .set(1);
        registry.register(
            "poolcap_build_info",
            "poolcap's version and capture backend; always 1",
            build,
        );
        registry.register_collector(Box::new(ProcessCollector));
        registry.register_collector(Box::new(EngineCollector(Box::new(read))));
        if !exporters.is_empty() {
            registry.register_collector(Box::new(ExportCollector(exporters)));
        }
        let rules = RuleCounters::default();
        // `register` ends the help text with a period itself.
        registry.register(
            "poolcap_probe_rule_packets",
            "Packets matching a probe rule (added at each period's end)",
            rules.packets.clone(),
        );
        registry.register_with_unit(
            "poolcap_probe_rule",
            "Wire bytes of the packets matching a probe rule (added at each period's end)",
            Unit::Bytes,
            rules.bytes.clone(),
        );
        registry.register(
            "poolcap_probe_rule_alerts",
            "Alert events of a probe rule",
            rules.alerts.clone(),
        );
        Self { registry, rules }
    }

    /// Adds the file writer's counters, which `read` returns at each scrape (a capture
    /// with `-w`).
    pub fn with_written(
        mut self,
        read: impl Fn() -> WrittenSample + Send + Sync + 'static,
    ) -> Self {
        self.registry
            .register_collector(Box::new(WrittenCollector(Box::new(read))));
        self
    }

    /// The probe's rule counters (a handle for the period reporter).
    pub fn rules(&self) -> RuleCounters {
        self.rules.clone()
    }

    /// The OpenMetrics text of all metrics now (what Prometheus asks for).
    pub fn encode(&self) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }

    /// The same metrics in the Prometheus text format 0.0.4 (for clients that do not ask
    /// for OpenMetrics, such as `promtool check metrics` and curl).
    pub fn encode_prometheus_text(&self) -> String {
        openmetrics_to_prometheus_text(&self.encode())
    }
}

/// OpenMetrics names a counter family without its `_total` suffix in `# HELP` and `# TYPE`
/// while the samples carry it; the Prometheus text format wants one name throughout, and
/// has no `# UNIT` or `# EOF`. prometheus-client writes only OpenMetrics
/// (prometheus/client_rust#51), so the older format is derived from it here.
fn openmetrics_to_prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let suffix = if kind == "counter" { "_total" } else { "" };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                out += &format!("# HELP {name}{suffix} {text}\n");
            }
            out += &format!("# TYPE {name}{suffix} {kind}\n");
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out += line;
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn engine_counters_are_read_at_each_scrape_with_conventional_names() {
        let captured = Arc::new(AtomicU64::new(5));
        let c = Arc::clone(&captured);
        let m = Metrics::new(
            "af_packet",
            move || {
                vec![
                    QueueSample {
                        queue: 0,
                        captured: c.load(Ordering::Relaxed),
                        bytes: 300,
                        dropped_kernel: 2,
                        dropped_pool: 1,
                        pool_in_use: 3,
                        paused_ms: 1500,
                        ..QueueSample::default()
                    },
                    QueueSample {
                        queue: 1,
                        ..QueueSample::default()
                    },
                ]
            },
            Vec::new(),
        );
        let t = m.encode();
        assert_eq!(
            value(&t, "poolcap_packets_captured_total{queue=\"0\"}"),
            Some(5.0),
            "{t}"
        );
        captured.store(9, Ordering::Relaxed);
        let t = m.encode();
        assert_eq!(
            value(&t, "poolcap_packets_captured_total{queue=\"0\"}"),
            Some(9.0),
            "{t}"
        );
        assert_eq!(
            value(&t, "poolcap_captured_bytes_total{queue=\"0\"}"),
            Some(300.0),
            "{t}"
        );
        assert_eq!(
            value(
                &t,
                "poolcap_packets_dropped_total{queue=\"0\",cause=\"kernel\"}"
            ),
            Some(2.0)
        );
        assert_eq!(
            value(
                &t,
                "poolcap_packets_dropped_total{queue=\"0\",cause=\"pool\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&t, "poolcap_pool_chunks_in_use{queue=\"0\"}"),
            Some(3.0)
        );
        assert_eq!(
            value(&t, "poolcap_paused_seconds_total{queue=\"0\"}"),
            Some(1.5)
        );
        assert_eq!(
            value(&t, "poolcap_packets_captured_total{queue=\"1\"}"),
            Some(0.0)
        );
        assert!(t.contains("# TYPE poolcap_pool_chunks_in_use gauge"), "{t}");
        assert!(t.ends_with("# EOF\n"), "{t}");
        let p = m.encode_prometheus_text();
        assert!(
            p.contains("# HELP poolcap_packets_captured_total Packets handed to the pipeline.\n# TYPE poolcap_packets_captured_total counter\npoolcap_packets_captured_total{queue=\"0\"} 9\n"),
            "{p}"
        );
        assert!(
            p.contains("# TYPE poolcap_pool_chunks_in_use gauge\npoolcap_pool_chunks_in_use{queue=\"0\"} 3\n"),
            "{p}"
        );
        assert!(!p.contains("# UNIT") && !p.contains("# EOF"), "{p}");
    }

    #[test]
    fn forwarding_counters_are_served_only_when_forwarding() {
        let m = Metrics::new(
            "af_packet",
            || {
                vec![QueueSample {
                    queue: 1,
                    dropped_kernel: 3,
                    forward: Some(ForwardSample {
                        forwarded: 7,
                        forwarded_bytes: 448,
                        dropped_by_rule: 2,
                        dropped_tx: 1,
                    }),
                    ..QueueSample::default()
                }]
            },
            Vec::new(),
        );
        let t = m.encode();
        let dropped = |cause: &str| {
            value(
                &t,
                &format!("poolcap_packets_dropped_total{{queue=\"1\",cause=\"{cause}\"}}"),
            )
        };
        assert_eq!(
            value(&t, "poolcap_packets_forwarded_total{queue=\"1\"}"),
            Some(7.0),
            "{t}"
        );
        assert_eq!(
            value(&t, "poolcap_forwarded_bytes_total{queue=\"1\"}"),
            Some(448.0),
            "{t}"
        );
        let causes = ["kernel", "pool", "tx", "rule"].map(dropped);
        assert_eq!(causes, [Some(3.0), Some(0.0), Some(1.0), None], "{t}");
        // What the operator asked to drop is policy, not loss.
        assert_eq!(
            value(&t, "poolcap_packets_policy_dropped_total{queue=\"1\"}"),
            Some(2.0),
            "{t}"
        );
        let plain = Metrics::new("af_packet", || vec![QueueSample::default()], Vec::new()).encode();
        assert!(
            !plain.contains("forwarded") && !plain.contains("policy"),
            "{plain}"
        );
    }

    #[test]
    fn rule_counters_add_up_over_periods_and_exporters_count_outcomes() {
        let counters = Arc::new(ExportCounters::default());
        counters.exported.store(7, Ordering::Relaxed);
        counters.dropped.store(2, Ordering::Relaxed);
        let m = Metrics::new("af_packet", Vec::new, vec![("ipfix", counters)]);
        let record = |packets| RuleRecord {
            rule: "web".into(),
            enabled: true,
            period_start: String::new(),
            period_end: String::new(),
            packets,
            bytes: packets * 100,
            accounting: Default::default(),
            no_ip: None,
            flows: None,
            sizes: None,
            alerts: None,
            alert_untracked: None,
            changes: Vec::new(),
            last: false,
        };
        m.rules().add_period(&[record(3)]);
        m.rules().add_period(&[record(4)]);
        let t = m.encode();
        assert_eq!(
            value(&t, "poolcap_probe_rule_packets_total{rule=\"web\"}"),
            Some(7.0),
            "{t}"
        );
        assert_eq!(
            value(&t, "poolcap_probe_rule_bytes_total{rule=\"web\"}"),
            Some(700.0),
            "{t}"
        );
        assert_eq!(
            value(
                &t,
                "poolcap_export_flow_records_total{exporter=\"ipfix\",outcome=\"dropped\"}"
            ),
            Some(2.0),
            "{t}"
        );
        // No engine queues: no empty families.
        assert!(!t.contains("poolcap_packets_captured"), "{t}");
        assert!(!t.contains("poolcap_written"), "{t}");
    }

    #[test]
    fn build_info_and_the_process_metrics_are_served_in_both_formats() {
        let m = Metrics::new("af_xdp", Vec::new, Vec::new());
        let t = m.encode();
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            value(
                &t,
                &format!("poolcap_build_info{{version=\"{version}\",backend=\"af_xdp\"}}")
            ),
            Some(1.0),
            "{t}"
        );
        assert!(
            value(&t, "process_resident_memory_bytes").is_some_and(|b| b > 0.0),
            "{t}"
        );
        assert!(
            value(&t, "process_open_fds").is_some_and(|n| n > 0.0),
            "{t}"
        );
        assert!(value(&t, "process_cpu_seconds_total").is_some(), "{t}");
        assert!(
            value(&t, "process_start_time_seconds").is_some_and(|s| s > 1e9),
            "{t}"
        );
        let p = m.encode_prometheus_text();
        for kind in [
            "poolcap_build_info gauge",
            "process_cpu_seconds_total counter",
            "process_resident_memory_bytes gauge",
            "process_open_fds gauge",
            "process_start_time_seconds gauge",
        ] {
            assert!(p.contains(&format!("# TYPE {kind}\n")), "{kind}: {p}");
        }
    }

    #[test]
    fn written_packets_and_bytes_are_counters_with_a_unit() {
        let bytes = Arc::new(AtomicU64::new(24));
        let b = Arc::clone(&bytes);
        let m =
            Metrics::new("af_packet", Vec::new, Vec::new()).with_written(move || WrittenSample {
                packets: 2,
                bytes: b.load(Ordering::Relaxed),
            });
        bytes.store(24 + 2 * 76, Ordering::Relaxed);
        let t = m.encode();
        assert_eq!(value(&t, "poolcap_written_bytes_total"), Some(176.0), "{t}");
        assert_eq!(value(&t, "poolcap_written_packets_total"), Some(2.0), "{t}");
        assert!(t.contains("# UNIT poolcap_written_bytes bytes"), "{t}");
        let p = m.encode_prometheus_text();
        assert!(
            p.contains(
                "# TYPE poolcap_written_bytes_total counter\npoolcap_written_bytes_total 176\n"
            ),
            "{p}"
        );
    }
}
