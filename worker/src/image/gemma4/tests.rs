//! Against transformers' `Gemma4ImageProcessorPil` on the images the vision tests send
//! (tests/data/vision/gemma4: its pixel values and grid per image, `scripts/reference/vision.py`),
//! which must come out the same to the bit.

use std::path::PathBuf;

use mlx_rs::Array;
use mlx_rs::ops::indexing::IndexOp;

use crate::image::{ImageProcessor, decode};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/vision")
}

#[test]
fn every_image_comes_out_as_transformers_makes_it() {
    let processor = ImageProcessor::load(&data().join("gemma4/hf"))
        .unwrap()
        .unwrap();
    assert!(
        matches!(processor, ImageProcessor::Gemma4(_)),
        "{processor:?}"
    );
    let reference =
        Array::load_safetensors(data().join("gemma4/hf/reference.safetensors")).unwrap();
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
        let grid = reference[&format!("image.{stem}.image_grid")].as_slice::<i32>();
        let [_, rows, columns] = patches.grid;
        assert_eq!([rows as i32, columns as i32], grid[..2], "{file}");
        // transformers pads every image to the budget's patches; the padding is left out here.
        let count = (rows * columns) as i32;
        let expected = reference[&format!("image.{stem}.pixel_values")].index((0, ..count, ..));
        assert_eq!(patches.values, expected.as_slice::<f32>(), "{file}");
        assert!(patches.values.len() <= 630 * 48, "{file}");
    }
}

fn screenshot() -> image::RgbImage {
    let bytes = std::fs::read(data().join("images/screenshot.png")).unwrap();
    decode(&bytes).unwrap()
}

/// The tokens (pooling squares of 3x3 patches) an image becomes.
fn tokens(processor: &ImageProcessor, image: &image::RgbImage) -> usize {
    let [_, rows, columns] = processor.preprocess(image).unwrap().grid;
    rows * columns / 9
}

#[test]
fn an_operators_pixel_limits_choose_the_budget_or_llama_cpps_limits() {
    let processor = ImageProcessor::load(&data().join("gemma4/hf"))
        .unwrap()
        .unwrap();
    let screenshot = screenshot();
    // Within the fixture's budget of 70 tokens of 12x12 pixels, 63 (transformers' 21x27
    // patches); 280 tokens fit in 280 · 144 pixels, and no budget is smaller than 70.
    assert_eq!(tokens(&processor, &screenshot), 63);
    let larger = processor.clone().with_pixel_limits(None, Some(280 * 144));
    assert!((141..=280).contains(&tokens(&larger, &screenshot)));
    let tiny = processor.with_pixel_limits(None, Some(1));
    assert_eq!(tokens(&tiny, &screenshot), 63);

    // llama.cpp's 1064 for the screenshot (gemma4/gguf/reference.json), then within 200.
    let projector = ImageProcessor::Gemma4(super::for_projector(4, 3, [0.0; 3], [1.0; 3]));
    assert_eq!(tokens(&projector, &screenshot), 1064);
    let limited = projector.with_pixel_limits(Some(100 * 144), Some(200 * 144));
    assert!((100..=200).contains(&tokens(&limited, &screenshot)));
}
