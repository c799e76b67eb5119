use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use corral_worker::cli::{Cli, Command};
use corral_worker::distributed::{Group, Member};
use std::sync::Arc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => corral_worker::one_shot::run(args),
        Command::Describe(args) => describe(&args.paths, args.mmproj.as_deref()),
        Command::Serve(args) => {
            // The supervisor reads the worker's stderr through a pipe and forwards each line
            // into its own log, where colour codes would be noise; a worker run by hand on a
            // terminal keeps them. NO_COLOR (no-color.org) still wins, as in tracing's default.
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .with_writer(std::io::stderr)
                .with_ansi(colour)
                .init();
            serve(args)
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

/// Serves the supervisor, or, as a group's rank other than 0, steps with rank 0.
fn serve(args: corral_worker::cli::ServeArgs) -> anyhow::Result<()> {
    let mut options = args.engine_options();
    if let Some(parallel) = args.parallel {
        corral_worker::lockstep::beat_on_stdout();
        let group = Group::join(args.backend).context("joining the worker group")?;
        let member = Member {
            group: Arc::new(group),
            parallel,
        };
        let follows = member.group.rank() != 0;
        options.group = Some(member);
        if follows {
            corral_worker::serve::exit_with_parent();
            return corral_worker::engine::follow(args.model, options);
        }
    }
    corral_worker::serve::run(args.model, args.socket, options)
}

fn describe(
    paths: &[std::path::PathBuf],
    projector: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for path in paths {
        let description = match projector {
            Some(projector) => corral_worker::describe::describe_with_projector(path, projector),
            None => corral_worker::describe::describe(path),
        };
        serde_json::to_writer(&mut out, &description)?;
        writeln!(out)?;
    }
    Ok(())
}
