//! End-to-end tests that need root: each builds its own lab (network namespaces and veth
//! test hosts), sends traffic only there, and tears it down even when it fails.
//!
//! A custom harness (libtest-mimic) so that, without the privileges, every test is reported
//! as ignored with the reason instead of passing silently.

mod bench;
mod capture;
mod cli;
mod collectors;
mod common;
#[path = "../support/deploy.rs"]
mod deploy;
mod disk;
mod doctor;
mod export;
mod field;
mod forward;
mod forward_xdp;
mod gen;
mod hardening;
mod kafka;
mod lengths;
mod metrics;
#[path = "../support/mix.rs"]
mod mix;
mod offload;
mod privileges;
mod probe;
mod probe_faults;
mod probe_kernel;
mod replay;
mod service;
mod store;
mod xdp;

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = Vec::new();
    trials.extend(gen::trials());
    trials.extend(replay::trials());
    trials.extend(lengths::trials());
    trials.extend(capture::trials());
    trials.extend(field::trials());
    trials.extend(disk::trials());
    trials.extend(offload::trials());
    trials.extend(xdp::trials());
    trials.extend(probe::trials());
    trials.extend(probe_faults::trials());
    trials.extend(probe_kernel::trials());
    trials.extend(export::trials());
    trials.extend(metrics::trials());
    trials.extend(collectors::trials());
    trials.extend(hardening::trials());
    trials.extend(kafka::trials());
    trials.extend(bench::trials());
    trials.extend(cli::trials());
    trials.extend(doctor::trials());
    trials.extend(forward::trials());
    trials.extend(forward_xdp::trials());
    trials.extend(privileges::trials());
    trials.extend(store::trials());
    trials.extend(service::trials());
    if let Err(why) = poolcap_sys::privilege::check_lab() {
        eprintln!("skipping {} root tests: {why}", trials.len());
        trials = trials
            .into_iter()
            .map(|t| t.with_ignored_flag(true))
            .collect();
    }
    libtest_mimic::run(&args, trials).exit();
}
