//! `wait`: syscalls per packet and loss of poolcap's wait strategies (`--wait poll`, `busy`,
//! `adaptive`) and of tcpdump, dumpcap and netsniff-ng at 50k, 300k pps and top speed (Braun
//! et al., section 4.3: one poll() per packet costs more than the capture itself).

use super::{k, loss_targets, Plan, Scale, Table, Text, BUFFER_KIB};
use crate::figure::{by_subject, median, offered, Figure};
use crate::meta::Meta;
use crate::peer::{CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "Braun et al. (IMC 2010), section 4.3: a capture tool that makes a \
syscall per packet to wait for the next one spends more on waiting than on capturing. poolcap \
waits once per kernel block, with a choice of strategy (`--wait poll`: block in poll(); \
`busy`: spin; `adaptive`: spin briefly, then sleep for a time that follows the packet rate). \
Every tool's syscalls are counted by `perf stat -e raw_syscalls:sys_enter` (in-kernel \
counting, so the measured tool is not slowed down the way `strace` would slow it), over the \
same window as its CPU time; poolcap also reports its own count of wait syscalls. Read: \
syscalls per packet (log scale), CPU per packet and loss, at 50k, 300k pps and top speed.";

/// The points.
pub fn plan(scale: Scale) -> Plan {
    let rates: Vec<Option<u64>> = match scale {
        Scale::Smoke => vec![Some(50_000)],
        Scale::Quick => vec![Some(50_000), Some(300_000), None],
        Scale::Full => vec![
            Some(50_000),
            Some(100_000),
            Some(200_000),
            Some(300_000),
            None,
        ],
    };
    let seconds = scale.pick(0.2, 1.5, 5.0);
    let mut subjects: Vec<Subject> = ["poll", "busy", "adaptive"]
        .iter()
        .map(|w| {
            Subject::named(
                format!("poolcap --wait {w}"),
                CaptureSpec {
                    wait: Some((*w).to_owned()),
                    ..CaptureSpec::new(Tool::Poolcap, BUFFER_KIB)
                },
            )
        })
        .collect();
    for t in [Tool::Tcpdump, Tool::Dumpcap, Tool::NetsniffNg] {
        subjects.push(Subject::capture(CaptureSpec::new(t, BUFFER_KIB)));
    }
    if scale == Scale::Smoke {
        subjects.truncate(1);
    }
    let points = rates
        .iter()
        .map(|&rate| {
            let traffic = match rate {
                Some(r) => Traffic {
                    rate: Some(r),
                    ..Traffic::top(64, (r as f64 * seconds) as u64)
                },
                None => Traffic::top(64, (500_000.0 * seconds) as u64),
            };
            Point {
                syscalls: true,
                ..Point::new(
                    format!("64B {}", rate.map_or("top".into(), k)),
                    traffic,
                    subjects.clone(),
                )
            }
        })
        .collect();
    Plan {
        points,
        notes: Vec::new(),
    }
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let mut notes = Vec::new();
    if !meta.perf {
        notes.push(
            "perf is not installed: no syscall counts; context switches per packet (from \
             /proc/PID/task/*/status) are the only proxy"
                .to_owned(),
        );
    }
    Text {
        settings: vec![
            "syscalls: `perf stat -x, -e raw_syscalls:sys_enter -p PIDS` attached after the \
             tool's ready line and stopped when its CPU time is read (every syscall of every \
             thread, not only waits); per packet = per captured packet. `wait syscalls/pkt \
             (own count)` is poolcap's own count of its wait calls (poll, sleep) from \
             --stats-json. Context switches: voluntary + involuntary, all threads, same window"
                .into(),
            format!(
                "every tool counts only (peers `-w /dev/null`), {BUFFER_KIB} KiB kernel buffer, \
                 one queue, no load"
            ),
        ],
        notes,
        tables: vec![Table::results(
            rows,
            &[
                "sender_pps",
                "loss",
                "syscalls_per_pkt",
                "wait_syscalls_per_pkt",
                "switches_per_pkt",
                "cpu_s_per_mpkt",
            ],
            &["syscalls_per_pkt", "loss", "cpu_s_per_mpkt"],
        )],
        targets: loss_targets(rows),
        headline: headline(rows),
        ..Text::default()
    }
}

fn headline(rows: &[Row]) -> String {
    let at = "64B 300k";
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.subject.as_str()) {
            names.push(&r.subject);
        }
    }
    let parts: Vec<String> = names
        .iter()
        .filter_map(|s| {
            let v = super::med(rows, |p| p == at, s, "syscalls_per_pkt")?;
            Some(format!("{s} {v:.3}"))
        })
        .collect();
    if parts.is_empty() {
        return String::new();
    }
    format!("Syscalls per packet at 300k pps: {}.", parts.join(", "))
}

/// The figures.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let rps = if meta.rps { "rps on" } else { "rps off" };
    let all = |r: &Row| r.capture.is_some();
    let per_packet = |file: &str, title: &str, y: &str, key| {
        Figure::new(file, title, "offered rate (pps, sender's achieved)", y)
            .with_subtitle(format!("64-byte frames, one queue, counting only; {rps}"))
            .lines(by_subject(rows, all, offered, median(key)))
    };
    let mut sys = per_packet(
        "wait-syscalls.png",
        "Syscalls per captured packet vs offered rate",
        "syscalls per packet (perf, log scale)",
        "syscalls_per_pkt",
    );
    sys.log_y = true;
    let cpu = per_packet(
        "wait-cpu.png",
        "Tool CPU per packet vs offered rate",
        "tool CPU s per million packets",
        "cpu_s_per_mpkt",
    );
    vec![sys, cpu]
}

/// The wait suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    figures,
    ..super::SuiteDef::new(
        "Wait strategies: syscalls per packet (Braun et al., 4.3)",
        INTRO,
        |scale, _| plan(scale),
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_syscalls_for_every_subject() {
        let q = plan(Scale::Quick).points;
        assert_eq!(q.len(), 3);
        assert!(q.iter().all(|p| p.syscalls && p.subjects.len() == 6));
        assert_eq!(q[1].traffic.count, 450_000);
        assert_eq!(
            q[0].subjects[2].capture.as_ref().unwrap().wait.as_deref(),
            Some("adaptive")
        );
    }
}
