//! `corral pull ORG/NAME[@REVISION]`: the command line of `corral::pull`, with its progress shown
//! as a bar per file on a terminal and as log lines anywhere else (a pipe, a file, CI).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use corral::memory::format_bytes;
use corral::pull::{self, Hub, ModelRef, PullEvent};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, Args)]
pub struct PullArgs {
    /// The model on the Hugging Face hub: ORG/NAME, optionally @REVISION (branch, tag or commit;
    /// default main).
    model: String,
    /// The .gguf file to take, for a repository that holds several.
    #[arg(long)]
    file: Option<String>,
    /// The Hugging Face home to download into instead of HF_HOME (files go to DIR/hub).
    #[arg(long)]
    hf_home: Option<PathBuf>,
}

impl PullArgs {
    pub fn run(self) -> Result<()> {
        let model = ModelRef::parse(&self.model)?;
        let hub = Hub::from_env(self.hf_home.as_deref())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?;
        let pulled = runtime.block_on(async {
            let plan = pull::plan(&hub, &model, self.file.as_deref()).await?;
            let mut display = Display::new(std::io::stderr().is_terminal());
            plan.download(&mut |event| display.show(event)).await
        })?;
        // The path alone on stdout, for scripts; everything else went to stderr.
        println!("{}", pulled.path.display());
        Ok(())
    }
}

/// Shows pull events: an indicatif bar per file on a terminal, log lines at every tenth of a
/// file otherwise.
struct Display {
    terminal: bool,
    bar: Option<ProgressBar>,
    /// The file being logged and the last tenth logged of it.
    logged: Option<(String, u64)>,
}

impl Display {
    fn new(terminal: bool) -> Self {
        Self {
            terminal,
            bar: None,
            logged: None,
        }
    }

    fn show(&mut self, event: PullEvent) {
        match event {
            PullEvent::Resolved {
                model,
                revision,
                commit,
                files,
                bytes,
            } => tracing::info!(
                model,
                revision,
                commit,
                files = files.join(", "),
                size = %format_bytes(bytes),
                "pulling"
            ),
            PullEvent::Cached { file, total } => {
                tracing::info!(file, size = %format_bytes(total), "already in the cache");
            }
            PullEvent::Downloading { file, bytes, total } if self.terminal => {
                self.draw(file, bytes, total);
            }
            PullEvent::Downloading { file, bytes, total } => self.log(file, bytes, total),
        }
    }

    fn draw(&mut self, file: String, bytes: u64, total: u64) {
        let bar = self.bar.get_or_insert_with(|| {
            let style = ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .map(|style| style.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            ProgressBar::new(total).with_style(style).with_message(file)
        });
        bar.set_position(bytes);
        if bytes >= total {
            bar.finish();
            self.bar = None;
        }
    }

    fn log(&mut self, file: String, bytes: u64, total: u64) {
        let tenth = (bytes * 10).checked_div(total).unwrap_or(10);
        match &self.logged {
            Some((logged, last)) if *logged == file && tenth <= *last => return,
            Some((logged, _)) if *logged == file => {}
            _ if bytes > 0 && bytes < total => {
                tracing::info!(file, from = %format_bytes(bytes), of = %format_bytes(total), "resuming");
            }
            _ => {}
        }
        let (done, of) = (format_bytes(bytes), format_bytes(total));
        tracing::info!(file, percent = tenth * 10, done, of, "downloading");
        self.logged = Some((file, tenth));
    }
}

impl Drop for Display {
    /// A failed pull leaves its bar where it stopped, above the error.
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.abandon();
        }
    }
}
