//! The Hugging Face hub as a pull sees it: where it is (`HF_ENDPOINT`), who we are (`HF_TOKEN`,
//! else the token file `huggingface-cli login` writes), where its cache is (`--hf-home`,
//! `HF_HUB_CACHE`, `HF_HOME`, as huggingface_hub resolves them), and the three requests a pull
//! makes: the repository's listing, a HEAD that finds out early whether the files may be read,
//! and a file's download from an offset.
//!
//! Every answer that is not a success becomes an error that says what was asked and what the
//! user can do; the hub's `X-Error-Code` header tells a private or missing repository from a
//! gated one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::header::{HeaderMap, RANGE};
use reqwest::redirect::Policy;
use reqwest::{Response, StatusCode};

use super::PullError;
use super::listing::RepoListing;
use super::name::{RepoId, Revision};
use crate::registry;

const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// A connection that delivers nothing for this long is dropped; the next pull resumes it.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Hub {
    endpoint: String,
    token: Option<String>,
    cache: PathBuf,
    client: reqwest::Client,
    /// For the access check: the hub answers a large file's HEAD with a redirect to a CDN URL
    /// signed for GET only, which would refuse a HEAD; the redirect itself is the hub's yes.
    head_client: reqwest::Client,
}

impl Hub {
    /// The hub and cache this process's environment names; `hf_home` (`--hf-home`) replaces
    /// `HF_HOME` and wins over `HF_HUB_CACHE`.
    pub fn from_env(hf_home: Option<&Path>) -> Result<Self, PullError> {
        Self::from_vars(hf_home, |name| std::env::var_os(name))
    }

    fn from_vars(
        hf_home: Option<&Path>,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, PullError> {
        let set = |name: &str| var(name).filter(|value| !value.is_empty());
        let (home, cache) = match hf_home {
            Some(dir) => (Some(dir.to_path_buf()), Some(dir.join("hub"))),
            None => (registry::hf_home(&var), registry::hub_cache_dir(&var)),
        };
        let cache = cache.ok_or(PullError::NoCacheDir)?;
        let token = set("HF_TOKEN")
            .and_then(|token| token.into_string().ok())
            .or_else(|| std::fs::read_to_string(home?.join("token")).ok())
            .map(|token| token.trim().to_owned())
            .filter(|token| !token.is_empty());
        let endpoint = set("HF_ENDPOINT")
            .and_then(|endpoint| endpoint.into_string().ok())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        Self::new(&endpoint, token, cache)
    }

    pub fn new(endpoint: &str, token: Option<String>, cache: PathBuf) -> Result<Self, PullError> {
        let client = |redirects: Policy| {
            reqwest::Client::builder()
                .user_agent(concat!("corral/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(READ_TIMEOUT)
                .redirect(redirects)
                .build()
                .map_err(PullError::Client)
        };
        Ok(Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            token,
            cache,
            client: client(Policy::default())?,
            head_client: client(Policy::none())?,
        })
    }

    /// The cache's root (`…/hub`), which holds `models--ORG--NAME`.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    pub(super) async fn listing(
        &self,
        repo: &RepoId,
        revision: &Revision,
    ) -> Result<RepoListing, PullError> {
        let url = format!(
            "{}/api/models/{repo}/revision/{}?blobs=true",
            self.endpoint,
            revision.url_segment()
        );
        let response = self.send(self.client.get(&url), &url).await?;
        let what = || format!("{repo} at revision {revision}");
        let response = self.check(repo, &url, response, what).await?;
        response
            .json()
            .await
            .map_err(|error| PullError::MalformedListing {
                repo: repo.to_string(),
                reason: format!("{url}: {error}"),
            })
    }

    /// Whether `file` may be downloaded: a gated model lists its files to anyone but serves
    /// them only to accounts that accepted its licence, and that should be known before any
    /// download starts.
    pub(super) async fn check_access(
        &self,
        repo: &RepoId,
        commit: &str,
        file: &str,
    ) -> Result<(), PullError> {
        let url = self.file_url(repo, commit, file);
        let response = self.send(self.head_client.head(&url), &url).await?;
        if response.status().is_redirection() {
            return Ok(());
        }
        self.check(repo, &url, response, || format!("{file} of {repo}"))
            .await
            .map(drop)
    }

    /// `file` at `commit` from byte `offset` on (a Range request when `offset` is not 0).
    pub(super) async fn download(
        &self,
        repo: &RepoId,
        commit: &str,
        file: &str,
        offset: u64,
    ) -> Result<Response, PullError> {
        let url = self.file_url(repo, commit, file);
        let mut request = self.client.get(&url);
        if offset > 0 {
            request = request.header(RANGE, format!("bytes={offset}-"));
        }
        let response = self.send(request, &url).await?;
        self.check(repo, &url, response, || format!("{file} of {repo}"))
            .await
    }

    fn file_url(&self, repo: &RepoId, commit: &str, file: &str) -> String {
        format!(
            "{}/{repo}/resolve/{commit}/{}",
            self.endpoint,
            encode_segment(file)
        )
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<Response, PullError> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        request.send().await.map_err(|source| PullError::Request {
            url: url.to_owned(),
            source,
        })
    }

    /// The response when it is a success; otherwise the error it means.
    async fn check(
        &self,
        repo: &RepoId,
        url: &str,
        response: Response,
        what: impl FnOnce() -> String,
    ) -> Result<Response, PullError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let code = header(response.headers(), "x-error-code");
        let detail = match header(response.headers(), "x-error-message") {
            Some(message) => format!(": {message}"),
            None => {
                let body = response.text().await.unwrap_or_default();
                let body = body.trim();
                let short: String = body.chars().take(200).collect();
                if short.is_empty() {
                    short
                } else {
                    format!(": {short}")
                }
            }
        };
        let url = url.to_owned();
        Err(match (status, code.as_deref()) {
            (_, Some("RepoNotFound")) => PullError::NotFound {
                what: format!("{repo} (or it is private, and HF_TOKEN must be set)"),
                url,
                detail,
            },
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) => PullError::Unauthorized {
                repo: repo.to_string(),
                url,
                status: status.as_u16(),
                page: format!("{}/{repo}", self.endpoint),
            },
            (StatusCode::NOT_FOUND, _) => PullError::NotFound {
                what: what(),
                url,
                detail,
            },
            _ => PullError::HubStatus {
                url,
                status: status.as_u16(),
                detail,
            },
        })
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)?
        .to_str()
        .ok()
        .map(|value| value.chars().take(300).collect())
}

/// A file name as one URL path segment: unreserved characters as they are, the rest
/// percent-encoded.
fn encode_segment(name: &str) -> String {
    let mut encoded = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(vars: &[(&str, &str)], hf_home: Option<&Path>) -> Hub {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(name, value)| (name.to_string(), OsString::from(value)))
            .collect();
        Hub::from_vars(hf_home, |name| {
            vars.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        })
        .unwrap()
    }

    #[test]
    fn the_cache_is_found_as_huggingface_hub_finds_it() {
        let home = [("HOME", "/home/u")];
        assert_eq!(
            hub(&home, None).cache,
            Path::new("/home/u/.cache/huggingface/hub")
        );
        let xdg = [("HOME", "/home/u"), ("XDG_CACHE_HOME", "/xdg")];
        assert_eq!(hub(&xdg, None).cache, Path::new("/xdg/huggingface/hub"));
        let hf_home = [("HOME", "/home/u"), ("HF_HOME", "/hf")];
        assert_eq!(hub(&hf_home, None).cache, Path::new("/hf/hub"));
        let hub_cache = [("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/cache")];
        assert_eq!(hub(&hub_cache, None).cache, Path::new("/cache"));
        let flag = Some(Path::new("/flag"));
        assert_eq!(hub(&hub_cache, flag).cache, Path::new("/flag/hub"));
        assert!(matches!(
            Hub::from_vars(None, |_| None),
            Err(PullError::NoCacheDir)
        ));
    }

    #[test]
    fn the_token_comes_from_hf_token_else_the_login_file() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("token"), "hf_file\n").unwrap();
        let flag = Some(home.path());
        assert_eq!(hub(&[], flag).token.as_deref(), Some("hf_file"));
        assert_eq!(
            hub(&[("HF_TOKEN", "hf_env")], flag).token.as_deref(),
            Some("hf_env")
        );
        assert_eq!(hub(&[("HOME", "/nonexistent")], None).token, None);
    }

    #[test]
    fn the_endpoint_comes_from_hf_endpoint_without_its_trailing_slash() {
        let vars = [("HOME", "/h"), ("HF_ENDPOINT", "http://127.0.0.1:9/")];
        assert_eq!(hub(&vars, None).endpoint, "http://127.0.0.1:9");
        assert_eq!(hub(&[("HOME", "/h")], None).endpoint, DEFAULT_ENDPOINT);
    }

    #[test]
    fn file_names_are_encoded_as_one_segment() {
        assert_eq!(
            encode_segment("model-00001.safetensors"),
            "model-00001.safetensors"
        );
        assert_eq!(encode_segment("a b+c?.gguf"), "a%20b%2Bc%3F.gguf");
    }
}
