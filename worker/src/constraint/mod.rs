//! Constrained decoding with llguidance: a token mask applied to the logits before sampling.
