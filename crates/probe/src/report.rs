//! Period reports: one JSON Lines record per rule and period (the machine form, `--report`)
//! and a short table (the human form, stdout), built from a merged [`Tally`].
//!
//! Flow records carry their first and last packet times; with `top = N` only the N largest
//! flows are listed, while `flows.count` and `flows.evicted` still cover them all, so
//! `packets` = sum of listed and unlisted flows + evicted + `no_ip` whatever the table did.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::{Config, Rule, TopBy};
use crate::flows::{Evicted, FlowTable};
use crate::packet::flag_letters;
use crate::tally::{RuleTally, Tally, SIZE_LABELS};

/// The capture engine's counters over one period (differences of its running totals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Accounting {
    /// Handed to the pipeline.
    pub captured: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Dropped by the kernel (ring full).
    pub dropped_kernel: u64,
    /// Dropped by the pools.
    pub dropped_pool: u64,
    /// Rejected by a capture filter.
    pub filtered: u64,
}

impl Accounting {
    /// `self - earlier`, term by term (counters only grow).
    pub fn since(&self, earlier: &Accounting) -> Accounting {
        Accounting {
            captured: self.captured.saturating_sub(earlier.captured),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            dropped_kernel: self.dropped_kernel.saturating_sub(earlier.dropped_kernel),
            dropped_pool: self.dropped_pool.saturating_sub(earlier.dropped_pool),
            filtered: self.filtered.saturating_sub(earlier.filtered),
        }
    }
}

/// A change of the running rules, and when it took effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// When the new rules started counting (RFC 3339).
    pub at: String,
    /// What changed, e.g. `rule web disabled`.
    pub what: String,
}

/// One period, as the reporter saw it.
#[derive(Debug, Clone)]
pub struct Period {
    /// Start.
    pub start: SystemTime,
    /// End.
    pub end: SystemTime,
    /// Capture accounting over the period.
    pub accounting: Accounting,
    /// Changes that took effect at `start`.
    pub changes: Vec<Change>,
    /// The final period (the probe stopped at `end`).
    pub last: bool,
}

/// One flow in a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowRecord {
    /// Source address.
    pub src: String,
    /// Destination address.
    pub dst: String,
    /// IP protocol number.
    pub proto: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Packets.
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    /// IP bytes (the wire bytes without link-layer header and VLAN tags).
    pub ip_bytes: u64,
    /// First packet (RFC 3339, ns).
    pub first_seen: String,
    /// Last packet (RFC 3339, ns).
    pub last_seen: String,
    /// TCP flags seen, as tcpdump letters.
    pub tcp_flags: String,
    /// The first packet's outer VLAN id, if it had a tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// ICMP and ICMPv6 flows: the first packet's type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP and ICMPv6 flows: the first packet's code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
}

/// The flows section of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowsRecord {
    /// Flows in the table (all of them, also with `top`).
    pub count: usize,
    /// What the table cap evicted.
    pub evicted: Evicted,
    /// The flows listed: all, or the `top` largest.
    pub list: Vec<FlowRecord>,
    /// With `top`, the flows not listed: not in the JSON, but exported (IPFIX) like the rest.
    #[serde(skip)]
    pub unlisted: Vec<FlowRecord>,
}

impl FlowsRecord {
    /// Every flow of the table, listed or not.
    pub fn all(&self) -> impl Iterator<Item = &FlowRecord> {
        self.list.iter().chain(&self.unlisted)
    }
}

/// One alert event: a key above the rule's rate in a period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertRecord {
    /// `dst` or `src`.
    pub key: &'static str,
    /// The address.
    pub value: String,
    /// Matching packets of the key in the period.
    pub packets: u64,
    /// Their rate per second over the period.
    pub rate: f64,
    /// The rule's threshold.
    pub threshold: u64,
}

/// The JSON Lines record of one rule in one period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleRecord {
    /// Rule name.
    pub rule: String,
    /// Whether the rule ran in this period.
    pub enabled: bool,
    /// Period start (RFC 3339).
    pub period_start: String,
    /// Period end (RFC 3339).
    pub period_end: String,
    /// Matching packets.
    pub packets: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Capture accounting over the period (the same for every rule).
    pub accounting: Accounting,
    /// Matching packets without an IP header (flows/alert rules only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_ip: Option<u64>,
    /// Flow table, with the flows action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flows: Option<FlowsRecord>,
    /// Frame sizes (wire bytes) by bucket, with the sizes action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sizes: Option<serde_json::Map<String, serde_json::Value>>,
    /// Alert events, with the alert action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<Vec<AlertRecord>>,
    /// Packets whose alert key found the key table full (not in any alert's count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert_untracked: Option<u64>,
    /// Changes that took effect at `period_start`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Set on the final record of the run.
    pub last: bool,
}

/// RFC 3339 with nanoseconds, UTC.
pub fn time(t: SystemTime) -> String {
    humantime::format_rfc3339_nanos(t).to_string()
}

/// `ns` since the epoch as a time.
pub fn time_ns(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn flows_record(t: &FlowTable, top: Option<usize>, by: TopBy) -> FlowsRecord {
    let ranked = t.ranked(by);
    let mut list: Vec<FlowRecord> = ranked
        .iter()
        .map(|(k, s)| FlowRecord {
            src: k.src.to_string(),
            dst: k.dst.to_string(),
            proto: k.proto,
            sport: k.sport,
            dport: k.dport,
            packets: s.packets,
            bytes: s.bytes,
            ip_bytes: s.ip_bytes,
            first_seen: time(time_ns(s.first_ns)),
            last_seen: time(time_ns(s.last_ns)),
            tcp_flags: flag_letters(s.tcp_flags),
            vlan: s.vlan,
            icmp_type: s.icmp.map(|t| (t >> 8) as u8),
            icmp_code: s.icmp.map(|t| t as u8),
        })
        .collect();
    let unlisted = list.split_off(top.unwrap_or(usize::MAX).min(list.len()));
    FlowsRecord {
        count: t.len(),
        evicted: t.evicted(),
        list,
        unlisted,
    }
}

fn rule_record(rule: &Rule, t: &RuleTally, p: &Period) -> RuleRecord {
    let secs = p
        .end
        .duration_since(p.start)
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-3);
    RuleRecord {
        rule: rule.name.clone(),
        enabled: rule.enabled,
        period_start: time(p.start),
        period_end: time(p.end),
        packets: t.packets,
        bytes: t.bytes,
        accounting: p.accounting,
        no_ip: t.needs_key().then_some(t.no_ip),
        flows: t
            .flows
            .as_ref()
            .zip(rule.flows)
            .map(|(f, spec)| flows_record(f, spec.top, spec.by)),
        sizes: t.sizes.map(|s| {
            SIZE_LABELS
                .iter()
                .zip(s.0)
                .map(|(l, n)| (l.to_string(), n.into()))
                .collect()
        }),
        alerts: t
            .alert
            .as_ref()
            .zip(rule.alert)
            .map(|((key, counts), spec)| {
                // More than `rate` per second on average over the period.
                let min = (spec.rate as f64 * secs).floor() as u64;
                counts
                    .above(min)
                    .into_iter()
                    .map(|(addr, n)| AlertRecord {
                        key: key.name(),
                        value: addr.to_string(),
                        packets: n,
                        rate: n as f64 / secs,
                        threshold: spec.rate,
                    })
                    .collect()
            }),
        alert_untracked: t.alert.as_ref().map(|(_, counts)| counts.untracked),
        changes: p.changes.clone(),
        last: p.last,
    }
}

/// The records of one period, one per rule of the configuration that ran.
pub fn records(config: &Config, tally: &Tally, period: &Period) -> Vec<RuleRecord> {
    config
        .rules
        .iter()
        .zip(&tally.rules)
        .map(|(r, t)| rule_record(r, t, period))
        .collect()
}

/// The human form of a period's records.
pub fn table(records: &[RuleRecord], period: &Period) -> String {
    let a = &period.accounting;
    let mut out = format!(
        "{} {} .. {}: captured {} ({} bytes), dropped kernel {} pool {}\n",
        if period.last {
            "final period"
        } else {
            "period"
        },
        time(period.start),
        time(period.end),
        a.captured,
        a.bytes,
        a.dropped_kernel,
        a.dropped_pool
    );
    for c in &period.changes {
        out += &format!("  change at {}: {}\n", c.at, c.what);
    }
    out += &format!(
        "  {:<16} {:>12} {:>14} {:>8} {:>7}\n",
        "rule", "packets", "bytes", "flows", "alerts"
    );
    for r in records {
        let dash = || "-".to_string();
        out += &format!(
            "  {:<16} {:>12} {:>14} {:>8} {:>7}{}\n",
            r.rule,
            r.packets,
            r.bytes,
            r.flows.as_ref().map_or_else(dash, |f| f.count.to_string()),
            r.alerts.as_ref().map_or_else(dash, |a| a.len().to_string()),
            if r.enabled { "" } else { " (disabled)" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::testing::udp4;
    use std::path::Path;

    #[test]
    fn records_carry_counts_flows_alerts_and_changes() {
        let c = parse(
            Path::new("t.toml"),
            "period = \"2s\"\n[[rule]]\nname = \"u\"\nfilter = \"udp\"\nactions = [\"flows\", \"alert\", \"sizes\"]\ntop = 1\nalert = { key = \"dst\", rate = 2 }\n",
        )
        .unwrap();
        let mut t = Tally::new(&c);
        let a = udp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, 10);
        let b = udp4([1, 1, 1, 1], [3, 3, 3, 3], 1, 2, 10);
        for i in 0..5 {
            t.rules[0].observe(60, i, crate::packet::parse(&a).as_ref());
        }
        t.rules[0].observe(60, 9, crate::packet::parse(&b).as_ref());
        let p = Period {
            start: time_ns(1_000_000_000),
            end: time_ns(3_000_000_000),
            accounting: Accounting {
                captured: 6,
                ..Accounting::default()
            },
            changes: vec![Change {
                at: time(time_ns(1_000_000_000)),
                what: "rule u enabled".into(),
            }],
            last: false,
        };
        let r = records(&c, &t, &p);
        let v = serde_json::to_value(&r[0]).unwrap();
        for k in [
            "rule",
            "period_start",
            "period_end",
            "packets",
            "bytes",
            "accounting",
        ] {
            assert!(v.get(k).is_some(), "{k} missing: {v}");
        }
        assert_eq!(v["packets"], 6);
        assert_eq!(v["flows"]["count"], 2);
        assert_eq!(v["flows"]["list"].as_array().unwrap().len(), 1);
        assert_eq!(v["flows"]["list"][0]["dst"], "2.2.2.2");
        assert!(v["flows"].get("unlisted").is_none(), "not in the JSON: {v}");
        let all: Vec<_> = r[0].flows.as_ref().unwrap().all().map(|f| &f.dst).collect();
        assert_eq!(all, ["2.2.2.2", "3.3.3.3"], "top shortens only the list");
        // 5 packets in 2 s is 2.5/s > 2: one alert, for 2.2.2.2 only.
        assert_eq!(v["alerts"].as_array().unwrap().len(), 1);
        assert_eq!(v["alerts"][0]["value"], "2.2.2.2");
        assert_eq!(v["sizes"]["<=64"], 6);
        assert_eq!(v["alert_untracked"], 0);
        assert_eq!(v["changes"][0]["what"], "rule u enabled");
        assert_eq!(v["period_start"], "1970-01-01T00:00:01.000000000Z");
        let human = table(&r, &p);
        assert!(
            human.contains("change at") && human.contains(" u "),
            "{human}"
        );
    }
}
