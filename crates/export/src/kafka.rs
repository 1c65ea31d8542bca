//! The Kafka exporter: each probe period as JSON messages on one topic, through librdkafka
//! (the rdkafka crate on the system's library).
//!
//! Per period and rule: one `report` message (the rule's JSON Lines record without its flow
//! list), one `flow` message per listed flow and one `alert` message per alert. Keys name the
//! probe, the rule and the flow (or alert key), so a topic with several partitions keeps
//! each flow's records in order on one partition.
//!
//! Nothing here can hold up the capture: the reporter only offers a period (`try_send`; a
//! full channel drops it), this thread hands messages to librdkafka's bounded queue
//! without waiting (a full queue drops the message), and librdkafka gives up on a message
//! after [`MESSAGE_TIMEOUT`]. Every message is counted once, as delivered (acknowledged by
//! the broker) or not delivered; flow records in [`ExportCounters`] (the metrics'
//! `exporter="kafka"`), reports and alerts apart.

use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use poolcap_probe::report::RuleRecord;
use rdkafka::config::ClientConfig;
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
}

/// Checks `--kafka`: a comma-separated list of HOST:PORT, each of which must resolve now
/// (librdkafka would only retry in the background).
pub fn parse_brokers(s: &str) -> Result<String, ExportError> {
    let bad = |why: String| ExportError::Address {
        what: "--kafka",
        addr: s.to_string(),
        why,
    };
    let list: Vec<&str> = s.split(',').map(str::trim).collect();
    for b in &list {
        b.to_socket_addrs()
            .map_err(|e| bad(format!("give HOST:PORT[,HOST:PORT...] ({b}: {e})")))?
            .next()
            .ok_or_else(|| bad(format!("{b} resolves to no address")))?;
    }
    Ok(list.join(","))
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
                    "{probe}/{}/flow/{}/{}:{}/{}:{}",
                    r.rule, f.proto, f.src, f.sport, f.dst, f.dport
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

/// Counts each message's delivery report.
struct Context {
    counters: Arc<KafkaCounters>,
}

impl ClientContext for Context {}

impl ProducerContext for Context {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, kind: usize) {
        let kind = if kind == Kind::Flow as usize {
            Kind::Flow
        } else {
            Kind::Other
        };
        self.counters.count(kind, result.is_ok(), 1);
    }
}

/// Offers periods to a running exporter (the reporter's handle; cheap to clone).
#[derive(Debug, Clone)]
pub struct KafkaSender {
    tx: SyncSender<Vec<RuleRecord>>,
    counters: Arc<KafkaCounters>,
}

impl KafkaSender {
    /// Hands one period's records over without waiting; a full channel (or a stopped
    /// exporter) drops them and counts their messages.
    pub fn offer(&self, records: &[RuleRecord]) {
        match self.tx.try_send(records.to_vec()) {
            Ok(()) => {}
            Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) => {
                for m in messages("", &r) {
                    self.counters.count(m.kind, false, 1);
                }
            }
        }
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
        let producer: ThreadedProducer<Context> = ClientConfig::new()
            .set("bootstrap.servers", &cfg.brokers)
            .set("queue.buffering.max.messages", QUEUE_MESSAGES.to_string())
            .set(
                "message.timeout.ms",
                MESSAGE_TIMEOUT.as_millis().to_string(),
            )
            .set("linger.ms", "20")
            .set("log_level", "3")
            .create_with_context(Context {
                counters: Arc::clone(&counters),
            })
            .map_err(|e| bad(e.to_string()))?;
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
            sender: KafkaSender { tx, counters },
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
    fn run(self, rx: &Receiver<Vec<RuleRecord>>) {
        // Ends when every sender is gone.
        while let Ok(records) = rx.recv() {
            for m in messages(&self.probe, &records) {
                let payload = m.payload.to_string();
                let record = BaseRecord::with_opaque_to(&self.topic, m.kind as usize)
                    .key(&m.key)
                    .payload(&payload);
                if self.producer.send(record).is_err() {
                    self.counters.count(m.kind, false, 1);
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
            first_seen: "t0".into(),
            last_seen: "t1".into(),
            tcp_flags: String::new(),
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
    fn brokers_must_resolve() {
        assert_eq!(
            parse_brokers("127.0.0.1:9092, localhost:9093").unwrap(),
            "127.0.0.1:9092,localhost:9093"
        );
        for bad in [
            "broker.invalid:9092",
            "127.0.0.1",
            "127.0.0.1:9092,nope.invalid:1",
        ] {
            let e = parse_brokers(bad).unwrap_err().to_string();
            assert!(e.starts_with("--kafka `"), "{e}");
        }
    }
}
