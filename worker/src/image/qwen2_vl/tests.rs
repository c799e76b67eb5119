//! Against transformers' `Qwen2VLImageProcessorPil` on the images the vision tests send
//! (tests/data/vision: its pixel values per image, `scripts/reference/vision.py`), which must
//! come out the same to the bit.

use std::path::{Path, PathBuf};

use mlx_rs::Array;

use super::*;
use crate::image::decode;

/// The model's processor config as `ImageProcessor::load` finds it, read as Qwen2-VL's.
fn load(dir: &Path) -> Result<Option<Qwen2VlProcessor>, ImageError> {
    match crate::image::processor::processor_section(dir)? {
        Some((path, section)) => config::parse(&path, section).map(Some),
        None => Ok(None),
    }
}

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/vision")
}

#[test]
fn smart_resize_rounds_and_bounds_as_transformers() {
    let cases = [
        ((23, 61, 8, 2048, 8192), (32, 80)),
        ((768, 1024, 8, 2048, 8192), (72, 104)),
        ((77, 30, 8, 2048, 8192), (80, 32)),
        ((768, 1024, 28, 3136, 1_003_520), (756, 1036)),
        ((1, 150, 28, 3136, 1_003_520), (28, 700)),
        // Halves round to even, as Python's `round`.
        ((20, 20, 8, 0, 100_000), (16, 16)),
        ((36, 36, 8, 0, 100_000), (32, 32)),
        ((44, 44, 8, 0, 1_000_000), (48, 48)),
        // Qwen3.5's own bounds (patch 16, merge 2).
        ((768, 1024, 32, 65_536, 16_777_216), (768, 1024)),
        ((4000, 3000, 32, 65_536, 16_777_216), (4000, 3008)),
        ((10, 10, 32, 65_536, 16_777_216), (256, 256)),
        // An aspect ratio of exactly 200 passes.
        ((1, 200, 28, 3136, 1_003_520), (28, 812)),
    ];
    // Each expected pair is transformers 5.23's `smart_resize` of the same arguments.
    for ((height, width, factor, min, max), expected) in cases {
        let resized = smart_resize(height, width, factor, min, max).unwrap();
        assert_eq!(resized, expected, "{height}x{width}");
    }
    assert!(matches!(
        smart_resize(1, 201, 28, 3136, 1_003_520),
        Err(ImageError::AspectRatio { .. })
    ));
}

#[test]
fn every_image_becomes_the_processors_patches() {
    let checkpoint = data().join("qwen3_5/hf");
    let processor = load(&checkpoint).unwrap().unwrap();
    let reference = Array::load_safetensors(checkpoint.join("reference.safetensors")).unwrap();
    for (name, file) in [
        ("wide", "wide.png"),
        ("tall", "tall.jpg"),
        ("square", "square.webp"),
        ("alpha", "alpha.png"),
        ("animated", "animated.gif"),
        ("screenshot", "screenshot.png"),
    ] {
        let bytes = std::fs::read(data().join("images").join(file)).unwrap();
        let patches = processor.preprocess(&decode(&bytes).unwrap()).unwrap();
        let grid: Vec<usize> = reference[&format!("image.{name}.image_grid_thw")]
            .as_slice::<i32>()
            .iter()
            .map(|&side| side as usize)
            .collect();
        assert_eq!(patches.grid.to_vec(), grid, "{name}");
        let theirs = reference[&format!("image.{name}.pixel_values")].as_slice::<f32>();
        assert_eq!(patches.values.len(), theirs.len(), "{name}");
        // Decoded, resized and normalized to the bit.
        assert_eq!(patches.values, theirs, "{name}");
    }
}

#[test]
fn the_same_pixels_have_the_same_digest_whatever_the_format() {
    let processor = load(&data().join("qwen3_5/hf")).unwrap().unwrap();
    let png = std::fs::read(data().join("images/wide.png")).unwrap();
    let decoded = decode(&png).unwrap();
    let mut webp = Vec::new();
    decoded
        .write_to(
            &mut std::io::Cursor::new(&mut webp),
            image::ImageFormat::WebP,
        )
        .unwrap();
    let from_png = processor.preprocess(&decoded).unwrap();
    let from_webp = processor.preprocess(&decode(&webp).unwrap()).unwrap();
    assert_eq!(from_png.digest, from_webp.digest);
    let mut changed = decoded.clone();
    changed.get_pixel_mut(0, 0).0[0] ^= 0x40;
    assert_ne!(
        processor.preprocess(&changed).unwrap().digest,
        from_png.digest
    );
}

#[test]
fn operator_limits_replace_the_configs() {
    let processor = load(&data().join("qwen3_5/hf")).unwrap().unwrap();
    let screenshot = decode(&std::fs::read(data().join("images/screenshot.png")).unwrap()).unwrap();
    let smaller = processor
        .clone()
        .with_pixel_limits(None, Some(4096))
        .preprocess(&screenshot)
        .unwrap();
    assert_eq!(smaller.grid, [1, 12, 18]);
    // mlx-vlm's `processor_config.json` alone (nested, transformers 5's form) reads alike.
    let nested = tempfile::tempdir().unwrap();
    std::fs::copy(
        data().join("qwen3_5/mlx/processor_config.json"),
        nested.path().join("processor_config.json"),
    )
    .unwrap();
    let nested = load(nested.path()).unwrap().unwrap();
    assert_eq!(nested.preprocess(&screenshot).unwrap().grid, [1, 18, 26]);
}

#[test]
fn configs_in_every_spelling_load_and_bad_ones_are_refused() {
    let folder = tempfile::tempdir().unwrap();
    let write = |name: &str, json: &str| {
        std::fs::write(folder.path().join(name), json).unwrap();
    };
    assert!(load(folder.path()).unwrap().is_none());
    // A processor_config.json without an image processor configures none.
    write("processor_config.json", r#"{"processor_class": "X"}"#);
    assert!(load(folder.path()).unwrap().is_none());
    // Qwen2.5-VL's spelling: the bounds as top-level keys, no `size`.
    write(
        "preprocessor_config.json",
        r#"{"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "merge_size": 2}"#,
    );
    let processor = load(folder.path()).unwrap().unwrap();
    assert_eq!(
        (processor.min_pixels, processor.max_pixels),
        (3136, 12_845_056)
    );
    assert_eq!(processor.merge_size, 2);
    // Another family's processor is named, not read as Qwen2-VL's.
    write(
        "preprocessor_config.json",
        r#"{"image_processor_type": "IdeficsImageProcessorFast"}"#,
    );
    let error = crate::image::ImageProcessor::load(folder.path()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`IdeficsImageProcessorFast` is not a processor corral runs"),
        "{error}"
    );
    for (json, complaint) in [
        (r#"{"resample": 1}"#, "resample 1"),
        (r#"{"size": {"longest_edge": 8192}}"#, "shortest_edge"),
        (r#"{"patch_size": 0}"#, "positive"),
        (r#"{"image_mean": [0.5]}"#, "image_mean"),
    ] {
        write("preprocessor_config.json", json);
        let error = load(folder.path()).unwrap_err();
        let ImageError::ProcessorConfig { message, .. } = &error else {
            panic!("{json}: {error}");
        };
        assert!(message.contains(complaint), "{json}: {error}");
    }
}
