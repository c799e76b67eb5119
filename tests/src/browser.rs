//! Debian's headless Chromium, driven over WebDriver (`chromedriver`) by fantoccini: the page as
//! a user's browser runs it, script and all. Missing either program fails the test, naming the
//! package that `cargo xtask setup` installs.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wait_until;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

pub struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
    screenshots: PathBuf,
}

impl Browser {
    /// A fresh browser profile with a window of a laptop's size; screenshots go to
    /// `target/dashboard-screenshots/`.
    pub fn open() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot run chromedriver (Debian's chromium-driver): {error}")
            });
        let profile = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-extensions", "--disable-quic",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let url = format!("http://127.0.0.1:{port}");
        let mut client = None;
        wait_until("chromedriver to start a session", || {
            client = runtime
                .block_on(
                    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                        .capabilities(capabilities.clone())
                        .connect(&url),
                )
                .ok();
            client.is_some()
        });
        let screenshots = crate::binary("corral")
            .parent()
            .and_then(|profile| profile.parent())
            .unwrap()
            .join("dashboard-screenshots");
        std::fs::create_dir_all(&screenshots).unwrap();
        Self {
            runtime,
            client,
            driver,
            _profile: profile,
            screenshots,
        }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    pub fn goto(&self, url: &str) {
        self.runtime.block_on(self.client().goto(url)).unwrap();
    }

    /// Runs `script` (a function body) in the page with `args`, and returns what it returns.
    pub fn script(&self, script: &str, args: Vec<Value>) -> Value {
        self.runtime
            .block_on(self.client().execute(script, args))
            .unwrap_or_else(|error| panic!("{script}: {error}"))
    }

    /// Runs `script` (a function body) in the page, which calls its last argument with what it
    /// returns, and returns that.
    pub fn script_async(&self, script: &str) -> Value {
        self.runtime
            .block_on(self.client().execute_async(script, vec![]))
            .unwrap_or_else(|error| panic!("{script}: {error}"))
    }

    /// The text of the first element `css` finds, or `None`.
    pub fn text(&self, css: &str) -> Option<String> {
        let text = self.script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        );
        text.as_str().map(str::to_owned)
    }

    /// How many elements `css` finds that are displayed.
    pub fn visible(&self, css: &str) -> usize {
        let count = self.script(
            "return [...document.querySelectorAll(arguments[0])]
                 .filter(e => e.offsetParent !== null || e.getClientRects().length > 0).length;",
            vec![json!(css)],
        );
        count.as_u64().unwrap() as usize
    }

    pub fn wait_for(&self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        wait_until(what, || {
            let ready = done(self);
            if !ready {
                std::thread::sleep(Duration::from_millis(100));
            }
            ready
        });
    }

    /// Clicks the first element `css` finds, as a mouse would, once it is displayed.
    pub fn click(&self, css: &str) {
        self.wait_for(&format!("{css} to be shown"), |page| page.visible(css) > 0);
        self.runtime
            .block_on(async {
                let element = self.client().find(Locator::Css(css)).await?;
                element.click().await
            })
            .unwrap_or_else(|error| panic!("clicking {css}: {error}"));
    }

    /// Types `text` into the first element `css` finds, after clearing it.
    pub fn type_into(&self, css: &str, text: &str) {
        self.runtime
            .block_on(async {
                let element = self.client().find(Locator::Css(css)).await?;
                element.clear().await?;
                element.send_keys(text).await
            })
            .unwrap_or_else(|error| panic!("typing into {css}: {error}"));
    }

    /// Presses keys (WebDriver's key codes) on the focused element.
    pub fn press(&self, keys: &str) {
        self.runtime
            .block_on(async {
                let focused = self.client().active_element().await?;
                focused.send_keys(keys).await
            })
            .unwrap_or_else(|error| panic!("pressing {keys:?}: {error}"));
    }

    /// Saves the window as `NAME.png` beside the other screenshots, and says where.
    pub fn screenshot(&self, name: &str) {
        let png = self.runtime.block_on(self.client().screenshot()).unwrap();
        let path = self.screenshots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
