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
