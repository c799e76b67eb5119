//! DeepSeek V3's and GLM-4.5's next-n layers and Qwen3.5's MTP layer against transformers'
//! `MtpModel` on the toolchain's checkpoints with the release's MTP layer, and on llama.cpp's
//! float32 conversions of them (`scripts/reference/mtp.py`, tests/data/mtp).

use std::path::{Path, PathBuf};

use mlx_rs::Array;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

use crate::loaded::LoadedModel;
use crate::model::Model;
use crate::model::vision_tests::largest_difference;

fn checkpoint(arch: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/data/mtp/{arch}"))
}

#[test]
fn the_mtp_layer_drafts_as_transformers_whole_or_a_position_at_a_time() {
    for arch in ["deepseek_v3", "glm4_moe", "qwen3_5"] {
        let dir = checkpoint(arch);
        drafts_as_transformers(arch, &Model::load(&dir).unwrap(), &dir);
        // The toolchain's checkpoint, as mlx-community's conversions, dropped the layer.
        let dropped = dir.join(format!("../../toolchain/{arch}/hf"));
        assert!(Model::load(&dropped).unwrap().new_mtp_cache().is_none());
    }
}

#[test]
fn llama_cpps_nextn_tensors_draft_as_the_checkpoint_they_were_converted_from() {
    // GLM-4.5's next-n layer and Qwen3.5's `mtp.*` as llama.cpp's converter writes them: the
    // layer's own parts as `blk.{N}.nextn.*` past the trunk, its block as layer N.
    for arch in ["glm4_moe", "qwen3_5"] {
        let gguf = checkpoint(&format!("{arch}-gguf")).join("model.gguf");
        let model = LoadedModel::load(&gguf).unwrap().model;
        drafts_as_transformers(arch, &model, &checkpoint(arch));
    }
}

/// Checks `model`'s logits and its MTP layer's drafts against transformers' for the checkpoint
/// in `dir`.
fn drafts_as_transformers(arch: &str, model: &Model, dir: &Path) {
    let reference = Array::load_safetensors(dir.join("reference.safetensors")).unwrap();
    let prompt: Vec<u32> = reference["prompt"]
        .as_slice::<i32>()
        .iter()
        .map(|&id| id as u32)
        .collect();
    let length = prompt.len() as i32;
    let mut cache = model.new_cache();
    let hidden = model.hidden_states(&prompt, &mut cache).unwrap();
    let logits = model.logits(&hidden).unwrap().index((0, .., ..));
    assert!(largest_difference(&logits, &reference["logits"]) < 1e-3);

    // Row i drafts position i + 2 from the model's state at i and the token at i + 1.
    let expected = &reference["mtp_logits"];
    let mut whole = model.new_mtp_cache().unwrap();
    let before_last = hidden.index((.., ..length - 1, ..));
    let drafted = model
        .mtp_hidden_states(&prompt[1..], &before_last, &mut whole)
        .unwrap();
    let drafted = model.logits(&drafted).unwrap().index((0, .., ..));
    let difference = largest_difference(&drafted, expected);
    assert!(difference < 1e-3, "{arch}: {difference}");

    // Half the prompt, then a position at a time, as decoding feeds it.
    let mut stepped = model.new_mtp_cache().unwrap();
    let half = length / 2;
    let mut rows = vec![
        model
            .mtp_hidden_states(
                &prompt[1..=half as usize],
                &hidden.index((.., ..half, ..)),
                &mut stepped,
            )
            .unwrap(),
    ];
    for position in half..length - 1 {
        let next = position as usize + 1;
        let previous = hidden.index((.., position..=position, ..));
        let row = model.mtp_hidden_states(&prompt[next..=next], &previous, &mut stepped);
        rows.push(row.unwrap());
    }
    let stepped = model.logits(&ops::concatenate(&rows, 1).unwrap()).unwrap();
    let difference = largest_difference(&stepped.index((0, .., ..)), expected);
    assert!(difference < 1e-3, "{arch}: {difference}");
}
