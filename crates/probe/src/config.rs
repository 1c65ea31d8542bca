//! The probe's configuration file: a report `period` and a list of rules, in TOML.
//!
//! ```toml
//! period = "10s"
//! flow_limit = 65536          # optional: flows (and alert keys) kept per rule and worker
//!
//! [[rule]]
//! name = "web"
//! filter = "tcp port 80"
//! actions = ["count", "flows"]
//! top = 10                     # optional: report the 10 largest flows only
//!
//! [[rule]]
//! name = "syn-flood"
//! filter = "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn"
//! actions = ["alert"]
//! alert = { key = "dst", rate = 1000 }
//! ```
//!
//! Every rule counts packets and bytes (the `count` action may be listed, it is implied).
//! Parsing checks everything a running probe would otherwise trip over later (unknown keys
//! and actions, duplicate names, filters libpcap rejects), so a configuration that loads
//! runs; every error names the file, the line and, where there is one, the rule.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

/// Flows (and alert keys) kept per rule and worker when the file does not say.
pub const DEFAULT_FLOW_LIMIT: usize = 65_536;

/// The shortest report period accepted: below it, a period is mostly hand-over.
pub const MIN_PERIOD: Duration = Duration::from_millis(100);

/// A configuration that cannot be used, with where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {}{}", file.display(), rule.as_ref().map(|r| format!("rule `{}`: ", printable(r))).unwrap_or_default(), printable(message))]
pub struct ConfigError {
    /// The configuration file.
    pub file: PathBuf,
    /// 1-based line of the offending entry.
    pub line: usize,
    /// The rule it belongs to, if any.
    pub rule: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// What a flow ranking orders by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopBy {
    /// Wire bytes.
    Bytes,
    /// Packets.
    Packets,
}

/// The `flows` action: a per-5-tuple table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowsSpec {
    /// Report only the N largest flows (all when None).
    pub top: Option<usize>,
    /// Largest by what.
    pub by: TopBy,
}

/// Which address an alert counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKey {
    /// Destination host.
    Dst,
    /// Source host.
    Src,
}

impl AlertKey {
    /// The name used in the file and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Dst => "dst",
            Self::Src => "src",
        }
    }
}

/// The `alert` action: an event when one key's matching packets exceed `rate` per second,
/// averaged over the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertSpec {
    /// What a key is.
    pub key: AlertKey,
    /// Packets per second above which a key raises an alert.
    pub rate: u64,
}

/// One rule: a filter and what to do with the packets it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Unique name.
    pub name: String,
    /// tcpdump filter expression, run on the stored frame as `tcpdump -r` does.
    pub filter: String,
    /// Disabled rules see no packets.
    pub enabled: bool,
    /// Per-flow table.
    pub flows: Option<FlowsSpec>,
    /// Frame-size histogram.
    pub sizes: bool,
    /// Rate alert per key.
    pub alert: Option<AlertSpec>,
    /// Counted by `poolcap probe --in-kernel`'s eBPF program, so the workers skip it; set
    /// by the probe, never by the file.
    pub in_kernel: bool,
}

/// A whole, valid configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Report period.
    pub period: Duration,
    /// Flows (and alert keys) kept per rule and worker.
    pub flow_limit: usize,
    /// Rules, in file order.
    pub rules: Vec<Rule>,
}

impl Config {
    /// The rule called `name`.
    pub fn rule_mut(&mut self, name: &str) -> Option<&mut Rule> {
        self.rules.iter_mut().find(|r| r.name == name)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    period: Spanned<String>,
    flow_limit: Option<Spanned<usize>>,
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    filter: Spanned<String>,
    #[serde(default = "yes")]
    enabled: bool,
    actions: Spanned<Vec<String>>,
    top: Option<Spanned<usize>>,
    top_by: Option<Spanned<String>>,
    alert: Option<Spanned<RawAlert>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlert {
    key: String,
    rate: u64,
}

fn yes() -> bool {
    true
}

/// `s` with control characters escaped (`\u{1b}`): what the file holds may not drive the
/// terminal an error is shown on.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Reads and checks the configuration file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.to_owned(),
        line: 0,
        rule: None,
        message: format!("cannot read: {e}"),
    })?;
    parse(path, &text)
}

/// Parses and checks configuration text; `file` only names it in errors.
pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
    let err = |span: Range<usize>, rule: Option<&str>, message: String| ConfigError {
        file: file.to_owned(),
        line: line_of(text, span.start),
        rule: rule
            .map(str::to_owned)
            .or_else(|| rule_around(text, span.start)),
        message,
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        err(
            e.span().unwrap_or(0..0),
            None,
            e.message().trim().to_string(),
        )
    })?;
    let period = humantime::parse_duration(raw.period.get_ref()).map_err(|e| {
        err(
            raw.period.span(),
            None,
            format!("period `{}`: {e}", raw.period.get_ref()),
        )
    })?;
    if period < MIN_PERIOD {
        return Err(err(
            raw.period.span(),
            None,
            format!("period must be at least {MIN_PERIOD:?}"),
        ));
    }
    let flow_limit = match raw.flow_limit {
        Some(l) if *l.get_ref() == 0 => {
            return Err(err(l.span(), None, "flow_limit must be at least 1".into()))
        }
        Some(l) => l.into_inner(),
        None => DEFAULT_FLOW_LIMIT,
    };
    let mut rules: Vec<Rule> = Vec::with_capacity(raw.rule.len());
    for spanned in raw.rule {
        let span = spanned.span();
        let r = spanned.into_inner();
        let name = r.name.clone();
        let here = |s: Range<usize>, m: String| err(s, Some(&name), m);
        if name.trim().is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(here(
                span,
                "a rule name must be non-empty, without spaces or control characters".into(),
            ));
        }
        if rules.iter().any(|o| o.name == name) {
            return Err(here(span, "a rule of this name comes earlier".into()));
        }
        check_filter(r.filter.get_ref()).map_err(|m| here(r.filter.span(), m))?;
        let (mut count, mut flows, mut sizes, mut alert) = (false, false, false, false);
        for a in r.actions.get_ref() {
            let seen = match a.as_str() {
                "count" => &mut count,
                "flows" => &mut flows,
                "sizes" => &mut sizes,
                "alert" => &mut alert,
                other => {
                    return Err(here(
                        r.actions.span(),
                        format!("unknown action `{other}` (use count, flows, sizes, alert)"),
                    ))
                }
            };
            *seen = true;
        }
        if r.actions.get_ref().is_empty() {
            return Err(here(
                r.actions.span(),
                "give at least one action (count, flows, sizes, alert)".into(),
            ));
        }
        let by = match r.top_by.as_ref().map(|b| (b.get_ref().as_str(), b.span())) {
            None | Some(("bytes", _)) => TopBy::Bytes,
            Some(("packets", _)) => TopBy::Packets,
            Some((other, s)) => {
                return Err(here(s, format!("top_by `{other}`: use bytes or packets")))
            }
        };
        if let Some(t) = r.top.as_ref().filter(|_| !flows) {
            return Err(here(t.span(), "`top` needs the flows action".into()));
        }
        if let Some(t) = r.top.as_ref().filter(|t| *t.get_ref() == 0) {
            return Err(here(t.span(), "`top` must be at least 1".into()));
        }
        let alert_spec = match (alert, r.alert) {
            (false, None) => None,
            (true, None) => {
                return Err(here(
                    r.actions.span(),
                    "the alert action needs `alert = { key = \"dst\", rate = N }`".into(),
                ))
            }
            (false, Some(a)) => {
                return Err(here(
                    a.span(),
                    "`alert` is set but the actions do not list alert".into(),
                ))
            }
            (true, Some(a)) => {
                let s = a.span();
                let a = a.into_inner();
                let key = match a.key.as_str() {
                    "dst" => AlertKey::Dst,
                    "src" => AlertKey::Src,
                    other => return Err(here(s, format!("alert key `{other}`: use dst or src"))),
                };
                if a.rate == 0 {
                    return Err(here(s, "alert rate must be at least 1".into()));
                }
                Some(AlertSpec { key, rate: a.rate })
            }
        };
        rules.push(Rule {
            name: r.name,
            filter: r.filter.into_inner(),
            enabled: r.enabled,
            flows: flows.then_some(FlowsSpec {
                top: r.top.map(Spanned::into_inner),
                by,
            }),
            sizes,
            alert: alert_spec,
            in_kernel: false,
        });
    }
    Ok(Config {
        period,
        flow_limit,
        rules,
    })
}

/// Compiles `expr` as libpcap would for `tcpdump -r` on an Ethernet file.
pub fn compile_filter(expr: &str) -> Result<pcap::BpfProgram, String> {
    pcap::Capture::dead(pcap::Linktype::ETHERNET)
        .and_then(|c| c.compile(expr, true))
        .map_err(|e| format!("filter `{expr}`: {e}"))
}

fn check_filter(expr: &str) -> Result<(), String> {
    compile_filter(expr).map(drop)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The name of the `[[rule]]` table that holds byte `offset`, for errors the TOML layer
/// reports before the rule is whole.
fn rule_around(text: &str, offset: usize) -> Option<String> {
    let head = text[..offset.min(text.len())].rfind("[[rule]]")?;
    let body = &text[head + "[[rule]]".len()..];
    let end = body.find("\n[").unwrap_or(body.len());
    body[..end].lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "name").then(|| v.trim().trim_matches('"').to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Config, ConfigError> {
        parse(Path::new("probe.toml"), text)
    }

    #[test]
    fn the_documented_shape_parses() {
        let c = parse_str(
            "period = \"10s\"\n[[rule]]\nname = \"web\"\nfilter = \"tcp port 80\"\nactions = [\"count\", \"flows\"]\ntop = 10\n\n[[rule]]\nname = \"syn\"\nfilter = \"tcp\"\nenabled = false\nactions = [\"alert\", \"sizes\"]\nalert = { key = \"dst\", rate = 1000 }\n",
        )
        .unwrap();
        assert_eq!(c.period, Duration::from_secs(10));
        assert_eq!(c.flow_limit, DEFAULT_FLOW_LIMIT);
        assert_eq!(c.rules.len(), 2);
        assert_eq!(
            c.rules[0].flows,
            Some(FlowsSpec {
                top: Some(10),
                by: TopBy::Bytes
            })
        );
        assert!(c.rules[0].enabled && !c.rules[0].sizes);
        assert!(!c.rules[1].enabled && c.rules[1].sizes);
        assert_eq!(
            c.rules[1].alert,
            Some(AlertSpec {
                key: AlertKey::Dst,
                rate: 1000
            })
        );
    }

    #[test]
    fn errors_name_file_line_and_rule() {
        let text = "period = \"1s\"\n[[rule]]\nname = \"a\"\nfilter = \"udp\"\nactions = [\"count\"]\n[[rule]]\nname = \"web\"\nfilter = \"tcp port 80 and\"\nactions = [\"count\"]\n";
        let e = parse_str(text).unwrap_err();
        assert_eq!((e.line, e.rule.as_deref()), (8, Some("web")), "{e}");
        let shown = e.to_string();
        assert!(
            shown.starts_with("probe.toml:8: rule `web`: filter `tcp port 80 and`"),
            "{shown}"
        );

        let unknown = text.replace("tcp port 80 and", "tcp").replace(
            "actions = [\"count\"]\n[[rule]]\nname = \"web\"",
            "actions = [\"count\"]\n[[rule]]\nname = \"web\"\ncolour = 1",
        );
        let e = parse_str(&unknown).unwrap_err();
        assert_eq!((e.line, e.rule.as_deref()), (8, Some("web")), "{e}");
        assert!(e.message.contains("colour"), "{e}");

        let e =
            parse_str(&text.replace("[\"count\"]\n[[rule]]", "[\"cnt\"]\n[[rule]]")).unwrap_err();
        assert_eq!((e.line, e.rule.as_deref()), (5, Some("a")), "{e}");
        assert!(e.message.contains("unknown action `cnt`"), "{e}");
    }

    #[test]
    fn control_characters_in_names_are_refused_and_never_printed() {
        let text = "period = \"1s\"\n[[rule]]\nname = \"a\\u001b[2Jb\"\nfilter = \"udp\"\nactions = [\"count\"]\n";
        let e = parse_str(text).unwrap_err();
        let shown = e.to_string();
        assert!(shown.contains("control characters"), "{shown}");
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(shown.contains("a\\u{1b}[2Jb"), "{shown}");
    }

    #[test]
    fn bad_values_are_refused() {
        let base = |rule: &str| format!("period = \"1s\"\n[[rule]]\nname = \"r\"\n{rule}\n");
        let cases = [
            ("filter = \"udp\"\nactions = []", "at least one action"),
            (
                "filter = \"udp\"\nactions = [\"count\"]\ntop = 3",
                "needs the flows",
            ),
            ("filter = \"udp\"\nactions = [\"alert\"]", "needs `alert"),
            (
                "filter = \"udp\"\nactions = [\"alert\"]\nalert = { key = \"port\", rate = 5 }",
                "alert key",
            ),
            (
                "filter = \"udp\"\nactions = [\"flows\"]\ntop_by = \"age\"",
                "top_by",
            ),
        ];
        for (rule, want) in cases {
            let e = parse_str(&base(rule)).unwrap_err();
            assert!(e.message.contains(want), "{rule}: {e}");
            assert_eq!(e.rule.as_deref(), Some("r"), "{rule}: {e}");
        }
        let dup = "period = \"1s\"\n[[rule]]\nname = \"r\"\nfilter = \"udp\"\nactions = [\"count\"]\n[[rule]]\nname = \"r\"\nfilter = \"udp\"\nactions = [\"count\"]\n";
        let e = parse_str(dup).unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        let e = parse_str("period = \"soon\"\n").unwrap_err();
        assert_eq!((e.line, e.rule.as_deref()), (1, None), "{e}");
        let e = parse_str("period = \"1ms\"\n").unwrap_err();
        assert!(e.message.contains("at least"), "{e}");
        let e = load(Path::new("/nonexistent/probe.toml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/probe.toml"), "{e}");
    }
}
