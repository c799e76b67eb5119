//! Nemotron-H's tensor names (`nemotron_h`, `nemotron_h_moe`): every layer's block is its
//! `mixer`, as in transformers' `backbone.layers.{i}.mixer`; the Mamba-2 tensors keep llama.cpp's
//! shapes here and `Mamba2::load` takes them (`ssm_a` is `A = -exp(A_log)`, `A` here).

/// `blk.3.ssm_in` → `backbone.layers.3.mixer.in_proj`; `None` for a name outside the layout.
pub(super) fn hugging_face_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd" => return Some("backbone.embeddings".into()),
        "output_norm" => return Some("backbone.norm_f".into()),
        "output" => return Some("lm_head".into()),
        _ => {}
    }
    let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let renamed = match part {
        "attn_norm" => "norm",
        "attn_q" => "mixer.q_proj",
        "attn_k" => "mixer.k_proj",
        "attn_v" => "mixer.v_proj",
        "attn_output" => "mixer.o_proj",
        "ssm_in" => "mixer.in_proj",
        "ssm_conv1d" => "mixer.conv1d",
        // Its bias is `dt_bias`.
        "ssm_dt" => "mixer.dt",
        "ssm_norm" => "mixer.norm",
        "ssm_out" => "mixer.out_proj",
        "ffn_up" => "mixer.up_proj",
        "ffn_down" => "mixer.down_proj",
        "ffn_gate_inp" => "mixer.gate",
        "exp_probs_b" => "mixer.gate.e_score_correction",
        "ffn_up_exps" => "mixer.switch_mlp.fc1",
        "ffn_down_exps" => "mixer.switch_mlp.fc2",
        "ffn_up_shexp" => "mixer.shared_experts.up_proj",
        "ffn_down_shexp" => "mixer.shared_experts.down_proj",
        _ => return None,
    };
    Some(format!("backbone.layers.{layer}.{renamed}"))
}
