use std::process::ExitCode;

use clap::Parser;
use corral_worker::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => corral_worker::one_shot::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("corral-worker: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
