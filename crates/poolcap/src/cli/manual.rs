//! `poolcap man` and `poolcap completions`: the manual pages and shell completion scripts,
//! generated from the same clap definition that parses the command line, so that they can
//! never describe options the program does not have. `./dev install` puts them where `man`
//! and the shells look (man pages in /usr/local/share/man/man1, bash completion in
//! /usr/share/bash-completion/completions).

use anyhow::Context as _;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::{usage, Cli};

/// Arguments of `poolcap man`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  poolcap man | man -l -              # read poolcap(1)
  poolcap man capture > poolcap-capture.1
  poolcap man --out-dir /usr/local/share/man/man1")]
pub struct ManArgs {
    /// The command whose page to print (poolcap-COMMAND(1)); without it, poolcap(1).
    #[arg(conflicts_with = "out_dir")]
    command: Option<String>,
    /// Write poolcap.1 and every poolcap-COMMAND.1 into DIR instead of printing one page.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<std::path::PathBuf>,
}

/// Arguments of `poolcap completions`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  poolcap completions bash > /usr/share/bash-completion/completions/poolcap
  poolcap completions zsh > \"${fpath[1]}/_poolcap\"
  poolcap completions fish > ~/.config/fish/completions/poolcap.fish")]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    shell: Shell,
}

/// The roff source of poolcap(1), or of poolcap-COMMAND(1).
pub fn man_page(command: Option<&str>) -> anyhow::Result<Vec<u8>> {
    let mut cli = Cli::command();
    // Building gives every subcommand its display name `poolcap-COMMAND`, the page's title.
    cli.build();
    let page = match command {
        None => cli,
        Some(name) => cli
            .find_subcommand(name)
            .filter(|c| c.get_name() != "help")
            .cloned()
            .ok_or_else(|| {
                usage(format!(
                    "no command `{name}`; commands: {}",
                    command_names().join(", ")
                ))
            })?,
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    Ok(out)
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "poolcap", &mut out);
    out
}

/// The subcommands, as typed (not the hidden ones the bench rig runs).
pub fn command_names() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_owned())
        .collect()
}

/// Writes `bytes` to standard output.
fn print(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(())
}

/// Runs `poolcap man`.
pub fn run_man(args: ManArgs) -> anyhow::Result<()> {
    let Some(dir) = args.out_dir else {
        return print(&man_page(args.command.as_deref())?);
    };
    let pages = std::iter::once(None).chain(command_names().into_iter().map(Some));
    for name in pages {
        let file = match &name {
            None => dir.join("poolcap.1"),
            Some(c) => dir.join(format!("poolcap-{c}.1")),
        };
        crate::outfile::write(&file, &man_page(name.as_deref())?)
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(())
}

/// Runs `poolcap completions`.
pub fn run_completions(args: CompletionsArgs) -> anyhow::Result<()> {
    print(&completions(args.shell))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page as `groff -man -Tutf8` renders it (plain text), or the roff source when
    /// groff is not installed.
    fn rendered(roff: &[u8]) -> String {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let Ok(mut child) = Command::new("groff")
            // No hyphenation, long lines: options stay whole on one line.
            .args([
                "-man",
                "-Tutf8",
                "-P",
                "-cbou",
                "-ww",
                "-rHY=0",
                "-rLL=300n",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        else {
            return String::from_utf8_lossy(roff).into_owned();
        };
        child
            .stdin
            .take()
            .expect("groff stdin")
            .write_all(roff)
            .expect("feed groff");
        let out = child.wait_with_output().expect("groff");
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && warnings.trim().is_empty(),
            "{warnings}"
        );
        // groff prints `-` as a hyphen (U+2010) and `\-` as a minus sign (U+2212).
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .replace(['\u{2010}', '\u{2212}'], "-")
    }

    #[test]
    fn man_pages_render_with_every_command_and_option() {
        let names = command_names();
        for c in ["capture", "gen", "check", "bench", "man", "completions"] {
            assert!(names.iter().any(|n| n == c), "{names:?}");
        }
        let top = rendered(&man_page(None).expect("poolcap(1)"));
        assert!(
            top.contains("poolcap - Lossless packet capture engine"),
            "{top}"
        );
        for c in &names {
            assert!(
                top.contains(&format!("poolcap-{c}(1)")),
                "{c} missing: {top}"
            );
        }
        let capture = rendered(&man_page(Some("capture")).expect("poolcap-capture(1)"));
        assert!(capture.contains("poolcap-capture"), "{capture}");
        for opt in ["--interface", "--pool", "--compress", "--fsync", "-Z"] {
            assert!(capture.contains(opt), "{opt} missing: {capture}");
        }
        let e = man_page(Some("nonsense")).expect_err("no such command");
        assert!(e.to_string().contains("commands: capture"), "{e}");
    }

    #[test]
    fn completion_scripts_name_every_command() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(completions(shell)).expect("utf-8");
            for c in command_names() {
                assert!(script.contains(&c), "{shell}: {c} missing");
            }
            assert!(script.contains("interface"), "{shell}");
        }
        let bash = completions(Shell::Bash);
        assert!(
            String::from_utf8_lossy(&bash).contains("complete -F _poolcap"),
            "no completion function registered"
        );
        // bash itself parses the script (syntax only, nothing runs).
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("poolcap.bash");
        std::fs::write(&file, &bash).expect("write");
        let st = std::process::Command::new("bash")
            .arg("-n")
            .arg(&file)
            .status()
            .expect("bash");
        assert!(st.success(), "bash -n rejects the completion script");
    }
}
