//! Root tests of the lab: each builds real namespaces and veths with `ip`, checks them with
//! `ip` (not with the code under test) and checks they are gone afterwards. Without the
//! privileges a lab needs, every trial is reported as ignored, never as passed.

use libtest_mimic::{Arguments, Failed, Trial};
use poolcap_lab::{if_counters, netns_command, IfCounters, Lab, LabError, LabSpec, Role};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

/// A root test: checks with `ip` and fails with a message.
type Test = fn() -> Result<(), Failed>;

fn main() {
    let mut args = Arguments::from_args();
    // One test at a time: run side by side, a lab's namespace was now and then gone when the
    // next `ip -n` looked (about 1 run in 30, `up_down` alone 1 in 40; never in 30 runs one
    // at a time, nor in 80 side by side under strace, nor with two `poolcap lab up`/`down`
    // loops in parallel processes). Its cause is not found yet; these tests take 1.5 s.
    args.test_threads = Some(1);
    let missing = poolcap_sys::privilege::check_lab().err();
    if let Some(m) = &missing {
        eprintln!("lab tests ignored: {m}");
    }
    let tests: [(&str, Test); 7] = [
        ("up_down_two_hosts", up_down_two_hosts),
        ("up_down_three_hosts", up_down_three_hosts),
        (
            "up_twice_is_exists_and_keeps_first",
            up_twice_is_exists_and_keeps_first,
        ),
        ("down_missing_is_not_found", down_missing_is_not_found),
        ("panic_removes_lab", panic_removes_lab),
        ("ping_is_counted", ping_is_counted),
        ("idle_wire_is_quiet", idle_wire_is_quiet),
    ];
    // A test whose tool is missing is reported as ignored, never as passed.
    let no_ping = !which("ping");
    if no_ping {
        eprintln!("ping_is_counted ignored: `ping` not found (./dev deps installs iputils-ping)");
    }
    let trials = tests
        .into_iter()
        .map(|(name, f)| {
            let tool_missing = name == "ping_is_counted" && no_ping;
            Trial::test(name, f).with_ignored_flag(missing.is_some() || tool_missing)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

/// Runs `ip ARGS` and parses its JSON output.
fn ip_json(args: &[&str]) -> Result<Value, Failed> {
    let out = Command::new("ip").args(args).output()?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let text = if text.trim().is_empty() { "[]" } else { &text };
    Ok(serde_json::from_str(text)?)
}

fn namespaces() -> Result<BTreeSet<String>, Failed> {
    Ok(ip_json(&["-j", "netns", "list"])?
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect())
}

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), Failed> {
    if cond {
        Ok(())
    } else {
        Err(msg().into())
    }
}

/// Checks everything `up` promises about one interface, as `ip` reports it.
fn check_iface(role: Role, netns: &str, iface: &str, queues: u16) -> Result<(), Failed> {
    let link = ip_json(&["-n", netns, "-d", "-j", "addr", "show", "dev", iface])?;
    let link = &link[0];
    let what = format!("{role} {netns}/{iface}");
    check(
        link["num_rx_queues"] == queues && link["num_tx_queues"] == queues,
        || {
            format!(
                "{what}: queues {} rx / {} tx, want {queues}",
                link["num_rx_queues"], link["num_tx_queues"]
            )
        },
    )?;
    check(link["address"] == role.mac(), || {
        format!("{what}: mac {}", link["address"])
    })?;
    let flags = link["flags"].as_array().cloned().unwrap_or_default();
    check(!flags.iter().any(|f| f == "MULTICAST"), || {
        format!("{what}: multicast on: {flags:?}")
    })?;
    check(flags.iter().any(|f| f == "UP"), || {
        format!("{what}: not up: {flags:?}")
    })?;
    let addrs = link["addr_info"].as_array().cloned().unwrap_or_default();
    check(
        addrs.len() == 1
            && addrs[0]["family"] == "inet"
            && addrs[0]["local"] == role.ip().to_string()
            && addrs[0]["prefixlen"] == 24,
        || format!("{what}: addresses {addrs:?}"),
    )?;
    let peer = role.peer();
    let neigh = ip_json(&["-n", netns, "-j", "neigh", "show", "dev", iface])?;
    let neigh = neigh.as_array().cloned().unwrap_or_default();
    check(
        neigh.len() == 1
            && neigh[0]["dst"] == peer.ip().to_string()
            && neigh[0]["lladdr"] == peer.mac()
            && neigh[0]["state"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s == "PERMANENT")),
        || format!("{what}: neighbours {neigh:?}"),
    )
}

fn up_down(hosts: u8) -> Result<(), Failed> {
    let lab = Lab::unique(2, hosts)?;
    let want: Vec<String> = lab.namespaces().iter().map(|s| s.to_string()).collect();
    check(want.len() == usize::from(hosts), || {
        format!("namespaces {want:?}")
    })?;
    let present = namespaces()?;
    check(want.iter().all(|ns| present.contains(ns)), || {
        format!("missing some of {want:?}")
    })?;
    let info = lab.info();
    let roles: Vec<Role> = info.hosts.iter().map(|h| h.role).collect();
    check(roles.len() == if hosts == 3 { 4 } else { 2 }, || {
        format!("roles {roles:?}")
    })?;
    check(
        lab.probe_fwd.is_some() == (hosts == 3) && lab.sink.is_some() == (hosts == 3),
        || "probe_fwd/sink do not match hosts".to_owned(),
    )?;
    for h in &info.hosts {
        check_iface(h.role, &h.netns, &h.iface, 2)?;
    }
    let status = Lab::status()?;
    let found = status.iter().find(|l| l.name == lab.name);
    check(found == Some(&info), || {
        format!("status {found:?}, want {info:?}")
    })?;
    drop(lab);
    let present = namespaces()?;
    check(want.iter().all(|ns| !present.contains(ns)), || {
        format!("left behind: {want:?}")
    })
}

fn up_down_two_hosts() -> Result<(), Failed> {
    up_down(2)
}

fn up_down_three_hosts() -> Result<(), Failed> {
    up_down(3)
}

fn up_twice_is_exists_and_keeps_first() -> Result<(), Failed> {
    let lab = Lab::unique(1, 2)?;
    let again = Lab::up(&LabSpec {
        name: lab.name.clone(),
        queues: 1,
        hosts: 3,
    });
    check(
        matches!(&again, Err(LabError::Exists(n)) if *n == lab.name),
        || format!("second up: {again:?}"),
    )?;
    let present = namespaces()?;
    check(
        lab.namespaces().iter().all(|ns| present.contains(*ns)),
        || "first lab lost a namespace".to_owned(),
    )?;
    for h in lab.info().hosts {
        check_iface(h.role, &h.netns, &h.iface, 1)?;
    }
    Ok(())
}

fn down_missing_is_not_found() -> Result<(), Failed> {
    let name = format!("gone{}", std::process::id());
    let r = Lab::down(&name, false);
    check(
        matches!(&r, Err(LabError::NotFound(n)) if *n == name),
        || format!("down: {r:?}"),
    )
}

fn panic_removes_lab() -> Result<(), Failed> {
    let mut built: Vec<String> = Vec::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let lab = Lab::unique(1, 3).expect("lab");
        built = lab.namespaces().iter().map(|s| s.to_string()).collect();
        panic!("deliberate panic while holding a lab (expected)");
    }));
    check(r.is_err(), || "closure did not panic".to_owned())?;
    check(built.len() == 3, || format!("namespaces {built:?}"))?;
    let present = namespaces()?;
    check(built.iter().all(|ns| !present.contains(ns)), || {
        format!("left behind: {built:?}")
    })
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn delta(before: IfCounters, after: IfCounters) -> (u64, u64, u64, u64) {
    (
        after.rx_packets - before.rx_packets,
        after.rx_bytes - before.rx_bytes,
        after.tx_packets - before.tx_packets,
        after.tx_bytes - before.tx_bytes,
    )
}

fn ping_is_counted() -> Result<(), Failed> {
    let lab = Lab::unique(1, 2)?;
    let (snd, prb) = (&lab.sender, &lab.probe);
    let snd0 = if_counters(&snd.netns, &snd.iface)?;
    let prb0 = if_counters(&prb.netns, &prb.iface)?;
    let out = netns_command(&snd.netns, "ping")
        .args(["-c", "3", "-i", "0.2", "-W", "1", "-q", &prb.ip.to_string()])
        .output()?;
    check(out.status.success(), || {
        format!(
            "ping failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let snd0 = delta(snd0, if_counters(&snd.netns, &snd.iface)?);
    let prb0 = delta(prb0, if_counters(&prb.netns, &prb.iface)?);
    // 3 echo requests one way, 3 replies the other, 98 bytes each (14 + 20 + 8 + 56),
    // and nothing else: no ARP thanks to the permanent neighbours.
    check(prb0 == (3, 294, 3, 294), || {
        format!("prb0 (rx pkts, rx bytes, tx pkts, tx bytes) {prb0:?}")
    })?;
    check(snd0 == (3, 294, 3, 294), || {
        format!("snd0 (rx pkts, rx bytes, tx pkts, tx bytes) {snd0:?}")
    })
}

fn idle_wire_is_quiet() -> Result<(), Failed> {
    let lab = Lab::unique(1, 3)?;
    let hosts = lab.info().hosts;
    let read = || -> Result<Vec<IfCounters>, Failed> {
        hosts
            .iter()
            .map(|h| Ok(if_counters(&h.netns, &h.iface)?))
            .collect()
    };
    let before = read()?;
    std::thread::sleep(Duration::from_secs(1));
    let after = read()?;
    for ((h, b), a) in hosts.iter().zip(&before).zip(&after) {
        check(a == b, || {
            format!(
                "{} {}/{}: {b:?} -> {a:?} while idle",
                h.role, h.netns, h.iface
            )
        })?;
        check(*b == IfCounters::default(), || {
            format!(
                "{} {}/{}: frames during setup: {b:?}",
                h.role, h.netns, h.iface
            )
        })?;
    }
    Ok(())
}
