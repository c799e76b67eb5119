//! Against transformers' `PixtralImageProcessorPil` on the images the vision tests send
//! (tests/data/vision/mistral3: its pixel values per image, `scripts/reference/vision.py`),
//! which must come out the same to the bit.

use std::path::PathBuf;

use mlx_rs::Array;
use mlx_rs::ops::indexing::IndexOp;

use super::*;
use crate::image::{ImageProcessor, decode};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/vision")
}

/// transformers' `[3, height, width]` pixel values as the processor's patches, row by row.
fn patches_of(pixels: &Array, patch: i32) -> Vec<f32> {
    let (height, width) = (pixels.dim(1), pixels.dim(2));
    pixels
        .reshape(&[3, height / patch, patch, width / patch, patch])
        .unwrap()
        .transpose_axes(&[1, 3, 0, 2, 4])
        .unwrap()
        .flatten(None, None)
        .unwrap()
        .as_slice::<f32>()
        .to_vec()
}

#[test]
fn every_image_comes_out_as_transformers_makes_it() {
    let processor = match ImageProcessor::load(&data().join("mistral3/hf")).unwrap() {
        Some(ImageProcessor::Pixtral(processor)) => processor,
        other => panic!("{other:?}"),
    };
    let reference =
        Array::load_safetensors(data().join("mistral3/hf/reference.safetensors")).unwrap();
    for file in [
        "wide.png",
        "tall.jpg",
        "square.webp",
        "alpha.png",
        "animated.gif",
        "screenshot.png",
    ] {
        let bytes = std::fs::read(data().join("images").join(file)).unwrap();
        let patches = processor.preprocess(&decode(&bytes).unwrap()).unwrap();
        let stem = file.split('.').next().unwrap();
        let expected = reference[&format!("image.{stem}.pixel_values")].index(0);
        let [_, rows, columns] = patches.grid;
        assert_eq!(
            [expected.dim(1), expected.dim(2)],
            [rows as i32 * 4, columns as i32 * 4],
            "{file}"
        );
        assert_eq!(patches.values, patches_of(&expected, 4), "{file}");
    }
}

#[test]
fn sizes_fit_the_longest_edge_and_round_up_to_merged_patches() {
    let path = std::path::Path::new("preprocessor_config.json");
    let folder = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"size": {"longest_edge": 1540}});
    let processor = parse(path, config, folder.path()).unwrap();
    // Without processor_config.json: patches of 16, unmerged.
    assert_eq!(processor.resized(768, 1024, 1540), (768, 1024));
    assert_eq!(processor.resized(1, 1, 1540), (16, 16));
    std::fs::write(
        folder.path().join("processor_config.json"),
        r#"{"patch_size": 14, "spatial_merge_size": 2}"#,
    )
    .unwrap();
    let processor = parse(
        path,
        serde_json::json!({"size": {"longest_edge": 1540}}),
        folder.path(),
    )
    .unwrap();
    // Each the release's processor's size for the same image.
    assert_eq!(processor.resized(768, 1024, 1540), (784, 1036));
    assert_eq!(processor.resized(3000, 4000, 1540), (1176, 1540));
    assert_eq!(processor.resized(10, 4000, 1540), (28, 1540));
    for (json, complaint) in [
        (r#"{"resample": 0}"#, "resample 0"),
        (r#"{"size": {"longest_edge": 0}}"#, "positive"),
    ] {
        let error = parse(path, serde_json::from_str(json).unwrap(), folder.path()).unwrap_err();
        assert!(error.to_string().contains(complaint), "{json}: {error}");
    }
}

#[test]
fn an_operators_most_pixels_set_the_longest_edge_or_llama_cpps_limits() {
    let path = std::path::Path::new("preprocessor_config.json");
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(
        folder.path().join("processor_config.json"),
        r#"{"patch_size": 14, "spatial_merge_size": 2}"#,
    )
    .unwrap();
    let config = serde_json::json!({"size": {"longest_edge": 1540}});
    let processor = parse(path, config, folder.path()).unwrap();
    // A square of 784 · 784 pixels: the longest edge 784.
    let limited = processor.with_pixel_limits(None, Some(784 * 784));
    assert_eq!(limited.max_pixels(), 784 * 784);
    let image = image::RgbImage::new(1024, 768);
    assert_eq!(limited.preprocess(&image).unwrap().grid, [1, 42, 56]);

    // llama.cpp's limits of merged patches (28 pixels a side), at most 100 of them.
    let projector =
        for_projector(14, 2, [0.5; 3], [0.5; 3]).with_pixel_limits(None, Some(100 * 784));
    let [_, rows, columns] = projector.preprocess(&image).unwrap().grid;
    assert!(rows * columns / 4 <= 100, "{rows}x{columns}");
}
