"""llama.cpp's own answer for one prompt with one image, through its multimodal library
(`mtmd`) on a GGUF and its projector.

Usage: llama_cpp_mtmd.py MODEL.gguf MMPROJ.gguf PIXELS.npy PROMPT.txt STEPS OUT.npz
       llama_cpp_mtmd.py MODEL.gguf MMPROJ.gguf PIXELS.npy PROMPT.txt tokens OUT.npz

PIXELS.npy: the image's RGB bytes, `uint8[height, width, 3]`, decoded by the caller (llama.cpp's
own decoder reads no WebP). PROMPT.txt: the prompt with mtmd's media marker where the image
goes. Runs under llama-cpp-python 0.3.36's `mtmd_cpp` bindings on the shared libraries built
from the same sdist with `LLAMA_BUILD_MTMD` (LLAMA_CPP_LIB_PATH, MTMD_CPP_LIB), on one thread:
the prompt's chunks evaluated from an empty cache (`mtmd_helper_eval_chunks`), then STEPS greedy
steps one token each; writes `positions` (the position after the prompt), `logits` (float32
[1 + STEPS, vocab]: after the prompt, then after each step) and `decoded`. With `tokens` for
STEPS, evaluates nothing and writes `image_tokens`: the tokens mtmd gives the image (its sizing).
"""

import ctypes
import sys

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp


def main():
    model_path, projector_path, pixels_path, prompt_path, steps_arg, out = sys.argv[1:7]
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), llama_cpp.llama_model_default_params())
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 512
    params.n_threads = params.n_threads_batch = 1
    context = llama_cpp.llama_init_from_model(model, params)
    projector_params = mtmd_cpp.mtmd_context_params_default()
    projector_params.use_gpu = False
    projector_params.n_threads = 1
    projector_params.print_timings = False
    projector_params.warmup = False
    projector = mtmd_cpp.mtmd_init_from_file(projector_path.encode(), model, projector_params)
    pixels = np.load(pixels_path)
    data = pixels.tobytes()
    bitmap = mtmd_cpp.mtmd_bitmap_init(
        pixels.shape[1], pixels.shape[0], (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    )
    text = mtmd_cpp.mtmd_input_text()
    text.text = open(prompt_path, encoding="utf-8").read().encode()
    text.text_len = len(text.text)
    text.add_special = False
    text.parse_special = True
    chunks = mtmd_cpp.mtmd_input_chunks_init()
    bitmaps = (mtmd_cpp.mtmd_bitmap_p_ctypes * 1)(bitmap)
    if mtmd_cpp.mtmd_tokenize(projector, chunks, ctypes.byref(text), bitmaps, 1) != 0:
        raise SystemExit("mtmd_tokenize failed")
    if steps_arg == "tokens":
        image_tokens = [
            mtmd_cpp.mtmd_input_chunk_get_n_tokens(chunk)
            for chunk in (mtmd_cpp.mtmd_input_chunks_get(chunks, index) for index in range(mtmd_cpp.mtmd_input_chunks_size(chunks)))
            if mtmd_cpp.mtmd_input_chunk_get_type(chunk) == mtmd_cpp.MTMD_INPUT_CHUNK_TYPE_IMAGE
        ]
        np.savez(out, image_tokens=np.array(image_tokens, dtype=np.int32))
        return
    position = llama_cpp.llama_pos(0)
    if mtmd_cpp.mtmd_helper_eval_chunks(projector, context, chunks, 0, 0, 512, True, ctypes.byref(position)) != 0:
        raise SystemExit("mtmd_helper_eval_chunks failed")
    after_prompt = position.value

    def last_logits():
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(context, -1), shape=(vocab,)).copy()

    rows, decoded = [last_logits()], []
    for _ in range(int(steps_arg)):
        token = int(rows[-1].argmax())
        decoded.append(token)
        tokens = (llama_cpp.llama_token * 1)(token)
        if llama_cpp.llama_decode(context, llama_cpp.llama_batch_get_one(tokens, 1)) != 0:
            raise SystemExit("llama_decode failed")
        rows.append(last_logits())
    np.savez(
        out,
        positions=np.array([after_prompt], dtype=np.int32),
        logits=np.stack(rows).astype(np.float32),
        decoded=np.array(decoded, dtype=np.int32),
    )


if __name__ == "__main__":
    main()
