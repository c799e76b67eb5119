//! The `corral` binary: parse the command line, run the chosen subcommand. Everything else lives
//! in the library so each subcommand can be tested without spawning a process.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use corral::log_tail::Tee;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let format = cli.log_format();
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    // Files, when configured, instead of stderr: a service manager's own capture of stderr
    // (launchd's StandardErrorPath) never rotates.
    let (writer, to_terminal) = match cli.log_files() {
        Some((dir, config)) => match corral::log_files::open(&dir, &config) {
            Ok(files) => (BoxMakeWriter::new(Tee(files)), false),
            Err(error) => {
                eprintln!("corral: {error:#}");
                return ExitCode::FAILURE;
            }
        },
        None => (
            BoxMakeWriter::new(Tee(std::io::stderr)),
            std::io::stderr().is_terminal(),
        ),
    };
    let colour = colour_logs(format, to_terminal, no_color);
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(writer)
        .with_ansi(colour);
    match format {
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

/// Whether log lines carry ANSI colour codes: only text logs that a person reads on a terminal.
/// launchd and systemd log files, `> file` and pipes get plain lines, JSON is for collectors, and
/// `NO_COLOR` (no-color.org) wins as in tracing's default, which an explicit `with_ansi` overrides.
fn colour_logs(format: cli::LogFormat, stderr_is_terminal: bool, no_color: bool) -> bool {
    format == cli::LogFormat::Text && stderr_is_terminal && !no_color
}

#[cfg(test)]
mod tests {
    use super::cli::LogFormat;
    use super::colour_logs;

    #[test]
    fn only_text_logs_on_a_terminal_are_coloured() {
        assert!(colour_logs(LogFormat::Text, true, false));
        assert!(!colour_logs(LogFormat::Text, false, false), "file or pipe");
        assert!(!colour_logs(LogFormat::Json, true, false), "json");
        assert!(!colour_logs(LogFormat::Json, false, false), "json, piped");
    }

    #[test]
    fn no_color_turns_colour_off_even_on_a_terminal() {
        assert!(!colour_logs(LogFormat::Text, true, true));
    }
}
