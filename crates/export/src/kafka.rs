//! The Kafka exporter: each probe period as JSON messages on one topic, through librdkafka
//! (the rdkafka crate on the system's library).
//!
//! Per period and rule: one `report` message (the rule's JSON Lines record without its flow
//! list), one `flow` message per listed flow and one `alert` message per alert. Keys name the
//! probe, the rule and the flow (or alert key), so a topic with several partitions keeps
//! each flow's records in order on one partition; an IPv6 endpoint is written `[ADDR]:PORT`.
//!
//! Brokers are resolved by librdkafka when it connects, and again at each reconnection: a
//! probe started before its broker's name resolves (at boot, before the network) runs,
//! counts what it cannot deliver, says so on stderr, and delivers once the broker is
//! reachable. `--kafka-opt KEY=VALUE` passes any librdkafka setting (TLS, SASL,
//! compression, acks), as kcat's `-X` does.
//!
//! Nothing here can hold up the capture: the reporter only offers a period (`try_send`; a
//! full channel drops it), this thread hands messages to librdkafka's bounded queue
//! without waiting (a full queue drops the message), and librdkafka gives up on a message
//! after [`MESSAGE_TIMEOUT`]. Every message is counted once, as delivered (acknowledged by
//! the broker) or not delivered; flow records in [`ExportCounters`] (the metrics'
//! `exporter="kafka"`), reports and alerts apart.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use poolcap_probe::report::RuleRecord;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig, ThreadedProducer,
};
use rdkafka::ClientContext;
use serde_json::{json, Value};

use crate::exporter::ExportCounters;
use crate::ExportError;

/// Periods the channel holds (as for IPFIX).
const CHANNEL_PERIODS: usize = 64;
/// Messages librdkafka keeps waiting for the broker; beyond that they are dropped.
const QUEUE_MESSAGES: usize = 100_000;
/// How long librdkafka tries to deliver a message.
pub const MESSAGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the end of the probe waits for the last messages to be acknowledged.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// A resolved `--kafka`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: HOST:PORT,...
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// The probe's name in every message and key.
    pub probe: String,
    /// librdkafka settings (`--kafka-opt KEY=VALUE`), applied after poolcap's own.
    pub options: Vec<(String, String)>,
}

/// Checks `--kafka`: a comma-separated list of HOST:PORT (a name, an IPv4 address or a
/// bracketed IPv6 one, and a port number). Names are not resolved now: librdkafka resolves
/// them when it connects, and retries.
pub fn parse_brokers(s: &str) -> Result<String, ExportError> {
    let bad = |why: String| ExportError::Address {
        what: "--kafka",
        addr: s.to_string(),
        why,
    };
    let list: Vec<&str> = s.split(',').map(str::trim).collect();
    for b in &list {
        let (host, port) = b
            .rsplit_once(':')
            .ok_or_else(|| bad(format!("give HOST:PORT[,HOST:PORT...] ({b}: no port)")))?;
        port.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad(format!("{b}: `{port}` is not a port number")))?;
        let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        let valid = match bracketed {
            Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
            None => {
                !host.is_empty()
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            }
        };
        if !valid {
            return Err(bad(format!(
                "{b}: `{host}` is not a host name or address (IPv6: [ADDR]:PORT)"
            )));
        }
    }
    Ok(list.join(","))
}

/// Parses one `--kafka-opt KEY=VALUE`.
pub fn parse_option(s: &str) -> Result<(String, String), ExportError> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(ExportError::Address {
            what: "--kafka-opt",
            addr: s.to_string(),
            why: "give KEY=VALUE, a librdkafka setting (e.g. compression.codec=zstd)".into(),
        }),
    }
}

/// `ADDR:PORT`, or `[ADDR]:PORT` for IPv6, so a key splits unambiguously.
fn endpoint(addr: &str, port: u16) -> String {
    match addr.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{addr}:{port}"),
    }
}

/// What a message carries, for counting its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Flow = 0,
    Other = 1,
}

/// Delivered and not delivered messages: flow records, and reports with alerts.
#[derive(Debug, Default)]
pub struct KafkaCounters {
    /// Flow records (shown in the metrics).
    pub flows: Arc<ExportCounters>,
    /// Period reports and alerts.
    pub other: ExportCounters,
}

impl KafkaCounters {
    fn of(&self, kind: Kind) -> &ExportCounters {
        match kind {
            Kind::Flow => &self.flows,
            Kind::Other => &self.other,
        }
    }

    fn count(&self, kind: Kind, delivered: bool, n: u64) {
        let c = self.of(kind);
        let field: &AtomicU64 = if delivered { &c.exported } else { &c.dropped };
        field.fetch_add(n, Ordering::Relaxed);
    }
}

/// One Kafka message: key, JSON payload, kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `probe/rule/...`.
    pub key: String,
    /// The JSON object.
    pub payload: Value,
    kind: Kind,
}

/// The messages of one period (pure).
pub fn messages(probe: &str, records: &[RuleRecord]) -> Vec<Message> {
    let mut out = Vec::new();
    for r in records {
        let mut report = serde_json::to_value(r).unwrap_or(Value::Null);
        if let Some(list) = report.pointer_mut("/flows/list") {
            *list = Value::Array(Vec::new());
        }
        report["type"] = json!("report");
        report["probe"] = json!(probe);
        out.push(Message {
            key: format!("{probe}/{}/report", r.rule),
            payload: report,
            kind: Kind::Other,
        });
        let header = |kind: &str, mut v: Value| {
            v["type"] = json!(kind);
            v["probe"] = json!(probe);
            v["rule"] = json!(r.rule);
            v["period_start"] = json!(r.period_start);
            v["period_end"] = json!(r.period_end);
            v
        };
        for f in r.flows.iter().flat_map(|f| &f.list) {
            out.push(Message {
                key: format!(
                    "{probe}/{}/flow/{}/{}/{}",
                    r.rule,
                    f.proto,
                    endpoint(&f.src, f.sport),
                    endpoint(&f.dst, f.dport)
                ),
                payload: header("flow", serde_json::to_value(f).unwrap_or(Value::Null)),
                kind: Kind::Flow,
            });
        }
        for a in r.alerts.iter().flatten() {
            out.push(Message {
                key: format!("{probe}/{}/alert/{}={}", r.rule, a.key, a.value),
                payload: header("alert", serde_json::to_value(a).unwrap_or(Value::Null)),
                kind: Kind::Other,
            });
        }
    }
    out
}

/// Counts each message's delivery report, says when delivery starts failing and when it
/// works again, and passes librdkafka's own log records and errors (a broker refusing the
/// connection, every broker down) to the process's logger, as `librdkafka`'s.
struct Context {
    counters: Arc<KafkaCounters>,
    failing: AtomicBool,
}

impl ClientContext for Context {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let level = match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => log::Level::Error,
            RDKafkaLogLevel::Warning => log::Level::Warn,
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => log::Level::Info,
            RDKafkaLogLevel::Debug => log::Level::Debug,
        };
        log::log!(target: LOG_TARGET, level, "{facility}: {message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log::error!(target: LOG_TARGET, "{error}: {reason}");
    }
}

/// The target of librdkafka's records.
const LOG_TARGET: &str = "librdkafka";

/// librdkafka's `log_level` (syslog levels) for the most detailed level the logger lets
/// through: errors only unless asked for more (`-v`), as its records are many.
fn librdkafka_log_level() -> &'static str {
    match log::max_level() {
        log::LevelFilter::Trace => "7",
        log::LevelFilter::Debug => "6",
        _ => "3",
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, kind: usize) {
        let kind = if kind == Kind::Flow as usize {
            Kind::Flow
        } else {
            Kind::Other
        };
        self.counters.count(kind, result.is_ok(), 1);
        match result {
            Err((e, _)) if !self.failing.swap(true, Ordering::Relaxed) => {
                log::warn!(
                    "kafka: cannot deliver: {e} (counted as not delivered; the broker is \
                     tried again)"
                );
            }
            Ok(_) if self.failing.swap(false, Ordering::Relaxed) => {
                log::info!("kafka: delivering again");
            }
            _ => {}
        }
    }
}

/// Offers periods to a running exporter (the reporter's handle; cheap to clone).
#[derive(Debug, Clone)]
pub struct KafkaSender {
    tx: SyncSender<Handed>,
    counters: Arc<KafkaCounters>,
    wait: bool,
}

/// A period's records, and whether the exporter waits for room in librdkafka's queue.
type Handed = (Vec<RuleRecord>, bool);

impl KafkaSender {
    /// Hands one period's records over without waiting (unless [`KafkaSender::waiting`]);
    /// a full channel (or a stopped exporter) drops them and counts their messages.
    pub fn offer(&self, records: &[RuleRecord]) {
        let handed = (records.to_vec(), self.wait);
        let lost = if self.wait {
            self.tx.send(handed).err().map(|e| e.0)
        } else {
            match self.tx.try_send(handed) {
                Ok(()) => None,
                Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) => Some(r),
            }
        };
        for m in lost.iter().flat_map(|(r, _)| messages("", r)) {
            self.counters.count(m.kind, false, 1);
        }
    }

    /// A handle that waits for room (in the channel, then in librdkafka's queue) instead
    /// of dropping: for a capture file, whose reading can wait for the exporter.
    pub fn waiting(mut self) -> Self {
        self.wait = true;
        self
    }
}

/// A running Kafka exporter.
pub struct KafkaExporter {
    sender: KafkaSender,
    thread: JoinHandle<()>,
}

impl KafkaExporter {
    /// Creates the producer (no connection yet: librdkafka connects in the background and
    /// keeps trying) and starts the thread.
    pub fn start(cfg: KafkaConfig) -> Result<Self, ExportError> {
        let bad = |why: String| ExportError::Address {
            what: "--kafka",
            addr: cfg.brokers.clone(),
            why,
        };
        let counters = Arc::new(KafkaCounters::default());
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &cfg.brokers)
            .set("queue.buffering.max.messages", QUEUE_MESSAGES.to_string())
            .set(
                "message.timeout.ms",
                MESSAGE_TIMEOUT.as_millis().to_string(),
            )
            .set("linger.ms", "20")
            .set("log_level", librdkafka_log_level());
        for (k, v) in &cfg.options {
            config.set(k, v);
        }
        let producer: ThreadedProducer<Context> = config
            .create_with_context(Context {
                counters: Arc::clone(&counters),
                failing: AtomicBool::new(false),
            })
            .map_err(|e| ExportError::Address {
                what: "--kafka-opt",
                addr: cfg
                    .options
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                why: e.to_string(),
            })?;
        let (tx, rx) = sync_channel(CHANNEL_PERIODS);
        let worker = Worker {
            producer,
            topic: cfg.topic,
            probe: cfg.probe,
            counters: Arc::clone(&counters),
        };
        let thread = std::thread::Builder::new()
            .name("kafka".into())
            .spawn(move || worker.run(&rx))
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            sender: KafkaSender {
                tx,
                counters,
                wait: false,
            },
            thread,
        })
    }

    /// A handle for the reporter.
    pub fn sender(&self) -> KafkaSender {
        self.sender.clone()
    }

    /// The flow records' delivery counters (for the metrics).
    pub fn flow_counters(&self) -> Arc<ExportCounters> {
        Arc::clone(&self.sender.counters.flows)
    }

    /// Waits until every other [`KafkaSender`] is gone and the last messages are delivered
    /// or given up (`FLUSH_TIMEOUT`); returns the counters, every message counted.
    pub fn finish(self) -> Arc<KafkaCounters> {
        let counters = Arc::clone(&self.sender.counters);
        drop(self.sender);
        let _ = self.thread.join();
        counters
    }
}

struct Worker {
    producer: ThreadedProducer<Context>,
    topic: String,
    probe: String,
    counters: Arc<KafkaCounters>,
}

impl Worker {
    fn run(self, rx: &Receiver<Handed>) {
        // Ends when every sender is gone.
        while let Ok((records, wait)) = rx.recv() {
            for m in messages(&self.probe, &records) {
                let payload = m.payload.to_string();
                let mut record = BaseRecord::with_opaque_to(&self.topic, m.kind as usize)
                    .key(&m.key)
                    .payload(&payload);
                loop {
                    match self.producer.send(record) {
                        Ok(()) => break,
                        // A full queue empties as the broker acknowledges or as messages
                        // time out (MESSAGE_TIMEOUT): a bounded wait.
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                            if wait =>
                        {
                            record = r;
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        Err(_) => {
                            self.counters.count(m.kind, false, 1);
                            break;
                        }
                    }
                }
            }
        }
        if self.producer.flush(FLUSH_TIMEOUT).is_err() {
            // What the broker did not take by now is reported as not delivered.
            self.producer
                .purge(PurgeConfig::default().queue().inflight());
            self.producer.poll(Duration::from_millis(100));
        }
        // Dropping the producer delivers the remaining reports to the context.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolcap_probe::report::{Accounting, AlertRecord, FlowRecord, FlowsRecord};

    fn record() -> RuleRecord {
        let flow = |sport| FlowRecord {
            src: "10.77.0.1".into(),
            dst: "10.77.0.2".into(),
            proto: 17,
            sport,
            dport: 9,
            packets: 3,
            bytes: 300,
            ip_bytes: 258,
            first_seen: "t0".into(),
            last_seen: "t1".into(),
            tcp_flags: String::new(),
            vlan: None,
            icmp_type: None,
            icmp_code: None,
        };
        RuleRecord {
            rule: "all".into(),
            enabled: true,
            period_start: "s".into(),
            period_end: "e".into(),
            packets: 6,
            bytes: 600,
            accounting: Accounting::default(),
            no_ip: None,
            flows: Some(FlowsRecord {
                count: 2,
                evicted: Default::default(),
                list: vec![flow(1000), flow(1001)],
                unlisted: Vec::new(),
            }),
            sizes: None,
            alerts: Some(vec![AlertRecord {
                key: "dst",
                value: "10.77.0.2".into(),
                packets: 6,
                rate: 6.0,
                threshold: 1,
            }]),
            alert_untracked: None,
            changes: Vec::new(),
            last: false,
        }
    }

    #[test]
    fn a_period_is_a_report_its_flows_and_its_alerts_keyed_by_probe_and_flow() {
        let m = messages("p1", &[record()]);
        let keys: Vec<&str> = m.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "p1/all/report",
                "p1/all/flow/17/10.77.0.1:1000/10.77.0.2:9",
                "p1/all/flow/17/10.77.0.1:1001/10.77.0.2:9",
                "p1/all/alert/dst=10.77.0.2",
            ]
        );
        assert_eq!(m[0].payload["packets"], 6);
        assert_eq!(m[0].payload["flows"]["count"], 2);
        assert_eq!(m[0].payload["flows"]["list"], json!([]));
        assert_eq!(m[1].payload["type"], "flow");
        assert_eq!(m[1].payload["bytes"], 300);
        assert_eq!(m[1].payload["period_end"], "e");
        assert_eq!(m[3].payload["type"], "alert");
        assert_eq!(
            m.iter().filter(|m| m.kind == Kind::Flow).count(),
            2,
            "two flow records"
        );
    }

    #[test]
    fn brokers_are_checked_but_not_resolved() {
        assert_eq!(
            parse_brokers("127.0.0.1:9092, localhost:9093,[::1]:9094,broker.invalid:9092").unwrap(),
            "127.0.0.1:9092,localhost:9093,[::1]:9094,broker.invalid:9092"
        );
        for bad in [
            "127.0.0.1",
            "127.0.0.1:9092,nope:x",
            "::1:9092",
            "[::1]:0",
            ":9092",
            "a b:1",
        ] {
            let e = parse_brokers(bad).unwrap_err().to_string();
            assert!(e.starts_with("--kafka `"), "{e}");
        }
        assert_eq!(
            parse_option("compression.codec=zstd").unwrap(),
            ("compression.codec".into(), "zstd".into())
        );
        assert_eq!(parse_option("sasl.password=a=b").unwrap().1, "a=b");
        assert!(parse_option("acks").is_err() && parse_option("=1").is_err());
    }

    #[test]
    fn ipv6_endpoints_in_keys_are_bracketed() {
        let mut r = record();
        if let Some(f) = r.flows.as_mut() {
            f.list[0].src = "2001:db8::1".into();
            f.list[0].dst = "2001:db8::2".into();
        }
        let m = messages("p1", &[r]);
        assert_eq!(
            m[1].key,
            "p1/all/flow/17/[2001:db8::1]:1000/[2001:db8::2]:9"
        );
        assert_eq!(m[2].key, "p1/all/flow/17/10.77.0.1:1001/10.77.0.2:9");
    }

    #[test]
    fn librdkafka_settings_pass_through_and_bad_ones_are_refused() {
        let cfg = |options: &[(&str, &str)]| KafkaConfig {
            brokers: "broker.invalid:9092".into(),
            topic: "t".into(),
            probe: "p".into(),
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        // A broker that does not resolve starts an exporter all the same.
        let x =
            KafkaExporter::start(cfg(&[("compression.codec", "zstd"), ("acks", "all")])).unwrap();
        drop(x.finish());
        let e = KafkaExporter::start(cfg(&[("no.such.setting", "1")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("--kafka-opt `no.such.setting=1`"), "{e}");
        let e = KafkaExporter::start(cfg(&[("compression.codec", "nope")]))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("compression.codec"), "{e}");
    }
}
