//! `poolcap doctor`: reads (never changes) what decides capture loss on this machine and
//! prints each finding with its evidence and the command that would fix it. The checks live
//! in `poolcap-doctor` ([`poolcap_doctor::checks`]); this module only parses and prints.

use clap::Args;
use poolcap_doctor::checks::{self, Finding, Status, Target};
use poolcap_doctor::system::{parse_cpu_list, RealSystem};

use crate::cli::usage;

/// Arguments of `poolcap doctor`.
#[derive(Debug, Args)]
#[command(
    after_help = "Reads sysctls, /sys and `ethtool -g/-l/-k/-i`; needs no root and \
changes nothing. Run it in the namespace of the interface (ip netns exec NS poolcap doctor -i IF)."
)]
pub struct DoctorArgs {
    /// The capture interface (without it, only the machine-wide checks).
    #[arg(short = 'i', long = "interface")]
    iface: Option<String>,
    /// CPUs the capture threads will be pinned to (as `capture --cpus`), to check IRQ
    /// affinity and RPS against (e.g. 1 or 0-3).
    #[arg(long)]
    cpus: Option<String>,
    /// Print a JSON list of findings (check, status, evidence, why, fix).
    #[arg(long)]
    json: bool,
}

fn print_text(findings: &[Finding]) {
    for f in findings {
        println!("[{:<4}] {}: {}", f.status.name(), f.check, f.evidence);
        if f.status != Status::Ok {
            println!("       why: {}", f.why);
            println!("       fix: {}", f.fix);
        }
    }
    let n = |s: Status| findings.iter().filter(|f| f.status == s).count();
    println!(
        "{} checks: {} ok, {} warn, {} bad",
        findings.len(),
        n(Status::Ok),
        n(Status::Warn),
        n(Status::Bad)
    );
}

/// Runs `poolcap doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<()> {
    if let Some(i) = &args.iface {
        if i.contains('/') || !std::path::Path::new(&format!("/sys/class/net/{i}")).exists() {
            return Err(usage(format!(
                "-i: no interface `{i}` in this network namespace"
            )));
        }
    }
    let capture_cpus =
        match &args.cpus {
            Some(c) => Some(parse_cpu_list(c).filter(|v| !v.is_empty()).ok_or_else(|| {
                usage(format!("--cpus: `{c}` is not a CPU list (e.g. 1 or 0-3)"))
            })?),
            None => None,
        };
    let target = Target {
        iface: args.iface,
        capture_cpus,
    };
    let findings = checks::run_all(&RealSystem, &target);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&findings)?);
    } else {
        print_text(&findings);
    }
    Ok(())
}
