//! `capture --config FILE`: a capture's options in a TOML file, so a service (the systemd
//! unit in deploy/systemd) keeps its settings in /etc/poolcap/IFACE.toml rather than in a
//! unit's command line.
//!
//! A key is an option's long name (`interface`, `snaplen`, `stats-json`); an option with a
//! short form only goes by its name in `poolcap capture --help`'s terms (`write`, `count`,
//! `buffer`, `rotate-size`, `rotate-seconds`, `rotate-files`, `post-rotate`); `filter` is the
//! filter expression. Switches take `true` or `false`, lists (`cpus`) an array or a string.
//! The file is turned into the options it stands for and parsed by the same parser as the
//! command line, so both are checked alike; an option given on the command line wins over the
//! file. An unknown key is an error naming it.

use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

/// The key of the filter expression (the positional arguments).
const FILTER: &str = "filter";

/// Options that have no place in the file.
const NOT_IN_FILE: &[&str] = &["config", "help", "version"];

/// The key `arg` goes by in the file: its long name, else its id with dashes.
fn key_of(arg: &clap::Arg) -> String {
    arg.get_long()
        .map_or_else(|| arg.get_id().as_str().replace('_', "-"), str::to_owned)
}

/// A TOML scalar as an option value.
fn scalar(key: &str, v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(x) => Ok(x.to_string()),
        _ => Err(format!("`{key}`: give a string or a number")),
    }
}

/// The command-line words a file's settings stand for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Words {
    /// The options, to go before the command line's own.
    pub options: Vec<OsString>,
    /// The filter expression's words, to go last (a capture takes the filter last).
    pub filter: Vec<OsString>,
}

/// The words the file's settings stand for, except those of options the command line
/// (`given`) sets itself.
pub(super) fn words(
    path: &Path,
    text: &str,
    command: &Command,
    given: &ArgMatches,
) -> Result<Words, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("{}: {}", path.display(), e.message()))?;
    let mut options = Vec::new();
    let mut filter = Vec::new();
    for (key, value) in &table {
        let arg = command
            .get_arguments()
            .find(|a| key_of(a) == *key && !NOT_IN_FILE.contains(&a.get_id().as_str()))
            .ok_or_else(|| format!("{}: unknown key `{key}`", path.display()))?;
        if given.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
            continue;
        }
        let bad = |why: String| format!("{}: {why}", path.display());
        if key == FILTER {
            filter = match value {
                toml::Value::Array(words) => words
                    .iter()
                    .map(|w| scalar(key, w))
                    .collect::<Result<_, _>>()
                    .map_err(bad)?,
                v => vec![scalar(key, v).map_err(bad)?],
            };
            continue;
        }
        let flag = arg.get_long().map_or_else(
            || format!("-{}", arg.get_short().unwrap_or('?')),
            |l| format!("--{l}"),
        );
        if !arg.get_action().takes_values() {
            match value {
                toml::Value::Boolean(true) => options.push(flag),
                toml::Value::Boolean(false) => {}
                _ => return Err(bad(format!("`{key}`: give true or false"))),
            }
            continue;
        }
        let value = match value {
            toml::Value::Array(items) => items
                .iter()
                .map(|i| scalar(key, i))
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad)?
                .join(","),
            v => scalar(key, v).map_err(bad)?,
        };
        // `--flag=value`: a value that starts with a dash stays a value.
        if flag.starts_with("--") {
            options.push(format!("{flag}={value}"));
        } else {
            options.extend([flag, value]);
        }
    }
    let os = |words: Vec<String>| words.into_iter().map(OsString::from).collect();
    Ok(Words {
        options: os(options),
        filter: os(filter),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory;

    fn capture_command() -> Command {
        Cli::command()
            .find_subcommand("capture")
            .expect("capture")
            .clone()
    }

    /// The options, then the filter words, `text` stands for under `capture CLI`.
    fn words_for(text: &str, cli: &[&str]) -> Result<Vec<String>, String> {
        let mut argv = vec!["poolcap", "capture"];
        argv.extend(cli);
        let all = Cli::command().try_get_matches_from(argv).expect("parse");
        let given = all.subcommand_matches("capture").expect("capture");
        words(Path::new("c.toml"), text, &capture_command(), given).map(|w| {
            w.options
                .into_iter()
                .chain(w.filter)
                .map(|s| s.into_string().expect("utf-8"))
                .collect()
        })
    }

    #[test]
    fn keys_are_the_long_flags_and_the_short_options_names() {
        let w = words_for(
            "interface = \"eth0\"\nwrite = \"/var/lib/poolcap/x.pcap\"\nrotate-size = 100\n\
             snaplen = 96\nno-promiscuous-mode = true\nquiet = false\ncpus = [0, 1]\n\
             filter = \"udp port 53\"\n",
            &["--config", "c.toml"],
        )
        .expect("words");
        assert_eq!(
            w,
            [
                "--cpus=0,1",
                "--interface=eth0",
                "--no-promiscuous-mode",
                "-C",
                "100",
                "--snaplen=96",
                "-w",
                "/var/lib/poolcap/x.pcap",
                "udp port 53"
            ]
        );
    }

    #[test]
    fn the_command_line_wins() {
        let w = words_for(
            "interface = \"eth0\"\nsnaplen = 96\nfilter = \"udp\"\n",
            &["--config", "c.toml", "-s", "128", "-i", "eth1", "tcp"],
        )
        .expect("words");
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn an_unknown_key_or_a_wrong_type_is_named() {
        let e = words_for("interfce = \"eth0\"\n", &["-i", "x"]).expect_err("unknown");
        assert_eq!(e, "c.toml: unknown key `interfce`");
        let e = words_for("config = \"other.toml\"\n", &["-i", "x"]).expect_err("config");
        assert_eq!(e, "c.toml: unknown key `config`");
        let e = words_for("quiet = \"yes\"\n", &["-i", "x"]).expect_err("bool");
        assert_eq!(e, "c.toml: `quiet`: give true or false");
    }
}
