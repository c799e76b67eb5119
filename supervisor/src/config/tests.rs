//! The layers (defaults, file, flags), each table's keys and their checks, and the errors that
//! name the file or key at fault.

use super::*;

#[test]
fn no_file_and_no_flags_give_loopback_defaults() {
    let config = Config::load(None, Overrides::default()).unwrap();
    assert_eq!(config, Config::default());
    assert!(config.host.is_loopback());
}

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(
        &file,
        "port = 9000\nmodels_dirs = [\"/models\"]\ndrain_timeout_secs = 3\n\
         responses_store_size = 5\n[aliases]\nfast = \"tiny\"\n",
    )
    .unwrap();
    let config = Config::load(
        Some(&file),
        Overrides {
            port: Some(9100),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(config.port, 9100);
    assert_eq!(config.models_dirs, [PathBuf::from("/models")]);
    assert_eq!(config.drain_timeout, Duration::from_secs(3));
    assert_eq!(config.aliases["fast"], "tiny");
    assert_eq!(config.responses_store_size, 5);
}

#[test]
fn a_models_sampling_defaults_and_tool_choice_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(
        &file,
        "[models.\"org/qwen\"]\ntemperature = 0.6\ntop_p = 0.95\ntop_k = 20\nmin_p = 0.0\n\
         repetition_penalty = 1.05\npresence_penalty = 1.5\nfrequency_penalty = -0.5\n\
         max_tokens = 64\nstop = [\"END\"]\ntool_choice = \"required\"\n",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    let settings = &config.models["org/qwen"];
    assert_eq!(
        settings.sampling(),
        SamplingValues {
            temperature: Some(0.6),
            top_p: Some(0.95),
            top_k: Some(20),
            min_p: Some(0.0),
            repetition_penalty: Some(1.05),
            presence_penalty: Some(1.5),
            frequency_penalty: Some(-0.5),
            max_tokens: Some(64),
            stop: Some(vec!["END".to_owned()]),
        }
    );
    assert_eq!(settings.tool_choice.as_deref(), Some("required"));

    std::fs::write(&file, "[models.m]\ntop_p = 1.5\n").unwrap();
    let error = format!(
        "{:#}",
        Config::load(Some(&file), Overrides::default()).unwrap_err()
    );
    assert!(
        error.contains("models.\"m\"") && error.contains("top_p"),
        "{error}"
    );
}

#[test]
fn memory_settings_and_per_model_overrides_come_from_the_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(
        &file,
        "memory_ceiling = \"6GiB\"\nidle_timeout_secs = 600\nmax_loaded_models = 3\n\
         [models.big]\nidle_timeout_secs = 60\n[models.chat]\npinned = true\n",
    )
    .unwrap();
    let config = Config::load(
        Some(&file),
        Overrides {
            memory_ceiling: Some("50%".parse().unwrap()),
            admission_wait_secs: Some(5),
            pinned: vec!["code".to_owned()],
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(config.memory.ceiling, Some("50%".parse().unwrap()));
    assert_eq!(config.memory.max_loaded_models, Some(3));
    assert_eq!(config.memory.admission_wait, Duration::from_secs(5));
    assert_eq!(config.idle_timeout("big"), Some(Duration::from_secs(60)));
    assert_eq!(config.idle_timeout("other"), Some(Duration::from_secs(600)));
    let pinned: Vec<&str> = config.pinned_models().collect();
    assert_eq!(pinned, ["chat", "code"]);
}

#[test]
fn each_library_is_searched_unless_the_file_turns_it_off() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(&file, "[discovery]\nollama = false\n").unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(
        config.discovery,
        DiscoveryConfig {
            huggingface: true,
            ollama: false,
            lmstudio: true,
        }
    );
}

#[test]
fn watermarks_out_of_order_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(
        &file,
        "memory_soft_watermark = 0.9\nmemory_hard_watermark = 0.8\n",
    )
    .unwrap();
    let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
    assert!(format!("{error:#}").contains("watermarks"), "{error:#}");
}

#[test]
fn batching_is_unset_by_default_and_a_models_max_sequences_wins_over_the_global_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    assert_eq!(Config::default().max_sequences("any"), None);
    std::fs::write(
        &file,
        "[batching]\nmax_sequences = 8\nprefill_chunk = 512\n\
         [models.\"solo\"]\nmax_sequences = 1\n[models.other]\npinned = true\n",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(
        config.batching,
        BatchingConfig {
            max_sequences: Some(8),
            prefill_chunk: Some(512),
        }
    );
    assert_eq!(config.max_sequences("solo"), Some(1));
    assert_eq!(config.max_sequences("other"), Some(8));
    assert_eq!(config.max_sequences("unlisted"), Some(8));

    std::fs::write(&file, "[models.solo]\nmax_sequences = 2\n").unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(config.batching, BatchingConfig::default());
    assert_eq!(config.max_sequences("solo"), Some(2));
    assert_eq!(config.max_sequences("unlisted"), None);
}

#[test]
fn batching_values_the_worker_would_refuse_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    for (text, key) in [
        (
            "[batching]\nmax_sequences = 0\n",
            "batching.max_sequences = 0",
        ),
        (
            "[batching]\nmax_sequences = 257\n",
            "batching.max_sequences = 257",
        ),
        (
            "[batching]\nprefill_chunk = 15\n",
            "batching.prefill_chunk = 15",
        ),
        (
            "[batching]\nprefill_chunk = 65537\n",
            "batching.prefill_chunk = 65537",
        ),
        (
            "[models.\"big\"]\nmax_sequences = 300\n",
            "models.\"big\".max_sequences = 300",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
        assert!(format!("{error:#}").contains(key), "{text}: {error:#}");
    }
    std::fs::write(
        &file,
        "[batching]\nmax_sequences = 256\nprefill_chunk = 16\n[models.one]\nmax_sequences = 1\n",
    )
    .unwrap();
    Config::load(Some(&file), Overrides::default()).unwrap();
}

#[test]
fn the_log_table_sets_rotation_and_the_flag_wins_for_its_dir() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    assert_eq!(Config::default().log.dir, None);
    std::fs::write(
        &file,
        "[log]\ndir = \"/var/log/corral\"\nmax_bytes = 65536\nkeep = 3\n",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(
        config.log,
        LogConfig {
            dir: Some("/var/log/corral".into()),
            max_bytes: 65536,
            keep: 3,
        }
    );
    let flagged = Overrides {
        log_dir: Some("/tmp/logs".into()),
        ..Overrides::default()
    };
    let config = Config::load(Some(&file), flagged).unwrap();
    assert_eq!(config.log.dir, Some("/tmp/logs".into()));
    assert_eq!(config.log.keep, 3);

    for (text, key) in [
        ("[log]\nmax_bytes = 100\n", "log.max_bytes = 100"),
        ("[log]\nkeep = 0\n", "log.keep = 0"),
    ] {
        std::fs::write(&file, text).unwrap();
        let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
        assert!(format!("{error:#}").contains(key), "{text}: {error:#}");
    }
}

#[test]
fn an_unknown_key_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(&file, "prot = 1\n").unwrap();
    let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
    assert!(format!("{error:#}").contains("corral.toml"), "{error:#}");
}

#[test]
fn a_models_gguf_requantize_is_read_and_an_unknown_value_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(&file, "[models.q6k]\ngguf_requantize = \"6bit\"\n").unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(
        config.models["q6k"].gguf_requantize,
        Some(GgufRequantize::Bits6)
    );
    assert!(!config.gguf_exact_k_quants("q6k"));
    std::fs::write(&file, "[models.q4km]\ngguf_exact_k_quants = true\n").unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert!(config.gguf_exact_k_quants("q4km"));
    std::fs::write(&file, "[models.q6k]\ngguf_requantize = \"3bit\"\n").unwrap();
    let error = format!(
        "{:#}",
        Config::load(Some(&file), Overrides::default()).unwrap_err()
    );
    assert!(error.contains("3bit") && error.contains("8bit"), "{error}");
}

#[test]
fn image_urls_are_fetched_on_loopback_only_unless_the_file_says() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    let load = |text: &str, host: [u8; 4]| {
        std::fs::write(&file, text).unwrap();
        let overrides = Overrides {
            host: Some(IpAddr::from(host)),
            ..Overrides::default()
        };
        Config::load(Some(&file), overrides).unwrap()
    };
    let loopback = load("", [127, 0, 0, 1]);
    assert!(loopback.fetches_image_urls());
    assert_eq!(loopback.images, ImagesConfig::default());
    assert_eq!(loopback.images.fetch_max_bytes, 20 * 1024 * 1024);
    assert_eq!(loopback.images.fetch_timeout_secs, 10);
    assert!(!load("", [0, 0, 0, 0]).fetches_image_urls());
    assert!(load("[images]\nfetch_urls = true\n", [0, 0, 0, 0]).fetches_image_urls());
    let off = load(
        "[images]\nfetch_urls = false\nfetch_max_bytes = 1024\nfetch_timeout_secs = 2\n",
        [127, 0, 0, 1],
    );
    assert!(!off.fetches_image_urls());
    assert_eq!(off.images.fetch_max_bytes, 1024);
    assert_eq!(off.images.fetch_timeout_secs, 2);
}

#[test]
fn a_models_image_limits_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(
        &file,
        "[models.vl]\nmax_images = 4\nimage_max_pixels = 1003520\nimage_min_pixels = 3136\n",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    let vl = &config.models["vl"];
    assert_eq!(
        (vl.max_images, vl.image_max_pixels, vl.image_min_pixels),
        (Some(4), Some(1_003_520), Some(3136))
    );
}

#[test]
fn a_models_speculation_is_read_and_an_unknown_method_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(
        &file,
        "[models.m]
speculative = \"ngram\"
draft_tokens = 6
",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    let m = &config.models["m"];
    assert_eq!(
        (m.speculative, m.draft_tokens),
        (Some(SpeculativeMethod::Ngram), Some(6))
    );
    std::fs::write(
        &file,
        "[models.m]
speculative = \"dflash\"
",
    )
    .unwrap();
    let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
    assert!(format!("{error:#}").contains("dflash"), "{error:#}");
    std::fs::write(&file, "[models.m]\nspeculative = \"mtp\"\n").unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(
        config.models["m"].speculation(),
        Some(SpeculativeMethod::Mtp)
    );
    // Naming a draft model is enough to draft with it.
    std::fs::write(&file, "[models.m]\ndraft = \"small\"\n").unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(
        config.models["m"].speculation(),
        Some(SpeculativeMethod::Draft)
    );
    assert_eq!(config.drafts()["m"], "small");
    // A draft method without a draft, or a model drafting for itself, is refused.
    for (text, expected) in [
        ("speculative = \"draft\"\n", "needs a draft model"),
        ("draft = \"m\"\n", "names the model itself"),
    ] {
        std::fs::write(&file, format!("[models.m]\n{text}")).unwrap();
        let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{error:#}");
    }
    // With another method the draft model is loaded all the same, for requests that ask for it.
    std::fs::write(
        &file,
        "[models.m]\ndraft = \"small\"\nspeculative = \"ngram\"\n",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(config.drafts()["m"], "small");
    assert_eq!(
        config.models["m"].speculation(),
        Some(SpeculativeMethod::Ngram)
    );
}

#[test]
fn a_worker_group_is_read_and_a_group_corral_cannot_start_is_refused_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("corral.toml");
    std::fs::write(
        &file,
        "group_heartbeat_timeout_secs = 7\n[models.m]\nhosts = [\"localhost\", \"127.0.0.1\", \"localhost\"]\nparallel = \"pipeline\"\n",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(config.models["m"].ranks(), 3);
    assert_eq!(config.models["m"].parallel, Some(Parallel::Pipeline));
    assert_eq!(
        config.models["m"].group_plan(),
        GroupPlan {
            hosts: vec!["localhost".into(), "127.0.0.1".into(), "localhost".into()],
            parallel: "pipeline"
        }
    );
    assert_eq!(config.group_heartbeat_timeout, Duration::from_secs(7));
    assert_eq!(ModelSettings::default().ranks(), 1);
    for (text, expected) in [
        (
            "hosts = [\"localhost\", \"mac-2.local\"]",
            "host \"mac-2.local\" is not known",
        ),
        ("hosts = []", "hosts is empty"),
        (
            "hosts = [\"localhost\"]\nparallel = \"expert\"",
            "unknown variant",
        ),
    ] {
        std::fs::write(&file, format!("[models.m]\n{text}\n")).unwrap();
        let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{text}: {error:#}");
    }
    std::fs::write(
        &file,
        "[models.m]\nhosts = [\"localhost\", \"localhost\"]\nparallel = \"tensor\"\n",
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(config.models["m"].group_plan().parallel, "tensor");
    // A host of [cluster.hosts] may run a rank, after this host's rank 0.
    let key = "ab".repeat(32);
    let cluster = format!(
        "[cluster]\nring = \"10.0.0.1:7840\"\n[cluster.hosts.mac2]\naddress = \"10.0.0.2:7830\"\nkey = \"{key}\"\nring = \"10.0.0.2:7840\"\n"
    );
    std::fs::write(
        &file,
        format!("{cluster}[models.m]\nhosts = [\"localhost\", \"mac2\"]\n"),
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert!(config.models["m"].group_plan().spans_hosts());
    assert_eq!(config.cluster.hosts["mac2"].key.to_string(), key);
    for (text, expected) in [
        (
            "hosts = [\"mac2\", \"localhost\"]",
            "name \"localhost\" first",
        ),
        (
            "hosts = [\"localhost\", \"mac3\"]",
            "host \"mac3\" is not known",
        ),
    ] {
        std::fs::write(&file, format!("{cluster}[models.m]\n{text}\n")).unwrap();
        let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
        assert!(format!("{error:#}").contains(expected), "{text}: {error:#}");
    }
    std::fs::write(&file, cluster.replace(&key, "not-a-key")).unwrap();
    let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
    assert!(format!("{error:#}").contains("64 hex digits"), "{error:#}");
    // JACCL: each host names its RDMA device to each other host; a pair left out is refused.
    let jaccl = cluster.replace(
        "[cluster]\n",
        "[cluster]\nbackend = \"jaccl\"\nrdma = { mac2 = \"rdma_en3\" }\n",
    );
    let group = "[models.m]\nhosts = [\"localhost\", \"mac2\"]\n";
    std::fs::write(
        &file,
        format!("{jaccl}rdma = {{ localhost = \"rdma_en4\" }}\n{group}"),
    )
    .unwrap();
    let config = Config::load(Some(&file), Overrides::default()).unwrap();
    assert_eq!(config.cluster.backend, crate::cluster::Backend::Jaccl);
    std::fs::write(&file, format!("{jaccl}{group}")).unwrap();
    let error = Config::load(Some(&file), Overrides::default()).unwrap_err();
    assert!(
        format!("{error:#}").contains("no RDMA device links host \"mac2\" to \"localhost\""),
        "{error:#}"
    );
}
