//! `corral service install|uninstall|status|start|stop`: the command line of `corral::service`.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use corral::config::Config;
use corral::service::{self, Action, Definition, Platform, Target};

use super::ServeArgs;

#[derive(Debug, Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    action: ServiceAction,
    /// The launchd label or systemd unit name (default: com.corral.server under launchd, corral
    /// under systemd).
    #[arg(long, global = true)]
    label: Option<String>,
    /// The service manager to write for (default: launchd on macOS, systemd elsewhere).
    #[arg(long, global = true, value_enum)]
    platform: Option<Platform>,
    /// Print the files and commands, as shell commands, instead of writing and running them.
    #[arg(long, global = true)]
    dry_run: bool,
}

#[derive(Debug, Subcommand)]
enum ServiceAction {
    /// Write the service definition, then (re)load and start it; it also starts at each login.
    Install {
        /// `corral serve` options for the service, after `--`
        /// (for example `-- --models-dir ~/models --port 8080`).
        #[arg(last = true)]
        serve_args: Vec<String>,
    },
    /// Stop the service and remove its definition.
    Uninstall,
    /// Show the service manager's view of the service.
    Status,
    /// Start the service if it is not running.
    Start,
    /// Stop the service (it drains first); it starts again at the next login or `start`.
    Stop,
}

/// The serve options on their own command line, parsed exactly as `corral serve` parses them.
#[derive(Debug, Parser)]
#[command(name = "corral serve")]
struct ServeCommandLine {
    #[command(flatten)]
    serve: ServeArgs,
}

impl ServiceArgs {
    pub fn run(self) -> Result<()> {
        let platform = self.platform.unwrap_or_else(Platform::native);
        let uid = nix::unistd::getuid().as_raw();
        let target = Target::new(platform, self.label, service::home_dir()?, uid)?;
        let action = match self.action {
            ServiceAction::Install { serve_args } => Action::Install(definition(&serve_args)?),
            ServiceAction::Uninstall => Action::Uninstall,
            ServiceAction::Status => Action::Status,
            ServiceAction::Start => Action::Start,
            ServiceAction::Stop => Action::Stop,
        };
        let plan = service::plan(&target, &action)?;
        if self.dry_run {
            print!("{plan}");
            Ok(())
        } else {
            plan.execute()
        }
    }
}

/// Parsing and loading the serve options now makes a typo fail here rather than in a restart
/// loop, and gives the drain timeout the service manager must wait for.
fn definition(serve_args: &[String]) -> Result<Definition> {
    let command_line = std::iter::once("corral serve").chain(serve_args.iter().map(String::as_str));
    let options = ServeCommandLine::try_parse_from(command_line)
        .context("the serve options after `--`")?
        .serve
        .into_options();
    let config = Config::load(options.config_file.as_deref(), options.overrides)?;
    Definition::for_this_process(serve_args, &config)
}
