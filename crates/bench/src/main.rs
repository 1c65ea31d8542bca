//! The `poolcap-bench` command: the measuring rig (`poolcap-bench SUITE`), the simulator
//! (`poolcap-bench sim`), bench results against the loss model (`poolcap-bench validate`)
//! and the rig's own subjects (`poolcap-bench peer`). `poolcap bench`, `poolcap sim` and
//! `poolcap predict --validate` run it; it measures the `poolcap` beside it.
#![forbid(unsafe_code)]

mod cli;

fn main() {
    std::process::exit(cli::main());
}
