//! A chat's images through `prepare` against transformers' processor and `get_rope_index` (the
//! tokens, positions and shift of each case in tests/data/vision), and the refusals before the
//! template renders.

use std::path::PathBuf;

use mlx_rs::Array;

use super::*;
use crate::generation::{GenerateRequest, Prompt, prepare};
use crate::model::vision_tests::{self, largest_difference};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data")
}

fn image(file: &str, location: &str) -> PromptImage {
    PromptImage {
        bytes: std::fs::read(data().join("vision/images").join(file)).unwrap(),
        location: location.to_owned(),
    }
}

/// A chat whose images travel as the supervisor sends them: `{"type": "image"}` parts, and the
/// bytes beside the messages.
fn chat(messages: Vec<serde_json::Value>, images: Vec<PromptImage>) -> GenerateRequest {
    GenerateRequest::greedy(
        Prompt::Chat {
            messages,
            tools: None,
            template_kwargs: None,
            images,
        },
        8,
    )
}

/// Reference case `case` as the supervisor would send it.
fn case(reference: &serde_json::Value, case: &str) -> GenerateRequest {
    let mut images = Vec::new();
    let messages = reference["cases"][case]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let mut message = message.clone();
            if let Some(parts) = message["content"].as_array_mut() {
                for (part_index, part) in parts.iter_mut().enumerate() {
                    if let Some(file) = part.get("image").and_then(|file| file.as_str()) {
                        images.push(image(
                            file,
                            &format!("messages[{index}].content[{part_index}]"),
                        ));
                        *part = serde_json::json!({"type": "image"});
                    }
                }
            }
            message
        })
        .collect();
    chat(messages, images)
}

#[test]
fn each_case_has_the_processors_tokens_and_transformers_positions() {
    let dir = data().join("vision/qwen3_5/hf");
    let loaded = LoadedModel::load(&dir).unwrap();
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let reference_cases: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tensors = Array::load_safetensors(dir.join("reference.safetensors")).unwrap();
    for name in ["a", "b", "c", "d"] {
        let prepared = prepare(
            &loaded,
            &case(&reference_cases, name),
            &ImageLimits::default(),
        )
        .unwrap();
        let tokens: Vec<i32> = prepared.tokens.iter().map(|&token| token as i32).collect();
        assert_eq!(
            tokens,
            tensors[&format!("{name}.input_ids")].as_slice::<i32>(),
            "{name}"
        );
        let images = prepared.images.unwrap();
        assert_eq!(
            images.positions.as_deref().unwrap(),
            tensors[&format!("{name}.position_ids")].as_slice::<i32>(),
            "{name}"
        );
        assert_eq!(
            images.shift,
            tensors[&format!("{name}.rope_deltas")].as_slice::<i32>()[0],
            "{name}"
        );
        // The prefix cache's key: the text as it is, each image's tokens its own.
        let image_token = loaded.model.vision.as_ref().unwrap().row_token();
        for (key, token) in images.key().iter().zip(&prepared.tokens) {
            assert_eq!(*token == image_token, key != token, "{name}");
        }
    }
}

#[test]
fn the_same_picture_keys_alike_and_another_otherwise() {
    let loaded = LoadedModel::load(&data().join("vision/qwen3_5/hf")).unwrap();
    let ask = |file: &str| {
        let message = serde_json::json!({"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": "what is it?"}]});
        let request = chat(vec![message], vec![image(file, "messages[0].content[0]")]);
        prepare(&loaded, &request, &ImageLimits::default()).unwrap()
    };
    let (first, again) = (ask("alpha.png"), ask("alpha.png"));
    // `animated.gif` has `alpha.png`'s grid (12x14 patches): the same tokens, another key.
    let other = ask("animated.gif");
    assert_eq!(first.tokens, other.tokens);
    let key =
        |prepared: &crate::generation::Prepared| prepared.images.as_ref().unwrap().key().to_vec();
    assert_eq!(key(&first), key(&again));
    assert_ne!(key(&first), key(&other));
}

#[test]
fn a_bad_image_or_a_text_model_is_refused_by_the_images_place() {
    let vision = LoadedModel::load(&data().join("vision/qwen3_5/hf")).unwrap();
    let message = serde_json::json!({"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image"}]});
    let garbage = PromptImage {
        bytes: b"not an image".to_vec(),
        location: "messages[0].content[1]".into(),
    };
    let error = prepare(
        &vision,
        &chat(vec![message.clone()], vec![garbage]),
        &ImageLimits::default(),
    )
    .err()
    .unwrap();
    assert_eq!(
        error.to_string(),
        "image at messages[0].content[1]: not an image in a format corral reads (PNG, JPEG, WebP or GIF)"
    );
    let two = vec![
        image("wide.png", "messages[0].content[1]"),
        image("tall.jpg", "messages[0].content[2]"),
    ];
    let limits = ImageLimits {
        max_images: Some(1),
        ..ImageLimits::default()
    };
    let error = prepare(&vision, &chat(vec![message.clone()], two), &limits)
        .err()
        .unwrap();
    assert!(
        error
            .to_string()
            .ends_with("(the first one too many at messages[0].content[2])")
    );
    let text_only = LoadedModel::load(&data().join("toolchain/qwen3/hf")).unwrap();
    let one = vec![image("wide.png", "messages[0].content[1]")];
    let error = prepare(
        &text_only,
        &chat(vec![message], one),
        &ImageLimits::default(),
    )
    .err()
    .unwrap();
    assert_eq!(
        error.to_string(),
        "model `hf` takes no images (image at messages[0].content[1])"
    );
}

#[test]
fn an_image_goes_through_the_tower_a_few_blocks_a_pass_and_reads_the_same() {
    use crate::batch::{Batch, BatchLimits, Job};
    use crate::generation::Event;

    let dir = data().join("vision/qwen3_5/hf");
    let loaded = LoadedModel::load(&dir).unwrap();
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let reference: serde_json::Value = serde_json::from_str(&text).unwrap();
    let request = case(&reference, "d");
    let prepared = prepare(&loaded, &request, &ImageLimits::default()).unwrap();
    let images = prepared.images.as_ref().unwrap();
    let (first_row, _, _) = images.images[0].runs[0];
    let tower = loaded.model.vision.as_ref().unwrap();
    let patches = &images.images[0].patches;
    // The screenshot's 468 patches make a block cost more prompt tokens than this pass has:
    // one block runs, the chunk stops before the image, and the budget is spent.
    let block = tower.block_multiply_adds(grid_of(patches));
    let per_token = loaded.prompt_token_multiply_adds.unwrap();
    assert!(block / per_token > 16.0, "{}", block / per_token);
    assert_eq!(tower.depth(), 2);
    let length = prepared.tokens.len();
    let mut budget = 16;
    let end = images
        .encode_reached(&loaded, 0, length, &mut budget)
        .unwrap();
    assert_eq!((end, budget), (first_row, 0));
    assert!(!loaded.encoded_images.holds(patches));
    let mut budget = 16;
    let end = images
        .encode_reached(&loaded, 0, length, &mut budget)
        .unwrap();
    assert_eq!((end, budget), (first_row, 0));
    assert!(loaded.encoded_images.holds(patches));
    let mut budget = 16;
    let end = images
        .encode_reached(&loaded, 0, length, &mut budget)
        .unwrap();
    assert_eq!((end, budget), (length, 16));

    // Through a batch of 16-token passes, beside another sequence, the answer is
    // transformers' greedy one.
    let fresh = LoadedModel::load(&dir).unwrap();
    let limits = BatchLimits {
        prefill_chunk: 16,
        ..BatchLimits::default()
    };
    let answers = std::cell::RefCell::new([String::new(), String::new()]);
    let mut batch = Batch::new(&fresh, limits, None, None);
    let text_request = chat(
        vec![serde_json::json!({"role": "user", "content": "Say something long."})],
        Vec::new(),
    );
    for (index, request) in [text_request, request].into_iter().enumerate() {
        let answers = &answers;
        batch.submit(Job {
            request,
            cancelled: Box::new(|| false),
            sink: Box::new(move |event| match event.unwrap() {
                // The template opens the model's thinking, which the answer then is.
                Event::Delta {
                    text, reasoning, ..
                } => answers.borrow_mut()[index].push_str(&(reasoning + &text)),
                Event::Accepted { .. } | Event::Done { .. } => {}
            }),
        });
    }
    while !batch.is_idle() {
        batch.step();
    }
    drop(batch);
    let decoded: Vec<u32> = reference["cases"]["d"]["decoded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|token| token.as_u64().unwrap() as u32)
        .collect();
    let expected = fresh.tokenizer.decode(&decoded, true).unwrap();
    // The reasoning parser drops the space that opens the thinking.
    assert_eq!(answers.borrow()[1], expected.trim_start());
}

#[test]
fn the_memory_guard_counts_the_tower_on_the_largest_image() {
    use crate::batch::{Batch, BatchLimits, Job};

    let loaded = LoadedModel::load(&data().join("vision/qwen3_5/hf")).unwrap();
    // The whole 1024x768 screenshot: 49,152 patches of 4 pixels, whose attention scores in
    // one of the tower's blocks take tens of GiB, far over the limit the text alone fits in.
    let limits = BatchLimits {
        images: ImageLimits {
            max_pixels: Some(1 << 20),
            ..ImageLimits::default()
        },
        ..BatchLimits::default()
    };
    let message = serde_json::json!({"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "what is it?"}]});
    let request = chat(
        vec![message],
        vec![image("screenshot.png", "messages[0].content[0]")],
    );
    let failure = std::cell::RefCell::new(None);
    let mut batch = Batch::new(&loaded, limits, Some(4 << 30), None);
    batch.submit(Job {
        request,
        cancelled: Box::new(|| false),
        sink: Box::new(|event| {
            if let Err(error) = event {
                let reason = std::error::Error::source(&error).map(ToString::to_string);
                *failure.borrow_mut() = reason;
            }
        }),
    });
    while !batch.is_idle() {
        batch.step();
    }
    drop(batch);
    let failure = failure.into_inner().expect("a refusal");
    assert!(
        failure.contains("of it the vision tower's on the largest image"),
        "{failure}"
    );
}

/// A fixture's model (its files, or a GGUF with its projector) and its reference.
struct Fixture {
    loaded: LoadedModel,
    reference: serde_json::Value,
    tensors: std::collections::HashMap<String, Array>,
}

impl Fixture {
    fn load(dir: &str) -> Self {
        Self::at(
            &data().join(dir),
            LoadedModel::load(&data().join(dir)).unwrap(),
        )
    }

    /// The GGUF and projector llama.cpp's converter made of fixture `name`, with the
    /// reference in `reference_dir`.
    fn gguf(name: &str, reference_dir: &str) -> Self {
        let gguf = data().join(format!("vision/{name}/gguf"));
        let loaded = LoadedModel::load_with(
            &gguf.join(format!("{name}-vl-F32.gguf")),
            crate::gguf::Choices::default(),
            Some(&gguf.join(format!("mmproj-{name}-vl-F32.gguf"))),
            None,
        )
        .unwrap();
        Self::at(&data().join(reference_dir), loaded)
    }

    fn at(dir: &std::path::Path, loaded: LoadedModel) -> Self {
        let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
        Self {
            loaded,
            reference: serde_json::from_str(&text).unwrap(),
            tensors: Array::load_safetensors(dir.join("reference.safetensors")).unwrap(),
        }
    }

    /// Case `name` prepared, its tokens checked against the processor's.
    fn prepared(&self, name: &str) -> crate::generation::Prepared {
        let request = case(&self.reference, name);
        let prepared = prepare(&self.loaded, &request, &ImageLimits::default()).unwrap();
        let tokens: Vec<i32> = prepared.tokens.iter().map(|&token| token as i32).collect();
        let expected = &self.tensors[&format!("{name}.input_ids")];
        assert_eq!(tokens, expected.as_slice::<i32>(), "{name}");
        prepared
    }

    /// The logits at every prompt position, the prompt read in chunks of at most `chunk`
    /// tokens as a sequence reads it (each image encoded when a chunk reaches it, kept whole
    /// where its tokens see each other), into `cache`.
    fn prompt_logits(
        &self,
        prepared: &crate::generation::Prepared,
        cache: &mut [KvCache],
        chunk: usize,
    ) -> Array {
        let images = prepared.images.as_ref().unwrap();
        let length = prepared.tokens.len();
        let spans: Vec<(usize, usize)> = images.spans().collect();
        let (mut start, mut rows) = (0, Vec::new());
        while start < length {
            let mut budget = 1 << 20;
            let end = start.saturating_add(chunk).min(length);
            let end = images
                .encode_reached(&self.loaded, start, end, &mut budget)
                .unwrap();
            let end = images.whole_images(start, end);
            assert!(
                images.both_ways == ImagesSeenBothWays::Nowhere
                    || spans
                        .iter()
                        .all(|&(first, last)| !(first < end && end < last)),
                "{start}..{end} ends inside an image"
            );
            images.prepare_chunk(cache, start, end);
            let embedded = images.rows_in(&self.loaded, start, end).unwrap();
            let hidden = self
                .loaded
                .model
                .packed_hidden_states(&mut [crate::model::Segment {
                    tokens: &prepared.tokens[start..end],
                    cache,
                    embedded,
                }])
                .unwrap();
            rows.push(
                self.loaded
                    .model
                    .logits(&hidden)
                    .unwrap()
                    .squeeze_axes(&[0])
                    .unwrap(),
            );
            start = end;
        }
        mlx_rs::ops::concatenate(&rows, 0).unwrap()
    }
}

/// The Gemma fixtures and the name of the token types transformers' processor marks their
/// images' tokens with.
const GEMMAS: [(&str, &str); 2] = [
    ("vision/gemma3/hf", "token_type_ids"),
    ("vision/gemma4/hf", "mm_token_type_ids"),
];

#[test]
fn gemmas_prompts_have_the_processors_tokens_and_each_image_sees_itself_both_ways() {
    for (dir, types) in GEMMAS {
        let fixture = Fixture::load(dir);
        for name in ["a", "b", "c", "d"] {
            let images = fixture.prepared(name).images.unwrap();
            assert!(images.positions.is_none(), "{dir} {name}");
            // The runs that see each other are transformers' image token types.
            let types = fixture.tensors[&format!("{name}.{types}")].as_slice::<i32>();
            let spans: Vec<(usize, usize)> = images.spans().collect();
            for (position, &kind) in types.iter().enumerate() {
                let in_span = spans
                    .iter()
                    .any(|&(first, last)| (first..last).contains(&position));
                assert_eq!(kind == 1, in_span, "{dir} {name} position {position}");
            }
        }
    }
}

#[test]
fn gemmas_prompt_read_in_small_chunks_keeps_each_image_whole_and_reads_the_same() {
    for (dir, _) in GEMMAS {
        let fixture = Fixture::load(dir);
        let prepared = fixture.prepared("c");
        // 8-token chunks, shorter than an image's tokens.
        let mut cache = fixture.loaded.model.new_cache();
        let logits = fixture.prompt_logits(&prepared, &mut cache, 8);
        let difference = largest_difference(&logits, &fixture.tensors["c.logits"]);
        assert!(difference < 1e-3, "{dir}: {difference}");
    }
}

#[test]
fn mistral3s_prompts_have_the_processors_tokens_rows_broken_at_each_line() {
    let fixture = Fixture::load("vision/mistral3/hf");
    for name in ["a", "b", "c", "d"] {
        let images = fixture.prepared(name).images.unwrap();
        assert!(images.positions.is_none(), "{name}");
        // One run of rows per line of merged patches.
        let sizes = fixture.tensors[&format!("{name}.image_sizes")].as_slice::<i32>();
        for (image, size) in images.images.iter().zip(sizes.chunks(2)) {
            assert_eq!(image.runs.len(), (size[0] / 8) as usize, "{name}");
            assert!(image.runs.iter().all(|run| run.2 == (size[1] / 8) as usize));
        }
    }
}

/// llama.cpp's converter's GGUF and projector of the same checkpoint hold its weights exactly
/// (float32), so transformers' reference holds for them: for case (b), whose images llama.cpp's
/// pixel limits leave at the same size as the checkpoint's processor does.
#[test]
fn a_gguf_with_its_projector_reads_images_as_transformers() {
    let fixture = Fixture::gguf("qwen3_5", "vision/qwen3_5/hf");
    assert!(fixture.loaded.model.vision.is_some());
    let prepared = fixture.prepared("b");
    assert_eq!(
        prepared
            .images
            .as_ref()
            .unwrap()
            .positions
            .as_deref()
            .unwrap(),
        fixture.tensors["b.position_ids"].as_slice::<i32>()
    );
    let mut cache = fixture.loaded.model.new_cache();
    let logits = fixture.prompt_logits(&prepared, &mut cache, usize::MAX);
    let difference = largest_difference(&logits, &fixture.tensors["b.logits"]);
    assert!(difference < 1e-3, "{difference}");
}

/// Fixture `name`'s GGUF and projector (llama.cpp's converter's, of the fixture as the release
/// spells it) against transformers' reference in its `hf` folder, case by case: the tower, given
/// transformers' pixels (`encoded`), within 1e-3 of transformers' rows, and the text model,
/// given those rows, within 1e-3 of transformers' logits, each image's tokens seeing each other
/// both ways where `both_ways` says.
fn a_gguf_pair_reads_as_transformers(
    name: &str,
    encoded: vision_tests::Encoded,
    both_ways: ImagesSeenBothWays,
) -> Fixture {
    let fixture = Fixture::gguf(name, &format!("vision/{name}/hf"));
    let model = &fixture.loaded.model;
    let tower = model.vision.as_ref().unwrap();
    assert_eq!(tower.sees_images_both_ways(), both_ways, "{name}");
    for case in ["a", "b", "c", "d"] {
        let rows = encoded(model, &fixture.tensors, case);
        let features = &fixture.tensors[&format!("{case}.image_features")];
        let difference = largest_difference(&rows, features);
        assert!(difference < 1e-3, "{name} {case}: tower {difference}");
        let tokens = vision_tests::reference_tokens(&fixture.tensors, case);
        let mut cache = model.new_cache();
        let logits =
            vision_tests::logits_after_rows(model, &tokens, features, &mut cache, both_ways);
        let expected = &fixture.tensors[&format!("{case}.logits")];
        let difference = largest_difference(&logits, expected);
        assert!(difference < 1e-3, "{name} {case}: {difference}");
    }
    fixture
}

/// Gemma 3's pair: llama.cpp's fixed size is the processor's, and the converter writes the
/// projection in float16 whatever the output type, which moves the tower's rows by up to
/// 2.6e-4 (and the logits after them by up to 4.7e-2).
#[test]
fn a_gemma3_gguf_with_its_projector_reads_images_as_transformers() {
    let fixture = a_gguf_pair_reads_as_transformers(
        "gemma3",
        vision_tests::gemma3_encoded,
        ImagesSeenBothWays::EveryLayer,
    );
    // The prompt is transformers'.
    for name in ["a", "b", "c", "d"] {
        fixture.prepared(name);
    }
}

/// Gemma 4's pair, each image sized as llama.cpp's `mtmd` sizes it
/// (tests/data/vision/gemma4/gguf/reference.json).
#[test]
fn a_gemma4_gguf_with_its_projector_sizes_images_as_llama_cpp_and_reads_them_as_transformers() {
    let fixture = a_gguf_pair_reads_as_transformers(
        "gemma4",
        vision_tests::gemma4_encoded,
        ImagesSeenBothWays::SlidingLayers,
    );
    let text = std::fs::read_to_string(data().join("vision/gemma4/gguf/reference.json")).unwrap();
    let llama_cpp: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tower = fixture.loaded.model.vision.as_ref().unwrap();
    let processor = fixture.loaded.image_processor.as_ref().unwrap();
    for (file, tokens) in llama_cpp["llama_cpp_image_tokens"].as_object().unwrap() {
        let bytes = std::fs::read(data().join("vision/images").join(file)).unwrap();
        let patches = processor
            .preprocess(&image::decode(&bytes).unwrap())
            .unwrap();
        let rows = tower.rows(crate::encoded_images::grid_of(&patches));
        assert_eq!(rows as u64, tokens.as_u64().unwrap(), "{file}");
    }
}

/// Mistral 3's pair, its query and key rows permuted for llama.cpp's rotation, sized as
/// llama.cpp sizes Pixtral's images: its sizing, shared with Gemma 4's (held to `mtmd` there),
/// within 8 to 1024 merged patches of 8 pixels here.
#[test]
fn a_mistral3_gguf_with_its_projector_reads_images_as_transformers() {
    let fixture = a_gguf_pair_reads_as_transformers(
        "mistral3",
        vision_tests::mistral3_encoded,
        ImagesSeenBothWays::Nowhere,
    );
    let processor = fixture.loaded.image_processor.as_ref().unwrap();
    // The screenshot scaled down into 1024, the rest rounded to whole merged patches.
    for (file, [rows, columns]) in [
        ("screenshot.png", [27, 36]),
        ("wide.png", [3, 8]),
        ("square.webp", [6, 6]),
    ] {
        let bytes = std::fs::read(data().join("vision/images").join(file)).unwrap();
        let patches = processor
            .preprocess(&image::decode(&bytes).unwrap())
            .unwrap();
        assert_eq!(patches.grid, [1, rows * 2, columns * 2], "{file}");
    }
}

/// The same GGUF and projector against llama.cpp's own multimodal library (`mtmd`), on a
/// picture llama.cpp leaves at its size (tests/data/vision/qwen3_5/gguf/reference.json).
#[test]
fn a_gguf_with_its_projector_reads_an_image_as_llama_cpp() {
    let mut fixture = Fixture::gguf("qwen3_5", "vision/qwen3_5/gguf");
    let messages = fixture.reference["messages"].clone();
    fixture.reference = serde_json::json!({"cases": {"only": {"messages": messages}}});
    let loaded = &fixture.loaded;
    let prepared = prepare(
        loaded,
        &case(&fixture.reference, "only"),
        &ImageLimits::default(),
    )
    .unwrap();
    let images = prepared.images.as_ref().unwrap();
    // llama.cpp's position after the prompt is transformers' (M-RoPE's shift included).
    assert_eq!(
        prepared.tokens.len() as i32 + images.shift,
        fixture.tensors["positions"].as_slice::<i32>()[0]
    );
    let mut cache = loaded.model.new_cache();
    let prompt = fixture.prompt_logits(&prepared, &mut cache, usize::MAX);
    let mut rows = vec![prompt.index(-1)];
    for &token in fixture.tensors["decoded"].as_slice::<i32>() {
        images.prepare_generated(&mut cache);
        let hidden = loaded
            .model
            .hidden_states(&[token as u32], &mut cache)
            .unwrap();
        rows.push(
            loaded
                .model
                .logits(&hidden)
                .unwrap()
                .reshape(&[-1])
                .unwrap(),
        );
    }
    let logits = mlx_rs::ops::stack(&rows, 0).unwrap();
    let difference = largest_difference(&logits, &fixture.tensors["logits"]);
    assert!(difference < 1e-3, "{difference}");
}
