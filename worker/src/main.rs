use std::process::ExitCode;

use clap::Parser;
use corral_worker::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => corral_worker::one_shot::run(args),
        Command::Serve(args) => {
            // The supervisor forwards the worker's stderr into its own log.
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .init();
            let options = args.engine_options();
            corral_worker::serve::run(args.model, args.socket, options)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("corral-worker: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
