//! The dashboard in Debian's headless Chromium against a real `corral serve` with API keys and an
//! admin key: locked without a key, read-only with an API key, and with the admin key a model
//! loaded, its worker killed and its return, pinned, unloaded, another pulled from a hub on
//! loopback, a chat streamed, the activity and every view, each saved as a screenshot under
//! `target/dashboard-screenshots/`.

use std::ffi::OsStr;

use corral_fixture::Arch;
use corral_tests::browser::Browser;
use corral_tests::fake_hub::{FakeHub, FakeRepo};
use corral_tests::server::{Dirs, Server, chat, client};
use corral_tests::tiny_model;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

/// What the page pulls from the fake hub.
const PULLED: &str = "corral-test/tiny-llama";
const LLAMA_ROW: &str = "#models tr[data-model=\"llama\"]";
const WORKER_ROW: &str = "#workers tr[data-model=\"llama\"]";
const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

fn access(page: &Browser) -> String {
    page.text("#access").unwrap_or_default()
}

fn worker_pid(page: &Browser) -> Option<u32> {
    page.text(&format!("{WORKER_ROW} .pid"))?
        .trim()
        .parse()
        .ok()
}

/// `model`'s entry in `/v1/models/status`, read with the API key.
fn status_of(server: &Server, model: &str) -> Value {
    let status: Value = client()
        .get(server.url("/v1/models/status"))
        .bearer_auth("client-key")
        .send()
        .unwrap()
        .json()
        .unwrap();
    status["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["id"] == model)
        .cloned()
        .unwrap_or_else(|| panic!("no {model} in {status}"))
}

/// Answers the confirmation the page asks before each operation.
fn confirm(page: &Browser) {
    page.click("#confirm-yes");
}

#[test]
fn the_dashboard_shows_and_operates_the_server_with_the_keys_it_is_given() {
    let dirs = Dirs::with_models(&[Arch::Llama]);
    let args = ["--api-key", "client-key", "--admin-key", "admin-key"].map(OsStr::new);
    // A hub on loopback for the pull, into a Hugging Face cache of the test's own.
    let hub = FakeHub::start();
    let pulled = tiny_model(Arch::Llama);
    hub.add(PULLED, FakeRepo::from_dir(pulled.path()));
    let hf_home = tempfile::tempdir().unwrap();
    let endpoint = hub.endpoint();
    let env = [
        ("HF_HOME", hf_home.path().as_os_str()),
        ("HF_ENDPOINT", OsStr::new(&endpoint)),
        ("HF_TOKEN", OsStr::new("")),
    ];
    let mut server = Server::start_with_env(&dirs, &args, &env);
    let page = Browser::open();
    page.goto(&server.url("/"));

    // No key: nothing of the server is shown.
    page.wait_for("the page to say it is locked", |page| {
        access(page) == "locked"
    });
    assert_eq!(page.visible("#models tr[data-model]"), 0);
    assert_eq!(page.visible("nav a"), 0);
    page.screenshot("locked");

    // An API key: everything shown, nothing to operate.
    page.type_into("#api-key", "client-key");
    page.click("#save-keys");
    page.wait_for("the models, read-only", |page| {
        access(page) == "read-only" && page.visible(LLAMA_ROW) == 1
    });
    let operable = page.script(
        "return [...document.querySelectorAll('[data-action], #pull-start')]
             .filter(button => !button.disabled).length;",
        vec![],
    );
    assert_eq!(operable, 0, "an operation is offered without the admin key");
    let kept = page.script(
        "return [sessionStorage.getItem('corral.apiKey'), localStorage.length, location.href];",
        vec![],
    );
    assert_eq!(kept[0], "client-key");
    assert_eq!(kept[1], 0, "a key in local storage");
    assert!(!kept[2].as_str().unwrap().contains("key"), "{kept}");
    page.screenshot("models-read-only");

    // The admin key: load the model from the page; its worker appears with its footprint.
    page.type_into("#admin-key", "admin-key");
    page.click("#save-keys");
    page.wait_for("admin access", |page| access(page) == "admin");
    page.click(&format!("{LLAMA_ROW} button[data-action=\"load\"]"));
    confirm(&page);
    page.click("a[href=\"#workers\"]");
    page.wait_for("the loaded worker with its pid and footprint", |page| {
        let footprint = page
            .text(&format!("{WORKER_ROW} .footprint"))
            .unwrap_or_default();
        worker_pid(page).is_some() && footprint.contains("iB")
    });
    page.wait_for(
        "the context the ready worker holds, in the model's row",
        |page| {
            page.text(LLAMA_ROW)
                .is_some_and(|row| row.contains("ctx 8,192") || row.contains("ctx 8192"))
        },
    );
    let first_pid = worker_pid(&page).unwrap();
    assert_eq!(server.worker_pids(), vec![first_pid]);
    page.screenshot("workers");

    // Killed from the page, it disappears; the next request brings it back.
    page.click(&format!("{WORKER_ROW} button[data-action=\"kill\"]"));
    confirm(&page);
    page.wait_for("the killed worker to go", |page| {
        page.visible(WORKER_ROW) == 0
    });
    let answer = client()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth("client-key")
        .json(&chat("llama", 2, false))
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200);
    page.wait_for("a new worker", |page| {
        worker_pid(page).is_some_and(|pid| pid != first_pid)
    });

    // Pinned from the page, as the status says; then unloaded from it.
    page.click("a[href=\"#models\"]");
    page.click(&format!("{LLAMA_ROW} button[data-action=\"pin\"]"));
    confirm(&page);
    page.wait_for("the model pinned", |page| {
        page.text(&format!("{LLAMA_ROW} button[data-action=\"pin\"]"))
            .is_some_and(|label| label.trim() == "Unpin")
    });
    assert_eq!(status_of(&server, "llama")["pinned"], true);
    page.click(&format!("{LLAMA_ROW} button[data-action=\"unload\"]"));
    confirm(&page);
    page.wait_for("the unloaded model", |page| {
        page.text(&format!("{LLAMA_ROW} .state"))
            .is_some_and(|state| state.contains("not_running"))
    });
    assert!(server.worker_pids().is_empty());

    // Pulled from the hub with its progress, then listed as a model.
    page.type_into("#pull-model", PULLED);
    page.click("#pull-start");
    confirm(&page);
    page.wait_for("the pull to finish", |page| {
        page.text("#pull-progress")
            .is_some_and(|progress| progress.contains("Pulled"))
    });
    page.wait_for("the pulled model's row", |page| {
        page.visible(&format!("#models tr[data-model=\"{PULLED}\"]")) == 1
    });
    page.screenshot("models-pulled");

    // The views by keyboard: Tab to the memory link, Enter.
    page.script("document.activeElement?.blur(); window.focus();", vec![]);
    let mut presses = 0;
    while page.script(
        "return document.activeElement?.getAttribute('href');",
        vec![],
    ) != json!("#memory")
    {
        assert!(presses < 60, "Tab never reached the memory view's link");
        page.press(TAB);
        presses += 1;
    }
    page.press(ENTER);
    page.wait_for("the memory view", |page| page.visible("#view-memory") == 1);
    page.screenshot("memory");
    page.click("a[href=\"#cache\"]");
    page.wait_for("the cache view", |page| page.visible("#view-cache") == 1);
    page.screenshot("cache");

    // A chat streams its answer, and the page shows it as a curl command without the key.
    page.click("a[href=\"#chat\"]");
    page.wait_for("llama among the chat models", |page| {
        page.script(
            "return [...document.querySelectorAll('#chat-model option')].some(o => o.value === 'llama');",
            vec![],
        ) == json!(true)
    });
    page.script(
        "const select = document.querySelector('#chat-model'); select.value = 'llama';
         select.dispatchEvent(new Event('change'));",
        vec![],
    );
    page.type_into("#chat-max-tokens", "8");
    page.type_into("#chat-input", "Say hello.");
    page.click("#chat-send");
    page.wait_for("the streamed answer and its usage", |page| {
        let answer = page.text("#chat-answer").unwrap_or_default();
        let stats = page.text("#chat-stats").unwrap_or_default();
        !answer.trim().is_empty() && stats.contains(" output")
    });
    let curl = page.text("#chat-curl").unwrap_or_default();
    assert!(
        curl.contains("curl")
            && curl.contains("/v1/chat/completions")
            && curl.contains("\"max_tokens\":8"),
        "{curl}"
    );
    assert!(
        !curl.contains("client-key") && !curl.contains("admin-key"),
        "{curl}"
    );
    page.screenshot("chat");

    // Two turns that part after their common start: the second's row says where.
    for fruit in ["apples", "pears"] {
        let asked = json!({
            "model": "llama",
            "messages": [{"role": "user", "content": format!("Tell me about {fruit}.")}],
            "max_tokens": 2,
        });
        let answer = client()
            .post(server.url("/v1/chat/completions"))
            .bearer_auth("client-key")
            .json(&asked)
            .send()
            .unwrap();
        assert_eq!(answer.status(), 200);
    }

    // The activity lists the page's chat as it happened, and the log its lines.
    page.click("a[href=\"#activity\"]");
    page.wait_for(
        "the chats in the activity, one parted from the cache",
        |page| {
            page.text("#activity").is_some_and(|rows| {
                rows.contains("chat")
                    && rows.contains("llama")
                    && rows.contains("diverged at token")
            })
        },
    );
    page.wait_for("the log tail", |page| {
        page.text("#log").is_some_and(|log| log.contains("llama"))
    });
    page.screenshot("activity");

    // The page's open activity stream does not hold up the server's stop.
    server.signal(Signal::SIGTERM);
    assert!(server.wait().success());
    let log = server.log_lines().join("\n");
    assert!(
        log.contains("stopped") && !log.contains("drain timeout"),
        "{log}"
    );
}
