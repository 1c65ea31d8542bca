//! `poolcap lab`: build, list and remove labs (test hosts in network namespaces joined by veth
//! pairs) from the shell, so a capture can be tried by hand on a wire where every frame is
//! known. `up` keeps the lab after poolcap exits and prints what to type next; `down` removes
//! it. Errors about the request itself (a bad name, 0 queues) are usage errors (exit 2).

use crate::cli::usage;
use clap::{Args, Subcommand};
use poolcap_lab::{Lab, LabError, LabInfo, LabSpec, Role};

/// Arguments of `poolcap lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Debug, Subcommand)]
enum LabCommand {
    /// Build a lab and keep it until `poolcap lab down`.
    Up {
        /// Lab name (1-20 of A-Z a-z 0-9 _ -); namespaces are poolcap-NAME-{sender,probe,sink}.
        #[arg(long, default_value = "lab")]
        name: String,
        /// Receive and transmit queues per interface (1-64).
        #[arg(long, default_value_t = 1)]
        queues: u16,
        /// 2 (sender, probe) or 3 (sender, probe, sink behind the probe).
        #[arg(long, default_value_t = 2)]
        hosts: u8,
        /// Print the lab as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a lab: all its namespaces, and with them its veths. A lab with processes still
    /// running inside is left as it is (they would keep it alive, unseen) unless --force.
    Down {
        /// Lab name.
        #[arg(long, default_value = "lab")]
        name: String,
        /// End the processes running inside first (SIGTERM, then SIGKILL after 2 s).
        #[arg(long)]
        force: bool,
    },
    /// List the labs that exist.
    Status {
        /// Print the labs as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `poolcap lab`.
pub fn run(args: LabArgs) -> anyhow::Result<()> {
    match args.command {
        LabCommand::Up {
            name,
            queues,
            hosts,
            json,
        } => {
            let spec = LabSpec {
                name,
                queues,
                hosts,
            };
            let info = Lab::up(&spec).map_err(lab_error)?.persist();
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print_up(&info);
            }
        }
        LabCommand::Down { name, force } => {
            Lab::down(&name, force).map_err(lab_error)?;
            println!("lab \"{name}\" removed");
        }
        LabCommand::Status { json } => {
            let labs = Lab::status().map_err(lab_error)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&labs)?);
            } else if labs.is_empty() {
                println!("no labs (build one with `poolcap lab up`)");
            } else {
                for (i, info) in labs.iter().enumerate() {
                    if i > 0 {
                        println!();
                    }
                    println!(
                        "lab \"{}\" ({} queues per interface)",
                        info.name, info.queues
                    );
                    print_hosts(info);
                }
            }
        }
    }
    Ok(())
}

/// A bad name, queue count or host count is the user's to fix: exit code 2.
fn lab_error(e: LabError) -> anyhow::Error {
    if e.is_invalid_spec() {
        usage(e.to_string())
    } else {
        e.into()
    }
}

fn print_up(info: &LabInfo) {
    println!(
        "lab \"{}\" is up ({} queues per interface)",
        info.name, info.queues
    );
    print_hosts(info);
    let find = |role| info.hosts.iter().find(|h| h.role == role);
    if let (Some(snd), Some(prb)) = (find(Role::Sender), find(Role::Probe)) {
        println!("\ntry:");
        println!("  ip netns exec {} tcpdump -ni {}", prb.netns, prb.iface);
        println!(
            "  ip netns exec {} poolcap gen -i {} --count 1000",
            snd.netns, snd.iface
        );
        println!("  ip netns exec {} ping -c 3 {}", snd.netns, prb.ip);
        println!("  ip -n {} -s link show dev {}", prb.netns, prb.iface);
    }
    println!("\nremove it with: poolcap lab down --name {}", info.name);
}

/// One line per interface, columns sized to the namespace names.
fn print_hosts(info: &LabInfo) {
    let w = info
        .hosts
        .iter()
        .map(|h| h.netns.len())
        .max()
        .unwrap_or(0)
        .max("namespace".len());
    println!(
        "  {:<9}  {:<w$}  {:<9}  {:<17}  ip",
        "role", "namespace", "interface", "mac"
    );
    for h in &info.hosts {
        println!(
            "  {:<9}  {:<w$}  {:<9}  {:<17}  {}/24",
            h.role.as_str(),
            h.netns,
            h.iface,
            h.mac,
            h.ip
        );
    }
}
