//! Whose service and where it lives: the service manager (`Platform`), a per-user service or a
//! system one that starts at boot and runs as a named user (`Scope`), and the label.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nix::unistd::{Group, Uid, User};

/// The service manager to write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    Launchd,
    Systemd,
}

impl Platform {
    pub fn native() -> Self {
        if cfg!(target_os = "macos") {
            Platform::Launchd
        } else {
            Platform::Systemd
        }
    }

    /// launchd wants a reverse-DNS label; a systemd unit is named for what it runs.
    pub fn default_label(self) -> &'static str {
        match self {
            Platform::Launchd => "com.corral.server",
            Platform::Systemd => "corral",
        }
    }

    /// Where `corral serve` keeps its state when `home` is `$HOME` and nothing else says, as
    /// `state_dir::state_dir` decides on this platform (written here for either platform, so a
    /// plan for the other one is right too).
    pub fn default_state_dir(self, home: &Path) -> PathBuf {
        match self {
            Platform::Launchd => home.join("Library/Application Support/corral"),
            Platform::Systemd => home.join(".local/state/corral"),
        }
    }
}

/// A per-user service (a launchd agent, a systemd user unit) runs while its user is logged in;
/// a system one (a launchd daemon, a systemd system unit) starts at boot, as `Account`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    User,
    System(Account),
}

/// The user a system service runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub group: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl Account {
    /// `name` from the user database, with its primary group and home.
    pub fn lookup(name: &str) -> Result<Self> {
        let user = User::from_name(name)
            .with_context(|| format!("looking up the user {name}"))?
            .with_context(|| format!("there is no user {name}"))?;
        let group = Group::from_gid(user.gid)
            .with_context(|| format!("looking up the group of {name}"))?
            .with_context(|| format!("{name}'s group {} has no name", user.gid))?;
        Ok(Self {
            name: user.name,
            group: group.name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: user.dir,
        })
    }

    /// The user a system service runs as: `--user`, else whoever ran `sudo`. Never root by
    /// default: the models, state and caches are a person's, and a server needs no root.
    pub fn for_system_service(named: Option<String>) -> Result<Self> {
        let name = match named.or_else(|| std::env::var("SUDO_USER").ok()) {
            Some(name) if !name.is_empty() => name,
            _ => bail!(
                "a system service runs as a user: run this with sudo from that user's shell, or \
                 pass --user NAME"
            ),
        };
        Self::lookup(&name)
    }
}

/// Whose service, and under which name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub platform: Platform,
    /// The launchd label or the systemd unit name (without `.service`).
    pub label: String,
    pub scope: Scope,
    /// The home of the user the service runs as.
    pub home: PathBuf,
    /// That user's id, for launchd's `gui/<uid>` domain.
    pub uid: u32,
}

impl Target {
    /// The current user's service; `home` is their `$HOME`.
    pub fn user(
        platform: Platform,
        label: Option<String>,
        home: PathBuf,
        uid: u32,
    ) -> Result<Self> {
        Self::new(platform, label, Scope::User, home, uid)
    }

    /// A system service running as `account`.
    pub fn system(platform: Platform, label: Option<String>, account: Account) -> Result<Self> {
        let (home, uid) = (account.home.clone(), account.uid);
        Self::new(platform, label, Scope::System(account), home, uid)
    }

    fn new(
        platform: Platform,
        label: Option<String>,
        scope: Scope,
        home: PathBuf,
        uid: u32,
    ) -> Result<Self> {
        let label = label.unwrap_or_else(|| platform.default_label().to_string());
        // The label becomes a file name and a launchctl service path.
        let allowed = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
        if label.is_empty() || label.starts_with('.') || !label.chars().all(allowed) {
            bail!("service label {label:?} must be letters, digits, '.', '_' or '-'");
        }
        Ok(Self {
            platform,
            label,
            scope,
            home,
            uid,
        })
    }

    pub fn account(&self) -> Option<&Account> {
        match &self.scope {
            Scope::User => None,
            Scope::System(account) => Some(account),
        }
    }

    /// Where `install` puts `corral` and `corral-worker` unless told (`--prefix`).
    pub fn default_prefix(&self) -> PathBuf {
        match self.scope {
            Scope::User => self.home.join(".local/bin"),
            Scope::System(_) => PathBuf::from("/usr/local/bin"),
        }
    }
}

/// Whether this process may write a system service's files and load it.
pub fn is_root() -> bool {
    Uid::effective().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_are_not_file_names_are_refused() {
        let target =
            |label: &str| Target::user(Platform::Launchd, Some(label.into()), "/h".into(), 501);
        assert!(target("com.example.corral-2").is_ok());
        for label in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(target(label).is_err(), "{label:?}");
        }
        let default = Target::user(Platform::Systemd, None, "/h".into(), 1000).unwrap();
        assert_eq!(default.label, "corral");
    }

    #[test]
    fn the_binaries_go_to_the_users_bin_or_usr_local_bin() {
        let user = Target::user(Platform::Systemd, None, "/home/ada".into(), 1000).unwrap();
        assert_eq!(user.default_prefix(), PathBuf::from("/home/ada/.local/bin"));
        let account = Account {
            name: "ada".into(),
            group: "staff".into(),
            uid: 501,
            gid: 20,
            home: "/Users/ada".into(),
        };
        let system = Target::system(Platform::Launchd, None, account).unwrap();
        assert_eq!(system.default_prefix(), PathBuf::from("/usr/local/bin"));
        assert_eq!(
            (system.home.to_str(), system.uid),
            (Some("/Users/ada"), 501)
        );
    }

    #[test]
    fn the_current_user_is_found_with_a_group_and_a_home() {
        let me = User::from_uid(Uid::current()).unwrap().unwrap();
        let account = Account::for_system_service(Some(me.name.clone())).unwrap();
        assert_eq!((account.uid, account.home), (me.uid.as_raw(), me.dir));
        assert!(!account.group.is_empty());
        let error = Account::lookup("no-such-user-corral").unwrap_err();
        assert!(
            format!("{error:#}").contains("no-such-user-corral"),
            "{error:#}"
        );
    }
}
