"""llama.cpp's own logits for one GGUF file, in toolchain.py's reference order.

Usage: llama_cpp_logits.py MODEL.gguf PROMPT_IDS DECODE_STEPS OUT.npz

PROMPT_IDS: comma-separated token ids. Runs under llama-cpp-python 0.3.36 on the shared
libraries `cargo xtask setup` builds from the same sdist (LLAMA_CPP_LIB_PATH). One evaluation
of the prompt from an empty cache, then DECODE_STEPS greedy steps through that cache, one token
each; writes `prompt`, `decoded` and `logits` (float32[prompt + steps, vocab]).
"""

import sys

import numpy as np
from llama_cpp import Llama


def main():
    model_path, prompt_arg, steps_arg, out = sys.argv[1:5]
    prompt = [int(token) for token in prompt_arg.split(",")]
    steps = int(steps_arg)
    # One thread: ggml splits a matrix product's rows among threads, and one thread keeps the
    # order of every sum the same on every machine.
    llm = Llama(
        model_path=model_path,
        logits_all=True,
        n_ctx=64,
        n_batch=64,
        n_threads=1,
        n_threads_batch=1,
        type_k=0,
        type_v=0,
        verbose=False,
    )
    llm.eval(prompt)
    rows = [np.array(llm.scores[: len(prompt)], dtype=np.float32)]
    decoded = []
    for _ in range(steps):
        token = int(rows[-1][-1].argmax())
        decoded.append(token)
        llm.eval([token])
        rows.append(np.array(llm.scores[llm.n_tokens - 1 : llm.n_tokens], dtype=np.float32))
    np.savez(
        out,
        prompt=np.array(prompt, dtype=np.int32),
        decoded=np.array(decoded, dtype=np.int32),
        logits=np.concatenate(rows),
    )


if __name__ == "__main__":
    main()
