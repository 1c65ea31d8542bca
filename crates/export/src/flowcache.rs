//! From the probe's per-period flow tables to IPFIX flow records with active and idle
//! timeouts (RFC 5470 5.1 "metering process" expiry rules), time as a parameter.
//!
//! The probe reports, at the end of every period, each rule's flows with their packets,
//! bytes, first and last packet times and TCP flags over that period. The cache adds the
//! periods up per flow and decides when a flow's record is exported:
//! - a FIN or RST was seen: end of flow;
//! - no packet for the idle timeout: idle;
//! - the record has been open for the active timeout: active (the flow goes on in a new
//!   record, so long flows are reported while they last);
//! - the exporter stops: forced end, for every open record.
//!
//! Expiry is checked at period ends, so timeouts act with the period's granularity. Each
//! rule with the flows action is its own observation domain (its position in the rule list
//! plus one), so a packet two rules count is not one flow counted twice.
//!
//! Every flow of the probe's table is seen here, also with `top = N` (which only shortens
//! the report's list). What the table cap evicted has no record: the exporter counts those
//! flows as not delivered.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, UNIX_EPOCH};

use poolcap_probe::packet::tcp_flag;
use poolcap_probe::report::{FlowRecord, RuleRecord};

use crate::ipfix::{EndReason, Flow};

/// When open flow records are exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Export a record open this long, and start a new one.
    pub active: Duration,
    /// Export a flow without packets for this long.
    pub idle: Duration,
}

impl Default for Timeouts {
    /// 60 s active, 15 s idle: the usual router defaults scaled down to a probe whose
    /// reports come every few seconds (Cisco: 30 min and 15 s; softflowd: 1 h and 5 min).
    fn default() -> Self {
        Self {
            active: Duration::from_secs(60),
            idle: Duration::from_secs(15),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    domain: u32,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    proto: u8,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    packets: u64,
    /// IP bytes.
    octets: u64,
    /// Frame bytes.
    l2_octets: u64,
    start_ms: u64,
    end_ms: u64,
    flags: u8,
    /// The first packet's VLAN id and ICMP type and code (0: none).
    vlan: u16,
    icmp: u16,
}

/// A flow record the probe wrote that does not parse (a bug upstream, counted as dropped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable flow record {0}")]
pub struct BadRecord(String);

fn ms(rfc3339: &str) -> Result<u64, BadRecord> {
    let t = humantime::parse_rfc3339(rfc3339).map_err(|_| BadRecord(rfc3339.into()))?;
    Ok(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64)
}

fn flag_bits(letters: &str) -> u8 {
    use tcp_flag::*;
    letters
        .chars()
        .map(|c| match c {
            'F' => FIN,
            'S' => SYN,
            'R' => RST,
            'P' => PSH,
            '.' => ACK,
            'U' => URG,
            _ => 0,
        })
        .fold(0, |a, b| a | b)
}

/// Open flow records, by observation domain and 5-tuple.
#[derive(Debug, Clone)]
pub struct FlowCache {
    timeouts: Timeouts,
    open: HashMap<Key, Open>,
}

impl FlowCache {
    /// An empty cache.
    pub fn new(timeouts: Timeouts) -> Self {
        Self {
            timeouts,
            open: HashMap::new(),
        }
    }

    /// Flow records open now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// No flow record open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Adds one period's records (every rule's flows, listed or not); returns the flows
    /// that did not parse.
    pub fn add_period(&mut self, records: &[RuleRecord]) -> Vec<BadRecord> {
        let mut bad = Vec::new();
        for (i, r) in records.iter().enumerate() {
            for f in r.flows.iter().flat_map(|f| f.all()) {
                if let Err(e) = self.add(i as u32 + 1, f) {
                    bad.push(e);
                }
            }
        }
        bad
    }

    fn add(&mut self, domain: u32, f: &FlowRecord) -> Result<(), BadRecord> {
        let ip = |s: &str| s.parse::<IpAddr>().map_err(|_| BadRecord(s.into()));
        let key = Key {
            domain,
            src: ip(&f.src)?,
            dst: ip(&f.dst)?,
            sport: f.sport,
            dport: f.dport,
            proto: f.proto,
        };
        let (first, last) = (ms(&f.first_seen)?, ms(&f.last_seen)?);
        let flags = flag_bits(&f.tcp_flags);
        let period = Open {
            packets: f.packets,
            octets: f.ip_bytes,
            l2_octets: f.bytes,
            start_ms: first,
            end_ms: last,
            flags,
            vlan: f.vlan.unwrap_or(0),
            icmp: match (f.icmp_type, f.icmp_code) {
                (Some(t), Some(c)) => u16::from(t) << 8 | u16::from(c),
                _ => 0,
            },
        };
        self.open
            .entry(key)
            .and_modify(|o| {
                if period.start_ms < o.start_ms {
                    (o.vlan, o.icmp) = (period.vlan, period.icmp);
                }
                o.packets += period.packets;
                o.octets += period.octets;
                o.l2_octets += period.l2_octets;
                o.start_ms = o.start_ms.min(first);
                o.end_ms = o.end_ms.max(last);
                o.flags |= flags;
            })
            .or_insert(period);
        Ok(())
    }

    fn reason(&self, o: &Open, now_ms: u64) -> Option<EndReason> {
        let since = |t: u64| Duration::from_millis(now_ms.saturating_sub(t));
        if o.flags & (tcp_flag::FIN | tcp_flag::RST) != 0 {
            Some(EndReason::EndOfFlow)
        } else if since(o.end_ms) >= self.timeouts.idle {
            Some(EndReason::Idle)
        } else if since(o.start_ms) >= self.timeouts.active {
            Some(EndReason::Active)
        } else {
            None
        }
    }

    /// Removes and returns the records due at `now_ms` (ms since the epoch), with the
    /// observation domain of each.
    pub fn expire(&mut self, now_ms: u64) -> Vec<(u32, Flow)> {
        let due: Vec<(Key, EndReason)> = self
            .open
            .iter()
            .filter_map(|(k, o)| Some((*k, self.reason(o, now_ms)?)))
            .collect();
        due.into_iter()
            .filter_map(|(k, why)| Some(flow(&k, &self.open.remove(&k)?, why)))
            .collect()
    }

    /// Removes and returns every open record (the exporter stops).
    pub fn flush(&mut self) -> Vec<(u32, Flow)> {
        self.open
            .drain()
            .map(|(k, o)| flow(&k, &o, EndReason::Forced))
            .collect()
    }
}

fn flow(k: &Key, o: &Open, end_reason: EndReason) -> (u32, Flow) {
    (
        k.domain,
        Flow {
            src: k.src,
            dst: k.dst,
            sport: k.sport,
            dport: k.dport,
            proto: k.proto,
            tcp_flags: o.flags,
            octets: o.octets,
            l2_octets: o.l2_octets,
            packets: o.packets,
            start_ms: o.start_ms,
            end_ms: o.end_ms,
            end_reason,
            vlan: o.vlan,
            icmp: o.icmp,
            ingress: 0,
        },
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use poolcap_probe::flows::Evicted;
    use poolcap_probe::report::{time, time_ns, FlowsRecord};

    /// A rule record listing `flows` as (source port, packets, first ms, last ms, flags).
    pub(crate) fn period(flows: &[(u16, u64, u64, u64, &str)]) -> RuleRecord {
        let list: Vec<FlowRecord> = flows
            .iter()
            .map(|&(sport, packets, first, last, flags)| FlowRecord {
                src: "10.77.0.1".into(),
                dst: "10.77.0.2".into(),
                proto: 6,
                sport,
                dport: 80,
                packets,
                bytes: packets * 100,
                ip_bytes: packets * 86,
                first_seen: time(time_ns(first * 1_000_000)),
                last_seen: time(time_ns(last * 1_000_000)),
                tcp_flags: flags.into(),
                vlan: Some(sport),
                icmp_type: None,
                icmp_code: None,
            })
            .collect();
        RuleRecord {
            rule: "flows".into(),
            enabled: true,
            period_start: String::new(),
            period_end: String::new(),
            packets: list.iter().map(|f| f.packets).sum(),
            bytes: list.iter().map(|f| f.bytes).sum(),
            accounting: Default::default(),
            no_ip: Some(0),
            flows: Some(FlowsRecord {
                count: list.len(),
                evicted: Evicted::default(),
                list,
                unlisted: Vec::new(),
            }),
            sizes: None,
            alerts: None,
            alert_untracked: None,
            changes: Vec::new(),
            last: false,
        }
    }

    fn cache() -> FlowCache {
        FlowCache::new(Timeouts {
            active: Duration::from_secs(10),
            idle: Duration::from_secs(3),
        })
    }

    #[test]
    fn periods_add_up_until_idle() {
        let mut c = cache();
        assert!(c
            .add_period(&[period(&[(1, 5, 1000, 1900, "S")])])
            .is_empty());
        assert!(c.expire(2000).is_empty());
        c.add_period(&[period(&[(1, 7, 2100, 2900, ".")])]);
        assert!(c.expire(5000).is_empty(), "2.1 s idle < 3 s");
        let out = c.expire(6000);
        assert_eq!(out.len(), 1);
        let (domain, f) = out[0];
        assert_eq!(domain, 1);
        assert_eq!(
            (
                f.packets,
                f.octets,
                f.l2_octets,
                f.start_ms,
                f.end_ms,
                f.tcp_flags,
                f.end_reason,
                f.vlan
            ),
            (12, 1032, 1200, 1000, 2900, 0x12, EndReason::Idle, 1)
        );
        assert!(c.is_empty());
    }

    #[test]
    fn long_flows_are_cut_by_the_active_timeout_and_fin_ends_a_flow() {
        let mut c = cache();
        for s in 0..12u64 {
            c.add_period(&[period(&[
                (1, 1, s * 1000, s * 1000 + 999, "."),
                (2, 1, s * 1000, s * 1000, ""),
            ])]);
            let out = c.expire(s * 1000 + 1000);
            if s == 9 {
                assert_eq!(out.len(), 2, "both open 10 s");
                assert!(out
                    .iter()
                    .all(|(_, f)| f.end_reason == EndReason::Active && f.packets == 10));
            } else {
                assert!(out.is_empty(), "at {s}: {out:?}");
            }
        }
        c.add_period(&[period(&[(1, 1, 12_000, 12_000, "F.")])]);
        let out = c.expire(12_500);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].1.sport, out[0].1.packets, out[0].1.end_reason),
            (1, 3, EndReason::EndOfFlow)
        );
        let rest = c.flush();
        assert_eq!(rest.len(), 1);
        assert_eq!(
            (rest[0].1.sport, rest[0].1.packets, rest[0].1.end_reason),
            (2, 2, EndReason::Forced)
        );
    }

    #[test]
    fn rules_are_domains_and_bad_records_are_reported() {
        let mut c = cache();
        let mut bad = period(&[(1, 1, 0, 0, "")]);
        if let Some(f) = bad.flows.as_mut() {
            f.list[0].src = "nonsense".into();
        }
        let errs = c.add_period(&[
            period(&[(1, 1, 0, 0, "")]),
            period(&[(1, 2, 0, 0, "")]),
            bad,
        ]);
        assert_eq!(errs.len(), 1);
        let mut out = c.flush();
        out.sort_by_key(|(d, _)| *d);
        assert_eq!(
            out.iter().map(|(d, f)| (*d, f.packets)).collect::<Vec<_>>(),
            vec![(1, 1), (2, 2)]
        );
    }
}
