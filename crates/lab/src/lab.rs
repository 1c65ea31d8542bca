//! Building, describing and removing labs.
//!
//! Building is all-or-nothing: every namespace created is recorded, and if any step fails they
//! are all removed before the error is returned, so a failed `up` never leaves a half-built lab
//! that a later `up` would trip over. Only namespaces this call created are removed, never one
//! that another process made under the same name.

use crate::cmd::{ip, netns_command, run, run_json};
use crate::layout::{
    check_name, netns_name, parse_netns, Role, MAX_QUEUES, NETNS_HOSTS, PREFIX_LEN,
};
use crate::LabError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

/// What lab to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabSpec {
    /// Lab name, 1 to 20 characters from `[A-Za-z0-9_-]`; namespaces are `poolcap-{name}-{host}`.
    pub name: String,
    /// Receive and transmit queues per interface, 1 to 64.
    pub queues: u16,
    /// 2 (sender, probe) or 3 (sender, probe, sink).
    pub hosts: u8,
}

impl LabSpec {
    /// Checks the name, the number of queues and the number of hosts.
    pub fn validate(&self) -> Result<(), LabError> {
        check_name(&self.name)?;
        if !(1..=MAX_QUEUES).contains(&self.queues) {
            return Err(LabError::InvalidQueues(self.queues));
        }
        if !(2..=3).contains(&self.hosts) {
            return Err(LabError::InvalidHosts(self.hosts));
        }
        Ok(())
    }
}

/// One end of a veth pair: an interface in a lab namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The namespace, e.g. `poolcap-lab-sender`.
    pub netns: String,
    /// The interface, e.g. `snd0`.
    pub iface: String,
    /// Its MAC address, e.g. `02:70:63:00:00:01`.
    pub mac: String,
    /// Its IPv4 address (a /24).
    pub ip: Ipv4Addr,
}

impl Host {
    fn new(lab: &str, role: Role) -> Host {
        Host {
            netns: netns_name(lab, role.netns_host()),
            iface: role.iface().to_owned(),
            mac: role.mac().to_owned(),
            ip: role.ip(),
        }
    }
}

/// A built lab. Dropping it removes its namespaces (and with them the veths) unless it was
/// [persisted](Lab::persist).
#[derive(Debug)]
pub struct Lab {
    /// Lab name.
    pub name: String,
    /// Receive and transmit queues per interface.
    pub queues: u16,
    /// The sender's interface `snd0`.
    pub sender: Host,
    /// The probe's interface `prb0`, wired to the sender.
    pub probe: Host,
    /// The probe's interface `prb1` facing the sink (three hosts only).
    pub probe_fwd: Option<Host>,
    /// The sink's interface `snk0` (three hosts only).
    pub sink: Option<Host>,
    persistent: bool,
}

/// One interface of a lab, as printed by `poolcap lab up --json` and `status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// `sender`, `probe`, `probe-fwd` or `sink`.
    pub role: Role,
    /// The namespace.
    pub netns: String,
    /// The interface.
    pub iface: String,
    /// Its MAC address.
    pub mac: String,
    /// Its IPv4 address (`0.0.0.0` if `status` found none).
    pub ip: Ipv4Addr,
}

/// A description of a lab that outlives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabInfo {
    /// Lab name.
    pub name: String,
    /// Receive and transmit queues per interface (0 if `status` could not read them).
    pub queues: u16,
    /// Its interfaces, sender first.
    pub hosts: Vec<HostInfo>,
}

/// Lab names handed out by [`Lab::unique`] in this process.
static UNIQUE: AtomicU32 = AtomicU32::new(0);

impl Lab {
    /// Builds the lab `spec` describes. On failure nothing this call created is left behind.
    pub fn up(spec: &LabSpec) -> Result<Lab, LabError> {
        spec.validate()?;
        poolcap_sys::privilege::check_lab()?;
        let existing = list_netns()?;
        if NETNS_HOSTS
            .iter()
            .any(|h| existing.contains(&netns_name(&spec.name, h)))
        {
            return Err(LabError::Exists(spec.name.clone()));
        }
        let mut builder = Builder::default();
        build(&mut builder, spec)?;
        builder.created.clear();
        let three = spec.hosts == 3;
        Ok(Lab {
            name: spec.name.clone(),
            queues: spec.queues,
            sender: Host::new(&spec.name, Role::Sender),
            probe: Host::new(&spec.name, Role::Probe),
            probe_fwd: three.then(|| Host::new(&spec.name, Role::ProbeFwd)),
            sink: three.then(|| Host::new(&spec.name, Role::Sink)),
            persistent: false,
        })
    }

    /// Builds a lab whose name is unique to this process and call (`t{pid}x{n}`), so tests can
    /// build labs in parallel.
    pub fn unique(queues: u16, hosts: u8) -> Result<Lab, LabError> {
        let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
        Lab::up(&LabSpec {
            name: format!("t{}x{n}", std::process::id()),
            queues,
            hosts,
        })
    }

    /// Keeps the lab after this value is gone (for `poolcap lab up`) and describes it.
    pub fn persist(mut self) -> LabInfo {
        self.persistent = true;
        self.info()
    }

    /// Describes the lab.
    pub fn info(&self) -> LabInfo {
        LabInfo {
            name: self.name.clone(),
            queues: self.queues,
            hosts: self
                .roles()
                .map(|(role, h)| HostInfo {
                    role,
                    netns: h.netns.clone(),
                    iface: h.iface.clone(),
                    mac: h.mac.clone(),
                    ip: h.ip,
                })
                .collect(),
        }
    }

    /// The lab's namespaces: sender, probe and, with three hosts, sink.
    pub fn namespaces(&self) -> Vec<&str> {
        let mut v = vec![self.sender.netns.as_str(), self.probe.netns.as_str()];
        v.extend(self.sink.as_ref().map(|h| h.netns.as_str()));
        v
    }

    fn roles(&self) -> impl Iterator<Item = (Role, &Host)> {
        [
            Some((Role::Sender, &self.sender)),
            Some((Role::Probe, &self.probe)),
            self.probe_fwd.as_ref().map(|h| (Role::ProbeFwd, h)),
            self.sink.as_ref().map(|h| (Role::Sink, h)),
        ]
        .into_iter()
        .flatten()
    }

    /// Removes every namespace of lab `name`; [`LabError::NotFound`] if there is none.
    ///
    /// Deleting a namespace only removes its name: processes still running inside keep it
    /// (and its veths) alive, unseen by `status`. So a lab with processes is left alone
    /// ([`LabError::Busy`]) unless `force`, which ends them first (SIGTERM, then SIGKILL).
    pub fn down(name: &str, force: bool) -> Result<(), LabError> {
        check_name(name)?;
        poolcap_sys::privilege::check_lab()?;
        let existing = list_netns()?;
        let ours: Vec<String> = NETNS_HOSTS
            .iter()
            .map(|h| netns_name(name, h))
            .filter(|ns| existing.contains(ns))
            .collect();
        if ours.is_empty() {
            return Err(LabError::NotFound(name.to_owned()));
        }
        let busy = processes_in(&ours)?;
        if !busy.is_empty() {
            if !force {
                return Err(LabError::Busy {
                    name: name.to_owned(),
                    pids: busy,
                });
            }
            end_processes(&ours)?;
        }
        for ns in &ours {
            run(ip(["netns", "del", ns]))?;
        }
        Ok(())
    }

    /// Removes the labs named `{prefix}{pid}` whose owner process `pid` is gone (a demo
    /// killed before it could clean up), ending anything left running in them. Returns the
    /// names removed.
    pub fn remove_orphans(prefix: &str) -> Result<Vec<String>, LabError> {
        poolcap_sys::privilege::check_lab()?;
        // From the namespace names alone: other labs may come and go meanwhile.
        let existing = list_netns()?;
        let orphans: BTreeSet<&str> = existing
            .iter()
            .filter_map(|ns| parse_netns(ns))
            .map(|(lab, _)| lab)
            .filter(|lab| {
                lab.strip_prefix(prefix)
                    .and_then(|pid| pid.parse::<u32>().ok())
                    .is_some_and(|pid| !poolcap_sys::process::is_alive(pid))
            })
            .collect();
        let mut removed = Vec::new();
        for lab in orphans {
            match Lab::down(lab, true) {
                // Another cleanup got there first.
                Ok(()) | Err(LabError::NotFound(_)) => removed.push(lab.to_owned()),
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }

    /// The labs that exist, found from `ip netns list`, sorted by name.
    pub fn status() -> Result<Vec<LabInfo>, LabError> {
        poolcap_sys::privilege::check_lab()?;
        let existing = list_netns()?;
        let mut labs: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (lab, host) in existing.iter().filter_map(|ns| parse_netns(ns)) {
            labs.entry(lab).or_default().insert(host);
        }
        labs.into_iter()
            .map(|(name, hosts)| read_info(name, &hosts))
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.persistent {
            return;
        }
        for ns in self.namespaces() {
            let _ = run(ip(["netns", "del", ns]));
        }
    }
}

/// Records the namespaces a build created and removes them if the build does not finish.
#[derive(Default)]
struct Builder {
    created: Vec<String>,
}

impl Builder {
    /// Creates a namespace and silences it before any link exists: IPv6 off (no router
    /// solicitations, DAD or MLD reports) and IPv4 forwarding off (a new namespace may inherit
    /// it from the root one, see `net.core.devconf_inherit_init_net`), so the probe never
    /// routes between its two wires on its own.
    fn add_netns(&mut self, ns: &str) -> Result<(), LabError> {
        run(ip(["netns", "add", ns]))?;
        self.created.push(ns.to_owned());
        let mut sysctl = netns_command(ns, "sysctl");
        sysctl.args([
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
            "net.ipv4.ip_forward=0",
        ]);
        run(sysctl)?;
        run(ip(["-n", ns, "link", "set", "dev", "lo", "up"]))?;
        Ok(())
    }
}

impl Drop for Builder {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            let _ = run(ip(["netns", "del", ns]));
        }
    }
}

/// `ip` with the arguments of a command line written as a user would type it. Only for lines
/// made of validated lab names and the fixed layout, which never contain whitespace.
fn ip_line(line: &str) -> std::process::Command {
    ip(line.split_whitespace())
}

fn build(b: &mut Builder, spec: &LabSpec) -> Result<(), LabError> {
    for host in &NETNS_HOSTS[..usize::from(spec.hosts)] {
        b.add_netns(&netns_name(&spec.name, host))?;
    }
    let roles = Role::for_hosts(spec.hosts);
    let host = |role| Host::new(&spec.name, role);
    let q = spec.queues;
    // One veth pair per wire, both ends created directly in their namespaces.
    for (a, z) in [(Role::Sender, Role::Probe), (Role::ProbeFwd, Role::Sink)] {
        if !roles.contains(&a) {
            continue;
        }
        let (a, z) = (host(a), host(z));
        run(ip_line(&format!(
            "-n {} link add {} address {} numtxqueues {q} numrxqueues {q} \
             type veth peer name {} address {} netns {} numtxqueues {q} numrxqueues {q}",
            a.netns, a.iface, a.mac, z.iface, z.mac, z.netns
        )))?;
    }
    for &role in roles {
        let h = host(role);
        run(ip_line(&format!(
            "-n {} addr add {}/{PREFIX_LEN} dev {}",
            h.netns, h.ip, h.iface
        )))?;
        run(ip_line(&format!(
            "-n {} link set dev {} multicast off up",
            h.netns, h.iface
        )))?;
    }
    // Neighbours last: taking a link down flushes even permanent entries.
    for &role in roles {
        let (h, peer) = (host(role), host(role.peer()));
        run(ip_line(&format!(
            "-n {} neigh replace {} lladdr {} dev {} nud permanent",
            h.netns, peer.ip, peer.mac, h.iface
        )))?;
    }
    Ok(())
}

#[derive(Deserialize)]
struct NetnsEntry {
    name: String,
}

/// The processes running in any of `namespaces`, from `ip netns pids`.
fn processes_in(namespaces: &[String]) -> Result<Vec<u32>, LabError> {
    let mut pids = Vec::new();
    for ns in namespaces {
        let out = run(ip(["netns", "pids", ns]))?;
        pids.extend(out.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    Ok(pids)
}

/// Ends every process in `namespaces`: SIGTERM, up to 2 s to exit, then SIGKILL.
fn end_processes(namespaces: &[String]) -> Result<(), LabError> {
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        for pid in processes_in(namespaces)? {
            // Already gone (ESRCH) is what we want.
            let _ = poolcap_sys::process::send_signal(pid, sig);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !processes_in(namespaces)?.is_empty() {
            if std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let left = processes_in(namespaces)?;
    if left.is_empty() {
        Ok(())
    } else {
        Err(LabError::Unkillable(left))
    }
}

/// Names of all network namespaces, from `ip -j netns list`.
fn list_netns() -> Result<BTreeSet<String>, LabError> {
    let list: Vec<NetnsEntry> = run_json(ip(["-j", "netns", "list"]))?;
    Ok(list.into_iter().map(|e| e.name).collect())
}

#[derive(Deserialize)]
struct LinkEntry {
    ifname: String,
    #[serde(default)]
    address: String,
    #[serde(default)]
    num_rx_queues: Option<u16>,
    #[serde(default)]
    addr_info: Vec<AddrEntry>,
}

#[derive(Deserialize)]
struct AddrEntry {
    family: String,
    local: String,
}

/// Describes an existing lab from what its namespaces actually contain.
fn read_info(name: &str, hosts: &BTreeSet<&str>) -> Result<LabInfo, LabError> {
    let mut info = LabInfo {
        name: name.to_owned(),
        queues: 0,
        hosts: Vec::new(),
    };
    for host in NETNS_HOSTS.iter().filter(|h| hosts.contains(*h)) {
        let ns = netns_name(name, host);
        let links: Vec<LinkEntry> = run_json(ip(["-n", &ns, "-d", "-j", "addr", "show"]))?;
        for role in Role::ALL.into_iter().filter(|r| r.netns_host() == *host) {
            let Some(link) = links.iter().find(|l| l.ifname == role.iface()) else {
                continue;
            };
            if info.queues == 0 {
                info.queues = link.num_rx_queues.unwrap_or(0);
            }
            let ip = link
                .addr_info
                .iter()
                .filter(|a| a.family == "inet")
                .find_map(|a| a.local.parse().ok())
                .unwrap_or(Ipv4Addr::UNSPECIFIED);
            info.hosts.push(HostInfo {
                role,
                netns: ns.clone(),
                iface: link.ifname.clone(),
                mac: link.address.clone(),
                ip,
            });
        }
    }
    Ok(info)
}
