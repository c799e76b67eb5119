//! `corral service install|uninstall|status|start|stop|restart|logs`: the command line of
//! `corral::service`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use corral::config::Config;
use corral::log_files::Follower;
use corral::service::{self, Account, Action, Definition, LogSource, Platform, Target};

use super::ServeArgs;

/// How often `logs -f` looks for new lines, as `tail -F` does: often enough for a person.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

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
    /// The system service (a launchd daemon, a systemd system unit): starts at boot, with nobody
    /// logged in, as `--user`; needs root (`sudo`).
    #[arg(long, global = true)]
    system: bool,
    /// The user the system service runs as (default: whoever ran `sudo`).
    #[arg(long, global = true, requires = "system")]
    user: Option<String>,
    /// Print the files and commands, as shell commands, instead of writing and running them.
    #[arg(long, global = true)]
    dry_run: bool,
}

#[derive(Debug, Subcommand)]
enum ServiceAction {
    /// Copy corral and corral-worker to the prefix, write the service definition, then start it
    /// (stopping, with a drain, a version already running); it also starts at each login, or at
    /// boot with --system.
    Install {
        /// Where the binaries go (default: ~/.local/bin, or /usr/local/bin with --system).
        #[arg(long)]
        prefix: Option<PathBuf>,
        /// `corral serve` options for the service, after `--`
        /// (for example `-- --models-dir ~/models --port 8080`).
        #[arg(last = true)]
        serve_args: Vec<String>,
    },
    /// Stop the service and remove its definition (the installed binaries stay).
    Uninstall,
    /// Show the service manager's view of the service.
    Status,
    /// Start the service if it is not running.
    Start,
    /// Stop the service (it drains first); it starts again at the next login or boot, or `start`.
    Stop,
    /// Stop the service (it drains first), then start it again.
    Restart,
    /// Show the service's log: corral's rotated files under launchd or with --log-dir, the
    /// journal under systemd.
    Logs {
        /// Keep showing lines as they are written, through rotations.
        #[arg(short, long)]
        follow: bool,
        /// How many of the last lines to show first.
        #[arg(short = 'n', long, default_value_t = 50)]
        lines: usize,
        /// Read corral's log files in this directory (the `[log] dir` of the configuration).
        #[arg(long, env = "CORRAL_LOG_DIR")]
        log_dir: Option<PathBuf>,
    },
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
        let target = if self.system {
            Target::system(
                platform,
                self.label,
                Account::for_system_service(self.user)?,
            )?
        } else {
            let uid = nix::unistd::getuid().as_raw();
            Target::user(platform, self.label, service::home_dir()?, uid)?
        };
        let action = match self.action {
            ServiceAction::Install { prefix, serve_args } => {
                let prefix = prefix.unwrap_or_else(|| target.default_prefix());
                Action::Install(Box::new(definition(&target, &serve_args, &prefix)?))
            }
            ServiceAction::Uninstall => Action::Uninstall,
            ServiceAction::Status => Action::Status,
            ServiceAction::Start => Action::Start,
            ServiceAction::Stop => Action::Stop,
            ServiceAction::Restart => Action::Restart,
            ServiceAction::Logs {
                follow,
                lines,
                log_dir,
            } => {
                let source = service::log_source(&target, log_dir, lines, follow);
                return show_logs(source, lines, follow, self.dry_run);
            }
        };
        let plan = service::plan(&target, &action)?;
        if self.dry_run {
            print!("{plan}");
            return Ok(());
        }
        if self.system && !service::is_root() {
            bail!("a system service is installed and controlled as root: run this with sudo");
        }
        plan.execute()
    }
}

/// Parsing and loading the serve options now makes a typo fail here rather than in a restart
/// loop, and gives the drain timeout the service manager must wait for.
fn definition(
    target: &Target,
    serve_args: &[String],
    prefix: &std::path::Path,
) -> Result<Definition> {
    let command_line = std::iter::once("corral serve").chain(serve_args.iter().map(String::as_str));
    let options = ServeCommandLine::try_parse_from(command_line)
        .context("the serve options after `--`")?
        .serve
        .into_options();
    let config = Config::load(options.config_file.as_deref(), options.overrides)?;
    Definition::for_this_process(target, serve_args, &config, prefix)
}

fn show_logs(source: LogSource, lines: usize, follow: bool, dry_run: bool) -> Result<()> {
    match source {
        LogSource::Journal(argv) if dry_run => println!("{}", argv.join(" ")),
        LogSource::Journal(argv) => {
            let status = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .status()
                .with_context(|| format!("running {}", argv[0]))?;
            if !status.success() {
                bail!("`{}` failed: {status}", argv.join(" "));
            }
        }
        LogSource::Files(dir) if dry_run => {
            let follow = if follow { " -F" } else { "" };
            println!(
                "tail -n {lines}{follow} {} # and the rotated files before it",
                dir.join(corral::log_files::LOG_FILE).display()
            );
        }
        LogSource::Files(dir) if follow => {
            let mut out = std::io::stdout().lock();
            let mut follower = Follower::start(&dir, lines, &mut out)?;
            loop {
                follower.poll(&mut out)?;
                std::thread::sleep(FOLLOW_INTERVAL);
            }
        }
        LogSource::Files(dir) => {
            let mut out = std::io::stdout().lock();
            for line in corral::log_files::last_lines(&dir, lines)? {
                writeln!(out, "{line}").context("writing the log")?;
            }
        }
    }
    Ok(())
}
