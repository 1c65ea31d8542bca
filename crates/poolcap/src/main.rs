//! The `poolcap` command: parses arguments, runs one subcommand, and alone decides the exit
//! code (0 success, 1 runtime failure, 2 bad usage or input).
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(poolcap::cli::main());
}
