//! Period switching without locks on the per-packet path.
//!
//! The hub holds the running configuration and an epoch number. Each worker owns an
//! [`Analyzer`]: its compiled filters and its [`Tally`] for the current epoch. At every
//! chunk boundary (and when idle) the worker compares the hub's epoch, one atomic load,
//! with its own; when the reporter has switched, the worker hands its whole tally for the
//! old epoch over a channel and starts a fresh one under the new configuration. A packet is
//! therefore counted by exactly one worker in exactly one epoch: switches (period ends, rule
//! changes, reloads) neither lose nor double-count packets, and no lock is taken per packet.
//!
//! The reporter switches, then [`Hub::collect`]s the closed epoch from every worker before it
//! switches again, so a worker is never more than one epoch behind. A worker that stops hands
//! over its last tally (also when it unwinds), which then stands for every later epoch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use poolcap_sys::pcap_filter::OfflineFilter;

use crate::config::{compile_filter, Config};
use crate::packet;
use crate::tally::Tally;

/// One worker's tally for one epoch.
#[derive(Debug)]
struct Handover {
    member: usize,
    epoch: u64,
    tally: Tally,
    last: bool,
}

#[derive(Debug)]
struct Collecting {
    rx: Receiver<Handover>,
    tx: Sender<Handover>,
    members: usize,
    /// Members whose last tally has arrived, with its epoch.
    finished: Vec<Option<u64>>,
    /// Tallies of an epoch later than the one being collected (a worker that switched and
    /// then stopped sends two): kept for the collect of their own epoch.
    early: Vec<Handover>,
}

/// Shared between the reporter and the workers' analyzers.
#[derive(Debug)]
pub struct Hub {
    epoch: AtomicU64,
    current: Mutex<(u64, Arc<Config>)>,
    collecting: Mutex<Collecting>,
}

/// Workers did not hand over their tallies in time.
#[derive(Debug, thiserror::Error)]
#[error("{missing} of {members} workers did not hand over epoch {epoch} within {waited:?}")]
pub struct Late {
    /// The epoch being collected.
    pub epoch: u64,
    /// Workers missing.
    pub missing: usize,
    /// Workers attached.
    pub members: usize,
    /// How long the reporter waited.
    pub waited: Duration,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Hub {
    /// A hub running `config` in epoch 0.
    pub fn new(config: Config) -> Arc<Self> {
        let (tx, rx) = channel();
        Arc::new(Self {
            epoch: AtomicU64::new(0),
            current: Mutex::new((0, Arc::new(config))),
            collecting: Mutex::new(Collecting {
                rx,
                tx,
                members: 0,
                finished: Vec::new(),
                early: Vec::new(),
            }),
        })
    }

    /// A new worker's analyzer (attach every worker before the first switch).
    pub fn attach(self: &Arc<Self>) -> Analyzer {
        let mut c = lock(&self.collecting);
        let member = c.members;
        c.members += 1;
        c.finished.push(None);
        let (epoch, config) = lock(&self.current).clone();
        Analyzer {
            member,
            tx: c.tx.clone(),
            hub: Arc::clone(self),
            epoch,
            filters: compile_all(&config),
            tally: Tally::new(&config),
            config,
        }
    }

    /// Workers attached.
    pub fn members(&self) -> usize {
        lock(&self.collecting).members
    }

    /// The running configuration and its epoch.
    pub fn current(&self) -> (u64, Arc<Config>) {
        lock(&self.current).clone()
    }

    /// Closes the current epoch: workers start `next` at their next chunk boundary. Returns
    /// the closed epoch and the configuration it ran, to [`collect`](Self::collect).
    pub fn switch(&self, next: Config) -> (u64, Arc<Config>) {
        let mut cur = lock(&self.current);
        let (closed, ran) = cur.clone();
        *cur = (closed + 1, Arc::new(next));
        // Release pairs with the Acquire in `Analyzer::sync`; the configuration itself is
        // read under the lock.
        self.epoch.store(closed + 1, Ordering::Release);
        (closed, ran)
    }

    /// Merges every worker's tally of `epoch`, which ran `config` (see the module docs);
    /// with `all_stopped`, waits for every worker's last tally instead (after the workers
    /// have exited).
    pub fn collect(
        &self,
        epoch: u64,
        config: &Config,
        all_stopped: bool,
        timeout: Duration,
    ) -> Result<Tally, Late> {
        let mut merged = Tally::new(config);
        let mut c = lock(&self.collecting);
        let mut got: Vec<bool> = c
            .finished
            .iter()
            .map(|f| f.is_some_and(|e| e < epoch || (e == epoch && !all_stopped)))
            .collect();
        let deadline = Instant::now() + timeout;
        let mut queued = std::mem::take(&mut c.early).into_iter();
        loop {
            let h = match queued.next() {
                Some(h) => h,
                None if got.iter().all(|g| *g) => break,
                None => match c
                    .rx
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                {
                    Ok(h) => h,
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                        return Err(Late {
                            epoch,
                            missing: got.iter().filter(|g| !**g).count(),
                            members: got.len(),
                            waited: timeout,
                        })
                    }
                },
            };
            if h.last {
                c.finished[h.member] = Some(h.epoch);
            }
            if h.epoch == epoch {
                got[h.member] = !all_stopped || h.last;
                merged.absorb(h.tally);
            } else if h.epoch > epoch {
                c.early.push(h);
            } else if h.last {
                got[h.member] = true;
            }
        }
        Ok(merged)
    }
}

fn compile_all(config: &Config) -> Vec<Option<OfflineFilter>> {
    // The configuration was checked when it was loaded, so these compile; a rule whose
    // filter should fail here anyway selects nothing rather than stopping the worker. Rules
    // an eBPF program counts in the kernel are left to it.
    config
        .rules
        .iter()
        .map(|r| {
            (r.enabled && !r.in_kernel)
                .then(|| compile_filter(&r.filter).ok().map(OfflineFilter::new))
                .flatten()
        })
        .collect()
}

/// One worker's side of the probe: compiled rule filters and the current period's tally.
pub struct Analyzer {
    member: usize,
    tx: Sender<Handover>,
    hub: Arc<Hub>,
    epoch: u64,
    config: Arc<Config>,
    filters: Vec<Option<OfflineFilter>>,
    tally: Tally,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("member", &self.member)
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl Analyzer {
    /// Runs every enabled rule over one frame (as stored, VLAN tags in place).
    #[inline]
    pub fn observe(&mut self, frame: &[u8], wire_len: u32, ts_ns: u64) {
        self.tally.analysed += 1;
        self.tally.analysed_bytes += u64::from(wire_len);
        let mut parsed = None;
        let mut parsed_yet = false;
        for (filter, rule) in self.filters.iter().zip(self.tally.rules.iter_mut()) {
            let Some(filter) = filter else { continue };
            // With the wire length, as `tcpdump -r` runs it: length tests see the packet
            // as sent, whatever the snaplen kept.
            if !filter.matches(frame, wire_len) {
                continue;
            }
            if rule.needs_key() && !parsed_yet {
                parsed = packet::parse(frame);
                parsed_yet = true;
            }
            rule.observe(wire_len, ts_ns, parsed.as_ref());
        }
    }

    /// At a chunk boundary or when idle: if the reporter switched epochs, hands this
    /// worker's tally over and starts the new configuration.
    pub fn sync(&mut self) {
        // Acquire pairs with the Release in `Hub::switch`.
        if self.hub.epoch.load(Ordering::Acquire) == self.epoch {
            return;
        }
        let (epoch, config) = self.hub.current();
        let fresh = Tally::new(&config);
        if !Arc::ptr_eq(&config, &self.config) {
            self.filters = compile_all(&config);
        }
        let old = std::mem::replace(&mut self.tally, fresh);
        let _ = self.tx.send(Handover {
            member: self.member,
            epoch: self.epoch,
            tally: old,
            last: false,
        });
        self.epoch = epoch;
        self.config = config;
    }
}

impl Drop for Analyzer {
    /// A stopping worker (also one that unwinds) hands over what it counted last.
    fn drop(&mut self) {
        let tally = std::mem::take(&mut self.tally);
        let _ = self.tx.send(Handover {
            member: self.member,
            epoch: self.epoch,
            tally,
            last: true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::testing::udp4;
    use std::path::Path;

    fn config(enabled: bool) -> Config {
        let text = format!("period = \"1s\"\n[[rule]]\nname = \"all\"\nfilter = \"udp\"\nactions = [\"flows\"]\n[[rule]]\nname = \"p9\"\nfilter = \"udp dst port 9\"\nenabled = {enabled}\nactions = [\"count\"]\n");
        parse(Path::new("t.toml"), &text).unwrap()
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn switches_split_packets_between_epochs_without_loss() {
        let hub = Hub::new(config(true));
        let hub2 = Arc::clone(&hub);
        let mut a = hub.attach();
        let b = hub.attach();
        let frame9 = udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 9, 20);
        let frame8 = udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 8, 20);
        // Worker b runs in a thread: 1000 packets then stops.
        let t = std::thread::spawn(move || {
            let mut b = b;
            for i in 0..1000 {
                b.observe(&frame9, 100, i);
                if i % 10 == 0 {
                    b.sync();
                }
            }
        });
        for _ in 0..3 {
            a.observe(&frame8, 60, 1);
            a.sync();
        }
        // In each epoch rule p9 counts exactly the port 9 packets of rule all's flows when
        // it ran enabled, and none when disabled.
        let port9 = |m: &Tally| -> u64 {
            let flows = m.rules[0].flows.as_ref().expect("flows");
            flows
                .ranked(crate::config::TopBy::Packets)
                .iter()
                .filter(|(k, _)| k.dport == 9)
                .map(|(_, s)| s.packets)
                .sum()
        };
        let mut total = (0, 0, 0);
        let mut analysed = 0;
        let mut add = |m: &Tally, ran: &Config| {
            assert_eq!(m.analysed, m.rules[0].packets, "every frame is udp");
            analysed += m.analysed;
            let nine = port9(m);
            let expected = if ran.rules[1].enabled { nine } else { 0 };
            assert_eq!(
                m.rules[1].packets, expected,
                "enabled: {}",
                ran.rules[1].enabled
            );
            total = (
                total.0 + m.rules[0].packets,
                total.1 + m.rules[1].packets,
                total.2 + nine,
            );
        };
        let mut epoch_cfg = hub2.current();
        for round in 0..5 {
            let (e, ran) = hub2.switch(config(round % 2 == 0));
            assert_eq!(e, epoch_cfg.0);
            a.sync();
            add(&hub2.collect(e, &ran, false, T).unwrap(), &ran);
            epoch_cfg = hub2.current();
        }
        t.join().unwrap();
        // The last epoch runs p9 enabled: it counts this one.
        assert!(epoch_cfg.1.rules[1].enabled);
        a.observe(&udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 9, 20), 100, 2);
        drop(a);
        let last = hub2.current();
        add(&hub2.collect(last.0, &last.1, true, T).unwrap(), &last.1);
        assert_eq!(total.0, 1004, "every packet in exactly one epoch");
        assert_eq!(analysed, 1004, "analysed cut at the same switches");
        assert_eq!(total.2, 1001, "every port 9 packet in rule all's flows");
        assert!(total.1 >= 1, "p9 counted: {total:?}");
    }

    #[test]
    fn disabled_rules_see_nothing_and_filters_select() {
        let hub = Hub::new(config(false));
        let mut a = hub.attach();
        a.observe(&udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 9, 20), 62, 1);
        a.observe(&udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 7, 20), 62, 2);
        let (e, ran) = hub.switch(config(true));
        a.sync();
        a.observe(&udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 9, 20), 62, 3);
        a.observe(&udp4([1, 1, 1, 1], [2, 2, 2, 2], 5, 7, 20), 62, 4);
        let first = hub.collect(e, &ran, false, T).unwrap();
        assert_eq!((first.rules[0].packets, first.rules[1].packets), (2, 0));
        assert_eq!(first.rules[0].bytes, 124);
        drop(a);
        let (e, ran) = hub.current();
        let second = hub.collect(e, &ran, true, T).unwrap();
        assert_eq!((second.rules[0].packets, second.rules[1].packets), (2, 1));
        assert_eq!(second.rules[0].flows.as_ref().unwrap().len(), 2);
    }
}
