//! The Qwen3.5 tower and the text model after images against transformers, on the
//! random-weight checkpoint `scripts/reference/vision.py` makes (tests/data/vision), fed the
//! processor's own pixel values, so that only the model is under test here.

use std::collections::HashMap;
use std::path::PathBuf;

use mlx_rs::Array;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

use crate::model::{EmbeddedRows, Model, Segment};

const CASES: [&str; 4] = ["a", "b", "c", "d"];

fn checkpoint(model_type: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/data/vision/{model_type}/hf"))
}

fn reference(model_type: &str) -> HashMap<String, Array> {
    Array::load_safetensors(checkpoint(model_type).join("reference.safetensors")).unwrap()
}

fn largest_difference(ours: &Array, theirs: &Array) -> f32 {
    assert_eq!(ours.shape(), theirs.shape());
    ops::abs(&ops::subtract(ours, theirs).unwrap())
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
    let model = Model::load(&checkpoint("qwen3_5")).unwrap();
    let reference = reference("qwen3_5");
    for case in CASES {
        let ours = ops::concatenate(&encoded(&model, &reference, case), 0).unwrap();
        let difference = largest_difference(&ours, &reference[&format!("{case}.image_features")]);
        assert!(difference < 1e-4, "case {case}: {difference}");
    }
}

#[test]
fn the_text_after_images_reads_as_transformers() {
    for model_type in ["qwen3_5", "qwen3_5_moe"] {
        let model = Model::load(&checkpoint(model_type)).unwrap();
        let reference = reference(model_type);
        let image_token = model.vision.as_ref().unwrap().image_token();
        let cases: Vec<&str> = CASES
            .into_iter()
            .filter(|case| reference.contains_key(&format!("{case}.input_ids")))
            .collect();
        for case in cases {
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
                "{model_type} case {case}: prompt {difference}"
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
                    "{model_type} case {case}: step {step} {difference}"
                );
            }
        }
    }
}
