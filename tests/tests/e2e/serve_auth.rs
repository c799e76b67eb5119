//! API keys, the admin key, the loopback rule and JSON logs, against the real `corral serve`.

use std::ffi::OsStr;
use std::process::Command;

use corral_fixture::Arch;
use corral_tests::server::{Dirs, Server, chat, client};
use corral_tests::{binary, isolate_discovery};
use serde_json::Value;

fn args<'a>(list: &[&'a str]) -> Vec<&'a OsStr> {
    list.iter().map(|arg| OsStr::new(*arg)).collect()
}

#[test]
fn requests_without_the_key_get_401_in_the_openai_shape_and_the_admin_key_guards_operations() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start_with(
        &dirs,
        &args(&["--api-key", "client-key", "--admin-key", "admin-key"]),
    );
    let get = |path: &str| client().get(server.url(path));

    assert_eq!(get("/health").send().unwrap().status(), 200);
    for request in [
        get("/v1/models"),
        get("/v1/models").bearer_auth("wrong-key"),
        client()
            .post(server.url("/v1/chat/completions"))
            .json(&chat("llama", 2, false)),
        get("/admin/workers"),
        client()
            .post(server.url("/admin/workers/llama/kill"))
            .bearer_auth("client-key"),
        client()
            .post(server.url("/v1/models/llama/load"))
            .header("x-api-key", "client-key"),
    ] {
        let response = request.send().unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.json().unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
        assert!(body["error"]["message"].is_string());
    }

    assert_eq!(
        get("/v1/models")
            .bearer_auth("client-key")
            .send()
            .unwrap()
            .status(),
        200
    );
    let chat_response = client()
        .post(server.url("/v1/chat/completions"))
        .header("x-api-key", "client-key")
        .json(&chat("llama", 2, false))
        .send()
        .unwrap();
    assert_eq!(chat_response.status(), 200);
    // Reading the server's state takes an API key; acting on it, the admin key.
    for key in ["client-key", "admin-key"] {
        for path in ["/admin/workers", "/metrics", "/v1/models/status"] {
            let status = get(path).bearer_auth(key).send().unwrap().status();
            assert_eq!(status, 200, "{path} with {key}");
        }
    }
    let access = |key: &str| -> Value {
        get("/admin/access")
            .bearer_auth(key)
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    assert_eq!(access("client-key")["operate"], false);
    assert_eq!(access("admin-key")["operate"], true);
    assert_eq!(access("wrong-key")["read"], false);
    let loaded = client()
        .post(server.url("/v1/models/llama/load"))
        .bearer_auth("admin-key")
        .send()
        .unwrap();
    assert_eq!(loaded.status(), 200);

    let ps = |key: Option<&str>| {
        let mut command = Command::new(binary("corral"));
        command.args(["ps", "--url", &server.url("")]);
        if let Some(key) = key {
            command.args(["--admin-key", key]);
        }
        command.output().unwrap()
    };
    let refused = ps(None);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"));
    let listed = ps(Some("admin-key"));
    assert!(listed.status.success());
    assert!(String::from_utf8_lossy(&listed.stdout).contains("llama"));
}

#[test]
fn without_a_key_the_server_refuses_a_non_loopback_address() {
    let state = tempfile::tempdir().unwrap();
    let output = isolate_discovery(&mut Command::new(binary("corral")), state.path())
        .args(["serve", "--host", "0.0.0.0", "--port", "0", "--state-dir"])
        .arg(state.path())
        .env_remove("CORRAL_API_KEYS")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0 without an API key")
            && stderr.contains("--allow-unauthenticated-remote"),
        "{stderr}"
    );
}

#[test]
fn json_logs_are_one_object_per_line_with_worker_output_tagged_by_model_and_pid() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let server = Server::start_with(&dirs, &args(&["--log-format", "json"]));
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
    let pid = server.worker_pids()[0];
    let lines = server.log_lines();
    let objects: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let from_worker = objects
        .iter()
        .find(|object| object["target"] == "worker")
        .expect("a forwarded worker line");
    assert_eq!(from_worker["fields"]["model"], "llama", "{from_worker}");
    assert_eq!(from_worker["fields"]["pid"], pid, "{from_worker}");
}
