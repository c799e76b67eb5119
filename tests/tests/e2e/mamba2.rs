//! The Mamba-2 hybrids (Nemotron-H dense and with Nemotron 3's experts, Granite 4) made by the
//! real tools (`tests/data/toolchain/{nemotron_h,nemotron_h_moe,granitemoehybrid}`): each layout
//! matches its reference alone, decoding packed in a batch of four beside other sequences' decode
//! steps and prompt chunks, and after a restore from two prefix-cache blocks whose boundary
//! snapshot (the convolution's inputs and the scan's state of each Mamba-2 layer) went through
//! the SSD tier's payload format. The GGUF layout checked is llama.cpp's F32 file, against
//! llama.cpp's logits.

use std::path::Path;

use corral_worker::gguf::GgufModel;
use corral_worker::model::Model;
use serde_json::Value;

use crate::logit_checks::{check_after_restore, check_alone, check_in_batch, read_reference};

pub(crate) const ARCHITECTURES: [&str; 3] = ["nemotron_h", "nemotron_h_moe", "granitemoehybrid"];

#[test]
fn mamba2_hybrids_match_their_references_alone_in_a_batch_and_after_a_restore() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/toolchain");
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("index.json")).unwrap()).unwrap();
    let mut checked = Vec::new();
    for architecture in ARCHITECTURES {
        let layouts = index["architectures"][architecture]["layouts"]
            .as_object()
            .unwrap_or_else(|| panic!("{architecture}: no layouts in index.json"));
        // Layouts held to their reference within the float tolerance; those held to
        // transformers' within a quantization bound are checked in toolchain.rs.
        for (layout, record) in layouts {
            let gguf = layout.starts_with("gguf");
            if record.get("not_made").is_some()
                || record.get("quantization_bound").is_some()
                || (gguf && layout != "gguf-f32")
            {
                continue;
            }
            let name = format!("{architecture}/{layout}");
            let reference_layout = record["reference_layout"].as_str().unwrap_or(layout);
            let reference = read_reference(&data.join(architecture).join(reference_layout));
            let dir = data.join(architecture).join(layout);
            let model = if gguf {
                GgufModel::load(&dir.join("model.gguf"))
                    .map(|loaded| loaded.model)
                    .map_err(|error| error.to_string())
            } else {
                Model::load(&dir).map_err(|error| error.to_string())
            }
            .unwrap_or_else(|error| panic!("{name}: {error}"));
            let alone = check_alone(&name, &model, &reference);
            let in_batch = check_in_batch(&name, &model, &reference);
            let restored = check_after_restore(&name, &model, &reference);
            checked.push(format!(
                "{name}: largest differences alone {alone:.1e}, in a batch {in_batch:.1e}, \
                 after a restore {restored:.1e}"
            ));
        }
    }
    eprintln!("checked:\n{}", checked.join("\n"));
    assert!(checked.len() >= 2, "no Mamba-2 layout was checked");
}
