//! The IPFIX exporting process: a thread that receives each probe period's records through
//! a bounded channel, keeps the open flow records ([`FlowCache`]), and sends the expired
//! ones to the collector.
//!
//! Nothing here can hold up the capture or the probe: the reporter only offers a period
//! (`try_send`; a full channel drops it and counts its flows), and a slow or absent
//! collector only ever blocks this thread, for at most [`WRITE_TIMEOUT`] per message.
//! Every flow record is counted once, as exported or as dropped (channel full, a record
//! that does not parse, a send that failed, no TCP connection, a flow the probe's table cap
//! evicted).
//!
//! With the templates' refresh (UDP and TCP alike), and once more at the end, an options
//! record tells the collector the exporting process's own counts: messages sent, flow
//! records exported and not delivered (as they stand then: over UDP the last datagram
//! counts as exported until a refusal comes back).
//!
//! Transports (RFC 7011 10): UDP sends the templates of an observation domain with its
//! first records and again every `template_refresh`; TCP sends them once per connection,
//! and after a broken connection reconnects at most once per [`RECONNECT_EVERY`], in a new
//! stream (sequence numbers from zero, templates again).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use poolcap_probe::report::RuleRecord;

use crate::flowcache::{FlowCache, Timeouts};
use crate::ipfix::{Encoder, Flow, Message, Stats, UDP_MAX_MESSAGE};
use crate::ExportError;

/// Periods the channel holds: at a period of a second, about a minute of a stalled
/// exporter before periods are dropped.
const CHANNEL_PERIODS: usize = 64;
/// Longest a TCP connect or a message write may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// Least time between TCP reconnection attempts.
pub const RECONNECT_EVERY: Duration = Duration::from_secs(1);

/// Flow records handed over or lost, read by the metrics at each scrape.
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Records sent to the collector.
    pub exported: AtomicU64,
    /// Records lost on the way.
    pub dropped: AtomicU64,
}

impl ExportCounters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// (exported, dropped) now.
    pub fn get(&self) -> (u64, u64) {
        (
            self.exported.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

/// How records travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One message per datagram.
    Udp,
    /// A stream of messages.
    Tcp,
}

/// A resolved `--ipfix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpfixConfig {
    /// The collector.
    pub collector: SocketAddr,
    /// UDP or TCP.
    pub transport: Transport,
    /// When open records are exported.
    pub timeouts: Timeouts,
    /// How often UDP re-sends the templates, and both transports the statistics.
    pub template_refresh: Duration,
    /// The ifindex of the interface the flows come in on (ingressInterface; 0: a file).
    pub ingress: u32,
}

/// Parses `--ipfix`: `HOST:PORT` or `udp://HOST:PORT` (UDP), `tcp://HOST:PORT`; the host
/// must resolve now.
pub fn parse_collector(s: &str) -> Result<(Transport, SocketAddr), ExportError> {
    let bad = |why: String| ExportError::Address {
        what: "--ipfix",
        addr: s.to_string(),
        why,
    };
    let (transport, rest) = if let Some(r) = s.strip_prefix("tcp://") {
        (Transport::Tcp, r)
    } else {
        (Transport::Udp, s.strip_prefix("udp://").unwrap_or(s))
    };
    let addr = rest
        .to_socket_addrs()
        .map_err(|e| bad(format!("give [udp://|tcp://]HOST:PORT ({e})")))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))?;
    Ok((transport, addr))
}

/// One period on its way to the exporter thread.
struct Period {
    records: Vec<RuleRecord>,
    end_ms: u64,
}

/// Offers periods to a running exporter (the reporter's handle; cheap to clone).
#[derive(Debug, Clone)]
pub struct FlowSender {
    tx: SyncSender<Period>,
    counters: Arc<ExportCounters>,
    /// Wait for room in the channel (see [`FlowSender::waiting`]).
    wait: bool,
}

/// The flows of a period: (those in the tables, listed or not; those the table cap evicted,
/// which have no record and count as not delivered).
fn period_flows(records: &[RuleRecord]) -> (u64, u64) {
    records
        .iter()
        .filter_map(|r| r.flows.as_ref())
        .fold((0, 0), |(n, evicted), f| {
            (n + f.all().count() as u64, evicted + f.evicted.flows)
        })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

impl FlowSender {
    /// Hands one period's records over without waiting (unless [`FlowSender::waiting`]); a
    /// full channel (or a stopped exporter) drops them and counts their flows.
    pub fn offer(&self, records: &[RuleRecord]) {
        let (flows, evicted) = period_flows(records);
        ExportCounters::add(&self.counters.dropped, evicted);
        if flows == 0 && !records.iter().any(|r| r.last) {
            return;
        }
        let end_ms = records
            .first()
            .and_then(|r| humantime::parse_rfc3339(&r.period_end).ok())
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or_else(now_ms, |d| d.as_millis() as u64);
        let period = Period {
            records: records.to_vec(),
            end_ms,
        };
        let handed = if self.wait {
            self.tx.send(period).is_ok()
        } else {
            match self.tx.try_send(period) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            }
        };
        if !handed {
            ExportCounters::add(&self.counters.dropped, flows);
        }
    }

    /// A handle that waits for room in the channel instead of dropping a period: for a
    /// capture file, whose reading can wait for the exporter.
    pub fn waiting(mut self) -> Self {
        self.wait = true;
        self
    }
}

/// A running IPFIX exporter.
#[derive(Debug)]
pub struct IpfixExporter {
    sender: FlowSender,
    thread: JoinHandle<()>,
}

impl IpfixExporter {
    /// Resolves nothing (see [`parse_collector`]); opens the socket (TCP: connects, so a
    /// collector that is not there is an error now) and starts the thread.
    pub fn start(cfg: IpfixConfig) -> Result<Self, ExportError> {
        let link = Link::open(&cfg)?;
        let counters = Arc::new(ExportCounters::default());
        let (tx, rx) = sync_channel(CHANNEL_PERIODS);
        let mut worker = Worker {
            cache: FlowCache::new(cfg.timeouts),
            link,
            counters: Arc::clone(&counters),
            ingress: cfg.ingress,
            messages: 0,
            stats_every: cfg.template_refresh,
            stats_at: Instant::now(),
        };
        let thread = std::thread::Builder::new()
            .name("ipfix".into())
            .spawn(move || worker.run(&rx))
            .map_err(|source| ExportError::Connect {
                addr: cfg.collector,
                source,
            })?;
        Ok(Self {
            sender: FlowSender {
                tx,
                counters,
                wait: false,
            },
            thread,
        })
    }

    /// A handle for the reporter.
    pub fn sender(&self) -> FlowSender {
        self.sender.clone()
    }

    /// The delivery counters (for the metrics).
    pub fn counters(&self) -> Arc<ExportCounters> {
        Arc::clone(&self.sender.counters)
    }

    /// Waits until every other [`FlowSender`] is gone, exports every open record (forced
    /// end) and returns (exported, dropped).
    pub fn finish(self) -> (u64, u64) {
        let counters = Arc::clone(&self.sender.counters);
        drop(self.sender);
        let _ = self.thread.join();
        counters.get()
    }
}

struct Worker {
    cache: FlowCache,
    link: Link,
    counters: Arc<ExportCounters>,
    ingress: u32,
    /// Messages sent.
    messages: u64,
    /// How often the statistics go out.
    stats_every: Duration,
    /// When the statistics went out last.
    stats_at: Instant,
}

impl Worker {
    fn run(&mut self, rx: &Receiver<Period>) {
        // Ends when every sender is gone.
        while let Ok(p) = rx.recv() {
            let bad = self.cache.add_period(&p.records);
            ExportCounters::add(&self.counters.dropped, bad.len() as u64);
            let due = if p.records.iter().any(|r| r.last) {
                self.cache.flush()
            } else {
                self.cache.expire(p.end_ms)
            };
            self.send(due);
            self.settle(Duration::ZERO);
            if self.stats_at.elapsed() >= self.stats_every {
                self.send_stats();
            }
        }
        let rest = self.cache.flush();
        self.send(rest);
        self.settle(WRITE_TIMEOUT);
        self.send_stats();
        // Over TCP, the last message is written before the connection closes with the
        // stream; over UDP it is one more datagram.
    }

    /// Sends the exporting process's statistics as they stand.
    fn send_stats(&mut self) {
        self.stats_at = Instant::now();
        let (flows, not_sent) = self.counters.get();
        let stats = Stats {
            process: std::process::id(),
            messages: self.messages,
            flows,
            not_sent,
        };
        if self.link.send_stats((now_ms() / 1000) as u32, &stats) {
            self.messages += 1;
        }
    }

    /// Counts what the collector took or refused since the last look (see [`Link::settle`]).
    fn settle(&mut self, wait: Duration) {
        let (exported, lost) = self.link.settle(wait);
        ExportCounters::add(&self.counters.exported, exported);
        ExportCounters::add(&self.counters.dropped, lost);
    }

    fn send(&mut self, flows: Vec<(u32, Flow)>) {
        let mut by_domain: HashMap<u32, Vec<Flow>> = HashMap::new();
        for (d, f) in flows {
            by_domain.entry(d).or_default().push(f);
        }
        let mut domains: Vec<_> = by_domain.into_iter().collect();
        domains.sort_by_key(|(d, _)| *d);
        let secs = (now_ms() / 1000) as u32;
        for (domain, mut flows) in domains {
            for f in &mut flows {
                f.ingress = self.ingress;
            }
            let (sent, lost, messages) = self.link.send(domain, secs, &flows);
            ExportCounters::add(&self.counters.exported, sent);
            ExportCounters::add(&self.counters.dropped, lost);
            self.messages += messages;
        }
    }
}

/// The transport and its stream state.
///
/// What counts as exported: over TCP, records whose bytes the collector's kernel has
/// acknowledged (records written but not acknowledged when the connection fails are not
/// delivered: the kernel drops its send queue). A collector that closes the connection (a
/// FIN, as on a graceful stop) still reads what it was sent: the exporter closes its side,
/// counts what is acknowledged within [`WRITE_TIMEOUT`], and connects again at the next
/// send. (A collector killed outright loses what its kernel acknowledged and it had not
/// read yet; TCP cannot tell the exporter.) Over UDP, records of datagrams the socket sent
/// and no ICMP port unreachable came back for: on a connected socket a refused datagram
/// fails the next send with ECONNREFUSED (which sends nothing), so the records of the
/// datagram before it are not delivered, and the send is tried once more after the
/// templates (the collector was away or restarted). Loss after that (a collector gone
/// without ICMP, a full receive buffer, the network) is not detectable over UDP.
enum Link {
    Udp {
        socket: UdpSocket,
        encoder: Encoder,
        refresh: Duration,
        templates_at: HashMap<u32, Instant>,
        /// Records of the last datagram sent, until a later send (or the end of a period)
        /// shows no refusal came back for it.
        unconfirmed: u64,
    },
    Tcp {
        addr: SocketAddr,
        stream: Option<Stream>,
        retry_at: Instant,
    },
}

/// A TCP connection to the collector and what it has not acknowledged.
struct Stream {
    socket: TcpStream,
    encoder: Encoder,
    with_templates: HashSet<u32>,
    /// Bytes written on this connection.
    written: u64,
    /// Messages written and not known to be acknowledged: (stream offset of their end,
    /// records), oldest first.
    pending: VecDeque<(u64, u64)>,
}

impl Stream {
    fn new(socket: TcpStream) -> Self {
        Self {
            socket,
            encoder: Encoder::new(UDP_MAX_MESSAGE),
            with_templates: HashSet::new(),
            written: 0,
            pending: VecDeque::new(),
        }
    }

    /// Records newly acknowledged (Ok), or, once the connection has failed, every record
    /// not known to be acknowledged (Err).
    fn acknowledged(&mut self) -> Result<u64, u64> {
        let queued = poolcap_sys::tcp::unacknowledged(&self.socket);
        // Read after the queue: a reset empties the queue and sets the error together.
        let failed = !matches!(self.socket.take_error(), Ok(None));
        match queued {
            Ok(queued) if !failed => {
                let acked = self.written.saturating_sub(queued);
                let mut n = 0;
                while let Some(&(end, records)) = self.pending.front() {
                    if end > acked {
                        break;
                    }
                    n += records;
                    self.pending.pop_front();
                }
                Ok(n)
            }
            _ => Err(self.pending.drain(..).map(|(_, r)| r).sum()),
        }
    }

    /// Whether the collector has closed its side (a FIN): it is going away and reads what
    /// it was sent until this side closes too. A collector never sends anything else.
    fn peer_closed(&self) -> bool {
        if self.socket.set_nonblocking(true).is_err() {
            return false;
        }
        let closed = matches!(self.socket.peek(&mut [0u8; 1]), Ok(0));
        let _ = self.socket.set_nonblocking(false);
        closed
    }
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, WRITE_TIMEOUT)?;
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Whether `e` is a refusal the collector's host sent back (ICMP port unreachable).
fn refused(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ConnectionRefused
}

impl Link {
    fn open(cfg: &IpfixConfig) -> Result<Self, ExportError> {
        let addr = cfg.collector;
        let err = |source| ExportError::Connect { addr, source };
        match cfg.transport {
            Transport::Udp => {
                let local: SocketAddr = if addr.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    ([0u16; 8], 0).into()
                };
                let socket = UdpSocket::bind(local).map_err(err)?;
                // Connected, so an ICMP port unreachable fails the next send (counted).
                socket.connect(addr).map_err(err)?;
                Ok(Link::Udp {
                    socket,
                    encoder: Encoder::new(UDP_MAX_MESSAGE),
                    refresh: cfg.template_refresh,
                    templates_at: HashMap::new(),
                    unconfirmed: 0,
                })
            }
            Transport::Tcp => Ok(Link::Tcp {
                addr,
                stream: Some(Stream::new(connect(addr).map_err(err)?)),
                retry_at: Instant::now(),
            }),
        }
    }

    /// Sends the statistics' options template and record; whether they went out.
    fn send_stats(&mut self, secs: u32, stats: &Stats) -> bool {
        match self {
            Link::Udp {
                socket, encoder, ..
            } => socket.send(&encoder.stats(secs, stats)).is_ok(),
            Link::Tcp { stream, .. } => stream.as_mut().is_some_and(|s| {
                let m = s.encoder.stats(secs, stats);
                let ok = s.socket.write_all(&m).is_ok();
                if ok {
                    s.written += m.len() as u64;
                    s.pending.push_back((s.written, 0));
                }
                ok
            }),
        }
    }

    /// Sends `flows` of `domain`; returns the records known (exported, lost) now and the
    /// messages sent: over TCP the records written are counted by [`Link::settle`] once
    /// acknowledged.
    fn send(&mut self, domain: u32, secs: u32, flows: &[Flow]) -> (u64, u64, u64) {
        let total = flows.len() as u64;
        match self {
            Link::Udp {
                socket,
                encoder,
                refresh,
                templates_at,
                unconfirmed,
            } => {
                let due = templates_at
                    .get(&domain)
                    .is_none_or(|t| t.elapsed() >= *refresh);
                if due {
                    templates_at.insert(domain, Instant::now());
                }
                let (mut exported, mut lost, mut messages) = (0, 0, 0);
                for m in encoder.data(domain, secs, flows, due) {
                    let records = u64::from(m.records);
                    let mut sent = socket.send(&m.bytes);
                    if sent.as_ref().is_err_and(refused) {
                        // The datagram before was refused; this one was not sent. The
                        // collector was away (or restarted): it needs the templates again.
                        lost += std::mem::take(unconfirmed);
                        templates_at.clear();
                        templates_at.insert(domain, Instant::now());
                        let _ = socket.send(&encoder.templates(domain, secs));
                        sent = socket.send(&m.bytes);
                    }
                    match sent {
                        Ok(_) => {
                            exported += std::mem::replace(unconfirmed, records);
                            messages += 1;
                        }
                        Err(_) => lost += records,
                    }
                }
                (exported, lost, messages)
            }
            Link::Tcp {
                addr,
                stream,
                retry_at,
            } => {
                if stream.is_none() && Instant::now() >= *retry_at {
                    *retry_at = Instant::now() + RECONNECT_EVERY;
                    *stream = connect(*addr).ok().map(Stream::new);
                }
                let Some(s) = stream else {
                    return (0, total, 0);
                };
                // What was acknowledged before these writes, while the queue still says so
                // (a failed connection empties it).
                let (acked, mut lost) = match s.acknowledged() {
                    Ok(n) => (n, 0),
                    Err(n) => (0, n),
                };
                let first = s.with_templates.insert(domain);
                let messages: Vec<Message> = s.encoder.data(domain, secs, flows, first);
                let (mut written, mut messages_written) = (0, 0);
                for m in &messages {
                    if s.socket.write_all(&m.bytes).is_err() {
                        *retry_at = Instant::now() + RECONNECT_EVERY;
                        let unacked: u64 = s.pending.drain(..).map(|(_, r)| r).sum();
                        *stream = None;
                        lost += unacked + total - written;
                        return (acked, lost, messages_written);
                    }
                    s.written += m.bytes.len() as u64;
                    s.pending.push_back((s.written, u64::from(m.records)));
                    written += u64::from(m.records);
                    messages_written += 1;
                }
                (acked, lost, messages_written)
            }
        }
    }

    /// Records settled since the last look: (exported, lost). Over TCP, those the
    /// collector acknowledged, or, when the connection has failed, those it had not (waiting
    /// up to `wait` for the acknowledgements of everything written); over UDP, the last
    /// datagram, unless a refusal for it came back.
    fn settle(&mut self, wait: Duration) -> (u64, u64) {
        match self {
            Link::Udp {
                socket,
                unconfirmed,
                templates_at,
                ..
            } => {
                let n = std::mem::take(unconfirmed);
                match socket.take_error() {
                    Ok(Some(e)) if refused(&e) => {
                        templates_at.clear();
                        (0, n)
                    }
                    _ => (n, 0),
                }
            }
            Link::Tcp {
                stream, retry_at, ..
            } => {
                let Some(s) = stream else { return (0, 0) };
                // A collector closing gracefully: close this side too, count what it
                // acknowledges before the close, and connect again at the next send.
                let closing = s.peer_closed();
                let wait = if closing {
                    let _ = s.socket.shutdown(Shutdown::Write);
                    *retry_at = Instant::now();
                    WRITE_TIMEOUT
                } else {
                    wait
                };
                let until = Instant::now() + wait;
                let mut exported = 0;
                loop {
                    match s.acknowledged() {
                        Ok(n) => exported += n,
                        Err(lost) => {
                            *stream = None;
                            *retry_at = Instant::now() + RECONNECT_EVERY;
                            return (exported, lost);
                        }
                    }
                    if s.pending.is_empty() || Instant::now() >= until {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                // At the end (a wait given), what is still not acknowledged is not delivered.
                let unacked = if wait.is_zero() {
                    0
                } else {
                    s.pending.drain(..).map(|(_, r)| r).sum()
                };
                if closing {
                    *stream = None;
                }
                (exported, unacked)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flowcache::tests::period;
    use crate::ipfix::decode;
    use crate::ipfix::EndReason;
    use std::io::Read;
    use std::net::TcpListener;

    fn config(collector: SocketAddr, transport: Transport) -> IpfixConfig {
        IpfixConfig {
            collector,
            transport,
            timeouts: Timeouts::default(),
            template_refresh: Duration::from_secs(10),
            ingress: 3,
        }
    }

    fn last(mut r: RuleRecord) -> RuleRecord {
        r.last = true;
        r
    }

    #[test]
    fn collector_addresses_are_checked_at_start() {
        assert_eq!(
            parse_collector("127.0.0.1:4739").unwrap(),
            (Transport::Udp, "127.0.0.1:4739".parse().unwrap())
        );
        assert_eq!(
            parse_collector("tcp://[::1]:4739").unwrap().0,
            Transport::Tcp
        );
        for bad in ["nowhere.invalid:4739", "127.0.0.1", "tcp://"] {
            let e = parse_collector(bad).unwrap_err().to_string();
            assert!(e.starts_with("--ipfix"), "{bad}: {e}");
        }
        // Nothing listens on a port just released: TCP fails at start.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = IpfixExporter::start(config(port, Transport::Tcp)).unwrap_err();
        assert!(e.to_string().contains("cannot reach the collector"), "{e}");
    }

    #[test]
    fn flows_beyond_top_are_exported_and_evicted_ones_count_as_not_delivered() {
        let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
        let x =
            IpfixExporter::start(config(collector.local_addr().unwrap(), Transport::Udp)).unwrap();
        let flows: Vec<(u16, u64, u64, u64, &str)> =
            (0..8).map(|i| (i, 2, 1000, 1500, "")).collect();
        let mut r = last(period(&flows));
        let f = r.flows.as_mut().unwrap();
        f.unlisted = f.list.split_off(3);
        f.evicted.flows = 2;
        x.sender().offer(&[r]);
        assert_eq!(x.finish(), (8, 2));
    }

    #[test]
    fn udp_delivers_every_flow_with_templates_first() {
        let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
        collector
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let x =
            IpfixExporter::start(config(collector.local_addr().unwrap(), Transport::Udp)).unwrap();
        let flows: Vec<(u16, u64, u64, u64, &str)> =
            (0..60).map(|i| (i, 2, 1000, 1500, "")).collect();
        x.sender().offer(&[period(&flows)]);
        x.sender().offer(&[last(period(&flows[..10]))]);
        // The first period's flows are long idle (period end: now), the last period's are
        // forced out at the end.
        assert_eq!(x.finish(), (70, 0));
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        let mut first = true;
        let mut messages = 0;
        while got.len() < 70 {
            let n = collector.recv(&mut buf).unwrap();
            let m = decode::message(&buf[..n]);
            assert_eq!(m.templates, first, "templates with the first message only");
            first = false;
            assert_eq!(m.domain, 1);
            assert!(m.flows.iter().all(|f| f.ingress == 3), "ingressInterface");
            got.extend(m.flows);
            messages += 1;
        }
        // Last, the exporting process's statistics: what it sent before them.
        let n = collector.recv(&mut buf).unwrap();
        let m = decode::message(&buf[..n]);
        assert_eq!((m.domain, m.flows.len()), (0, 0));
        let stats = m.stats[0];
        assert_eq!(
            (stats.process, stats.messages, stats.flows, stats.not_sent),
            (std::process::id(), messages, 70, 0)
        );
        assert_eq!(got.iter().map(|f| f.packets).sum::<u64>(), 60 * 2 + 10 * 2);
        let forced = got
            .iter()
            .filter(|f| f.end_reason == EndReason::Forced)
            .count();
        let idle = got
            .iter()
            .filter(|f| f.end_reason == EndReason::Idle)
            .count();
        assert_eq!((idle, forced), (60, 10));
    }

    #[test]
    fn udp_resends_templates_and_statistics_once_the_refresh_is_due() {
        let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
        collector
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut cfg = config(collector.local_addr().unwrap(), Transport::Udp);
        let flows = [(1, 1, 0, 0, "F")];
        let mut buf = [0u8; 65536];
        // Per message: templates in it, flow records, and its statistics' flows exported.
        type Seen = (bool, usize, Vec<u64>);
        let mut messages = |cfg: IpfixConfig| -> Vec<Seen> {
            let x = IpfixExporter::start(cfg).unwrap();
            for _ in 0..3 {
                x.sender().offer(&[period(&flows)]);
            }
            assert_eq!(x.finish(), (3, 0));
            let mut got: Vec<Seen> = Vec::new();
            // Everything was sent by the time `finish` returns: read until none is left.
            collector.set_nonblocking(true).unwrap();
            while let Ok(n) = collector.recv(&mut buf) {
                let m = decode::message(&buf[..n]);
                let stats = m.stats.iter().map(|s| s.flows).collect();
                got.push((m.templates, m.flows.len(), stats));
            }
            got
        };
        let (t, f, stats) = ((true, 1, vec![]), (false, 1, vec![]), |n| {
            (false, 0, vec![n])
        });
        assert_eq!(messages(cfg), [t.clone(), f.clone(), f, stats(3)]);
        cfg.template_refresh = Duration::ZERO;
        assert_eq!(
            messages(cfg),
            [
                t.clone(),
                stats(1),
                t.clone(),
                stats(2),
                t,
                stats(3),
                stats(3)
            ],
            "templates with every message, statistics after every period and at the end"
        );
    }

    #[test]
    fn tcp_streams_messages_and_counts_what_a_vanished_collector_missed() {
        let (listener, x, mut conn, flows) = tcp_exporter();
        x.sender().offer(&[period(&flows)]);
        // Read what arrived, then go away: later records cannot be delivered.
        let bytes = read_until(&mut conn, 50);
        let msgs = decode::stream(&bytes);
        assert!(msgs[0].templates && msgs.iter().skip(1).all(|m| !m.templates));
        assert!(msgs
            .iter()
            .flat_map(|m| &m.flows)
            .all(|f| f.end_reason == EndReason::EndOfFlow));
        drop(conn);
        drop(listener);
        // Nothing written after the collector went is acknowledged: the first write is
        // taken by the kernel and answered with a reset, later ones fail. Keep offering
        // until a loss is counted (hang guard: 10 s).
        let sender = x.sender();
        let start = Instant::now();
        let mut offered = 50;
        while x.counters().get().1 == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "no drop counted");
            sender.offer(&[period(&flows)]);
            offered += 50;
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(sender);
        let (exported, dropped) = x.finish();
        assert_eq!(
            (exported, dropped),
            (50, offered - 50),
            "exported: exactly what the collector acknowledged"
        );
    }

    /// A collector's listener, an exporter to it over TCP, the collector's side of their
    /// connection, and a period's 50 flows (each ended: exported at once).
    #[allow(clippy::type_complexity)]
    fn tcp_exporter() -> (
        TcpListener,
        IpfixExporter,
        TcpStream,
        Vec<(u16, u64, u64, u64, &'static str)>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let x =
            IpfixExporter::start(config(listener.local_addr().unwrap(), Transport::Tcp)).unwrap();
        let (conn, _) = listener.accept().unwrap();
        let flows = (0..50).map(|i| (i, 1, 0, 0, "F")).collect();
        (listener, x, conn, flows)
    }

    /// Reads from the collector's side of `conn` until `records` data records have come, or
    /// (`usize::MAX`) until the exporter closes the stream; hang guard 5 s per read.
    fn read_until(conn: &mut TcpStream, records: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 65536];
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        while decode::stream_len(&bytes) < records {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 && records == usize::MAX {
                break;
            }
            assert!(n > 0, "the exporter closed the stream");
            bytes.extend(&buf[..n]);
        }
        bytes
    }

    /// A collector stopping gracefully closes its side and reads until the exporter closes
    /// too: every record written is delivered and counted, and the exporter connects again.
    #[test]
    fn tcp_collector_closing_gracefully_gets_every_record_and_a_new_connection() {
        let (listener, x, mut first, flows) = tcp_exporter();
        let sender = x.sender();
        sender.offer(&[period(&flows)]);
        let mut held = read_until(&mut first, 50);
        first.shutdown(Shutdown::Write).unwrap();
        // Records keep coming while the exporter notices the close (hang guard: 10 s).
        let reader = std::thread::spawn(move || read_until(&mut first, usize::MAX));
        let start = Instant::now();
        let mut offered = 50;
        while !reader.is_finished() {
            assert!(start.elapsed() < Duration::from_secs(10), "never closed");
            sender.offer(&[period(&flows)]);
            offered += 50;
            std::thread::sleep(Duration::from_millis(20));
        }
        held.extend(reader.join().unwrap());
        let before = decode::stream_len(&held);
        assert!(before > 50, "records written after the close were read");
        sender.offer(&[period(&flows)]);
        offered += 50;
        let (mut second, _) = listener.accept().unwrap();
        drop(sender);
        let (exported, dropped) = x.finish();
        let after = decode::stream_len(&read_until(&mut second, usize::MAX));
        assert_eq!(
            before + after,
            offered as usize,
            "every record reached a collector"
        );
        assert_eq!((exported, dropped), (offered, 0));
    }
}
