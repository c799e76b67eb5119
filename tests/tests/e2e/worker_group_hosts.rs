//! A worker group whose rank 1 runs on another host: two `corral serve` on loopback, each with
//! its own state directory, key and models, one the coordinator and one its member
//! (`[cluster] listen`). The coordinator asks the member, over a session both keys prove, to
//! start the rank from its own copy of the model; the group answers as one worker does, and
//! lives and dies as one: a rank killed or stopped there, or the member gone, ends the group,
//! and nothing is left on either host. Starts a host cannot serve fail naming the host.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use corral_tests::server::{Dirs, Server, alive, sse_events};
use corral_tests::{binary, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

fn toolchain(layout: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/toolchain")
        .join(layout)
}

/// `corral key` for the host whose state is `state`.
fn key(state: &Path) -> String {
    let output = Command::new(binary("corral"))
        .arg("key")
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn completion(server: &Server, model: &str, prompt: &str) -> String {
    let request = json!({"model": model, "prompt": prompt, "max_tokens": 10, "temperature": 0});
    let response = server.post("/v1/completions", &request);
    assert_eq!(response.status(), 200, "{model}: {prompt}");
    let body: Value = response.json().unwrap();
    body["choices"][0]["text"].as_str().unwrap().to_owned()
}

/// A start that fails: the error's message.
fn refused(server: &Server, model: &str) -> String {
    let request = json!({"model": model, "prompt": "Hello", "max_tokens": 2});
    let response = server.post("/v1/completions", &request);
    assert_eq!(response.status(), 503, "{model}");
    let body: Value = response.json().unwrap();
    body["error"]["message"].as_str().unwrap().to_owned()
}

/// The group's rank 1, on the member host: its pid there.
fn remote_rank(coordinator: &Server) -> u32 {
    let row = coordinator.worker_row("spread");
    let ranks = row["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{row}");
    assert_eq!(ranks[0]["host"], "localhost", "{row}");
    assert_eq!(ranks[1]["host"], "member", "{row}");
    ranks[1]["pid"].as_u64().unwrap() as u32
}

#[test]
fn a_group_with_a_rank_on_a_member_host_answers_as_one_worker_and_ends_whole_on_any_fault() {
    let checkpoint = toolchain("qwen3/hf");
    let (member_dirs, coordinator_dirs) = (Dirs::generated([]), Dirs::generated([]));
    let (member_key, coordinator_key) = (
        key(member_dirs.state.path()),
        key(coordinator_dirs.state.path()),
    );
    assert_ne!(member_key, coordinator_key);
    copy_dir(&checkpoint, &member_dirs.models.path().join("spread"));
    // The group's draft model, which each host finds in its own models.
    std::os::unix::fs::symlink(&checkpoint, member_dirs.models.path().join("alone")).unwrap();
    copy_dir(&checkpoint, &member_dirs.models.path().join("altered"));
    let config = member_dirs.models.path().join("altered/config.json");
    let altered = std::fs::read_to_string(&config).unwrap().replace('{', "{ ");
    std::fs::write(config, altered).unwrap();
    for name in [
        "alone",
        "spread",
        "altered",
        "absent",
        "impostor",
        "unreachable",
        "outsider",
        "cramped",
        "vanishing",
    ] {
        std::os::unix::fs::symlink(&checkpoint, coordinator_dirs.models.path().join(name)).unwrap();
    }
    let listen = free_port();
    let member_config = member_dirs.write_config(&format!(
        "[cluster]\nlisten = \"127.0.0.1:{listen}\"\ncoordinators = [\"{coordinator_key}\"]\n"
    ));
    let member = Server::start_with(
        &member_dirs,
        &["--config".as_ref(), member_config.as_os_str()],
    );
    // A host that takes ranks from the member's key only.
    let stranger_dirs = Dirs::generated([]);
    let (stranger_key, stranger_listen) = (key(stranger_dirs.state.path()), free_port());
    let stranger_config = stranger_dirs.write_config(&format!(
        "[cluster]\nlisten = \"127.0.0.1:{stranger_listen}\"\ncoordinators = [\"{member_key}\"]\n"
    ));
    let _stranger = Server::start_with(
        &stranger_dirs,
        &["--config".as_ref(), stranger_config.as_os_str()],
    );
    // A host whose memory budget has no room for a rank.
    let cramped_dirs = Dirs::generated([]);
    copy_dir(&checkpoint, &cramped_dirs.models.path().join("cramped"));
    let (cramped_key, cramped_listen) = (key(cramped_dirs.state.path()), free_port());
    let cramped_config = cramped_dirs.write_config(&format!(
        "memory_ceiling = \"1MiB\"\n[cluster]\nlisten = \"127.0.0.1:{cramped_listen}\"\ncoordinators = [\"{coordinator_key}\"]\n"
    ));
    let cramped = Server::start_with(
        &cramped_dirs,
        &["--config".as_ref(), cramped_config.as_os_str()],
    );
    // A host whose ranks take seconds to start (its worker sleeps first), killed meanwhile.
    let slow_dirs = Dirs::generated([]);
    copy_dir(&checkpoint, &slow_dirs.models.path().join("vanishing"));
    let (slow_key, slow_listen) = (key(slow_dirs.state.path()), free_port());
    let slow_worker = slow_dirs.state.path().join("slow-worker.sh");
    std::fs::write(
        &slow_worker,
        format!(
            "#!/bin/sh\n[ -n \"$MLX_RANK\" ] && sleep 3\nexec '{}' \"$@\"\n",
            binary("corral-worker").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&slow_worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let slow_config = slow_dirs.write_config(&format!(
        "worker_binary = \"{}\"\n[cluster]\nlisten = \"127.0.0.1:{slow_listen}\"\ncoordinators = [\"{coordinator_key}\"]\n",
        slow_worker.display()
    ));
    let slow = Server::start_with(&slow_dirs, &["--config".as_ref(), slow_config.as_os_str()]);
    let (ring, member_ring, closed) = (free_port(), free_port(), free_port());
    let group = |model: &str, host: &str| {
        format!("[models.{model}]\nhosts = [\"localhost\", \"{host}\"]\n")
    };
    let coordinator_config = coordinator_dirs.write_config(&format!(
        "group_heartbeat_timeout_secs = 3\n\
         [cluster]\nring = \"127.0.0.1:{ring}\"\n\
         [cluster.hosts.member]\naddress = \"127.0.0.1:{listen}\"\nkey = \"{member_key}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         [cluster.hosts.impostor]\naddress = \"127.0.0.1:{listen}\"\nkey = \"{coordinator_key}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         [cluster.hosts.unreachable]\naddress = \"127.0.0.1:{closed}\"\nkey = \"{member_key}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         [cluster.hosts.stranger]\naddress = \"127.0.0.1:{stranger_listen}\"\nkey = \"{stranger_key}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         [cluster.hosts.cramped]\naddress = \"127.0.0.1:{cramped_listen}\"\nkey = \"{cramped_key}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         [cluster.hosts.slow]\naddress = \"127.0.0.1:{slow_listen}\"\nkey = \"{slow_key}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         {}{}{}{}{}{}{}{}",
        group("spread", "member") + "draft = \"alone\"\n",
        group("altered", "member"),
        group("absent", "member"),
        group("impostor", "impostor"),
        group("unreachable", "unreachable"),
        group("outsider", "stranger"),
        group("cramped", "cramped"),
        group("vanishing", "slow"),
    ));
    let coordinator = Server::start_with(
        &coordinator_dirs,
        &["--config".as_ref(), coordinator_config.as_os_str()],
    );

    // Starts the member cannot serve fail naming the host and why; nothing starts anywhere.
    for (model, reason) in [
        ("altered", "config.json is"),
        ("absent", "this host serves no model \"absent\""),
        ("impostor", "the other end's key is"),
        ("unreachable", "cannot connect"),
        ("outsider", "takes no ranks from key"),
        ("cramped", "no room for rank 1 of \"cramped\" on this host"),
    ] {
        let message = refused(&coordinator, model);
        assert!(message.contains(reason), "{model}: {message}");
        let host = match model {
            "altered" | "absent" => "member",
            "outsider" => "stranger",
            _ => model,
        };
        assert!(
            message.contains(&format!("host \"{host}\"")),
            "{model}: {message}"
        );
        assert!(coordinator.worker_pids().is_empty(), "{model}");
        assert!(member.worker_pids().is_empty(), "{model}");
        assert!(cramped.worker_pids().is_empty(), "{model}");
    }
    // This host's admission counts only its rank's share of a group that spans hosts: half of
    // the model and half of its draft model, here the model again.
    let estimate = |model: &str| {
        coordinator.worker_row(model)["estimate_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(estimate("spread"), estimate("alone"));

    // The group answers as the model alone does.
    let prompts = ["A rank on another host", "Keys prove both ends"];
    for prompt in prompts {
        assert_eq!(
            completion(&coordinator, "spread", prompt),
            completion(&coordinator, "alone", prompt),
            "{prompt}"
        );
    }
    let alone = coordinator.worker_row("alone")["pid"].as_u64().unwrap() as u32;
    let rank = remote_rank(&coordinator);
    assert_eq!(member.worker_pids(), [rank], "the member runs the rank");
    wait_until("the member's first footprint report", || {
        coordinator.worker_row("spread")["ranks"][1]["footprint_bytes"]
            .as_u64()
            .is_some_and(|bytes| bytes > 0)
    });
    let metrics = coordinator.metrics();
    // Every rank loads the draft model, named to the member by its id, and guesses alike.
    let drafted = "corral_speculative_draft_tokens_total{model=\"spread\"} ";
    assert!(
        metrics.lines().any(|line| line
            .strip_prefix(drafted)
            .is_some_and(|count| count.parse::<f64>().unwrap() > 0.0)),
        "{drafted} in\n{metrics}"
    );
    let series = "corral_worker_rank_footprint_bytes{model=\"spread\",rank=\"1\",host=\"member\"} ";
    assert!(
        metrics.lines().any(|line| line.starts_with(series)),
        "{series} in\n{metrics}"
    );

    // A rank killed there ends its stream with an error at once; one stopped there is found
    // silent at the heartbeat timeout. Both ranks go; the next request starts the group again.
    let first = completion(&coordinator, "spread", prompts[0]);
    for signal in [Signal::SIGKILL, Signal::SIGSTOP] {
        let rank0 = coordinator.worker_row("spread")["pid"].as_u64().unwrap() as u32;
        let rank = remote_rank(&coordinator);
        let stream =
            json!({"model": "spread", "prompt": "Tell", "max_tokens": 1000, "stream": true});
        let response = coordinator.post("/v1/completions", &stream);
        assert_eq!(response.status(), 200);
        let mut events = sse_events(response);
        assert!(events.next().unwrap().contains("\"text\""));
        kill(Pid::from_raw(rank as i32), signal).unwrap();
        let rest: Vec<String> = events.collect();
        let last = rest.last().map_or("", String::as_str);
        assert!(
            last.contains("\"error\"") && !rest.iter().any(|event| event == "[DONE]"),
            "{signal}: {rest:?}"
        );
        wait_until("both ranks to end", || !alive(rank0) && !alive(rank));
        wait_until("no rank left on the member", || {
            member.worker_pids().is_empty()
        });
        assert_eq!(coordinator.worker_row("alone")["pid"], alone);
        assert_eq!(completion(&coordinator, "spread", prompts[0]), first);
        assert_ne!(remote_rank(&coordinator), rank);
    }

    // Unloading the group ends its rank on the member too.
    let rank = remote_rank(&coordinator);
    let unload = coordinator.post("/v1/models/spread/unload", &json!({}));
    assert!(unload.status().is_success(), "{:?}", unload.text());
    wait_until("the member's rank to end", || !alive(rank));
    wait_until("the member to reap it", || member.worker_pids().is_empty());

    // A member gone while its rank starts: the start fails naming the host, and the rank it was
    // starting ends too.
    let message = std::thread::scope(|scope| {
        let starting = scope.spawn(|| refused(&coordinator, "vanishing"));
        wait_until("the slow host's rank to start", || {
            !slow.worker_pids().is_empty()
        });
        let rank = slow.worker_pids()[0];
        slow.signal(Signal::SIGKILL);
        let message = starting.join().unwrap();
        wait_until("the rank it was starting to end", || !alive(rank));
        message
    });
    assert!(
        message.contains("host \"slow\"") && message.contains("closed the connection"),
        "{message}"
    );
    assert!(coordinator.worker_row("vanishing")["pid"].is_null());
    drop(slow);

    // The member gone mid-serve: its rank ends with it, and so does the group here.
    assert_eq!(
        completion(&coordinator, "spread", prompts[1]),
        completion(&coordinator, "alone", prompts[1])
    );
    let (rank0, rank) = (
        coordinator.worker_row("spread")["pid"].as_u64().unwrap() as u32,
        remote_rank(&coordinator),
    );
    member.signal(Signal::SIGKILL);
    wait_until("the orphaned rank to end", || !alive(rank));
    wait_until("rank 0 to end", || !alive(rank0));
    assert_eq!(coordinator.worker_row("alone")["pid"], alone);
    drop(member);
}
