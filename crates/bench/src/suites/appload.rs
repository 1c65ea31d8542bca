//! `appload`: loss against the compression level of the written file at top speed (Braun et
//! al., Figs 10-11, where packzip's compression level was the application load). poolcap
//! compresses in its writer thread (`--compress`); tcpdump cannot compress, so its pcap stream
//! goes through a pipe into the `zstd` or `gzip` program on the same CPU.

use super::{loss_targets, rows_where, spec, Plan, Scale, Table, Text, BUFFER_KIB, TOOL_CPU};
use crate::figure::{by_key, percent, Figure};
use crate::meta::Meta;
use crate::peer::{compressor, CaptureSpec, Tool, Traffic};
use crate::point::{Point, Subject};
use crate::report::Row;

/// For BENCHMARKS.md.
pub const INTRO: &str = "Braun et al. (IMC 2010), Figs 10-11: the application is the main \
cause of loss. The application here is compression of the written file, at zstd levels 1, 3, \
9, 19 and gzip levels 1, 6, 9, with 64, 256 and 512-byte frames at top speed. poolcap \
compresses as it writes (`-w FILE --compress zstd:L`), from its kernel ring, which has the pool's \
memory; tcpdump has \
no compression option, so it writes its pcap stream to a pipe into the `zstd` (or `gzip`) \
program, both on the same CPU. Read: loss against level (captured = packets found in the \
decompressed file): a bigger buffer in front of the application (poolcap's pool) only helps \
until the application's rate is below the offered rate.";

/// `none` or a `--compress` setting.
fn levels(scale: Scale) -> Vec<&'static str> {
    match scale {
        Scale::Smoke => vec!["zstd:1"],
        Scale::Quick => vec!["none", "zstd:1", "zstd:19", "gzip:1", "gzip:9"],
        Scale::Full => vec![
            "none", "zstd:1", "zstd:3", "zstd:9", "zstd:19", "gzip:1", "gzip:6", "gzip:9",
        ],
    }
}

/// The points.
pub fn plan(scale: Scale) -> Plan {
    let sizes: &[usize] = scale.pick(&[64], &[64, 512], &[64, 256, 512]);
    let count = scale.pick(20_000, 200_000, 500_000);
    let mut v = Vec::new();
    for &size in sizes {
        for level in levels(scale) {
            let compress = (level != "none").then(|| level.to_owned());
            let with = |t: Tool| CaptureSpec {
                compress: compress.clone(),
                ..spec(t, BUFFER_KIB, true)
            };
            let peer_name = match &compress {
                None => "tcpdump".to_owned(),
                Some(c) => match compressor(c) {
                    Ok((prog, l)) => format!("tcpdump | {prog} -{l}"),
                    Err(_) => format!("tcpdump | {c}"),
                },
            };
            v.push(Point::new(
                format!("{size}B {level}"),
                Traffic::top(size, count),
                vec![
                    Subject::capture(with(Tool::Poolcap)),
                    Subject::named(peer_name, with(Tool::Tcpdump)),
                ],
            ));
        }
    }
    Plan {
        points: v,
        notes: Vec::new(),
    }
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let zstd = meta
        .versions
        .iter()
        .find(|v| v.to_lowercase().contains("zstandard") || v.contains("zstd"))
        .cloned()
        .unwrap_or_else(|| "not found".into());
    Text {
        settings: vec![
            format!(
                "poolcap: `-w FILE --format pcap --compress ALGO:L`, default pool (256×64 cells) \
                 and a {BUFFER_KIB} KiB ring, no x-loop; its one capture thread writes and compresses, on CPU \
                 {TOOL_CPU}"
            ),
            format!(
                "tcpdump: `tcpdump -B {BUFFER_KIB} -w - | zstd -L -q -c > FILE` (or `gzip -L`), \
                 both processes pinned to CPU {TOOL_CPU}; `none` is `tcpdump -w FILE`. tcpdump \
                 has no compression of its own. zstd program: {zstd}"
            ),
            "files go to /var/tmp (disk, not tmpfs); captured = packets found in the \
             decompressed file; tool CPU includes the compressor process for tcpdump"
                .into(),
            "buffers differ, and in short runs they decide the loss: poolcap holds at most its \
             pool (16384 packets) in front of its compressor, while the zstd program reads \
             tens of MB ahead of its own compression (measured on this machine: it accepted a \
             52.8 MB pcap of 512-byte frames within 3 s while compressing it at level 19 at \
             2.4 MB/s), so `tcpdump | zstd` has a far bigger buffer. Compression speeds are \
             alike: at level 19 on these frames the zstd program did 2.4 MB/s, poolcap's \
             writer about 3.5 MB/s"
                .into(),
        ],
        tables: vec![Table::results(
            rows,
            &[
                "offered",
                "sender_pps",
                "captured",
                "loss",
                "cpu_s",
                "cpu_s_per_mpkt",
            ],
            &["loss"],
        )],
        targets: loss_targets(rows),
        headline: headline(rows),
        ..Text::default()
    }
}

fn headline(rows: &[Row]) -> String {
    let mean = |t: Tool| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| {
                r.capture
                    .as_ref()
                    .is_some_and(|c| c.tool == t && c.compress.is_some())
            })
            .filter_map(|r| r.median("loss"))
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let worst = rows
        .iter()
        .filter(|r| r.poolcap)
        .filter_map(|r| Some((r.median("loss")?, r.point.clone())))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    format!(
        "Mean loss over the compressed points: poolcap {}, tcpdump into a compressor {}{}.",
        super::pct_or_dash(mean(Tool::Poolcap)),
        super::pct_or_dash(mean(Tool::Tcpdump)),
        worst
            .map(|(l, p)| format!("; poolcap's worst: {} at {p}", super::pct_or_dash(Some(l))))
            .unwrap_or_default()
    )
}

/// The figures: loss vs level per compressor, one line per tool and frame size.
pub fn figures(meta: &Meta, rows: &[Row]) -> Vec<Figure> {
    let mut v = Vec::new();
    for algo in ["zstd", "gzip"] {
        let level = |r: &Row| match r.capture.as_ref()?.compress.as_deref() {
            None => Some(0.0),
            Some(c) if c.starts_with(algo) => compressor(c).ok().map(|(_, l)| f64::from(l)),
            Some(_) => None,
        };
        let rs = rows_where(rows, |r| r.capture.is_some() && level(r).is_some());
        if rs
            .iter()
            .all(|r| r.capture.as_ref().is_some_and(|c| c.compress.is_none()))
        {
            continue;
        }
        v.push(
            Figure::new(
                format!("appload-{algo}.png"),
                format!("Loss vs {algo} level at top speed"),
                &format!("{algo} level (0 = no compression)"),
                "loss (%)",
            )
            .with_subtitle(format!(
                "tcpdump pipes into the {algo} program on the same CPU; poolcap compresses in its \
                 writer; rps {}",
                if meta.rps { "on" } else { "off" }
            ))
            .lines(by_key(
                &rs,
                |_| true,
                |r| {
                    let t = r.capture.as_ref().map_or("?", |c| c.tool.name());
                    format!("{t} {}B", r.traffic.size)
                },
                level,
                percent("loss"),
            )),
        );
    }
    v
}

/// The appload suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef {
    figures,
    ..super::SuiteDef::new(
        "Application load: compression level (Braun et al., Figs 10-11)",
        INTRO,
        |scale, _| plan(scale),
        text,
    )
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_has_poolcap_and_a_tcpdump_pipe() {
        let q = plan(Scale::Quick).points;
        assert_eq!(q.len(), 10);
        let p = q.iter().find(|p| p.id == "512B zstd:19").unwrap();
        assert_eq!(p.subjects[1].name, "tcpdump | zstd -19");
        assert!(p.subjects.iter().all(|s| s.capture.as_ref().unwrap().write));
        let none = q.iter().find(|p| p.id == "64B none").unwrap();
        assert_eq!(none.subjects[1].name, "tcpdump");
        assert_eq!(plan(Scale::Full).points.len(), 24);
    }
}
