//! The control language of a running probe (`poolcap ctl SOCKET ...`): one command per
//! line, one reply line. Commands are parsed and applied here as pure functions from the
//! running configuration to the next one, so an unknown command or rule name changes
//! nothing; the caller switches the probe's epoch only for a command that succeeded.

use std::time::Duration;

use crate::config::{Config, MIN_PERIOD};

/// A control command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `rule enable NAME` / `rule disable NAME`.
    Rule {
        /// Enable (true) or disable.
        enable: bool,
        /// Rule name.
        name: String,
    },
    /// `period DURATION`.
    Period(Duration),
    /// `reload`: read the configuration file again.
    Reload,
    /// `status`: the running rules and period, changing nothing.
    Status,
}

/// Parses one command line.
pub fn parse(line: &str) -> Result<Command, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["rule", verb @ ("enable" | "disable"), name] => Ok(Command::Rule {
            enable: *verb == "enable",
            name: (*name).to_string(),
        }),
        ["period", d] => {
            let p = humantime::parse_duration(d).map_err(|e| format!("period `{d}`: {e}"))?;
            if p < MIN_PERIOD {
                return Err(format!("period must be at least {MIN_PERIOD:?}"));
            }
            Ok(Command::Period(p))
        }
        ["reload"] => Ok(Command::Reload),
        ["status"] => Ok(Command::Status),
        _ => Err(format!(
            "unknown command `{}` (use: rule enable|disable NAME, period DURATION, reload, status)",
            line.trim()
        )),
    }
}

/// Applies a rule or period command to `running`: the next configuration and a description
/// of the change. Reload and status are the caller's (they need the file and the clock).
pub fn apply(running: &Config, cmd: &Command) -> Result<(Config, String), String> {
    let mut next = running.clone();
    match cmd {
        Command::Rule { enable, name } => {
            let rule = next
                .rule_mut(name)
                .ok_or_else(|| format!("no rule named `{name}`"))?;
            rule.enabled = *enable;
            let what = if *enable { "enabled" } else { "disabled" };
            Ok((next, format!("rule {name} {what}")))
        }
        Command::Period(p) => {
            next.period = *p;
            Ok((next, format!("period {}", humantime::format_duration(*p))))
        }
        Command::Reload | Command::Status => Err("not a rule or period command".into()),
    }
}

/// One line describing the running configuration.
pub fn status(c: &Config) -> String {
    let rules: Vec<String> = c
        .rules
        .iter()
        .map(|r| format!("{}{}", r.name, if r.enabled { "" } else { " (disabled)" }))
        .collect();
    format!(
        "period {}; rules: {}",
        humantime::format_duration(c.period),
        rules.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse as parse_config;
    use std::path::Path;

    fn cfg() -> Config {
        parse_config(
            Path::new("t.toml"),
            "period = \"10s\"\n[[rule]]\nname = \"web\"\nfilter = \"tcp\"\nactions = [\"count\"]\n",
        )
        .unwrap()
    }

    #[test]
    fn commands_change_only_what_they_name() {
        let c = cfg();
        let (n, what) = apply(&c, &parse("rule disable web").unwrap()).unwrap();
        assert!(!n.rules[0].enabled);
        assert_eq!(what, "rule web disabled");
        let (n, what) = apply(&c, &parse("period 5s").unwrap()).unwrap();
        assert_eq!(n.period, Duration::from_secs(5));
        assert_eq!(what, "period 5s");
        assert_eq!(status(&c), "period 10s; rules: web");
    }

    #[test]
    fn unknown_commands_and_rules_are_refused() {
        let c = cfg();
        assert!(parse("rule toggle web")
            .unwrap_err()
            .contains("unknown command"));
        assert!(parse("period never").unwrap_err().contains("period"));
        assert!(parse("period 1ms").unwrap_err().contains("at least"));
        assert!(parse("").is_err());
        let e = apply(&c, &parse("rule enable nope").unwrap()).unwrap_err();
        assert_eq!(e, "no rule named `nope`");
        assert_eq!(parse("reload").unwrap(), Command::Reload);
    }
}
