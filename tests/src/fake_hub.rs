//! A fake Hugging Face hub on 127.0.0.1 for the pull tests: the three endpoints a pull uses,
//! answered from files in memory, with the headers the real hub sends.
//!
//! - `GET /api/models/{org}/{name}/revision/{rev}`: the commit and the siblings with sizes,
//!   git blob ids and, for LFS files (`.safetensors`, `.gguf`), `lfs.sha256`;
//! - `HEAD`/`GET /{org}/{name}/resolve/{rev}/{file}`: small files served directly (`etag` the
//!   blob id), LFS files redirected to `/cdn/...` with `x-linked-etag` and `x-linked-size`, as
//!   the hub redirects to its CDN; `x-repo-commit` on both;
//! - `GET /cdn/{org}/{name}/{file}`: the bytes, with `Range` support.
//!
//! Faults on demand: a large file's download cut after N bytes (once, by a CDN that closes the
//! connection), a file served with altered bytes, a gated repository that wants a token. Every request is recorded for the tests to inspect.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::loopback::Loopback;

/// A repository of the fake hub.
#[derive(Debug, Clone, Default)]
pub struct FakeRepo {
    pub commit: String,
    pub files: BTreeMap<String, Vec<u8>>,
    /// Set for a gated repository: the token its files are served to.
    pub token: Option<String>,
}

impl FakeRepo {
    /// Every file of `dir` (a generated model), at a commit derived from their contents.
    pub fn from_dir(dir: &Path) -> Self {
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            files.insert(name, std::fs::read(entry.path()).unwrap());
        }
        Self::with_files(files)
    }

    pub fn with_files(files: BTreeMap<String, Vec<u8>>) -> Self {
        let mut hasher = Sha256::new();
        for (name, bytes) in &files {
            hasher.update(name.as_bytes());
            hasher.update(bytes);
        }
        Self {
            commit: hex(&hasher.finalize())[..40].to_owned(),
            files,
            token: None,
        }
    }
}

/// One request the hub received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

#[derive(Default)]
struct HubState {
    repos: BTreeMap<String, FakeRepo>,
    requests: Vec<Seen>,
    /// File name -> bytes sent before the connection is dropped, for its next download only.
    cuts: BTreeMap<String, usize>,
    /// File names served with one byte changed.
    corrupt: BTreeSet<String>,
}

type Shared = Arc<Mutex<HubState>>;

pub struct FakeHub {
    server: Loopback,
    state: Shared,
}

impl FakeHub {
    /// Listens on a free port of 127.0.0.1, on a thread of its own.
    pub fn start() -> Self {
        let state = Shared::default();
        Self {
            server: Loopback::serve(router(state.clone())),
            state,
        }
    }

    /// What `HF_ENDPOINT` is set to.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.server.address)
    }

    pub fn add(&self, id: &str, repo: FakeRepo) {
        self.state.lock().unwrap().repos.insert(id.to_owned(), repo);
    }

    /// The next download of `file`, an LFS file, sends `bytes` bytes, then drops the connection.
    pub fn cut_next_download(&self, file: &str, bytes: usize) {
        self.state
            .lock()
            .unwrap()
            .cuts
            .insert(file.to_owned(), bytes);
    }

    /// `file` is served with one byte changed, so its sha256 is not the listed one.
    pub fn corrupt(&self, file: &str) {
        self.state.lock().unwrap().corrupt.insert(file.to_owned());
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.state.lock().unwrap().requests.clone()
    }

    /// The GET requests for a file's bytes (the CDN's, the cutting one's, or the resolve of a
    /// small file).
    pub fn downloads_of(&self, file: &str) -> Vec<Seen> {
        self.requests()
            .into_iter()
            .filter(|seen| seen.method == "GET" && seen.path.ends_with(&format!("/{file}")))
            .filter(|seen| !seen.path.contains("/resolve/") || !is_lfs(file))
            .collect()
    }
}

fn router(state: Shared) -> Router {
    Router::new()
        .route("/api/models/{org}/{name}/revision/{rev}", get(listing))
        .route("/cdn/{org}/{name}/{file}", get(cdn))
        .route("/{org}/{name}/resolve/{rev}/{file}", get(resolve))
        .with_state(state)
}

fn record(state: &Shared, method: &Method, path: String, headers: &HeaderMap) {
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    state.lock().unwrap().requests.push(Seen {
        method: method.to_string(),
        path,
        range: header(header::RANGE),
        authorization: header(header::AUTHORIZATION),
    });
}

/// The hub answers 401 for a repository it does not show, so as not to tell whether it exists.
fn repo_not_found(id: &str) -> Response {
    hub_error(
        StatusCode::UNAUTHORIZED,
        "RepoNotFound",
        &format!("Repository not found: {id}"),
    )
}

fn hub_error(status: StatusCode, code: &str, message: &str) -> Response {
    let headers = [
        ("x-error-code", code.to_owned()),
        ("x-error-message", message.to_owned()),
    ];
    (status, headers, json!({"error": message}).to_string()).into_response()
}

/// The repository `id` at `rev` (a branch it has, `main`, or its commit).
fn repo_at(state: &Shared, id: &str, rev: &str) -> Result<FakeRepo, Box<Response>> {
    let repo = state.lock().unwrap().repos.get(id).cloned();
    let repo = repo.ok_or_else(|| Box::new(repo_not_found(id)))?;
    if rev != "main" && rev != repo.commit {
        let message = format!("Invalid rev id: {rev}");
        let error = hub_error(StatusCode::NOT_FOUND, "RevisionNotFound", &message);
        return Err(Box::new(error));
    }
    Ok(repo)
}

async fn listing(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    UrlPath((org, name, rev)): UrlPath<(String, String, String)>,
) -> Response {
    let id = format!("{org}/{name}");
    record(
        &state,
        &method,
        format!("/api/models/{id}/revision/{rev}"),
        &headers,
    );
    let repo = match repo_at(&state, &id, &rev) {
        Ok(repo) => repo,
        Err(response) => return *response,
    };
    let siblings: Vec<_> = repo
        .files
        .iter()
        .map(|(file, bytes)| {
            let mut sibling = json!({
                "rfilename": file,
                "size": bytes.len(),
                "blobId": blob_id(bytes),
            });
            if is_lfs(file) {
                sibling["lfs"] =
                    json!({"sha256": sha256(bytes), "size": bytes.len(), "pointerSize": 134});
            }
            sibling
        })
        .collect();
    axum::Json(json!({
        "id": id,
        "sha": repo.commit,
        "gated": repo.token.is_some().then_some("manual"),
        "siblings": siblings,
    }))
    .into_response()
}

async fn resolve(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    UrlPath((org, name, rev, file)): UrlPath<(String, String, String, String)>,
) -> Response {
    let id = format!("{org}/{name}");
    record(
        &state,
        &method,
        format!("/{id}/resolve/{rev}/{file}"),
        &headers,
    );
    let repo = match repo_at(&state, &id, &rev) {
        Ok(repo) => repo,
        Err(response) => return *response,
    };
    if let Some(token) = &repo.token {
        let expected = format!("Bearer {token}");
        if headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            != Some(&expected)
        {
            let message = format!(
                "Access to model {id} is restricted. You must have access to it and be authenticated to access it. Please log in."
            );
            return hub_error(StatusCode::UNAUTHORIZED, "GatedRepo", &message);
        }
    }
    let Some(bytes) = repo.files.get(&file) else {
        return hub_error(
            StatusCode::NOT_FOUND,
            "EntryNotFound",
            &format!("{file} does not exist"),
        );
    };
    let commit = ("x-repo-commit", repo.commit.clone());
    if is_lfs(&file) {
        let cut = (method == Method::GET)
            .then(|| state.lock().unwrap().cuts.remove(&file))
            .flatten();
        let location = match cut {
            Some(sent) => {
                let address = serve_cut(state.clone(), bytes.clone(), sent);
                format!("http://{address}/cut/{id}/{file}")
            }
            _ => format!("/cdn/{id}/{file}"),
        };
        let headers = [
            commit,
            ("x-linked-etag", format!("\"{}\"", sha256(bytes))),
            ("x-linked-size", bytes.len().to_string()),
            ("etag", format!("\"{}\"", blob_id(bytes))),
            ("location", location),
        ];
        return (StatusCode::FOUND, headers).into_response();
    }
    let mut response = serve(&state, &file, bytes.clone(), &headers);
    let extra = [commit, ("etag", format!("\"{}\"", blob_id(bytes)))];
    for (name, value) in extra {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

async fn cdn(
    State(state): State<Shared>,
    method: Method,
    headers: HeaderMap,
    UrlPath((org, name, file)): UrlPath<(String, String, String)>,
) -> Response {
    let id = format!("{org}/{name}");
    record(&state, &method, format!("/cdn/{id}/{file}"), &headers);
    let bytes = state
        .lock()
        .unwrap()
        .repos
        .get(&id)
        .and_then(|repo| repo.files.get(&file).cloned());
    match bytes {
        Some(bytes) => serve(&state, &file, bytes, &headers),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The bytes, or the range of them asked for, with the file's faults applied.
fn serve(state: &Shared, file: &str, mut bytes: Vec<u8>, headers: &HeaderMap) -> Response {
    let corrupt = state.lock().unwrap().corrupt.contains(file);
    if corrupt && let Some(byte) = bytes.get_mut(0) {
        *byte ^= 0xff;
    }
    let length = bytes.len();
    let range = headers
        .get(header::RANGE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("bytes="))
        .and_then(|value| value.split_once('-'))
        .map(|(start, end)| {
            let start: usize = start.parse().unwrap();
            let end = end
                .parse()
                .map_or(length.saturating_sub(1), |end: usize| end.min(length - 1));
            (start, end)
        });
    let (status, body, content_range) = match range {
        Some((start, _)) if start >= length => {
            let unsatisfied = [(header::CONTENT_RANGE, format!("bytes */{length}"))];
            return (StatusCode::RANGE_NOT_SATISFIABLE, unsatisfied).into_response();
        }
        Some((start, end)) => (
            StatusCode::PARTIAL_CONTENT,
            bytes[start..=end].to_vec(),
            Some(format!("bytes {start}-{end}/{length}")),
        ),
        None => (StatusCode::OK, bytes, None),
    };
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_LENGTH, body.len())
        .header(header::ACCEPT_RANGES, "bytes");
    if let Some(content_range) = content_range {
        response = response.header(header::CONTENT_RANGE, content_range);
    }
    response.body(Body::from(body)).unwrap()
}

/// A one-request server, as a CDN that fails mid-file: it answers with the whole file's length,
/// sends `sent` bytes and closes. Raw TCP, so that the bytes are surely sent before the close
/// (hyper, told of a failed body, may drop what it has not flushed yet).
fn serve_cut(state: Shared, bytes: Vec<u8>, sent: usize) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        stream.set_read_timeout(Some(crate::PATIENCE)).unwrap();
        let mut head = Vec::new();
        let mut buffer = [0; 4096];
        while !head.windows(4).any(|end| end == b"\r\n\r\n") {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(read) => head.extend_from_slice(&buffer[..read]),
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut lines = head.lines();
        let mut request = lines.next().unwrap_or_default().split(' ');
        let header = |name: &str| {
            head.lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.trim().to_owned())
        };
        state.lock().unwrap().requests.push(Seen {
            method: request.next().unwrap_or_default().to_owned(),
            path: request.next().unwrap_or_default().to_owned(),
            range: header("range"),
            authorization: header("authorization"),
        });
        let response = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", bytes.len());
        let _ = stream.write_all(response.as_bytes());
        let _ = stream.write_all(&bytes[..sent.min(bytes.len())]);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        // Read until the client closes: closing with its bytes unread would reset the connection,
        // and a reset may discard what the client has not read yet.
        let _ = std::io::copy(&mut stream, &mut std::io::sink());
    });
    address
}

pub fn is_lfs(file: &str) -> bool {
    file.ends_with(".safetensors") || file.ends_with(".gguf")
}

pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A git blob id stand-in: 40 hex digits that change with the content.
fn blob_id(bytes: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"blob ");
    hasher.update(bytes);
    hex(&hasher.finalize())[..40].to_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
