//! The operator commands (`corral ps`, `kill`, `load`, `unload`, `models`, `status`): a thin
//! client of the admin API of a running `corral serve`.
//!
//! The server is found from `--url` / `CORRAL_URL`, else from the same configuration `serve`
//! reads (the TOML file, `CORRAL_HOST`, `CORRAL_PORT`), with a wildcard host replaced by loopback.

mod tables;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::config::{Config, Overrides};

/// Long enough for a load or an unload's drain; the server bounds both itself.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the server is and how to authenticate.
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub url: Option<String>,
    pub config_file: Option<PathBuf>,
    pub host: Option<IpAddr>,
    pub port: Option<u16>,
    /// Sent as `Authorization: Bearer`; the admin key when one is configured.
    pub key: Option<String>,
}

pub enum Operation {
    Ps,
    Models,
    Status,
    Kill {
        model: String,
        signal: Option<String>,
        drain: bool,
    },
    Load {
        model: String,
    },
    Unload {
        model: String,
    },
}

pub fn run(target: Target, operation: Operation, json: bool) -> Result<()> {
    let server = Server::new(target)?;
    match operation {
        Operation::Ps => {
            let workers = server.get("/admin/workers")?;
            print(json, &workers, || tables::ps(&workers));
        }
        Operation::Models => {
            let status = server.get("/v1/models/status")?;
            print(json, &status, || tables::models(&status));
        }
        Operation::Status => {
            let memory = server.get("/admin/memory")?;
            let workers = server.get("/admin/workers")?;
            let view =
                serde_json::json!({"url": server.base, "memory": memory, "workers": workers});
            print(json, &view, || {
                tables::status(&server.base, &memory, &workers)
            });
        }
        Operation::Kill {
            model,
            signal,
            drain,
        } => {
            let mut query = Vec::new();
            if let Some(signal) = &signal {
                query.push(("signal", signal.clone()));
            }
            if drain {
                query.push(("drain", "true".to_owned()));
            }
            let stopped = server.post(&format!("/admin/workers/{model}/kill"), &query)?;
            print(json, &stopped, || tables::stopped("killed", &stopped));
        }
        Operation::Load { model } => {
            let loaded = server.post(&format!("/v1/models/{model}/load"), &[])?;
            print(json, &loaded, || {
                format!(
                    "loaded {} (pid {})\n",
                    loaded["model"].as_str().unwrap_or(&model),
                    loaded["pid"]
                )
            });
        }
        Operation::Unload { model } => {
            let stopped = server.post(&format!("/v1/models/{model}/unload"), &[])?;
            print(json, &stopped, || tables::stopped("unloaded", &stopped));
        }
    }
    Ok(())
}

fn print(json: bool, value: &Value, text: impl FnOnce() -> String) {
    if json {
        println!("{value:#}");
    } else {
        print!("{}", text());
    }
}

/// The running `corral serve` these commands talk to.
struct Server {
    base: String,
    key: Option<String>,
    http: reqwest::blocking::Client,
}

impl Server {
    fn new(target: Target) -> Result<Self> {
        let base = match target.url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => {
                let config = Config::load(
                    target.config_file.as_deref(),
                    Overrides {
                        host: target.host,
                        port: target.port,
                        ..Overrides::default()
                    },
                )?;
                let host = if config.host.is_unspecified() {
                    IpAddr::from([127, 0, 0, 1])
                } else {
                    config.host
                };
                match host {
                    IpAddr::V6(v6) => format!("http://[{v6}]:{}", config.port),
                    IpAddr::V4(v4) => format!("http://{v4}:{}", config.port),
                }
            }
        };
        let http = reqwest::blocking::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base,
            key: target.key,
            http,
        })
    }

    fn get(&self, path: &str) -> Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.base)))
    }

    fn post(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        self.send(self.http.post(format!("{}{path}", self.base)).query(query))
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> Result<Value> {
        let request = match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        };
        let response = request.send().map_err(|error| {
            if error.is_connect() {
                anyhow::anyhow!(
                    "no corral server is running at {} (start one with `corral serve`, or point \
                     --url / CORRAL_URL at it)",
                    self.base
                )
            } else {
                anyhow::Error::new(error).context(format!("talking to corral at {}", self.base))
            }
        })?;
        let status = response.status();
        let body: Value = response
            .json()
            .with_context(|| format!("reading corral's answer ({status}) from {}", self.base))?;
        if !status.is_success() {
            let message = body["error"]["message"].as_str().unwrap_or("no message");
            bail!("corral answered {status}: {message}");
        }
        Ok(body)
    }
}
