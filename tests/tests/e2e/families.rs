//! Every model family corral serves, through `corral serve` and the official OpenAI Python SDK
//! (`tests/sdk/openai_families.py`): each family's tiny checkpoint, served with the chat
//! template its real models ship (`corral_tests::families`), answers a chat, a call forced to a
//! named tool (parsed into `tool_calls`, its arguments valid for the tool's schema) and a stream
//! (chunks, one finish reason, `[DONE]`); and the worker reads the family's formats off its
//! template: a call in the family's own syntax comes back parsed, a `<think>` block (as the
//! family writes it) as reasoning exactly for the families that think. One server serves them all, each family its own model.

use corral_tests::families::FAMILIES;
use corral_tests::sdk;
use corral_tests::server::{Dirs, Server};
use corral_worker::model::SUPPORTED_ARCHITECTURES;
use serde_json::{Value, json};

#[test]
fn every_family_chats_calls_tools_streams_and_has_its_formats_read_off_its_template() {
    let dirs = Dirs::generated([]);
    for family in FAMILIES {
        family.write_model(&dirs.models.path().join(family.arch));
    }
    let server = Server::start(&dirs);
    let arguments = r#"{"city": "Paris", "unit": "celsius"}"#;
    let families: Vec<Value> = FAMILIES
        .iter()
        .map(|family| {
            json!({
                "model": family.arch,
                "call_grammar": family.call_grammar("get_weather", arguments),
                "thinks": family.thinks,
                "thinking_output": family.thinking_output(),
                "thinking_grammar": family.thinking_grammar(),
                "thinking_kwargs": serde_json::from_str::<Value>(family.thinking_kwargs).unwrap(),
            })
        })
        .collect();
    let stdout = sdk::run(
        "openai_families.py",
        &server.url("/v1"),
        &[&Value::from(families).to_string()],
    );
    let report: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("the script printed {stdout}"));
    for family in FAMILIES {
        eprintln!("{}: {}", family.arch, report[family.arch]);
    }
    let untested: Vec<&&str> = SUPPORTED_ARCHITECTURES
        .iter()
        .filter(|arch| !FAMILIES.iter().any(|family| family.arch == **arch))
        .collect();
    if !untested.is_empty() {
        eprintln!("served architectures without a family here yet: {untested:?}");
    }
}
