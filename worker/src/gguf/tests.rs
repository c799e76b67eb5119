//! The header checks, on GGUF files written byte by byte here.

use std::path::Path;

use super::ggml_type::GgmlType;
use super::header::GgufHeader;
use super::weights::hugging_face_name;
use super::{architectures, check, tokenizer};

/// A GGUF file under construction: metadata, tensor infos, then the data section.
#[derive(Default)]
struct Builder {
    metadata: Vec<u8>,
    kv_count: u64,
    tensors: Vec<u8>,
    tensor_count: u64,
    data_bytes: u64,
}

fn string(out: &mut Vec<u8>, text: &str) {
    out.extend((text.len() as u64).to_le_bytes());
    out.extend(text.as_bytes());
}

/// `text` as one element of a string array.
fn encoded(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    string(&mut out, text);
    out
}

impl Builder {
    fn text(mut self, key: &str, value: &str) -> Self {
        string(&mut self.metadata, key);
        self.metadata.extend(8u32.to_le_bytes());
        string(&mut self.metadata, value);
        self.kv_count += 1;
        self
    }

    /// An array of `element` type values, each already encoded.
    fn array(mut self, key: &str, element: u32, values: &[Vec<u8>]) -> Self {
        string(&mut self.metadata, key);
        self.metadata.extend(9u32.to_le_bytes());
        self.metadata.extend(element.to_le_bytes());
        self.metadata.extend((values.len() as u64).to_le_bytes());
        for value in values {
            self.metadata.extend(value);
        }
        self.kv_count += 1;
        self
    }

    fn uint(mut self, key: &str, value: u32) -> Self {
        string(&mut self.metadata, key);
        self.metadata.extend(4u32.to_le_bytes());
        self.metadata.extend(value.to_le_bytes());
        self.kv_count += 1;
        self
    }

    fn float(mut self, key: &str, value: f32) -> Self {
        string(&mut self.metadata, key);
        self.metadata.extend(6u32.to_le_bytes());
        self.metadata.extend(value.to_le_bytes());
        self.kv_count += 1;
        self
    }

    fn boolean(mut self, key: &str, value: bool) -> Self {
        string(&mut self.metadata, key);
        self.metadata.extend(7u32.to_le_bytes());
        self.metadata.push(u8::from(value));
        self.kv_count += 1;
        self
    }

    /// A tensor of `dims` (ggml order) at the next offset, its bytes counted into the data.
    fn tensor(self, name: &str, dims: &[u64], ggml_type: GgmlType) -> Self {
        let values: u64 = dims.iter().product();
        let bytes = ggml_type.bytes_for(values).unwrap();
        let offset = self.data_bytes;
        self.tensor_at(name, dims, ggml_type, offset)
            .with_data(bytes.next_multiple_of(32))
    }

    fn tensor_at(mut self, name: &str, dims: &[u64], ggml_type: GgmlType, offset: u64) -> Self {
        string(&mut self.tensors, name);
        self.tensors.extend((dims.len() as u32).to_le_bytes());
        for dim in dims {
            self.tensors.extend(dim.to_le_bytes());
        }
        self.tensors.extend(ggml_type.0.to_le_bytes());
        self.tensors.extend(offset.to_le_bytes());
        self.tensor_count += 1;
        self
    }

    fn with_data(mut self, bytes: u64) -> Self {
        self.data_bytes += bytes;
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(self.tensor_count.to_le_bytes());
        out.extend(self.kv_count.to_le_bytes());
        out.extend(&self.metadata);
        out.extend(&self.tensors);
        out.resize(out.len().next_multiple_of(32), 0);
        out.resize(out.len() + self.data_bytes as usize, 0);
        out
    }

    fn write(&self, dir: &Path) -> std::path::PathBuf {
        let path = dir.join("model.gguf");
        std::fs::write(&path, self.bytes()).unwrap();
        path
    }
}

fn llama() -> Builder {
    Builder::default()
        .text("general.architecture", "llama")
        .uint("llama.embedding_length", 64)
        .uint("llama.feed_forward_length", 128)
        .uint("llama.block_count", 1)
        .uint("llama.attention.head_count", 4)
        .tensor("token_embd.weight", &[64, 96], GgmlType::Q8_0)
        .tensor("blk.0.attn_q.weight", &[64, 64], GgmlType::Q4_1)
        .tensor("output_norm.weight", &[64], GgmlType::F32)
}

/// A `deepseek2` of `layers` layers and `vocab` tokens, its metadata as llama.cpp's converter
/// writes it for a model whose config has no `scoring_func`.
fn deepseek2(layers: u32, vocab: u64) -> Builder {
    Builder::default()
        .text("general.architecture", "deepseek2")
        .uint("deepseek2.embedding_length", 64)
        .uint("deepseek2.feed_forward_length", 64)
        .uint("deepseek2.block_count", layers)
        .uint("deepseek2.attention.head_count", 4)
        .uint("deepseek2.attention.head_count_kv", 1)
        .float("deepseek2.attention.layer_norm_rms_epsilon", 1e-6)
        .uint("deepseek2.attention.kv_lora_rank", 32)
        .uint("deepseek2.attention.key_length", 40)
        .uint("deepseek2.attention.value_length", 32)
        .uint("deepseek2.attention.key_length_mla", 24)
        .uint("deepseek2.attention.value_length_mla", 16)
        .uint("deepseek2.rope.dimension_count", 8)
        .uint("deepseek2.expert_count", 4)
        .uint("deepseek2.expert_used_count", 2)
        .uint("deepseek2.expert_feed_forward_length", 64)
        .tensor("token_embd.weight", &[64, vocab], GgmlType::Q4_0)
}

fn config_of(builder: Builder) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    super::config::config_json(&header).unwrap()
}

#[test]
fn deepseek2_routes_and_scales_yarn_as_llama_cpp_reads_the_file() {
    let config = config_of(deepseek2(3, 128));
    assert_eq!(config["model_type"], "deepseek_v3");
    assert_eq!(config["qk_nope_head_dim"], 16);
    assert_eq!(config["v_head_dim"], 16);
    // No gating function: DeepSeek V2's softmax, but for GLM-4.7-Flash's shape.
    assert_eq!(config["scoring_func"], "softmax");
    assert_eq!(config_of(deepseek2(47, 154_880))["scoring_func"], "sigmoid");
    let sigmoid = deepseek2(3, 128).uint("deepseek2.expert_gating_func", 2);
    assert_eq!(config_of(sigmoid)["scoring_func"], "sigmoid");
    let yarn = |builder: Builder| {
        let builder = builder
            .text("deepseek2.rope.scaling.type", "yarn")
            .float("deepseek2.rope.scaling.factor", 40.0)
            .uint("deepseek2.rope.scaling.original_context_length", 4096);
        let scaling = config_of(builder)["rope_scaling"].clone();
        let number = |key: &str| scaling[key].as_f64().unwrap();
        (number("mscale"), number("mscale_all_dim"))
    };
    // DeepSeek V2-Lite's 0.707: llama.cpp takes `mscale` to be the same.
    let (mscale, all_dims) =
        yarn(deepseek2(3, 128).float("deepseek2.rope.scaling.yarn_log_multiplier", 0.0707));
    assert!((mscale - 0.707).abs() < 1e-6 && (all_dims - 0.707).abs() < 1e-6);
    let with_one = deepseek2(3, 128).float("deepseek2.rope.scaling.yarn_log_multiplier", 0.1);
    assert_eq!(yarn(with_one), (1.0, 1.0));
    // No multiplier: llama.cpp scales the rotary channels and the scores by 1 + 0.1 ln 40.
    let (mscale, all_dims) = yarn(deepseek2(3, 128));
    assert_eq!(all_dims, 1.0);
    assert!((mscale - (2.0 + 0.1 * 40f64.ln())).abs() < 1e-12);
}

fn error_of(builder: &Builder) -> String {
    let dir = tempfile::tempdir().unwrap();
    GgufHeader::read(&builder.write(dir.path()))
        .unwrap_err()
        .to_string()
}

#[test]
fn reads_metadata_tensor_shapes_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let header = GgufHeader::read(&llama().write(dir.path())).unwrap();
    assert_eq!(header.architecture(), Some("llama"));
    assert_eq!(
        header.get("llama.block_count").and_then(|v| v.as_u64()),
        Some(1)
    );
    let embedding = &header.tensors[0];
    assert_eq!(embedding.shape(), [96, 64]);
    assert_eq!(embedding.bytes, 96 * 2 * 34);
    assert_eq!(header.quantization_summary(), "Q8_0+Q4_1+F32");
    header.check_types().unwrap();
}

#[test]
fn a_truncated_file_is_refused_naming_the_tensor_past_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = llama().write(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let error = GgufHeader::read(&path).unwrap_err().to_string();
    assert!(error.contains("model.gguf"), "{error}");
    assert!(
        error.contains("output_norm.weight") && error.contains("past the end"),
        "{error}"
    );

    std::fs::write(&path, &bytes[..40]).unwrap();
    let error = GgufHeader::read(&path).unwrap_err().to_string();
    assert!(error.contains("truncated"), "{error}");
}

#[test]
fn an_offset_past_the_file_is_refused() {
    let builder = llama().tensor_at("blk.0.ffn_up.weight", &[64, 128], GgmlType::F32, 1 << 40);
    let error = error_of(&builder);
    assert!(
        error.contains("blk.0.ffn_up.weight") && error.contains("past the end"),
        "{error}"
    );
}

#[test]
fn misaligned_offsets_unknown_types_and_bad_magic_are_refused() {
    let misaligned = llama().tensor_at("x.weight", &[32], GgmlType::F32, 4);
    assert!(error_of(&misaligned).contains("not aligned"));
    let unknown = llama().tensor_at("x.weight", &[32], GgmlType(99), 0);
    assert!(error_of(&unknown).contains("type 99"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, b"GGML and then some").unwrap();
    let error = GgufHeader::read(&path).unwrap_err().to_string();
    assert!(error.contains("magic"), "{error}");
}

#[test]
fn a_huge_array_count_is_refused_before_allocating() {
    let mut builder = llama();
    string(&mut builder.metadata, "tokenizer.ggml.tokens");
    builder.metadata.extend(9u32.to_le_bytes());
    builder.metadata.extend(8u32.to_le_bytes());
    builder.metadata.extend(u64::MAX.to_le_bytes());
    builder.kv_count += 1;
    assert!(error_of(&builder).contains("longer than the rest of the file"));
}

#[test]
fn a_tensor_type_corral_cannot_read_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let builder = llama().tensor("blk.0.ffn_down.weight", &[256, 64], GgmlType(16));
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let error = header.check_types().unwrap_err().to_string();
    assert!(
        error.contains("blk.0.ffn_down.weight") && error.contains("IQ2_XXS"),
        "{error}"
    );
    assert!(error.contains("Q4_K") && error.contains("Q6_K"), "{error}");
    assert!(check(&header).is_err());
}

#[test]
fn an_unknown_architecture_is_refused_naming_the_served_ones() {
    let dir = tempfile::tempdir().unwrap();
    let builder = Builder::default()
        .text("general.architecture", "mamba")
        .tensor("token_embd.weight", &[64, 96], GgmlType::F32);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let error = check(&header).err().unwrap().to_string();
    assert!(error.contains("mamba"), "{error}");
    for arch in architectures() {
        assert!(error.contains(arch), "{error}");
    }
}

#[test]
fn tensor_names_map_to_the_hugging_face_layout() {
    assert_eq!(
        hugging_face_name("llama", "token_embd"),
        "model.embed_tokens"
    );
    assert_eq!(hugging_face_name("llama", "output"), "lm_head");
    assert_eq!(
        hugging_face_name("qwen3", "blk.11.attn_k_norm"),
        "model.layers.11.self_attn.k_norm"
    );
    assert_eq!(
        hugging_face_name("llama", "blk.0.ffn_down"),
        "model.layers.0.mlp.down_proj"
    );
    assert_eq!(hugging_face_name("llama", "rope_freqs"), "rope_freqs");
    // Per architecture: which norm `ffn_norm` is, where the experts and router live.
    assert_eq!(
        hugging_face_name("gemma3", "blk.2.ffn_norm"),
        "model.layers.2.pre_feedforward_layernorm"
    );
    assert_eq!(
        hugging_face_name("gemma4", "blk.2.ffn_norm"),
        "model.layers.2.pre_feedforward_layernorm"
    );
    assert_eq!(
        hugging_face_name("gemma4", "per_layer_token_embd"),
        "model.embed_tokens_per_layer"
    );
    assert_eq!(
        hugging_face_name("gemma4", "blk.3.inp_gate"),
        "model.layers.3.per_layer_input_gate"
    );
    assert_eq!(
        hugging_face_name("gemma4", "blk.1.ffn_gate_inp"),
        "model.layers.1.router.proj"
    );
    assert_eq!(
        hugging_face_name("gemma4", "blk.1.ffn_down_exps"),
        "model.layers.1.experts.switch_glu.down_proj"
    );
    assert_eq!(
        hugging_face_name("llama", "blk.1.ffn_gate_exps"),
        "model.layers.1.block_sparse_moe.switch_mlp.gate_proj"
    );
    assert_eq!(
        hugging_face_name("llama4", "blk.1.ffn_gate_inp"),
        "model.layers.1.feed_forward.router"
    );
    assert_eq!(
        hugging_face_name("llama4", "blk.1.ffn_up_shexp"),
        "model.layers.1.feed_forward.shared_expert.up_proj"
    );
    assert_eq!(
        hugging_face_name("llama4", "blk.0.ffn_down"),
        "model.layers.0.feed_forward.down_proj"
    );
    assert_eq!(
        hugging_face_name("glm4moe", "blk.2.post_attention_norm"),
        "model.layers.2.post_attention_layernorm"
    );
    assert_eq!(
        hugging_face_name("qwen3moe", "blk.1.ffn_gate_exps"),
        "model.layers.1.mlp.switch_mlp.gate_proj"
    );
    assert_eq!(
        hugging_face_name("gpt-oss", "blk.1.ffn_gate_exps"),
        "model.layers.1.mlp.experts.gate_proj"
    );
    assert_eq!(
        hugging_face_name("gpt-oss", "blk.1.ffn_gate_inp"),
        "model.layers.1.mlp.router"
    );
    assert_eq!(
        hugging_face_name("phi3", "blk.0.ffn_up"),
        "model.layers.0.mlp.gate_up_proj"
    );
    // LFM2's own names: the final norm llama.cpp names after the embedding, the convolution.
    assert_eq!(
        hugging_face_name("lfm2", "token_embd_norm"),
        "model.embedding_norm"
    );
    assert_eq!(
        hugging_face_name("lfm2moe", "blk.0.shortconv.in_proj"),
        "model.layers.0.conv.in_proj"
    );
    assert_eq!(
        hugging_face_name("lfm2moe", "blk.1.ffn_down_exps"),
        "model.layers.1.feed_forward.switch_mlp.down_proj"
    );
    assert_eq!(
        hugging_face_name("lfm2", "blk.1.attn_q_norm"),
        "model.layers.1.self_attn.q_norm"
    );
    // DeepSeek's latent attention: the converter's split of `kv_b_proj` is the model's.
    assert_eq!(
        hugging_face_name("deepseek2", "blk.2.attn_k_b"),
        "model.layers.2.self_attn.embed_q"
    );
    assert_eq!(
        hugging_face_name("deepseek2", "blk.2.attn_kv_a_mqa"),
        "model.layers.2.self_attn.kv_a_proj_with_mqa"
    );
    assert_eq!(
        hugging_face_name("deepseek2", "blk.1.exp_probs_b"),
        "model.layers.1.mlp.gate.e_score_correction"
    );
}

/// A llama-style SentencePiece vocabulary: merges come from the scores, unknown characters fall
/// back to byte tokens, a space prefix is added and stripped again, and bos is added.
#[test]
fn a_sentencepiece_tokenizer_is_rebuilt_from_scores() {
    let pieces: [(&str, f32, i32); 15] = [
        ("<unk>", 0.0, 2),
        ("<s>", 0.0, 3),
        ("</s>", 0.0, 3),
        ("▁", -1.0, 1),
        ("h", -2.0, 1),
        ("e", -3.0, 1),
        ("l", -4.0, 1),
        ("o", -5.0, 1),
        ("▁h", -6.0, 1),
        ("ll", -7.0, 1),
        ("llo", -8.0, 1),
        ("▁he", -9.0, 1),
        ("▁hello", -10.0, 1),
        ("<0x21>", 0.0, 6),
        ("w", -11.0, 1),
    ];
    let dir = tempfile::tempdir().unwrap();
    let builder = Builder::default()
        .text("tokenizer.ggml.model", "llama")
        .array(
            "tokenizer.ggml.tokens",
            8,
            &pieces.map(|(piece, _, _)| encoded(piece)),
        )
        .array(
            "tokenizer.ggml.scores",
            6,
            &pieces.map(|(_, score, _)| score.to_le_bytes().to_vec()),
        )
        .array(
            "tokenizer.ggml.token_type",
            5,
            &pieces.map(|(_, _, kind)| kind.to_le_bytes().to_vec()),
        )
        .uint("tokenizer.ggml.bos_token_id", 1)
        .uint("tokenizer.ggml.eos_token_id", 2)
        .uint("tokenizer.ggml.unknown_token_id", 0);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let built = tokenizer::build(&header).unwrap();
    let encoding = built.encode("hello!", true).unwrap();
    assert_eq!(encoding.get_ids(), [1, 12, 13]);
    assert_eq!(built.decode(&[12, 13], true).unwrap(), "hello!");
    assert_eq!(built.encode("hello", false).unwrap().get_ids(), [12]);
    let stops: std::collections::BTreeSet<u32> =
        tokenizer::stop_ids(&header).unwrap().into_iter().collect();
    assert_eq!(stops, [2].into());
}

/// Gemma 4's tokenizer: SentencePiece pieces with the file's own merges, runs of newlines split
/// from the rest before merging (so the first-ranked merge `i` + `\n` never applies), no space
/// prefix, byte fallback, and bos added although the file says not to, as llama.cpp does.
#[test]
fn a_gemma4_tokenizer_merges_by_the_files_merges_apart_from_newlines() {
    let pieces: [(&str, i32); 12] = [
        ("<pad>", 3),
        ("<eos>", 3),
        ("<bos>", 3),
        ("▁", 1),
        ("h", 1),
        ("i", 1),
        ("\n", 1),
        ("i\n", 1),
        ("hi", 1),
        ("▁hi", 1),
        ("\n\n", 1),
        ("<0x21>", 6),
    ];
    let dir = tempfile::tempdir().unwrap();
    let builder = Builder::default()
        .text("tokenizer.ggml.model", "gemma4")
        .array(
            "tokenizer.ggml.tokens",
            8,
            &pieces.map(|(piece, _)| encoded(piece)),
        )
        .array(
            "tokenizer.ggml.token_type",
            5,
            &pieces.map(|(_, kind)| kind.to_le_bytes().to_vec()),
        )
        .array(
            "tokenizer.ggml.merges",
            8,
            &["i \n", "h i", "▁ hi", "\n \n"].map(encoded),
        )
        .boolean("tokenizer.ggml.add_space_prefix", false)
        .boolean("tokenizer.ggml.add_bos_token", false)
        .uint("tokenizer.ggml.bos_token_id", 2)
        .uint("tokenizer.ggml.eos_token_id", 1);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let built = tokenizer::build(&header).unwrap();
    let encoding = built.encode("hi hi\n\nhi!", true).unwrap();
    assert_eq!(encoding.get_ids(), [2, 8, 9, 10, 8, 11]);
    assert_eq!(
        built.decode(&[8, 9, 10, 8, 11], true).unwrap(),
        "hi hi\n\nhi!"
    );
}

/// The pieces `pre` (`tokenizer.ggml.pre`) splits `text` into, byte-level mapped.
fn pre_tokenized(pre: &str, text: &str) -> Vec<String> {
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let dir = tempfile::tempdir().unwrap();
    let builder = Builder::default()
        .text("tokenizer.ggml.model", "gpt2")
        .text("tokenizer.ggml.pre", pre)
        .array(
            "tokenizer.ggml.tokens",
            8,
            &[encoded("a"), encoded("b"), encoded("ab")],
        )
        .array("tokenizer.ggml.merges", 8, &[encoded("a b")]);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let built = tokenizer::build(&header).unwrap();
    let mut pieces = PreTokenizedString::from(text);
    built
        .get_pre_tokenizer()
        .unwrap()
        .pre_tokenize(&mut pieces)
        .unwrap();
    pieces
        .get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(_, (start, end), _)| text[start..end].to_owned())
        .collect()
}

/// gpt-oss's o200k split (capitals then lower case, a contraction kept, numbers by three) and
/// Granite's (digits alone), as llama.cpp splits them.
#[test]
fn the_gpt_4o_and_refact_pre_tokenizers_split_as_llama_cpp_does() {
    assert_eq!(
        pre_tokenized("gpt-4o", "HelloWorld's 12345 foo"),
        ["Hello", "World's", " ", "123", "45", " foo"]
    );
    assert_eq!(
        pre_tokenized("refact", "abc 123"),
        ["abc", " ", "1", "2", "3"]
    );
}

/// Kimi K2's split is llama.cpp's code, not its regex: Han runs apart from kana, whole words
/// (no CamelCase split), a combining mark apart, an apostrophe joining the word it leads.
/// DeepSeek V2's regexes run in turn: newlines, cased letters, punctuation, trailing spaces,
/// CJK, numbers; a non-ASCII space is a space to each, never punctuation or CJK. The pieces are
/// those llama.cpp's `unicode_regex_split` gives.
#[test]
fn the_kimi_k2_and_deepseek_llm_pre_tokenizers_split_as_llama_cpp_does() {
    assert_eq!(
        pre_tokenized(
            "kimi-k2",
            "日本語の文章 CamelCase e\u{301} it's 'rer\n\n  x1234"
        ),
        [
            "日本語",
            "の",
            "文章",
            " CamelCase",
            " e",
            "\u{301}",
            " it's",
            " '",
            "rer",
            "\n\n",
            " ",
            " x",
            "123",
            "4"
        ]
    );
    assert_eq!(
        pre_tokenized(
            "deepseek-llm",
            "Hello, world!\n\n  Ω 123 日本語 ok \u{3000}ｗｏｒｌｄ！\u{3000}\u{2003}日本  "
        ),
        [
            "Hello",
            ",",
            " world",
            "!",
            "\n",
            "\n",
            " ",
            " Ω",
            " ",
            "123",
            " ",
            "日本語",
            " ok",
            " ",
            "\u{3000}ｗｏｒｌｄ",
            "！",
            "\u{3000}\u{2003}",
            "日本",
            "  "
        ]
    );
}

/// llama.cpp's Q4_K_M recipe on a Llama-3-shaped model (eight layers of hidden size 512, the
/// feed-forward and the embeddings' share of the weights in Llama 3 8B's proportions): Q4_K
/// everywhere but the output and, in the layers `use_more_bits` picks, `attn_v` and `ffn_down`,
/// which are Q6_K. Loaded with the default choices (f16 K-quant scales, Q6_K requantized to 8
/// bits), its weights stay within 1.3 times the file; exact K-quants (f32 scales) take more.
#[test]
fn a_q4_k_m_model_loads_within_1_3_times_its_file_unless_its_k_quants_stay_exact() {
    let (hidden, ffn, vocab, layers) = (512, 1792, 4096, 8);
    let more_bits =
        |layer: u64| layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
    let mut builder = Builder::default()
        .text("general.architecture", "llama")
        .tensor("token_embd.weight", &[hidden, vocab], GgmlType::Q4_K)
        .tensor("output.weight", &[hidden, vocab], GgmlType::Q6_K)
        .tensor("output_norm.weight", &[hidden], GgmlType::F32);
    for layer in 0..layers {
        let v_and_down = if more_bits(layer) {
            GgmlType::Q6_K
        } else {
            GgmlType::Q4_K
        };
        let name = |tensor: &str| format!("blk.{layer}.{tensor}.weight");
        builder = builder
            .tensor(&name("attn_q"), &[hidden, hidden], GgmlType::Q4_K)
            .tensor(&name("attn_k"), &[hidden, hidden / 4], GgmlType::Q4_K)
            .tensor(&name("attn_v"), &[hidden, hidden / 4], v_and_down)
            .tensor(&name("attn_output"), &[hidden, hidden], GgmlType::Q4_K)
            .tensor(&name("ffn_gate"), &[hidden, ffn], GgmlType::Q4_K)
            .tensor(&name("ffn_up"), &[hidden, ffn], GgmlType::Q4_K)
            .tensor(&name("ffn_down"), &[ffn, hidden], v_and_down)
            .tensor(&name("attn_norm"), &[hidden], GgmlType::F32)
            .tensor(&name("ffn_norm"), &[hidden], GgmlType::F32);
    }
    let dir = tempfile::tempdir().unwrap();
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let file = builder.data_bytes as f64;
    let loaded = super::loaded_bytes(&header);
    let rounded = loaded["8bit"] as f64 / file;
    let exact = loaded["8bit+exact"] as f64 / file;
    eprintln!("Q4_K_M loaded: {rounded:.3}x the file, {exact:.3}x with exact K-quants");
    assert!(rounded < 1.3, "{rounded}");
    assert!(exact > 1.3, "{exact}");
}

/// Each served `tokenizer.ggml.pre` encodes tricky texts (contractions, digit runs, CamelCase,
/// newlines, unicode, runs of spaces, control tokens) to llama.cpp's own ids
/// (`tests/data/gguf_pre_tokenizers.json`, scripts/reference/gguf_pre_tokenizers.py), on a
/// small vocabulary whose whole words no merge reaches tell the `ignore_merges` ones apart, and
/// whose merges across a combining mark or a camel-case boundary tell Qwen3.5's and o200k's
/// splits apart; bos first where llama.cpp adds it to a file that does not say (llama3, tekken).
#[test]
fn each_pre_tokenizer_encodes_as_llama_cpp_does() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/gguf_pre_tokenizers.json");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let texts =
        |key: &str| -> Vec<String> { serde_json::from_value(reference[key].clone()).unwrap() };
    let (tokens, merges, texts) = (texts("tokens"), texts("merges"), texts("texts"));
    let ids: std::collections::BTreeMap<String, Vec<Vec<u32>>> =
        serde_json::from_value(reference["ids"].clone()).unwrap();
    // `gpt2` is corral's own spelling of `gpt-2`, which llama.cpp refuses.
    let served: Vec<&str> = tokenizer::pre_tokenizer_names()
        .filter(|name| *name != "gpt2")
        .collect();
    assert_eq!(
        ids.keys()
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>(),
        served.iter().copied().collect(),
        "the reference covers every pre-tokenizer served"
    );
    // Names whose splits differ in llama.cpp's source get different ids here: the texts tell
    // every split apart, so a name read as another's cannot pass.
    let regexes: std::collections::BTreeMap<String, u64> =
        serde_json::from_value(reference["regexes"].clone()).unwrap();
    assert_eq!(
        regexes.keys().collect::<Vec<_>>(),
        ids.keys().collect::<Vec<_>>()
    );
    for (name, split) in &regexes {
        for (other, other_split) in &regexes {
            assert!(
                split == other_split || ids[name] != ids[other],
                "{name} and {other} split differently in llama.cpp but give the same ids here"
            );
        }
    }
    let encoded =
        |values: &[String]| -> Vec<Vec<u8>> { values.iter().map(|value| encoded(value)).collect() };
    let control = tokens.len() - 1;
    let types: Vec<Vec<u8>> = (0..tokens.len())
        .map(|id| {
            (if id == control { 3i32 } else { 1 })
                .to_le_bytes()
                .to_vec()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut differences = Vec::new();
    for (pre, expected) in &ids {
        let builder = Builder::default()
            .text("tokenizer.ggml.model", "gpt2")
            .text("tokenizer.ggml.pre", pre)
            .array("tokenizer.ggml.tokens", 8, &encoded(&tokens))
            .array("tokenizer.ggml.merges", 8, &encoded(&merges))
            .array("tokenizer.ggml.token_type", 5, &types)
            .uint("tokenizer.ggml.bos_token_id", control as u32)
            .uint("tokenizer.ggml.eos_token_id", control as u32);
        let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
        let built = tokenizer::build(&header).unwrap();
        for (text, expected) in texts.iter().zip(expected) {
            let found = built.encode(text.as_str(), true).unwrap();
            if found.get_ids() != expected.as_slice() {
                differences.push(format!(
                    "{pre} {text:?}:\n  corral    {:?}\n  llama.cpp {expected:?}",
                    found.get_ids()
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// A fused `attn_qkv` splits by the attention's head counts and lengths (weight and bias alike,
/// Phi-3's kept whole), `ffn_gate_up_exps` in halves, and rows that are not the parts' sum are
/// an error naming them.
#[test]
fn fused_projections_split_by_the_attentions_shape() {
    let dir = tempfile::tempdir().unwrap();
    let builder = llama()
        .uint("llama.attention.head_count_kv", 2)
        .tensor("blk.0.attn_qkv.weight", &[64, 128], GgmlType::Q8_0)
        .tensor("blk.0.attn_qkv.bias", &[128], GgmlType::F32)
        .tensor(
            "blk.0.ffn_gate_up_exps.weight",
            &[64, 256, 4],
            GgmlType::Q4_1,
        )
        .tensor("blk.1.attn_qkv.weight", &[64, 100], GgmlType::F32);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let parts = |name: &str, arch: &str| {
        let tensor = header.tensors.iter().find(|t| t.name == name).unwrap();
        super::fused::parts(&header, arch, tensor)
    };
    let owned = |parts: &[(&str, u64)]| -> Option<Vec<(String, u64)>> {
        Some(
            parts
                .iter()
                .map(|(name, rows)| (name.to_string(), *rows))
                .collect(),
        )
    };
    assert_eq!(
        parts("blk.0.attn_qkv.weight", "llama").unwrap(),
        owned(&[
            ("blk.0.attn_q.weight", 64),
            ("blk.0.attn_k.weight", 32),
            ("blk.0.attn_v.weight", 32)
        ])
    );
    assert_eq!(
        parts("blk.0.attn_qkv.bias", "llama").unwrap(),
        owned(&[
            ("blk.0.attn_q.bias", 64),
            ("blk.0.attn_k.bias", 32),
            ("blk.0.attn_v.bias", 32)
        ])
    );
    assert_eq!(parts("blk.0.attn_qkv.weight", "phi3").unwrap(), None);
    assert_eq!(
        parts("blk.0.ffn_gate_up_exps.weight", "qwen3moe").unwrap(),
        owned(&[
            ("blk.0.ffn_gate_exps.weight", 128),
            ("blk.0.ffn_up_exps.weight", 128)
        ])
    );
    assert_eq!(parts("blk.0.attn_q.weight", "llama").unwrap(), None);
    let error = parts("blk.1.attn_qkv.weight", "llama").unwrap_err();
    assert!(
        error.contains("100 rows") && error.contains("64 + 32 + 32"),
        "{error}"
    );
}

/// A float32 metadata value.
fn with_f32(mut builder: Builder, key: &str, value: f32) -> Builder {
    string(&mut builder.metadata, key);
    builder.metadata.extend(6u32.to_le_bytes());
    builder.metadata.extend(value.to_le_bytes());
    builder.kv_count += 1;
    builder
}

/// A gated-DeltaNet hybrid of `arch` as llama.cpp's converter writes it: `layers` in
/// `block_count`, 2 key heads and 4 value heads of 16, a kernel of 4.
fn hybrid(arch: &str, layers: u32) -> Builder {
    let key = |name: &str| format!("{arch}.{name}");
    let builder = Builder::default()
        .text("general.architecture", arch)
        .uint(&key("block_count"), layers)
        .uint(&key("embedding_length"), 64)
        .uint(&key("feed_forward_length"), 64)
        .uint(&key("attention.head_count"), 4)
        .uint(&key("attention.head_count_kv"), 2)
        .uint(&key("attention.key_length"), 16)
        .uint(&key("rope.dimension_count"), 4)
        .uint(&key("ssm.conv_kernel"), 4)
        .uint(&key("ssm.state_size"), 16)
        .uint(&key("ssm.group_count"), 2)
        .uint(&key("ssm.time_step_rank"), 4)
        .uint(&key("ssm.inner_size"), 64)
        .tensor("token_embd.weight", &[64, 128], GgmlType::F32);
    with_f32(builder, &key("attention.layer_norm_rms_epsilon"), 1e-6)
}

#[test]
fn gated_delta_hybrids_read_their_linear_attention_from_the_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [true, false, true, false, false].map(|flag| vec![u8::from(flag)]);
    // Qwen3.5 with one multi-token-prediction layer past its four.
    let builder = hybrid("qwen35", 5)
        .uint("qwen35.nextn_predict_layers", 1)
        .array("qwen35.attention.recurrent_layers", 7, &flags);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let config = super::config::config_json(&header).unwrap();
    assert_eq!(config["model_type"], "qwen3_5");
    let text = &config["text_config"];
    assert_eq!(text["model_type"], "qwen3_5_text");
    assert_eq!(text["num_hidden_layers"], 4);
    assert_eq!(
        text["layer_types"],
        serde_json::json!([
            "linear_attention",
            "full_attention",
            "linear_attention",
            "full_attention"
        ])
    );
    for (key, value) in [
        ("linear_num_key_heads", 2),
        ("linear_num_value_heads", 4),
        ("linear_key_head_dim", 16),
        ("linear_value_head_dim", 16),
        ("linear_conv_kernel_dim", 4),
    ] {
        assert_eq!(text[key], value, "{key}");
    }
    assert_eq!(text["rope_parameters"]["partial_rotary_factor"], 0.25);
    assert_eq!(text["linear_value_heads_tiled"], true);
    // Qwen3-Next: no per-layer flags, every fourth layer attends; value heads grouped.
    let builder = hybrid("qwen3next", 4)
        .uint("qwen3next.full_attention_interval", 4)
        .uint("qwen3next.expert_count", 4)
        .uint("qwen3next.expert_used_count", 2)
        .uint("qwen3next.expert_feed_forward_length", 32)
        .uint("qwen3next.expert_shared_feed_forward_length", 48);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let config = super::config::config_json(&header).unwrap();
    assert_eq!(config["model_type"], "qwen3_next");
    assert_eq!(config["layer_types"][2], "linear_attention");
    assert_eq!(config["layer_types"][3], "full_attention");
    assert_eq!(config["moe_intermediate_size"], 32);
    assert_eq!(config["shared_expert_intermediate_size"], 48);
    assert_eq!(config["norm_topk_prob"], true);
    assert!(config.get("linear_value_heads_tiled").is_none());
}

#[test]
fn gated_delta_hybrid_tensors_load_under_mlx_lms_names_and_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let builder = hybrid("qwen3next", 3)
        .uint("qwen3next.nextn_predict_layers", 1)
        .tensor("blk.0.attn_qkv.weight", &[64, 128], GgmlType::F32)
        .tensor("blk.0.attn_gate.weight", &[64, 64], GgmlType::F32)
        .tensor("blk.0.ssm_ba.weight", &[64, 8], GgmlType::Q8_0)
        .tensor("blk.0.ssm_conv1d.weight", &[4, 128], GgmlType::F32)
        .tensor("blk.0.ssm_a", &[4], GgmlType::F32)
        .tensor("blk.0.ssm_dt.bias", &[4], GgmlType::F32)
        .tensor("blk.0.ffn_gate_inp_shexp.weight", &[64], GgmlType::F32)
        // An attention layer's fused projection: gated queries, keys, values.
        .tensor("blk.1.attn_qkv.weight", &[64, 192], GgmlType::F32)
        // The multi-token-prediction layer past the trunk: its block, and its own projection.
        .tensor("blk.2.attn_q.weight", &[64, 128], GgmlType::F32)
        .tensor("blk.2.nextn.eh_proj.weight", &[128, 64], GgmlType::Q8_0);
    let header = GgufHeader::read(&builder.write(dir.path())).unwrap();
    let weights = super::weights::load(&header, super::Choices::default()).unwrap();
    let layer = "model.layers.0.linear_attn";
    let shape = |name: &str| weights.shape_of(name);
    assert_eq!(
        shape(&format!("{layer}.in_proj_qkv.weight")),
        Some(vec![128, 64])
    );
    assert_eq!(
        shape(&format!("{layer}.in_proj_z.weight")),
        Some(vec![64, 64])
    );
    for part in ["in_proj_b", "in_proj_a"] {
        assert_eq!(shape(&format!("{layer}.{part}.scales")), Some(vec![4, 2]));
    }
    assert_eq!(
        shape(&format!("{layer}.conv1d.weight")),
        Some(vec![128, 4, 1])
    );
    assert_eq!(shape(&format!("{layer}.A_log")), Some(vec![4]));
    assert_eq!(shape(&format!("{layer}.dt_bias")), Some(vec![4]));
    assert_eq!(
        shape("model.layers.0.mlp.shared_expert_gate.weight"),
        Some(vec![1, 64])
    );
    assert_eq!(
        shape("model.layers.1.self_attn.q_proj.weight"),
        Some(vec![128, 64])
    );
    // Under the release's `mtp.` names, quantized as it was.
    assert_eq!(
        shape("mtp.layers.0.self_attn.q_proj.weight"),
        Some(vec![128, 64])
    );
    assert_eq!(shape("mtp.fc.scales"), Some(vec![64, 4]));
    assert!(weights.quantization_of("mtp.fc").is_some());
    let names = weights.leftover_names();
    assert!(
        !names.iter().any(|name| name.contains("in_proj_ba")
            || name.contains("ssm_a")
            || name.starts_with("model.layers.2.")),
        "{names:?}"
    );
}
