//! The `corral` binary: parse the command line, run the chosen subcommand. Everything else lives
//! in the library so each subcommand can be tested without spawning a process.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match cli::Cli::parse().command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // `{:#}` prints the whole cause chain on one line, without a backtrace.
            eprintln!("corral: {error:#}");
            ExitCode::FAILURE
        }
    }
}
