//! Against transformers' `Gemma3ImageProcessorPil` on the images the vision tests send
//! (tests/data/vision/gemma3: its pixel values per image, `scripts/reference/vision.py`),
//! which must come out the same to the bit.

use std::path::PathBuf;

use mlx_rs::Array;

use super::*;
use crate::image::{ImageProcessor, decode};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/vision")
}

#[test]
fn every_image_comes_out_as_transformers_makes_it() {
    let processor = match ImageProcessor::load(&data().join("gemma3/hf")).unwrap() {
        Some(ImageProcessor::Gemma3(processor)) => processor,
        other => panic!("{other:?}"),
    };
    let reference =
        Array::load_safetensors(data().join("gemma3/hf/reference.safetensors")).unwrap();
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
        let expected = &reference[&format!("image.{stem}.pixel_values")];
        assert_eq!(expected.shape(), [1, 3, 32, 32], "{file}");
        assert_eq!(patches.grid, [1, 1, 1], "{file}");
        assert_eq!(patches.values, expected.as_slice::<f32>(), "{file}");
    }
}

#[test]
fn pan_and_scan_and_unknown_filters_are_refused_by_name() {
    let path = std::path::Path::new("preprocessor_config.json");
    for (json, complaint) in [
        (r#"{"do_pan_and_scan": true}"#, "do_pan_and_scan"),
        (r#"{"resample": 0}"#, "resample 0"),
        (r#"{"size": {"height": 0, "width": 8}}"#, "positive"),
        (r#"{"size": {"height": 8}}"#, "width"),
    ] {
        let error = parse(path, serde_json::from_str(json).unwrap()).unwrap_err();
        assert!(error.to_string().contains(complaint), "{json}: {error}");
    }
    let released = r#"{"do_pan_and_scan": null, "size": {"height": 896, "width": 896}}"#;
    let processor = parse(path, serde_json::from_str(released).unwrap()).unwrap();
    assert_eq!(processor.pixels(), 896 * 896);
}
