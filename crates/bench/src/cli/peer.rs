//! `poolcap-bench peer` (`poolcap bench-peer`): helpers the bench runs as subjects, hidden from help because they are
//! measuring tools, not features. `xdp-redirect -i IN -o OUT` attaches the bench's XDP
//! redirect floor ([`poolcap_bench::xdp_redirect`]) to IN, says `listening on` once it is
//! attached, holds it until SIGINT or SIGTERM, then prints how many frames it redirected.

use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::{Args, Subcommand};

use poolcap::cli::{flag_on, usage};
use poolcap_bench::xdp_redirect::XdpRedirect;

/// Arguments of `poolcap-bench peer`.
#[derive(Debug, Args)]
pub(super) struct BenchPeerArgs {
    #[command(subcommand)]
    peer: Peer,
}

#[derive(Debug, Subcommand)]
enum Peer {
    /// Redirect every frame from IN to OUT in XDP (the forwarding fast path's floor).
    XdpRedirect {
        /// The interface frames arrive on.
        #[arg(short = 'i', long = "interface", value_name = "IN")]
        inp: String,
        /// The interface they leave from.
        #[arg(short = 'o', long = "out", value_name = "OUT")]
        out: String,
    },
}

/// Runs `poolcap-bench peer`.
pub(super) fn run(args: BenchPeerArgs) -> anyhow::Result<()> {
    let Peer::XdpRedirect { inp, out } = args.peer;
    let index = |name: &str| {
        poolcap_sys::socket::ifindex(name).map_err(|_| usage(format!("no interface `{name}`")))
    };
    let (i, o) = (index(&inp)?, index(&out)?);
    let stop = flag_on(&[signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
    let redirect = XdpRedirect::attach(i, o)?;
    log::info!("listening on {inp}, redirecting to {out} in XDP");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("{} frames redirected", redirect.redirected()?);
    Ok(())
}
