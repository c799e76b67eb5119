//! A worker group whose rank 1 runs on another host: `corral serve`s on loopback, each with its
//! own state directory, key and models, one the coordinator and the others its members
//! (`[cluster] listen`). The coordinator asks the member, over a session both keys prove, to
//! start the rank from its own copy of the model; the group answers as one worker does, and
//! lives and dies as one: a rank killed or stopped there, or the member gone, ends the group,
//! and nothing is left on either host. Starts a host cannot serve fail naming the host.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use corral_tests::server::{Dirs, Server, alive};
use corral_tests::{binary, wait_until};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::worker_group::{completion, signal_mid_stream, toolchain};

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

/// A corral on loopback that takes rank starts from the hosts whose keys are `coordinators`
/// (`[cluster] listen`); `prepare` puts its models in place and gives the top of its config.
struct Host {
    key: String,
    listen: u16,
    server: Server,
    /// Removed after the server has ended.
    _dirs: Dirs,
}

impl Host {
    fn start(coordinators: &str, prepare: impl FnOnce(&Dirs) -> String) -> Self {
        let dirs = Dirs::generated([]);
        let (key, listen) = (key(dirs.state.path()), free_port());
        let config = dirs.write_config(&format!(
            "{}[cluster]\nlisten = \"127.0.0.1:{listen}\"\ncoordinators = [\"{coordinators}\"]\n",
            prepare(&dirs)
        ));
        let server = Server::start_with(&dirs, &["--config".as_ref(), config.as_os_str()]);
        Self {
            key,
            listen,
            server,
            _dirs: dirs,
        }
    }

    /// The coordinator's `[cluster.hosts.NAME]` for this host, its ranks joining the ring at
    /// `ring`.
    fn entry(&self, name: &str, ring: u16) -> String {
        format!(
            "[cluster.hosts.{name}]\naddress = \"127.0.0.1:{}\"\nkey = \"{}\"\nring = \"127.0.0.1:{ring}\"\n",
            self.listen, self.key
        )
    }
}

#[test]
fn a_group_with_a_rank_on_a_member_host_answers_as_one_worker_and_ends_whole_on_any_fault() {
    let checkpoint = toolchain("qwen3/hf");
    let coordinator_dirs = Dirs::generated([]);
    let coordinator_key = key(coordinator_dirs.state.path());
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
    // The member: the model, the group's draft model (which each host finds in its own models),
    // and a copy whose config.json differs.
    let member = Host::start(&coordinator_key, |dirs| {
        copy_dir(&checkpoint, &dirs.models.path().join("spread"));
        std::os::unix::fs::symlink(&checkpoint, dirs.models.path().join("alone")).unwrap();
        copy_dir(&checkpoint, &dirs.models.path().join("altered"));
        let config = dirs.models.path().join("altered/config.json");
        let altered = std::fs::read_to_string(&config).unwrap().replace('{', "{ ");
        std::fs::write(config, altered).unwrap();
        String::new()
    });
    assert_ne!(member.key, coordinator_key);
    // A host that takes ranks from the member's key only.
    let stranger = Host::start(&member.key, |_| String::new());
    // A host whose memory budget has no room for a rank.
    let cramped = Host::start(&coordinator_key, |dirs| {
        copy_dir(&checkpoint, &dirs.models.path().join("cramped"));
        "memory_ceiling = \"1MiB\"\n".to_owned()
    });
    // A host whose ranks take seconds to start (its worker sleeps first), killed meanwhile.
    let slow = Host::start(&coordinator_key, |dirs| {
        copy_dir(&checkpoint, &dirs.models.path().join("vanishing"));
        let worker = dirs.state.path().join("slow-worker.sh");
        std::fs::write(
            &worker,
            format!(
                "#!/bin/sh\n[ -n \"$MLX_RANK\" ] && sleep 3\nexec '{}' \"$@\"\n",
                binary("corral-worker").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
        format!("worker_binary = \"{}\"\n", worker.display())
    });
    let (ring, member_ring, closed) = (free_port(), free_port(), free_port());
    let group = |model: &str, host: &str| {
        format!("[models.{model}]\nhosts = [\"localhost\", \"{host}\"]\n")
    };
    let coordinator_config = coordinator_dirs.write_config(&format!(
        "group_heartbeat_timeout_secs = 3\n[cluster]\nring = \"127.0.0.1:{ring}\"\n\
         {}{}{}{}\
         [cluster.hosts.impostor]\naddress = \"127.0.0.1:{}\"\nkey = \"{coordinator_key}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         [cluster.hosts.unreachable]\naddress = \"127.0.0.1:{closed}\"\nkey = \"{}\"\nring = \"127.0.0.1:{member_ring}\"\n\
         {}{}{}{}{}{}{}{}",
        member.entry("member", member_ring),
        stranger.entry("stranger", member_ring),
        cramped.entry("cramped", member_ring),
        slow.entry("slow", member_ring),
        member.listen,
        member.key,
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
        assert!(member.server.worker_pids().is_empty(), "{model}");
        assert!(cramped.server.worker_pids().is_empty(), "{model}");
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
    assert_eq!(
        member.server.worker_pids(),
        [rank],
        "the member runs the rank"
    );
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
        signal_mid_stream(response, "\"text\"", rank, signal);
        wait_until("both ranks to end", || !alive(rank0) && !alive(rank));
        wait_until("no rank left on the member", || {
            member.server.worker_pids().is_empty()
        });
        assert_eq!(coordinator.worker_row("alone")["pid"], alone);
        assert_eq!(completion(&coordinator, "spread", prompts[0]), first);
        assert_ne!(remote_rank(&coordinator), rank);
    }

    // Unloading the group ends its rank on the member too, which the member confirms with what
    // the rank held there.
    let rank = remote_rank(&coordinator);
    wait_until("the member's footprint report", || {
        coordinator.worker_row("spread")["ranks"][1]["footprint_bytes"]
            .as_u64()
            .is_some_and(|bytes| bytes > 0)
    });
    let unload = coordinator.post("/v1/models/spread/unload", &json!({}));
    assert!(unload.status().is_success());
    let stopped: Value = unload.json().unwrap();
    let ranks = stopped["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 1, "{stopped}");
    assert_eq!(
        (&ranks[0]["rank"], &ranks[0]["host"], &ranks[0]["pid"]),
        (&json!(1), &json!("member"), &json!(rank)),
        "{stopped}"
    );
    assert_eq!(ranks[0]["confirmed"], true, "{stopped}");
    assert!(ranks[0]["freed_bytes"].as_u64().unwrap() > 0, "{stopped}");
    assert!(!alive(rank), "the rank ended before the unload answered");
    wait_until("the member to reap it", || {
        member.server.worker_pids().is_empty()
    });

    // A member gone while its rank starts: the start fails naming the host, and the rank it was
    // starting ends too.
    let message = std::thread::scope(|scope| {
        let starting = scope.spawn(|| refused(&coordinator, "vanishing"));
        wait_until("the slow host's rank to start", || {
            !slow.server.worker_pids().is_empty()
        });
        let rank = slow.server.worker_pids()[0];
        slow.server.signal(Signal::SIGKILL);
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
    member.server.signal(Signal::SIGKILL);
    wait_until("the orphaned rank to end", || !alive(rank));
    wait_until("rank 0 to end", || !alive(rank0));
    assert_eq!(coordinator.worker_row("alone")["pid"], alone);
    drop(member);
}

/// `[cluster] backend = "jaccl"` starts each rank on MLX's JACCL backend, with the RDMA device
/// every host names to every other. MLX's Linux build has none (JACCL is RDMA over Thunderbolt
/// on macOS), so here the start fails naming the backend, and no rank is left on either host.
#[cfg(target_os = "linux")]
#[test]
fn a_jaccl_group_fails_its_start_naming_the_backend_where_mlx_has_none() {
    let checkpoint = toolchain("qwen3/hf");
    let coordinator_dirs = Dirs::generated([]);
    std::os::unix::fs::symlink(&checkpoint, coordinator_dirs.models.path().join("spread")).unwrap();
    let member = Host::start(&key(coordinator_dirs.state.path()), |dirs| {
        copy_dir(&checkpoint, &dirs.models.path().join("spread"));
        String::new()
    });
    let config = coordinator_dirs.write_config(&format!(
        "[cluster]\nbackend = \"jaccl\"\nring = \"127.0.0.1:{}\"\nrdma = {{ member = \"rdma_en3\" }}\n\
         {}rdma = {{ localhost = \"rdma_en3\" }}\n\
         [models.spread]\nhosts = [\"localhost\", \"member\"]\n",
        free_port(),
        member.entry("member", free_port()),
    ));
    let coordinator = Server::start_with(
        &coordinator_dirs,
        &["--config".as_ref(), config.as_os_str()],
    );
    let message = refused(&coordinator, "spread");
    assert!(
        message.contains("MLX was built without its jaccl distributed backend"),
        "{message}"
    );
    wait_until("no rank on either host", || {
        coordinator.worker_pids().is_empty() && member.server.worker_pids().is_empty()
    });
}
