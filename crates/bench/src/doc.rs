//! The markdown a run produces: `summary.md` in its result directory, and its section of
//! BENCHMARKS.md (same tables, figures linked from the committed `docs/bench/` folder, the
//! common method stated once at the top).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use poolcap_measure::scratch::timestamp;

use super::figure::Figure;
use super::meta::Meta;
use super::point::{GEN_CPU, TOOL_CPU};
use super::report::{md_cell, ratio_table, table, Row};
use super::suites::{self, Scale, Suite, Text, QUIET_BELOW};

/// A result directory turned into tables, figures and text.
pub struct Rendered {
    /// The directory.
    pub dir: PathBuf,
    /// Its description.
    pub meta: Meta,
    /// Aggregated rows.
    pub rows: Vec<Row>,
    /// The suite's text.
    pub text: Text,
    /// Figures, with the reason when one could not be drawn.
    pub figures: Vec<(Figure, Result<(), String>)>,
}

/// Where `report` writes: BENCHMARKS.md and its figures.
#[derive(Debug, Clone)]
pub struct ReportPaths {
    /// Result directories (`bench/results`).
    pub results: PathBuf,
    /// The markdown file (`BENCHMARKS.md`).
    pub markdown: PathBuf,
    /// The figure folder it links to (`docs/bench`), relative to the markdown file's folder.
    pub figures: PathBuf,
    /// The command that regenerates everything.
    pub command: String,
}

/// A suite's headline.
pub fn title(s: Suite) -> &'static str {
    s.def().title
}

fn date(unix: u64) -> String {
    let t = timestamp(unix);
    format!(
        "{}-{}-{} {}:{} UTC",
        &t[..4],
        &t[4..6],
        &t[6..8],
        &t[9..11],
        &t[11..13]
    )
}

/// The busiest start of any run, as a share of all CPUs.
fn busiest(rows: &[Row]) -> f64 {
    rows.iter()
        .filter_map(|r| r.get("busy_before"))
        .map(|s| s.max)
        .fold(0.0, f64::max)
}

/// The settings every suite shares, one bullet each.
fn common_settings(m: &Meta, rows: &[Row]) -> Vec<String> {
    let per_point = rows.iter().any(|r| r.rps) && rows.iter().any(|r| !r.rps);
    vec![
        format!(
            "runs: {} per point and subject, interleaved (A B C A B C ...)",
            m.runs
        ),
        suites::pinning(m),
        format!(
            "rps_cpus of {}: {}",
            m.probe_iface,
            if per_point {
                format!("set per point: CPU {TOOL_CPU} at `rps on` points, off at the others")
            } else if m.rps {
                format!("CPU {TOOL_CPU} (kernel receive work competes with the tool)")
            } else {
                "off (kernel receive work runs on the sender's CPU)".to_owned()
            }
        ),
        "loss = (offered − captured) / offered; captured = packets in the written file for \
         writing runs, the tool's own count otherwise"
            .to_owned(),
        "tool CPU = run time of all its threads, those that ended included, and of its child \
         processes (each process's CLOCK_PROCESS_CPUTIME_ID, nanoseconds) between the ready \
         line and 1.2 s after the sender finished; CPU s/Mpkt = that per million captured \
         packets"
            .to_owned(),
    ]
}

fn quiet_note(rows: &[Row]) -> String {
    format!(
        "each run waited (up to 60 s) until at most {:.0}% of all CPUs were busy; the busiest \
         start measured {:.0}% (above the limit means someone else kept the machine busy)",
        QUIET_BELOW * 100.0,
        busiest(rows) * 100.0
    )
}

/// Notes of a run: the manager's, the suite's, interruption, the quiet machine.
fn notes(r: &Rendered) -> Vec<String> {
    let mut v = r.meta.notes.clone();
    v.extend(r.text.notes.iter().cloned());
    if r.meta.interrupted {
        v.push("INTERRUPTED: these are partial results".into());
    }
    v.push(quiet_note(&r.rows));
    let bad: Vec<String> = r
        .rows
        .iter()
        .filter(|row| row.capture.is_some())
        .filter_map(|row| {
            let u = row.get("unaccounted")?;
            (u.min != 0.0 || u.max != 0.0)
                .then(|| format!("{} / {}: {:.0}–{:.0}", row.point, row.subject, u.min, u.max))
        })
        .collect();
    let cut: Vec<String> = r
        .rows
        .iter()
        .filter(|row| row.truncated_files > 0)
        .map(|row| {
            format!(
                "{} / {} ({} runs)",
                row.point, row.subject, row.truncated_files
            )
        })
        .collect();
    if !cut.is_empty() {
        v.push(format!(
            "files that end inside a record (the tool was stopped in the middle of a write; \
             their whole packets are counted): {}",
            cut.join("; ")
        ));
    }
    if !bad.is_empty() {
        v.push(format!(
            "accounting gaps (offered − captured − dropped − filtered as the tool reports them, \
             min–max over runs; libpcap tools may leave a partly filled block unread at exit): {}",
            bad.join("; ")
        ));
    }
    v
}

/// The tables, extra sections, targets, figures and failures, with headings at `h`.
fn body(r: &Rendered, h: &str, img: &str) -> String {
    let mut s = String::new();
    for t in &r.text.tables {
        if t.rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            s,
            "{h} {}\n\nMedians over the runs, with the min–max range where they differ.\n",
            t.title
        );
        s.push_str(&table(&t.rows, &t.columns));
        if !t.ratios.is_empty() {
            let ratios = ratio_table(&t.rows, &t.ratios);
            if !ratios.is_empty() {
                s.push_str("\npoolcap against the best peer at the same point (medians):\n\n");
                s.push_str(&ratios);
            }
        }
        s.push('\n');
    }
    for (title, text) in &r.text.sections {
        let _ = writeln!(s, "{h} {title}\n\n{text}");
    }
    if !r.text.targets.is_empty() {
        let _ = writeln!(s, "{h} Targets\n");
        for t in &r.text.targets {
            let _ = writeln!(s, "- {t}");
        }
        s.push('\n');
    }
    if !r.figures.is_empty() {
        let _ = writeln!(s, "{h} Figures\n");
        for (f, drawn) in &r.figures {
            match drawn {
                Ok(()) => {
                    let _ = writeln!(s, "![{}]({img}{})\n", f.title, f.file);
                }
                Err(e) => {
                    let _ = writeln!(s, "- {} not drawn: {e}\n", f.file);
                }
            }
        }
    }
    let failures: Vec<String> = r
        .rows
        .iter()
        .filter_map(|row| {
            Some(format!(
                "{} / {}: {} of {} runs failed, first: {}",
                row.point,
                row.subject,
                row.failed.len(),
                row.failed.len() + row.ok,
                row.failed.first()?
            ))
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(s, "{h} Failed runs\n");
        for f in failures {
            let _ = writeln!(s, "- {f}");
        }
        s.push('\n');
    }
    s
}

/// `summary.md` of a result directory.
pub fn summary(r: &Rendered) -> String {
    let m = &r.meta;
    let mut s = format!("# {}\n\n{}\n\n", m.title(), m.suite.def().intro);
    if !r.text.headline.is_empty() {
        let _ = writeln!(s, "**In short:** {}\n", r.text.headline);
    }
    let _ = writeln!(
        s,
        "- machine: {} CPUs, {}, kernel {}",
        m.machine.nproc, m.machine.cpu, m.machine.kernel
    );
    let _ = writeln!(s, "- command: `{}`", m.command);
    let _ = writeln!(
        s,
        "- started {}{}",
        date(m.started),
        m.minutes()
            .map(|x| format!(", {x:.1} min"))
            .unwrap_or_default()
    );
    for x in common_settings(m, &r.rows).iter().chain(&r.text.settings) {
        let _ = writeln!(s, "- {x}");
    }
    if !m.versions.is_empty() {
        let _ = writeln!(s, "- peer versions: {}", m.versions.join("; "));
    }
    s.push_str("\nNotes:\n\n");
    for x in notes(r) {
        let _ = writeln!(s, "- {x}");
    }
    s.push('\n');
    s.push_str(&body(r, "##", ""));
    s
}

/// PASS and FAIL counts in target lines.
fn verdicts(targets: &[String]) -> (usize, usize) {
    let count = |w: &str| targets.iter().map(|t| t.matches(w).count()).sum::<usize>();
    (count("PASS"), count("FAIL"))
}

/// BENCHMARKS.md.
pub fn benchmarks(
    rendered: &[Rendered],
    kept: &[Kept],
    missing: &[String],
    paths: &ReportPaths,
) -> String {
    let mut s = String::from("# poolcap benchmarks\n\n");
    s.push_str(
        "Generated by `poolcap bench report` from the latest result directory of every suite \
         (`bench/results/SUITE-YYYYMMDD-HHMMSS/`, not committed: each holds `raw.jsonl`, \
         `results.csv`, `summary.md` and the figures); do not edit by hand.\n\n",
    );
    let _ = writeln!(
        s,
        "Regenerate everything (as root, on an otherwise idle machine):\n\n```sh\n\
         cargo build --release -p poolcap\n{}\n```\n",
        regenerate_command(rendered, paths)
    );
    s.push_str(
        "or rebuild this file from the existing results without rerunning: `poolcap bench \
         report`. One suite: `poolcap bench SUITE [--quick] [--runs N] [--rps]`.\n\n",
    );
    if let Some(m) = rendered.first().map(|r| &r.meta) {
        let _ = writeln!(
            s,
            "Machine: {} CPUs ({}), kernel {}. Peers: {}.\n",
            m.machine.nproc,
            m.machine.cpu,
            m.machine.kernel,
            if m.versions.is_empty() {
                "–".to_owned()
            } else {
                m.versions.join("; ")
            }
        );
    }
    let _ = writeln!(
        s,
        "## Method\n\n\
         - Every suite builds its own lab: two network namespaces joined by a veth pair (1 or 2 \
           queues), static neighbours, so the only frames on the wire are the generator's and \
           counts are exact. The generator (`poolcap gen`) runs on CPU {GEN_CPU}, the tool under \
           test on CPU {TOOL_CPU} unless a suite says otherwise. This is a 2-core VM: whatever a \
           tool does on CPU {GEN_CPU} competes with the sender.\n\
         - On veth the kernel's receive work — including copying each frame into a capture \
           ring — runs on the sender's CPU, so it shows as a lower sender rate, not as the \
           tool's CPU; `--rps` moves it to the tool's CPU (as a NIC interrupt pinned to the \
           capture core would). Each suite says which setting it ran in.\n\
         - Each point runs every subject in turn, several times, interleaved (A B C A B C), so \
           drift hits all alike; tables give the median and the min–max over the runs. Before \
           each run the rig waits (up to 60 s) until at most {:.0}% of all CPUs are busy.\n\
         - loss = (offered − captured) / offered, where captured is what is in the written \
           file for writing runs and the tool's own count otherwise. Tool CPU = run time of \
           all its threads (each process's CLOCK_PROCESS_CPUTIME_ID, nanoseconds, threads \
           that ended during the run included; before 2026-12-06 the live threads' \
           schedstat, which left ended threads out, and utime + stime in 10 ms ticks in \
           suites run before 2026-11-26 03:00 UTC) between its ready line and 1.2 s after the \
           sender finished.\n\
         - \"poolcap / best peer\" tables give, at each point, poolcap's median over the best \
           peer's median on that metric (lower is better for loss and CPU, higher for rates); \
           `both 0` means neither lost anything, `∞` that only poolcap did. The plain fanout \
           reader (`poolcap --inplace`) counts as a peer.\n\
         - Numbers from quick runs are few and short: differences of a few percent in rates \
           or CPU are within the noise (see the min–max ranges).\n",
        QUIET_BELOW * 100.0
    );
    s.push_str(
        "## Overview\n\n| suite | reproduces | in short | run | targets | failed runs |\n\
         |---|---|---|---|---|---|\n",
    );
    for suite in Suite::ALL {
        if let Some(k) = kept.iter().find(|k| k.suite == suite) {
            let _ = writeln!(s, "{}", k.row);
            continue;
        }
        let Some(r) = rendered.iter().find(|r| r.meta.suite == suite) else {
            continue;
        };
        let m = &r.meta;
        let (pass, fail) = verdicts(&r.text.targets);
        let failed: usize = r.rows.iter().map(|x| x.failed.len()).sum();
        let runs: usize = r.rows.iter().map(|x| x.failed.len() + x.ok).sum();
        let _ = writeln!(
            s,
            "| [{}](#{}) | {} | {} | {}, {} runs/point, rps {}, {} | {} | {} of {} |",
            m.suite.name(),
            anchor(m.suite),
            title(m.suite),
            md_cell(&r.text.headline),
            m.scale.name(),
            m.runs,
            if m.rps { "on" } else { "off" },
            m.minutes().map_or("?".into(), |x| format!("{x:.1} min")),
            if pass + fail == 0 {
                "–".to_owned()
            } else {
                format!("{pass} pass, {fail} fail")
            },
            failed,
            runs
        );
    }
    for m in missing {
        let _ = writeln!(s, "\nNot included: {m}");
    }
    s.push('\n');
    let img = format!("{}/", paths.figures.display());
    for suite in Suite::ALL {
        if let Some(k) = kept.iter().find(|k| k.suite == suite) {
            s.push_str(&k.section);
        } else if let Some(r) = rendered.iter().find(|r| r.meta.suite == suite) {
            s.push_str(&section(r, &img));
        }
    }
    s
}

/// A suite's overview row and section kept from the previous BENCHMARKS.md, for a suite
/// with no result directory here: a report rebuilt after rerunning some suites keeps the
/// others' last results instead of dropping them. Each section says when it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub suite: Suite,
    /// The overview table's row, as it was.
    pub row: String,
    /// From its `## suite:` heading to the next `## ` heading.
    pub section: String,
}

impl Kept {
    /// `suite`'s row and section in a previous BENCHMARKS.md, if it has both.
    pub fn from_previous(text: &str, suite: Suite) -> Option<Kept> {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| [{}](#", suite.name())))?;
        let head = format!("## {}: ", suite.name());
        let start = text.find(&format!("\n{head}"))? + 1;
        let end = text[start + head.len()..]
            .find("\n## ")
            .map_or(text.len(), |i| start + head.len() + i + 1);
        Some(Kept {
            suite,
            row: row.to_owned(),
            section: text[start..end].to_owned(),
        })
    }

    /// The figures (`NAME.png` files) the section links to.
    pub fn figures(&self) -> Vec<&str> {
        figure_links(&self.section)
    }
}

/// The `.png` file names a markdown text links to (`](dir/NAME.png)`).
pub fn figure_links(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|t| t.split(')').next())
        .filter(|l| l.ends_with(".png"))
        .map(|l| l.rsplit('/').next().unwrap_or(l))
        .collect()
}

/// The `bench all` command that produced these results (the one given, or the one every run
/// recorded), or the documented default.
fn regenerate_command(rendered: &[Rendered], paths: &ReportPaths) -> String {
    if !paths.command.is_empty() {
        return paths.command.clone();
    }
    let mut cmds: Vec<&str> = rendered.iter().map(|r| r.meta.command.as_str()).collect();
    cmds.dedup();
    match cmds.as_slice() {
        [one] if one.contains(" bench all") => (*one).to_owned(),
        _ => "target/release/poolcap bench all --quick".to_owned(),
    }
}

fn anchor(suite: Suite) -> String {
    let t = format!("{}-{}", suite.name(), title(suite));
    t.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

/// One suite's section of BENCHMARKS.md.
fn section(r: &Rendered, img: &str) -> String {
    let m = &r.meta;
    let mut s = format!(
        "## {}: {}\n\n{}\n\n",
        m.suite.name(),
        title(m.suite),
        m.suite.def().intro
    );
    if !r.text.headline.is_empty() {
        let _ = writeln!(s, "**In short:** {}\n", r.text.headline);
    }
    let dir = r
        .dir
        .file_name()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "- run: {}, {}{}, {} runs per point and subject, rps {}; `{}`; results in \
         `bench/results/{dir}/`",
        date(m.started),
        m.scale.name(),
        m.minutes()
            .map(|x| format!(" ({x:.1} min)"))
            .unwrap_or_default(),
        m.runs,
        if m.rps { "on" } else { "off" },
        m.command
    );
    if m.queues > 1 {
        let _ = writeln!(s, "- lab: {} queues", m.queues);
    }
    for x in r.text.settings.iter().chain(&notes(r)) {
        let _ = writeln!(s, "- {x}");
    }
    s.push('\n');
    s.push_str(&body(r, "###", img));
    if m.scale == Scale::Smoke {
        s.push_str("(smoke run: one tiny point, for tests only)\n\n");
    }
    s
}

/// Whether `path` looks like the repository root (has a Cargo.toml with a workspace).
pub fn is_repo_root(path: &Path) -> bool {
    std::fs::read_to_string(path.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_previous_section_is_kept_whole_with_its_row_and_figures() {
        let old = "# poolcap benchmarks\n\n## Overview\n\n| suite | x |\n|---|---|\n\
                   | [gen](#gen-a) | g |\n| [burst](#burst-b) | b |\n\n\
                   ## gen: A\n\ntext\n\n### Results\n\n![f](docs/bench/gen-x.png)\n\n\
                   ## burst: B\n\nmore ![l](docs/bench/burst-loss.png)\n";
        let gen = Kept::from_previous(old, Suite::Gen).expect("gen kept");
        assert_eq!(gen.row, "| [gen](#gen-a) | g |");
        assert_eq!(
            gen.section,
            "## gen: A\n\ntext\n\n### Results\n\n![f](docs/bench/gen-x.png)\n\n"
        );
        assert_eq!(gen.figures(), vec!["gen-x.png"]);
        let burst = Kept::from_previous(old, Suite::Burst).expect("burst kept");
        assert!(burst.section.starts_with("## burst: B") && burst.section.ends_with(".png)\n"));
        assert_eq!(Kept::from_previous(old, Suite::Rates), None);
        assert_eq!(figure_links(old), vec!["gen-x.png", "burst-loss.png"]);
    }

    #[test]
    fn counts_verdicts_and_builds_anchors() {
        let t = vec![
            "a: 1 of 2 points — x: 1 PASS; y: 2 FAIL".to_owned(),
            "b: PASS".to_owned(),
        ];
        assert_eq!(verdicts(&t), (2, 1));
        assert_eq!(
            anchor(Suite::Backends),
            "backends-af_xdp-copy-mode-on-veth-vs-af_packet"
        );
        assert_eq!(date(0), "1970-01-01 00:00 UTC");
    }
}
