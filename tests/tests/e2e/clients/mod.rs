//! The agent CLIs against corral: the requests each CLI sends, recorded in
//! `tests/data/clients/` (`record`, run by hand when a pinned version changes), replayed against
//! a real `corral serve` on every run (`replay`), and the CLIs themselves run headless against
//! corral (`live`, skipped when `build/clients/` is missing).

mod live;
mod record;
mod replay;

use std::ffi::OsStr;
use std::path::PathBuf;

use corral_fixture::{Arch, Dtype, FixtureOptions, Format, Size};
use corral_tests::clients::{Api, Cli, MODEL};
use corral_tests::server::{Dirs, Server};

fn recordings_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/data/clients"))
}

/// One recorded run: which CLI, over which API, and whether the capture server made it call a
/// tool (then its requests end with the one carrying the tool's result).
struct Case {
    cli: Cli,
    api: Api,
    variant: Option<&'static str>,
    tool: bool,
    /// Whether the prompt comes with an image (the recording's name ends in `image`).
    image: bool,
}

impl Case {
    /// `<cli>-<api>[-variant]`, the recording's file stem.
    fn name(&self) -> String {
        let mut name = format!("{}-{}", self.cli.name(), self.api.name());
        if let Some(variant) = self.variant {
            name = format!("{name}-{variant}");
        }
        name
    }

    /// Codex without a model in its config is the `default-model` variant.
    fn configured_model(&self) -> bool {
        self.variant != Some("default-model")
    }
}

const fn case(cli: Cli, api: Api, variant: Option<&'static str>, tool: bool) -> Case {
    Case {
        cli,
        api,
        variant,
        tool,
        image: false,
    }
}

/// A case whose prompt comes with an image, then a tool round trip: its first request is the
/// image's alone, its last carries the tool's result after it.
const fn image_case(cli: Cli, api: Api) -> Case {
    Case {
        cli,
        api,
        variant: Some("tool-image"),
        tool: true,
        image: true,
    }
}

/// Every CLI over every API it speaks, Codex with and without a configured model, and one tool
/// round trip per CLI and API.
const CASES: &[Case] = &[
    case(Cli::ClaudeCode, Api::Messages, None, false),
    case(Cli::ClaudeCode, Api::Messages, Some("tool"), true),
    case(Cli::Codex, Api::Responses, None, false),
    case(Cli::Codex, Api::Responses, Some("default-model"), false),
    case(Cli::Codex, Api::Responses, Some("tool"), true),
    case(Cli::Opencode, Api::Chat, None, false),
    case(Cli::Opencode, Api::Chat, Some("tool"), true),
    case(Cli::Opencode, Api::Messages, None, false),
    case(Cli::Opencode, Api::Messages, Some("tool"), true),
    case(Cli::Opencode, Api::Responses, None, false),
    case(Cli::Opencode, Api::Responses, Some("tool"), true),
    image_case(Cli::ClaudeCode, Api::Messages),
    image_case(Cli::Codex, Api::Responses),
    image_case(Cli::Opencode, Api::Chat),
];

/// A `corral serve` of the long-context fixture as `clients::MODEL`, the CLIs' default model names
/// aliased to it, and `extra_config` (TOML) after that.
fn serve_fixture(extra_config: &str) -> (Server, Dirs) {
    let dirs = Dirs {
        models: tempfile::tempdir().unwrap(),
        state: tempfile::tempdir().unwrap(),
    };
    let options = FixtureOptions {
        size: Size::Long,
        // Llama: its untied head lets the fixture end its answers (see `Size::Long`).
        arch: Arch::Llama,
        dtype: Dtype::F32,
        quantize: None,
        format: Format::Safetensors,
    };
    corral_fixture::generate(&options, &dirs.models.path().join(MODEL)).unwrap();
    let config = dirs.write_config(&format!(
        "[aliases]\n\"claude-*\" = \"{MODEL}\"\n\"gpt-*\" = \"{MODEL}\"\n\n{extra_config}"
    ));
    let server = Server::start_with(&dirs, &[OsStr::new("--config"), config.as_os_str()]);
    (server, dirs)
}
