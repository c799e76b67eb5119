//! The Qwen3.5, Gemma 3, Gemma 4 and Mistral 3 towers and the text model after images against
//! transformers (`hf`) and mlx-vlm (`mlx`, `mlx-q4`), on the random-weight checkpoints
//! `scripts/reference/vision.py` and `vision_mlx.py` make (tests/data/vision), fed each
//! reference's own pixel values, so that only the model is under test here.

use std::collections::HashMap;
use std::path::PathBuf;

use mlx_rs::Array;
use mlx_rs::ops;
use mlx_rs::ops::indexing::IndexOp;

use crate::model::{EmbeddedRows, ImagesSeenBothWays, Model, Segment};

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

pub(crate) fn largest_difference(ours: &Array, theirs: &Array) -> f32 {
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

/// The reference's greedy steps through `cache`, after its prompt: each step's logits as the
/// reference's.
fn check_decode_steps(
    model: &Model,
    cache: &mut [crate::model::KvCache],
    reference: &HashMap<String, Array>,
    layout: &str,
    case: &str,
) {
    let decoded = reference[&format!("{case}.decoded")]
        .as_slice::<i32>()
        .to_vec();
    for (step, &token) in decoded.iter().enumerate() {
        let hidden = model.hidden_states(&[token as u32], cache).unwrap();
        let logits = model.logits(&hidden).unwrap().reshape(&[-1]).unwrap();
        let expected = reference[&format!("{case}.decode_logits")].index(step as i32);
        let difference = largest_difference(&logits, &expected);
        assert!(
            difference < 1e-3,
            "{layout} case {case}: step {step} {difference}"
        );
    }
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
            for layer in &mut cache {
                layer.set_rotary(shift, None);
            }
            check_decode_steps(&model, &mut cache, &reference, layout, case);
        }
    }
}

/// Gemma 3's checkpoint in each layout the tools made.
const GEMMA3_LAYOUTS: [&str; 3] = ["gemma3/hf", "gemma3/mlx", "gemma3/mlx-q4"];

/// The rows of one Gemma 3 case's images, by the tower, one image at a time.
pub(crate) fn gemma3_encoded(
    model: &Model,
    reference: &HashMap<String, Array>,
    case: &str,
) -> Array {
    let tower = model.vision.as_ref().unwrap();
    let pixels = &reference[&format!("{case}.pixel_values")];
    let rows: Vec<Array> = (0..pixels.dim(0))
        .map(|index| {
            let image = pixels.index(index).reshape(&[1, -1]).unwrap();
            tower.encode(&image, [1, 1, 1]).unwrap()
        })
        .collect();
    ops::concatenate(&rows, 0).unwrap()
}

/// The logits at every position of the prompt `tokens`, in one pass, each run of the tower's
/// row token taking the next of `rows` (the images' rows in order, `[rows, hidden]`), the runs
/// seeing each other both ways in the layers `both_ways` names; the cache is left after the
/// prompt.
pub(crate) fn logits_after_rows(
    model: &Model,
    tokens: &[u32],
    rows: &Array,
    cache: &mut [crate::model::KvCache],
    both_ways: ImagesSeenBothWays,
) -> Array {
    let row_token = model.vision.as_ref().unwrap().row_token();
    let runs: Vec<(i32, i32)> = (0..tokens.len())
        .filter(|&at| tokens[at] == row_token && (at == 0 || tokens[at - 1] != row_token))
        .map(|start| {
            let length = tokens[start..]
                .iter()
                .take_while(|&&token| token == row_token)
                .count();
            (start as i32, (start + length) as i32)
        })
        .collect();
    for layer in cache.iter_mut() {
        let seen = both_ways.in_layer_of(layer);
        layer.set_both_ways(if seen { runs.clone() } else { Vec::new() });
    }
    let mut next = 0;
    let embedded = runs
        .iter()
        .map(|&(start, end)| {
            next += end - start;
            EmbeddedRows {
                start: start as usize,
                rows: rows.index(next - (end - start)..next),
            }
        })
        .collect();
    assert_eq!(next, rows.dim(0), "the rows and the row tokens");
    let hidden = model
        .packed_hidden_states(&mut [Segment {
            tokens,
            cache,
            embedded,
        }])
        .unwrap();
    model.logits(&hidden).unwrap().squeeze_axes(&[0]).unwrap()
}

/// Case `case`'s prompt tokens in `reference`.
pub(crate) fn reference_tokens(reference: &HashMap<String, Array>, case: &str) -> Vec<u32> {
    reference[&format!("{case}.input_ids")]
        .as_slice::<i32>()
        .iter()
        .map(|&id| id as u32)
        .collect()
}

/// Gemma 4's checkpoint in each layout the tools made.
const GEMMA4_LAYOUTS: [&str; 3] = ["gemma4/hf", "gemma4/mlx", "gemma4/mlx-q4"];

/// The rows of one Gemma 4 case's images, by the tower, one image at a time: its patches
/// without the padding transformers adds to every image's.
pub(crate) fn gemma4_encoded(
    model: &Model,
    reference: &HashMap<String, Array>,
    case: &str,
) -> Array {
    let tower = model.vision.as_ref().unwrap();
    let pixels = &reference[&format!("{case}.pixel_values")];
    let grids = reference[&format!("{case}.image_grid")]
        .as_slice::<i32>()
        .to_vec();
    let rows: Vec<Array> = grids
        .chunks(2)
        .enumerate()
        .map(|(index, grid)| {
            let patches = pixels.index((index as i32, ..grid[0] * grid[1], ..));
            tower.encode(&patches, [1, grid[0], grid[1]]).unwrap()
        })
        .collect();
    ops::concatenate(&rows, 0).unwrap()
}

/// One case's image rows by a checkpoint's tower, from its reference's pixels.
pub(crate) type Encoded = fn(&Model, &HashMap<String, Array>, &str) -> Array;

/// Gemma 3's, Gemma 4's and Mistral 3's towers give the tools' rows, and their text models,
/// given them, the tools' logits with an image's tokens seeing each other both ways in the
/// layers each masks so (every layer for Gemma 3, the sliding ones for Gemma 4, none for
/// Mistral 3), and with the other masks (`wrong_masks`) not.
#[test]
fn gemma_and_mistral_towers_and_text_after_images_read_as_the_tools() {
    use ImagesSeenBothWays::{EveryLayer, Nowhere, SlidingLayers};
    type Family = (
        &'static [&'static str],
        Encoded,
        ImagesSeenBothWays,
        &'static [ImagesSeenBothWays],
    );
    let families: [Family; 3] = [
        (
            &GEMMA3_LAYOUTS,
            gemma3_encoded,
            EveryLayer,
            &[Nowhere, SlidingLayers],
        ),
        (
            &GEMMA4_LAYOUTS,
            gemma4_encoded,
            SlidingLayers,
            &[Nowhere, EveryLayer],
        ),
        // No sliding layers: only every layer differs.
        (&MISTRAL3_LAYOUTS, mistral3_encoded, Nowhere, &[EveryLayer]),
    ];
    for (layouts, encoded, both_ways, wrong_masks) in families {
        for &layout in layouts {
            let model = Model::load(&checkpoint(layout)).unwrap();
            let tower = model.vision.as_ref().unwrap();
            assert_eq!(tower.sees_images_both_ways(), both_ways, "{layout}");
            let reference = reference(layout);
            for case in cases(&reference) {
                let rows = encoded(&model, &reference, case);
                let theirs = &reference[&format!("{case}.image_features")];
                let difference = largest_difference(&rows, theirs);
                assert!(
                    difference < 1e-4,
                    "{layout} case {case}: tower {difference}"
                );

                let tokens = reference_tokens(&reference, case);
                let expected = &reference[&format!("{case}.logits")];
                for &wrong in wrong_masks {
                    let mut cache = model.new_cache();
                    let logits = logits_after_rows(&model, &tokens, &rows, &mut cache, wrong);
                    assert!(
                        largest_difference(&logits, expected) > 1e-2,
                        "{layout} case {case}: {wrong:?}"
                    );
                }
                let mut cache = model.new_cache();
                let logits = logits_after_rows(&model, &tokens, &rows, &mut cache, both_ways);
                let difference = largest_difference(&logits, expected);
                assert!(
                    difference < 1e-3,
                    "{layout} case {case}: prompt {difference}"
                );
                for layer in &mut cache {
                    layer.set_both_ways(Vec::new());
                }
                check_decode_steps(&model, &mut cache, &reference, layout, case);
            }
        }
    }
}

/// Mistral 3's checkpoint in each layout the tools made.
const MISTRAL3_LAYOUTS: [&str; 3] = ["mistral3/hf", "mistral3/mlx", "mistral3/mlx-q4"];

/// The rows of one Mistral 3 case's images, by the tower, one image at a time: its pixels
/// (padded to the case's largest, `image_sizes` the real ones) cut into patches row by row.
pub(crate) fn mistral3_encoded(
    model: &Model,
    reference: &HashMap<String, Array>,
    case: &str,
) -> Array {
    let tower = model.vision.as_ref().unwrap();
    let pixels = &reference[&format!("{case}.pixel_values")];
    let sizes = reference[&format!("{case}.image_sizes")]
        .as_slice::<i32>()
        .to_vec();
    let rows: Vec<Array> = sizes
        .chunks(2)
        .enumerate()
        .map(|(index, size)| {
            let (height, width) = (size[0], size[1]);
            let image = pixels.index((index as i32, .., ..height, ..width));
            let patches = image
                .reshape(&[3, height / 4, 4, width / 4, 4])
                .unwrap()
                .transpose_axes(&[1, 3, 0, 2, 4])
                .unwrap()
                .reshape(&[-1, 48])
                .unwrap();
            tower.encode(&patches, [1, height / 4, width / 4]).unwrap()
        })
        .collect();
    ops::concatenate(&rows, 0).unwrap()
}
