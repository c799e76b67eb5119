//! The operator commands end to end: the real `corral ps|kill|load|unload|models|status` talking
//! to a real `corral serve` with real workers.

use std::process::{Command, Output};
use std::thread;

use corral_fixture::Arch;
use corral_tests::binary;
use corral_tests::server::{Dirs, Server, alive, chat, sse_events};
use serde_json::Value;

fn corral(server: &Server, args: &[&str]) -> Output {
    Command::new(binary("corral"))
        .args(args)
        .arg("--url")
        .arg(server.url(""))
        .output()
        .unwrap()
}

fn corral_ok(server: &Server, args: &[&str]) -> String {
    let output = corral(server, args);
    assert!(
        output.status.success(),
        "corral {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn ps_json(server: &Server) -> Vec<Value> {
    let text = corral_ok(server, &["ps", "--json"]);
    let workers: Value = serde_json::from_str(&text).unwrap();
    workers["data"].as_array().unwrap().clone()
}

fn row<'a>(rows: &'a [Value], model: &str) -> &'a Value {
    rows.iter().find(|row| row["model"] == model).unwrap()
}

#[test]
fn ps_kill_and_unload_manage_single_workers_while_the_other_model_serves() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen3]);
    let server = Server::start(&dirs);
    for model in ["llama", "qwen3"] {
        let response = server.post("/v1/chat/completions", &chat(model, 2, false));
        assert_eq!(response.status(), 200);
    }

    let table = corral_ok(&server, &["ps"]);
    let rows = ps_json(&server);
    for model in ["llama", "qwen3"] {
        let worker = row(&rows, model);
        assert_eq!(worker["state"], "ready");
        let pid = worker["pid"].as_u64().unwrap();
        assert!(
            worker["footprint_bytes"].as_u64().unwrap() > 1 << 20,
            "{worker}"
        );
        let line = table.lines().find(|line| line.starts_with(model)).unwrap();
        assert!(
            line.contains(&pid.to_string()) && line.contains("MiB"),
            "{table}"
        );
    }
    let victim = row(&rows, "llama")["pid"].as_u64().unwrap() as u32;

    let killed = corral_ok(&server, &["kill", "llama"]);
    assert!(killed.contains(&format!("pid {victim}")), "{killed}");
    assert!(!alive(victim));
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("qwen3", 2, false))
            .status(),
        200
    );
    let rows = ps_json(&server);
    let killed_row = row(&rows, "llama");
    assert_eq!(killed_row["state"], "not_running");
    assert!(
        killed_row["last_exit"]
            .as_str()
            .unwrap()
            .contains("signal 9"),
        "{killed_row}"
    );
    assert!(corral_ok(&server, &["ps"]).contains("signal 9"));

    // The next request starts a new worker at once: an operator's kill is no crash to back
    // off from.
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat("llama", 2, false))
            .status(),
        200
    );
    let restarted = row(&ps_json(&server), "llama")["pid"].as_u64().unwrap() as u32;
    assert_ne!(restarted, victim);

    // Unload waits for the stream in flight: the stream finishes normally, not with its
    // worker's death, and the stop that follows is graceful (the pool stops no leased worker).
    let mut stream = sse_events(server.post("/v1/chat/completions", &chat("qwen3", 400, true)));
    stream.next().unwrap();
    let qwen3 = row(&ps_json(&server), "qwen3")["pid"].as_u64().unwrap() as u32;
    let unload = {
        let url = server.url("");
        thread::spawn(move || {
            Command::new(binary("corral"))
                .args(["unload", "qwen3", "--url", &url])
                .output()
                .unwrap()
        })
    };
    assert_eq!(stream.last().as_deref(), Some("[DONE]"));
    let unloaded = unload.join().unwrap();
    let text = String::from_utf8_lossy(&unloaded.stdout);
    assert!(unloaded.status.success(), "{text}");
    assert!(
        text.contains("unloaded qwen3") && text.contains("graceful"),
        "{text}"
    );
    assert!(!alive(qwen3));
}

#[test]
fn load_models_and_status_report_through_the_cli() {
    let dirs = Dirs::with_models(&[Arch::Llama, Arch::Qwen2]);
    let server = Server::start(&dirs);
    let loaded = corral_ok(&server, &["load", "qwen2"]);
    assert!(loaded.starts_with("loaded qwen2 (pid "), "{loaded}");
    assert_eq!(server.worker_pids().len(), 1);

    let models = corral_ok(&server, &["models"]);
    let qwen2 = models
        .lines()
        .find(|line| line.starts_with("qwen2"))
        .unwrap();
    assert!(qwen2.contains("ready"), "{models}");
    let llama = models
        .lines()
        .find(|line| line.starts_with("llama"))
        .unwrap();
    assert!(llama.contains("not_running"), "{models}");

    let status = corral_ok(&server, &["status"]);
    assert!(
        status.contains("corral is up at") && status.contains("1 ready"),
        "{status}"
    );

    let unknown = corral(&server, &["kill", "no-such-model"]);
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("404") && stderr.contains("no-such-model"),
        "{stderr}"
    );
    let not_running = corral(&server, &["unload", "llama"]);
    assert!(String::from_utf8_lossy(&not_running.stderr).contains("no running worker"));
}

#[test]
fn the_cli_says_clearly_when_no_server_is_running() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = Command::new(binary("corral"))
        .args(["status"])
        .env("CORRAL_PORT", port.to_string())
        .env_remove("CORRAL_URL")
        .env_remove("CORRAL_CONFIG")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "no corral server is running at http://127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}
