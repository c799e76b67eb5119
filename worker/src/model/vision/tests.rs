//! The Qwen3.5 tower and the text model after images against transformers (`hf`) and mlx-vlm
//! (`mlx`, `mlx-q4`), on the random-weight checkpoints `scripts/reference/vision.py` and
//! `vision_mlx.py` make (tests/data/vision), fed each reference's own pixel values, so that only
//! the model is under test here.

use std::collections::HashMap;
use std::path::PathBuf;

use mlx_rs::Array;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

use crate::model::{EmbeddedRows, Model, Segment};

const CASES: [&str; 4] = ["a", "b", "c", "d"];

/// Every checkpoint and layout the tools made.
const LAYOUTS: [&str; 6] = [
    "qwen3_5/hf",
    "qwen3_5/mlx",
    "qwen3_5/mlx-q4",
    "qwen3_5_moe/hf",
    "qwen3_5_moe/mlx",
    "qwen3_5_moe/mlx-q4",
];

fn checkpoint(layout: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/data/vision/{layout}"))
}

fn reference(layout: &str) -> HashMap<String, Array> {
    Array::load_safetensors(checkpoint(layout).join("reference.safetensors")).unwrap()
}

/// The cases a layout's reference has.
fn cases(reference: &HashMap<String, Array>) -> Vec<&'static str> {
    CASES
        .into_iter()
        .filter(|case| reference.contains_key(&format!("{case}.input_ids")))
        .collect()
}

fn largest_difference(ours: &Array, theirs: &Array) -> f32 {
    assert_eq!(ours.shape(), theirs.shape());
    ops::abs(ops::subtract(ours, theirs).unwrap())
        .unwrap()
        .max(None)
        .unwrap()
        .item_exact::<f32>()
}

/// Each image's rows of one case, by the tower, one image at a time.
fn encoded(model: &Model, reference: &HashMap<String, Array>, case: &str) -> Vec<Array> {
    let tower = model
        .vision
        .as_ref()
        .expect("the checkpoint's vision tower");
    let pixels = &reference[&format!("{case}.pixel_values")];
    let grids = &reference[&format!("{case}.image_grid_thw")];
    let grids: Vec<i32> = grids.as_slice::<i32>().to_vec();
    let mut start = 0;
    grids
        .chunks(3)
        .map(|grid| {
            let patches = grid.iter().product::<i32>();
            let rows = pixels.index((start..start + patches, ..));
            start += patches;
            tower.encode(&rows, [grid[0], grid[1], grid[2]]).unwrap()
        })
        .collect()
}

#[test]
fn the_tower_encodes_images_as_transformers() {
    for layout in LAYOUTS {
        let model = Model::load(&checkpoint(layout)).unwrap();
        let reference = reference(layout);
        for case in cases(&reference) {
            let ours = ops::concatenate(&encoded(&model, &reference, case), 0).unwrap();
            let theirs = &reference[&format!("{case}.image_features")];
            let difference = largest_difference(&ours, theirs);
            assert!(difference < 1e-4, "{layout} case {case}: {difference}");
        }
    }
}

#[test]
fn the_text_after_images_reads_as_transformers() {
    for layout in LAYOUTS {
        let model = Model::load(&checkpoint(layout)).unwrap();
        let reference = reference(layout);
        let image_token = model.vision.as_ref().unwrap().row_token();
        for case in cases(&reference) {
            let tokens: Vec<u32> = reference[&format!("{case}.input_ids")]
                .as_slice::<i32>()
                .iter()
                .map(|&id| id as u32)
                .collect();
            let shift = reference[&format!("{case}.rope_deltas")].as_slice::<i32>()[0];
            let mut cache = model.new_cache();
            for layer in &mut cache {
                layer.set_rotary(
                    shift,
                    Some(reference[&format!("{case}.position_ids")].clone()),
                );
            }
            // Each image's rows where its run of image tokens starts.
            let mut images = encoded(&model, &reference, case).into_iter();
            let embedded = tokens
                .iter()
                .enumerate()
                .filter(|&(index, &token)| {
                    token == image_token && (index == 0 || tokens[index - 1] != image_token)
                })
                .map(|(start, _)| EmbeddedRows {
                    start,
                    rows: images.next().unwrap(),
                })
                .collect();
            let hidden = model
                .packed_hidden_states(&mut [Segment {
                    tokens: &tokens,
                    cache: &mut cache,
                    embedded,
                }])
                .unwrap();
            let logits = model.logits(&hidden).unwrap().squeeze_axes(&[0]).unwrap();
            let difference = largest_difference(&logits, &reference[&format!("{case}.logits")]);
            assert!(
                difference < 1e-3,
                "{layout} case {case}: prompt {difference}"
            );
            let decoded = reference[&format!("{case}.decoded")]
                .as_slice::<i32>()
                .to_vec();
            for (step, &token) in decoded.iter().enumerate() {
                for layer in &mut cache {
                    layer.set_rotary(shift, None);
                }
                let hidden = model.hidden_states(&[token as u32], &mut cache).unwrap();
                let logits = model.logits(&hidden).unwrap().reshape(&[-1]).unwrap();
                let expected = reference[&format!("{case}.decode_logits")].index(step as i32);
                let difference = largest_difference(&logits, &expected);
                assert!(
                    difference < 1e-3,
                    "{layout} case {case}: step {step} {difference}"
                );
            }
        }
    }
}
