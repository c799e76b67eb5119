"""llama.cpp's greedy answers on SmolLM2-135M-Instruct as llama.cpp's quantizer writes it
(Q4_K_M, Q5_K_M, Q6_K; `cargo xtask setup` makes the files).

Usage: smollm2_requantized.py SMOLLM2_REFERENCE.json OUT.json MODEL.gguf...

Runs in regenerate.sh's smollm2 venv (llama-cpp-python 0.3.36). The prompts are the chats of
SMOLLM2_REFERENCE.json (`prompt_token_ids`, transformers' rendering, which corral's equals).

The JSON document:
  max_tokens         the most tokens each answer has.
  eos_id             the token that ends an answer (left out of it).
  models             [{file, sha256, answers}], one per MODEL.gguf; `answers` has one entry per
                     chat: {name, messages, greedy_ids, greedy_text, stopped_at_eos, leads}, where
                     `leads[i]` is how far llama.cpp's top logit was above its second at step i
                     (a small lead is where another engine's rounding can pick the other token).
"""

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
from llama_cpp import Llama

MAX_TOKENS = 32
EOS_ID = 2  # <|im_end|>, the GGUF's tokenizer.ggml.eos_token_id


def greedy(llm, prompt_ids):
    llm.reset()
    llm.eval(prompt_ids)
    ids, leads = [], []
    stopped = False
    while len(ids) < MAX_TOKENS:
        row = llm.scores[llm.n_tokens - 1]
        first, second = np.sort(row)[-2:][::-1]
        token = int(np.argmax(row))
        leads.append(round(float(first - second), 4))
        if token == EOS_ID:
            stopped = True
            break
        ids.append(token)
        llm.eval([token])
    return {
        "greedy_ids": ids,
        "greedy_text": llm.detokenize(ids).decode("utf-8", errors="replace"),
        "stopped_at_eos": stopped,
        "leads": leads,
    }


def dumps(document):
    # One line per array of numbers, as smollm2_reference.py writes them.
    text = json.dumps(document, ensure_ascii=False, indent=1)
    return re.sub(
        r"\[\s+([^\[\]{}]*?)\s+\]",
        lambda match: "[" + re.sub(r"\s*\n\s*", " ", match.group(1)) + "]",
        text,
    ) + "\n"


def main():
    chats = json.loads(Path(sys.argv[1]).read_text())["chats"]
    out = Path(sys.argv[2])
    models = []
    for path in map(Path, sys.argv[3:]):
        llm = Llama(
            model_path=str(path), logits_all=True, n_ctx=512, n_threads=2, verbose=False, seed=0
        )
        answers = [
            {"name": chat["name"], "messages": chat["messages"]}
            | greedy(llm, chat["prompt_token_ids"])
            for chat in chats
        ]
        models.append(
            {
                "file": path.name,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "answers": answers,
            }
        )
        del llm
    document = {"max_tokens": MAX_TOKENS, "eos_id": EOS_ID, "models": models}
    out.write_text(dumps(document))


if __name__ == "__main__":
    main()
