//! The human-readable output of the operator commands: aligned columns like `ollama ps`.

use serde_json::Value;

use crate::memory::format_bytes;

/// A worker's pid, or a group's ranks' pids in rank order, each on another host with `@host`.
fn pids(worker: &Value) -> String {
    match worker["ranks"].as_array() {
        Some(ranks) => ranks
            .iter()
            .map(|rank| match rank["host"].as_str() {
                Some(host) if host != "localhost" => format!("{}@{host}", text(&rank["pid"])),
                _ => text(&rank["pid"]),
            })
            .collect::<Vec<_>>()
            .join(","),
        None => text(&worker["pid"]),
    }
}

pub fn ps(workers: &Value) -> String {
    let mut rows = vec![
        [
            "NAME",
            "KIND",
            "PID",
            "STATE",
            "FOOTPRINT",
            "MLX ACTIVE",
            "LEASES",
            "ACTIVE",
            "QUEUED",
            "UPTIME",
            "IDLE",
            "RESTARTS",
            "LAST EXIT",
        ]
        .map(str::to_owned),
    ];
    for worker in list(workers) {
        // A model that never ran has nothing to show; one that ran and ended shows its exit.
        if worker["state"] == "not_running" && worker["last_exit"].is_null() {
            continue;
        }
        let stats = &worker["stats"];
        rows.push([
            text(&worker["model"]),
            text(&worker["kind"]),
            pids(&worker),
            text(&worker["state"]),
            bytes(&worker["footprint_bytes"]),
            bytes(&stats["mlx_active_bytes"]),
            text(&worker["leases"]),
            text(&stats["active_sequences"]),
            text(&stats["queued_requests"]),
            seconds(&worker["uptime_secs"]),
            seconds(&worker["idle_secs"]),
            text(&worker["restarts"]),
            text(&worker["last_exit"]),
        ]);
    }
    align(&rows)
}

/// One row per model. STATE comes last: an unservable model's reason can be long, and at the
/// end of its line it pushes no other column out of place.
pub fn models(status: &Value) -> String {
    let mut rows = vec![
        [
            "ID", "KIND", "SOURCE", "FORMAT", "QUANT", "SIZE", "PARAMS", "MTP", "PID", "MEMORY",
            "PINNED", "STATE",
        ]
        .map(str::to_owned),
    ];
    for model in list(status) {
        let state = match model["unservable"].as_str() {
            Some(reason) => format!("unservable: {reason}"),
            None => text(&model["state"]),
        };
        rows.push([
            text(&model["id"]),
            text(&model["kind"]),
            text(&model["source"]),
            text(&model["format"]),
            text(&model["quantization"]),
            bytes(&model["size_bytes"]),
            parameters(&model["parameters"], &model["active_parameters"]),
            // Only a checkpoint that has the layers or lost them says so.
            match model["mtp"].as_str() {
                Some(mtp @ ("kept" | "dropped")) => mtp.to_owned(),
                _ => String::new(),
            },
            text(&model["pid"]),
            bytes(&model["memory_bytes"]),
            if model["pinned"] == true { "yes" } else { "" }.to_owned(),
            state,
        ]);
    }
    align(&rows)
}

pub fn status(url: &str, memory: &Value, workers: &Value) -> String {
    let count = |state: &str| {
        list(workers)
            .iter()
            .filter(|worker| worker["state"] == state)
            .count()
    };
    format!(
        "corral is up at {url}\n\
         memory: {} used of a {} ceiling (soft {}, hard {}){}\n\
         system: {} available of {}\n\
         workers: {} ready, {} starting, {} stopping, {} failed, of {} models\n",
        bytes(&memory["used_bytes"]),
        bytes(&memory["ceiling_bytes"]),
        bytes(&memory["soft_watermark_bytes"]),
        bytes(&memory["hard_watermark_bytes"]),
        if memory["refusing_loads"] == true {
            "; refusing new loads"
        } else {
            ""
        },
        bytes(&memory["system_available_bytes"]),
        bytes(&memory["system_total_bytes"]),
        count("ready"),
        count("starting"),
        count("stopping"),
        count("failed"),
        list(workers).len(),
    )
}

pub fn stopped(verb: &str, stopped: &Value) -> String {
    format!(
        "{verb} {} (pid {}, {}) in {:.0} ms, freeing {}\n",
        text(&stopped["model"]),
        text(&stopped["pid"]),
        text(&stopped["step"]),
        stopped["duration_ms"].as_f64().unwrap_or(0.0),
        bytes(&stopped["freed_bytes"]),
    )
}

fn list(value: &Value) -> Vec<Value> {
    value["data"].as_array().cloned().unwrap_or_default()
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn bytes(value: &Value) -> String {
    value.as_u64().map_or_else(|| "-".to_owned(), format_bytes)
}

/// `30.5B`, and for a mixture of experts `30.5B/3.3B` (all, then active per token).
fn parameters(total: &Value, active: &Value) -> String {
    let Some(total) = total.as_u64() else {
        return "-".to_owned();
    };
    match active.as_u64() {
        Some(active) => format!("{}/{}", count(total), count(active)),
        None => count(total),
    }
}

fn count(value: u64) -> String {
    let value = value as f64;
    match value {
        1e9.. => format!("{:.1}B", value / 1e9),
        1e6.. => format!("{:.1}M", value / 1e6),
        1e3.. => format!("{:.1}K", value / 1e3),
        _ => format!("{value}"),
    }
}

fn seconds(value: &Value) -> String {
    let Some(secs) = value.as_f64() else {
        return "-".to_owned();
    };
    let secs = secs as u64;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{}s", secs / 60, secs % 60),
        _ => format!("{}h{}m", secs / 3600, secs % 3600 / 60),
    }
}

fn align<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ps_lists_a_worker_groups_ranks_pids_in_rank_order() {
        let workers = json!({"data": [
            {"model": "big", "kind": "chat", "pid": 50, "state": "ready", "restarts": 0,
             "ranks": [{"rank": 0, "host": "localhost", "pid": 50},
                       {"rank": 1, "host": "localhost", "pid": 51},
                       {"rank": 2, "host": "mac2", "pid": 7}]},
        ]});
        let table = ps(&workers);
        let row = table.lines().nth(1).unwrap();
        assert!(
            row.split_whitespace().nth(2) == Some("50,51,7@mac2"),
            "{table}"
        );
    }

    #[test]
    fn ps_shows_running_and_ended_workers_in_aligned_columns() {
        let workers = json!({"data": [
            {"model": "llama", "kind": "chat", "pid": 41, "state": "ready", "footprint_bytes": 41943040,
             "leases": 1, "uptime_secs": 75.2, "idle_secs": 0.5, "restarts": 0,
             "last_exit": null, "stats": {"mlx_active_bytes": 1048576, "active_sequences": 3,
             "queued_requests": 2}},
            {"model": "qwen", "pid": null, "state": "not_running", "restarts": 1,
             "last_exit": "worker pid 7 ended with signal 9", "stats": null},
            {"model": "never", "pid": null, "state": "not_running", "last_exit": null},
        ]});
        let table = ps(&workers);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("NAME   KIND  PID  STATE"), "{table}");
        assert!(lines[0].contains("LEASES  ACTIVE  QUEUED"), "{table}");
        assert!(
            lines[1].contains("40.0 MiB") && lines[1].contains("1m15s"),
            "{table}"
        );
        // LEASES, ACTIVE and QUEUED, each under its header (the last ACTIVE: MLX ACTIVE is
        // another column).
        let column = |header: &str| lines[0].rfind(header).unwrap();
        let cell = |header: &str| lines[1][column(header)..].split_whitespace().next();
        assert_eq!(
            ["LEASES", "ACTIVE", "QUEUED"].map(cell),
            [Some("1"), Some("3"), Some("2")],
            "{table}"
        );
        assert!(
            lines[2].ends_with("worker pid 7 ended with signal 9"),
            "{table}"
        );
    }

    #[test]
    fn models_show_source_format_size_and_why_a_model_cannot_be_served() {
        let status = json!({"data": [
            {"id": "llama3.2:latest", "kind": "chat", "source": "ollama", "format": "gguf",
             "quantization": "Q4_K_M", "size_bytes": 2019377376u64, "unservable": null,
             "state": "ready", "pid": 41, "memory_bytes": 2147483648u64, "pinned": true,
             "parameters": 3212749824u64, "active_parameters": null},
            {"id": "qwen3:30b-a3b", "kind": "chat", "source": "ollama", "format": "gguf",
             "quantization": "Q4_K_M", "size_bytes": 17179869184u64, "unservable": null,
             "state": "not_running", "pid": null, "memory_bytes": null, "pinned": false,
             "parameters": 30532122624u64, "active_parameters": 3335577600u64, "mtp": "dropped"},
            {"id": "llava:7b", "kind": "chat", "source": "ollama", "format": null, "quantization": null,
             "size_bytes": null, "unservable": "a vision model", "state": "not_running",
             "pid": null, "memory_bytes": null, "pinned": false},
        ]});
        let table = models(&status);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(
            lines[0].starts_with("ID               KIND  SOURCE  FORMAT  QUANT   SIZE"),
            "{table}"
        );
        assert!(
            lines[1].contains("gguf")
                && lines[1].contains("1.9 GiB")
                && lines[1].contains(" 3.2B ")
                && lines[1].ends_with("ready"),
            "{table}"
        );
        assert!(lines[2].contains(" 30.5B/3.3B  dropped "), "{table}");
        assert!(
            lines[3].starts_with("llava:7b") && lines[3].ends_with("unservable: a vision model"),
            "{table}"
        );
    }
}
