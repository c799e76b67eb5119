//! The `corral` binary: parse the command line, run the chosen subcommand. Everything else lives
//! in the library so each subcommand can be tested without spawning a process.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    match cli.log_format() {
        cli::LogFormat::Text => logs.init(),
        cli::LogFormat::Json => logs.json().init(),
    }
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // `{:#}` prints the whole cause chain on one line, without a backtrace.
            eprintln!("corral: {error:#}");
            ExitCode::FAILURE
        }
    }
}
