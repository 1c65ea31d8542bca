//! The exporters' options and their wiring, shared by `capture` and `probe`
//! ([`poolcap_export`]): `--metrics` serves the engine's live counters to Prometheus,
//! `--ipfix` sends the probe's flow records to a collector, `--kafka` streams the probe's
//! reports, flow records and alerts to a Kafka topic.
//!
//! Addresses are checked and the metrics port bound before the engine starts, so a bad
//! option is one line and a non-zero exit before any capture.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use poolcap_export::exporter::{parse_collector, ExportCounters, IpfixConfig, IpfixExporter};
use poolcap_export::flowcache::Timeouts;
use poolcap_export::http::{parse_listen, Listener, MetricsServer};
use poolcap_export::kafka::{parse_brokers, parse_option, KafkaConfig, KafkaExporter};
use poolcap_export::metrics::{ForwardSample, Metrics, QueueSample, RuleCounters, WrittenSample};

use crate::capture::Engine;
use crate::cli::usage;
use crate::units;

/// `--metrics`, on every command that runs the engine.
#[derive(Debug, Clone, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics on http://[ADDR:]PORT/metrics while running (loopback
    /// unless ADDR is given): per queue captured, drops by cause, filtered, pool
    /// occupancy, offloads, paused time, wait syscalls; written packets and bytes (-w);
    /// probe rule counters; build info and process CPU, memory and files.
    #[arg(long, value_name = "[ADDR:]PORT")]
    metrics: Option<String>,
}

impl MetricsArgs {
    /// `--metrics` was given.
    pub fn is_set(&self) -> bool {
        self.metrics.is_some()
    }
}

/// `--ipfix` and its timeouts (`probe` only: flow records come from the probe's rules).
#[derive(Debug, Clone, Args)]
pub struct IpfixArgs {
    /// Export the flows of rules with the flows action as IPFIX (RFC 7011) to a collector:
    /// HOST:PORT or udp://HOST:PORT (UDP, templates re-sent every 10 s), tcp://HOST:PORT.
    #[arg(long, value_name = "[udp://|tcp://]HOST:PORT")]
    ipfix: Option<String>,
    /// Export a flow record open this long (the flow continues in a new record).
    #[arg(long, default_value = "60s", value_parser = units::parse_duration, requires = "ipfix")]
    ipfix_active: Duration,
    /// Export a flow without packets for this long.
    #[arg(long, default_value = "15s", value_parser = units::parse_duration, requires = "ipfix")]
    ipfix_idle: Duration,
}

impl IpfixArgs {
    /// `--ipfix` was given.
    pub fn is_set(&self) -> bool {
        self.ipfix.is_some()
    }
}

/// How often UDP re-sends the templates.
const TEMPLATE_REFRESH: Duration = Duration::from_secs(10);

/// A bound but not yet serving `--metrics` endpoint.
pub struct MetricsPlan(Listener);

/// Checks `--metrics` and binds its port (before the engine starts).
pub fn bind_metrics(a: &MetricsArgs) -> anyhow::Result<Option<MetricsPlan>> {
    let Some(addr) = &a.metrics else {
        return Ok(None);
    };
    let addr = parse_listen(addr).map_err(|e| usage(e.to_string()))?;
    Ok(Some(MetricsPlan(Listener::bind(addr)?)))
}

/// Serves the engine's counters (and `exporters`' delivery counters, and what the file
/// writer wrote if the engine `writes` a file) on a bound endpoint; returns the server
/// (serving until dropped) and the probe's rule counters.
pub fn serve_metrics(
    plan: MetricsPlan,
    engine: &Engine,
    writes: bool,
    exporters: Vec<(&'static str, Arc<ExportCounters>)>,
) -> anyhow::Result<(MetricsServer, RuleCounters)> {
    let (counters, pools) = (engine.counters(), engine.pools());
    let forward = engine.forward_counters();
    let read = move || {
        counters
            .iter()
            .zip(pools.iter())
            .enumerate()
            .map(|(i, (c, p))| {
                let s = c.snapshot(i);
                QueueSample {
                    queue: i,
                    captured: s.captured,
                    bytes: s.bytes,
                    dropped_kernel: s.dropped_kernel,
                    dropped_pool: s.dropped_pool,
                    filtered: s.filtered,
                    freezes: s.freezes,
                    wait_syscalls: s.syscalls,
                    chunks_sealed: s.chunks,
                    pool_in_use: p.in_use() as u64,
                    pool_chunks: p.size().chunks as u64,
                    pool_peak: s.pool_peak_chunks,
                    offloaded_out: s.offloaded_out,
                    offloaded_in: s.offloaded_in,
                    paused_ms: s.paused_ms,
                    forward: forward.as_ref().map(|f| {
                        let (forwarded, forwarded_bytes, dropped_by_rule, dropped_tx) =
                            f[i].snapshot();
                        ForwardSample {
                            forwarded,
                            forwarded_bytes,
                            dropped_by_rule,
                            dropped_tx,
                        }
                    }),
                }
            })
            .collect()
    };
    let mut metrics = Metrics::new(engine.backend(), read, exporters);
    if writes {
        let written = engine.written();
        metrics = metrics.with_written(move || WrittenSample {
            packets: written.packets.load(Ordering::Relaxed),
            bytes: written.bytes.load(Ordering::Relaxed),
        });
    }
    let metrics = Arc::new(metrics);
    let rules = metrics.rules();
    let addr = plan.0.addr();
    let server = MetricsServer::start(plan.0, metrics)?;
    log::info!("metrics on http://{addr}/metrics");
    Ok((server, rules))
}

/// Checks `--ipfix` (before the engine starts); `ingress` is the ifindex of the interface
/// the flows come in on (0 for a file).
pub fn plan_ipfix(a: &IpfixArgs, ingress: u32) -> anyhow::Result<Option<IpfixConfig>> {
    let Some(target) = &a.ipfix else {
        return Ok(None);
    };
    let (transport, collector) = parse_collector(target).map_err(|e| usage(e.to_string()))?;
    Ok(Some(IpfixConfig {
        collector,
        transport,
        timeouts: Timeouts {
            active: a.ipfix_active,
            idle: a.ipfix_idle,
        },
        template_refresh: TEMPLATE_REFRESH,
        ingress,
    }))
}

/// Ends the exporter after the last period and prints what it delivered.
fn finish_ipfix(x: IpfixExporter) {
    let (exported, dropped) = x.finish();
    crate::say!("ipfix: {exported} flow records exported, {dropped} not delivered");
}

/// `--kafka` and `--topic` (`probe` only).
#[derive(Debug, Clone, Args)]
pub struct KafkaArgs {
    /// Stream each period's reports, flow records and alerts as JSON to Kafka brokers
    /// (HOST:PORT[,HOST:PORT...], IPv6 as [ADDR]:PORT; names resolve when librdkafka
    /// connects, and again on each retry), keyed by probe, rule and flow.
    #[arg(long, value_name = "BROKERS", requires = "topic")]
    kafka: Option<String>,
    /// The Kafka topic.
    #[arg(long, requires = "kafka")]
    topic: Option<String>,
    /// The probe's name in Kafka keys and messages (default: HOSTNAME:INTERFACE).
    #[arg(long, requires = "kafka")]
    probe_name: Option<String>,
    /// A librdkafka setting, as kcat's -X (repeatable): TLS (security.protocol=ssl,
    /// ssl.ca.location=...), SASL, compression.codec=zstd, acks=all, ...
    #[arg(long, value_name = "KEY=VALUE", requires = "kafka")]
    kafka_opt: Vec<String>,
}

impl KafkaArgs {
    /// `--kafka` was given.
    pub fn is_set(&self) -> bool {
        self.kafka.is_some()
    }
}

/// Checks `--kafka` and `--kafka-opt` (before the engine starts; broker names are resolved
/// later, by librdkafka, which retries).
pub fn plan_kafka(a: &KafkaArgs, iface: &str) -> anyhow::Result<Option<KafkaConfig>> {
    let (Some(brokers), Some(topic)) = (&a.kafka, &a.topic) else {
        return Ok(None);
    };
    let brokers = parse_brokers(brokers).map_err(|e| usage(e.to_string()))?;
    let options = a
        .kafka_opt
        .iter()
        .map(|o| parse_option(o).map_err(|e| usage(e.to_string())))
        .collect::<anyhow::Result<_>>()?;
    check_topic(topic).map_err(|e| usage(format!("--topic: {e}")))?;
    let probe = a.probe_name.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}:{iface}", host.trim())
    });
    Ok(Some(KafkaConfig {
        brokers,
        topic: topic.clone(),
        probe,
        options,
    }))
}

/// A topic name Kafka accepts: 1 to 249 of `a-z A-Z 0-9 . _ -`, and not `.` or `..`
/// (a broker refuses others only once the probe runs, and then every message is lost).
fn check_topic(topic: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 {
        return Err(format!("{} characters; Kafka takes 1 to 249", topic.len()));
    }
    if let Some(c) = topic.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "`{}` is not allowed in a Kafka topic name (use a-z, A-Z, 0-9, `.`, `_`, `-`)",
            c.escape_default()
        ));
    }
    if topic == "." || topic == ".." {
        return Err("`.` and `..` are not topic names".into());
    }
    Ok(())
}

/// The running exporters of a probe.
#[derive(Default)]
pub struct Exporters {
    /// `--ipfix`.
    pub ipfix: Option<IpfixExporter>,
    /// `--kafka`.
    pub kafka: Option<KafkaExporter>,
}

/// Starts the planned exporters (IPFIX over TCP connects now; librdkafka resolves and
/// connects in the background). Called once privileges are dropped, so their threads start
/// without any.
pub fn start_exporters(
    ipfix: Option<IpfixConfig>,
    kafka: Option<KafkaConfig>,
) -> anyhow::Result<Exporters> {
    Ok(Exporters {
        ipfix: ipfix.map(IpfixExporter::start).transpose()?,
        kafka: kafka.map(KafkaExporter::start).transpose()?,
    })
}

impl Exporters {
    /// The delivery counters of the flow exporters, by name (for the metrics).
    pub fn counters(&self) -> Vec<(&'static str, Arc<ExportCounters>)> {
        self.ipfix
            .iter()
            .map(|x| ("ipfix", x.counters()))
            .chain(self.kafka.iter().map(|x| ("kafka", x.flow_counters())))
            .collect()
    }

    /// Ends them after the last period and prints what each delivered.
    pub fn finish(self) {
        if let Some(x) = self.ipfix {
            finish_ipfix(x);
        }
        if let Some(x) = self.kafka {
            finish_kafka(x);
        }
    }
}

/// Ends the exporter after the last period and prints what it delivered.
fn finish_kafka(x: KafkaExporter) {
    let c = x.finish();
    let ((flows, flows_lost), (other, other_lost)) = (c.flows.get(), c.other.get());
    crate::say!(
        "kafka: {flows} flow records delivered, {flows_lost} not delivered; \
         {other} reports and alerts delivered, {other_lost} not delivered"
    );
}

#[cfg(test)]
mod tests {
    use super::check_topic;

    #[test]
    fn topic_names_kafka_refuses_are_refused() {
        for good in ["poolcap", "probe.flows_v2-1", &"t".repeat(249)] {
            assert_eq!(check_topic(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "1 to 249"),
            (&"t".repeat(250) as &str, "1 to 249"),
            ("a b", "` ` is not allowed"),
            ("a/b", "`/` is not allowed"),
            ("é", "not allowed"),
            ("a\u{1b}", "`\\u{1b}` is not allowed"),
            ("..", "not topic names"),
        ] {
            let e = check_topic(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
