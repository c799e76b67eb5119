//! The estimate's terms worked by hand for dense, mixture-of-experts and sliding-window layers.

use super::*;
use crate::model::CacheShape;

/// The tiny fixture's shape (`corral fixture --size tiny`).
fn tiny_config() -> ModelConfig {
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
        "vocab_size": 1024, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
        "tie_word_embeddings": false,
    });
    ModelConfig::from_json(config, std::path::Path::new("config.json")).unwrap()
}

const DENSE: LayerShape = LayerShape {
    sliding_window: None,
    cache: CacheShape::heads(4, 32),
    recurrent: None,
    feed_forward: FeedForwardShape::Dense { inner: 512 },
};

/// The peak of the tiny fixture's 4 dense layers.
fn tiny_peak(dtype: Dtype, prompt_tokens: usize, chunk: usize) -> u64 {
    let config = tiny_config();
    prefill_peak_bytes(
        Shape::new(&config, &[DENSE; 4], dtype),
        prompt_tokens,
        chunk,
    )
}

#[test]
fn a_short_prompt_costs_one_cache_step_and_small_activations() {
    // P = 20, C = 20, S = 256, b = 4.
    let kv_cache = 4 * 2 * 4 * 32 * 256 * 4; // 1_048_576
    let layer = 4 * 20 * 256 * 4 // 81_920
        + 2 * 20 * 16 * 32 * 4 // 81_920
        + 2 * 20 * 20 * 8 * 4 // 25_600
        + 3 * 20 * 512 * 4; // 122_880
    let logits = 1024 * 8;
    assert_eq!(kv_cache + layer + logits, 1_369_088);
    assert_eq!(tiny_peak(Dtype::Float32, 20, 512), 1_369_088);
}

#[test]
fn a_long_prompt_is_dominated_by_the_chunks_attention_scores() {
    // P = 7000, C = 512, S = 7168, b = 4.
    let kv_cache = 4 * 2 * 4 * 32 * 7168 * 4; // 29_360_128
    let layer = 4 * 512 * 256 * 4 // 2_097_152
        + 2 * 512 * 16 * 32 * 4 // 2_097_152
        + 2 * 512 * 7000 * 8 * 4 // 229_376_000
        + 3 * 512 * 512 * 4; // 3_145_728
    let logits = 1024 * 8;
    assert_eq!(kv_cache + layer + logits, 266_084_352);
    assert_eq!(tiny_peak(Dtype::Float32, 7000, 512), 266_084_352);
}

#[test]
fn half_precision_halves_everything_but_the_f32_terms() {
    // The f32 scores (229_376_000) and logits copy (4_096) stay; the rest halves.
    let f32_terms = 229_376_000 + 1024 * 4;
    let halved = (266_084_352 - f32_terms) / 2;
    assert_eq!(tiny_peak(Dtype::Bfloat16, 7000, 512), halved + f32_terms);
}

#[test]
fn a_prefill_that_crosses_the_limit_is_refused_with_the_numbers() {
    let mib = 1024 * 1024;
    assert_eq!(check(50 * mib, 14 * mib, 64 * mib, 10), Ok(()));
    let refused = check(71 * mib + mib / 5, 11 * mib + mib / 2, 64 * mib, 7000).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "prefill of 7000 prompt tokens needs about 71.2 MiB on top of 11.5 MiB in use, \
         over this worker's memory limit of 64.0 MiB"
    );
}

#[test]
fn human_units_pick_the_largest_unit_below_the_value() {
    assert_eq!(human(512), "512 B");
    assert_eq!(human(1536), "1.5 KiB");
    assert_eq!(human(3 * 1024 * 1024 * 1024), "3.0 GiB");
}

#[test]
fn experts_cost_their_top_k_widths_not_the_dense_width_of_every_layer() {
    // The tiny shape with a Qwen3-30B-A3B-like MoE in every layer: k = 8 of N = 128 experts,
    // each 64 wide (k·I = 512, the dense width), beside a dense intermediate_size of 6144 that
    // no layer has. P = 20, C = 20, b = 4.
    let config = ModelConfig {
        dense_width: Some(6144),
        ..tiny_config()
    };
    let moe = LayerShape {
        feed_forward: FeedForwardShape::Experts {
            experts: 128,
            top_k: 8,
            inner: 64,
            shared_inner: 0,
        },
        ..DENSE
    };
    let attention = 4 * 20 * 256 * 4 + 2 * 20 * 16 * 32 * 4 + 2 * 20 * 20 * 8 * 4;
    let experts = 3 * 20 * 8 * 64 * 4 // the chosen experts' gate, up and product
        + 20 * 8 * 256 * 4 // their outputs
        + 2 * 20 * 128 * 4; // router logits and scores
    let kv_cache = 4 * 2 * 4 * 32 * 256 * 4;
    let logits = 1024 * 8;
    let peak = |layers: &[LayerShape]| {
        prefill_peak_bytes(Shape::new(&config, layers, Dtype::Float32), 20, 512)
    };
    assert_eq!(peak(&[moe; 4]), kv_cache + attention + experts + logits);
    // A shared expert runs for every position; a dense first layer (GLM-4.5) is the largest
    // layer only when it is wider than the experts.
    let shared = LayerShape {
        feed_forward: FeedForwardShape::Experts {
            experts: 128,
            top_k: 8,
            inner: 64,
            shared_inner: 64,
        },
        ..moe
    };
    assert_eq!(
        peak(&[shared; 4]),
        kv_cache + attention + experts + 3 * 20 * 64 * 4 + logits
    );
    let wide_dense = LayerShape {
        feed_forward: FeedForwardShape::Dense { inner: 6144 },
        ..DENSE
    };
    assert_eq!(
        peak(&[wide_dense, moe, moe, moe]),
        kv_cache + attention + 3 * 20 * 6144 * 4 + logits
    );
}

#[test]
fn a_sliding_window_layer_holds_at_most_two_windows_and_a_chunk() {
    // gpt-oss's pattern: sliding (window 128) and full layers alternating. P = 7000, C = 512:
    // a sliding layer holds 2·128 + 512 = 768 positions (three steps), a full one 7168.
    let config = tiny_config();
    let sliding = LayerShape {
        sliding_window: Some(128),
        ..DENSE
    };
    let layers = [sliding, DENSE, sliding, DENSE];
    let shape = Shape::new(&config, &layers, Dtype::Float32);
    let per_position = 2 * 4 * 32 * 4;
    assert_eq!(
        kv_cache_bytes(shape, 7000, 512),
        2 * per_position * 768 + 2 * per_position * 7168
    );
    // The full layer's scores over all 7000 positions are the largest layer.
    let full_layer =
        4 * 512 * 256 * 4 + 2 * 512 * 16 * 32 * 4 + 2 * 512 * 7000 * 8 * 4 + 3 * 512 * 512 * 4;
    assert_eq!(
        prefill_peak_bytes(shape, 7000, 512),
        kv_cache_bytes(shape, 7000, 512) + full_layer + 1024 * 8
    );
    // Every layer sliding: the scores span the held positions only.
    let all_sliding = [sliding; 4];
    let shape = Shape::new(&config, &all_sliding, Dtype::Float32);
    let sliding_layer = full_layer - 2 * 512 * 7000 * 8 * 4 + 2 * 512 * 768 * 8 * 4;
    assert_eq!(
        prefill_peak_bytes(shape, 7000, 512),
        4 * per_position * 768 + sliding_layer + 1024 * 8
    );
    // A prompt shorter than the window holds what it has, as a full layer would.
    assert_eq!(kv_cache_bytes(shape, 20, 512), 4 * per_position * 256);
}

#[test]
fn a_latent_attention_layer_caches_its_latent_and_rotary_key_not_its_heads() {
    // DeepSeek V3's cache per position: a 512-wide latent and a 64-wide rotary key, one head,
    // where 128 heads of keys and values 192 and 128 wide would be 40,960 elements.
    let config = tiny_config();
    let latent = LayerShape {
        cache: CacheShape {
            kv_heads: 1,
            key_dim: 512,
            value_dim: 64,
        },
        ..DENSE
    };
    let (latent, dense) = ([latent; 4], [DENSE; 4]);
    let shape = Shape::new(&config, &latent, Dtype::Bfloat16);
    assert_eq!(kv_cache_bytes(shape, 7000, 512), 4 * (512 + 64) * 7168 * 2);
    let full = Shape::new(&config, &dense, Dtype::Bfloat16);
    assert_eq!(kv_cache_bytes(full, 7000, 512), 4 * 2 * 4 * 32 * 7168 * 2);
}

#[test]
fn a_recurrent_layer_holds_its_state_whatever_the_prompt() {
    // Qwen3.5's pattern: gated DeltaNet and attention layers alternating; a DeltaNet state of
    // 3 x 96 convolution inputs and 4 x 16 x 16 f32 memory.
    let config = tiny_config();
    let state = crate::model::StateShape {
        activation_elements: 3 * 96,
        f32_elements: 4 * 16 * 16,
    };
    let recurrent = LayerShape {
        recurrent: Some(state),
        ..DENSE
    };
    let layers = [recurrent, DENSE, recurrent, DENSE];
    let shape = Shape::new(&config, &layers, Dtype::Float32);
    let state_bytes = 3 * 96 * 4 + 4 * 16 * 16 * 4;
    let per_position = 2 * 4 * 32 * 4;
    for (prompt, held) in [(20, 256), (7000, 7168)] {
        assert_eq!(
            kv_cache_bytes(shape, prompt, 512),
            2 * state_bytes + 2 * per_position * held
        );
    }
    // The attention layers' scores are still the largest layer.
    let full_layer =
        4 * 512 * 256 * 4 + 2 * 512 * 16 * 32 * 4 + 2 * 512 * 7000 * 8 * 4 + 3 * 512 * 512 * 4;
    assert_eq!(
        prefill_peak_bytes(shape, 7000, 512),
        kv_cache_bytes(shape, 7000, 512) + full_layer + 1024 * 8
    );
}
