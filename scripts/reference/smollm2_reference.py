"""Reference data for SmolLM2-135M-Instruct (Q4_1 GGUF) from transformers and llama.cpp.

Usage: smollm2_reference.py MODEL.gguf OUT.json

regenerate.sh runs it in a venv with exactly these versions (kept in step with PINS there):
transformers 4.57.6, tokenizers 0.22.2, gguf 0.19.0, llama-cpp-python 0.3.36, jinja2 3.1.6,
numpy 2.4.6. No torch: see `gguf_tokenizer`.

The JSON document:
  gguf_sha256        sha256 of the model file the data was made from.
  versions           {package: version} of the packages above, as installed.
  chats              [{name, messages, prompt, prompt_token_ids}]: `messages` in the OpenAI shape;
                     `prompt` is transformers' apply_chat_template(add_generation_prompt=True,
                     tokenize=False) with the GGUF's template; `prompt_token_ids` the same call
                     with tokenize=True.
  texts              [{text, ids, llama_cpp_ids}]: `ids` is transformers'
                     encode(text, add_special_tokens=False); `llama_cpp_ids` is llama.cpp's
                     tokenize(text, add_bos=False, special=False). They are kept apart because the
                     two tokenizers need not agree (see `agree`).
  agree              whether `ids` == `llama_cpp_ids` for every text.
  logits             llama.cpp over one fixed sequence, evaluated in one batch:
    token_ids        the France chat's prompt_token_ids followed by the first ANSWER_TOKENS of
                     the greedy answer.
    top              for each position of token_ids, the TOP_K [token id, logit] pairs with the
                     highest logits, highest first (ties: lower id first).
  greedy             llama.cpp's greedy continuation of the France prompt: argmax at each step,
                     at most MAX_TOKENS tokens, stopping at (and leaving out) EOS_ID.
    prompt_token_ids the France prompt; greedy_ids; greedy_text (llama.cpp's detokenization,
                     UTF-8); stopped_at_eos; eos_id; max_tokens.
"""

import hashlib
import json
import re
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from llama_cpp import Llama
from transformers import AutoTokenizer

TOP_K = 16
MAX_TOKENS = 24
ANSWER_TOKENS = 8
EOS_ID = 2  # <|im_end|>, the GGUF's tokenizer.ggml.eos_token_id

CHATS = {
    "france": [{"role": "user", "content": "What is the capital of France?"}],
    "system": [
        {"role": "system", "content": "You are a terse assistant. Answer in one word."},
        {"role": "user", "content": "Name a primary color."},
    ],
    "multi_turn": [
        {"role": "user", "content": "Hi! What is 2+2?"},
        {"role": "assistant", "content": "2+2 is 4."},
        {"role": "user", "content": "And times 3?"},
    ],
    "non_ascii": [{"role": "user", "content": "Café, naïve, 東京, 😀: what do these mean?"}],
    "code": [
        {
            "role": "user",
            "content": "Fix this:\n```python\ndef add(a, b):\n    return a - b\n```",
        }
    ],
}

TEXTS = [
    "Hello, world!",
    "Café, naïve, façade, Ångström, Ünïcödé ß",
    "東京は日本の首都です。中文，한국어",
    "Emoji: 😀🎉👍🏽 ❤️",
    "12345 and 3.14159, 1,000,000",
    "def add(a, b):\n    return a + b\n",
    "  leading and trailing spaces  ",
    "line one\nline two\n\n\tTabbed\r\nend",
    "Привет, мир! Ελληνικά",
]

PACKAGES = ["transformers", "tokenizers", "gguf", "llama_cpp_python", "jinja2", "numpy"]


def gguf_tokenizer(gguf):
    # transformers refuses to read a GGUF without torch, although building the tokenizer reads
    # only metadata (torch is used only for tensors, which return_tensors=False never loads).
    gguf_utils.is_torch_available = lambda: True
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def chat_entries(tokenizer):
    entries = []
    for name, messages in CHATS.items():
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        entries.append(
            {"name": name, "messages": messages, "prompt": prompt, "prompt_token_ids": list(ids)}
        )
    return entries


def text_entries(tokenizer, llm):
    return [
        {
            "text": text,
            "ids": tokenizer.encode(text, add_special_tokens=False),
            "llama_cpp_ids": llm.tokenize(text.encode(), add_bos=False, special=False),
        }
        for text in TEXTS
    ]


def greedy(llm, prompt_ids):
    llm.reset()
    llm.eval(prompt_ids)
    ids = []
    stopped = False
    while len(ids) < MAX_TOKENS:
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        if token == EOS_ID:
            stopped = True
            break
        ids.append(token)
        llm.eval([token])
    return {
        "prompt_token_ids": prompt_ids,
        "greedy_ids": ids,
        "greedy_text": llm.detokenize(ids).decode("utf-8", errors="replace"),
        "stopped_at_eos": stopped,
        "eos_id": EOS_ID,
        "max_tokens": MAX_TOKENS,
    }


def top_logits(llm, token_ids):
    llm.reset()
    llm.eval(token_ids)
    rows = []
    for position in range(len(token_ids)):
        row = llm.scores[position]
        # Stable sort on the negated logits: equal logits keep the lower id first.
        order = np.argsort(-row, kind="stable")[:TOP_K]
        rows.append([[int(i), float(row[i])] for i in order])
    return {"token_ids": token_ids, "top": rows}


def dumps(document):
    # indent=1, then each array of scalars (ids, a [id, logit] pair) and each array of such pairs
    # (a row of `top`) joined onto one line: diffable without one line per number. JSON strings
    # hold no raw newline, so only indentation is joined.
    text = json.dumps(document, ensure_ascii=False, indent=1)
    scalars = r"[^\[\]{}]"
    for inner in (scalars, rf"(?:{scalars}|\[{scalars}*\])"):
        text = re.sub(
            rf"\[\s+((?:{inner})*?)\s+\]",
            lambda match: "[" + re.sub(r"\s*\n\s*", " ", match.group(1)) + "]",
            text,
        )
    return text + "\n"


def main():
    gguf = Path(sys.argv[1]).resolve()
    out = Path(sys.argv[2])
    tokenizer = gguf_tokenizer(gguf)
    llm = Llama(
        model_path=str(gguf), logits_all=True, n_ctx=512, n_threads=2, verbose=False, seed=0
    )
    chats = chat_entries(tokenizer)
    texts = text_entries(tokenizer, llm)
    france = next(chat["prompt_token_ids"] for chat in chats if chat["name"] == "france")
    answer = greedy(llm, france)
    document = {
        "gguf_sha256": hashlib.sha256(gguf.read_bytes()).hexdigest(),
        "versions": {package: version(package) for package in PACKAGES},
        "chats": chats,
        "texts": texts,
        "agree": all(text["ids"] == text["llama_cpp_ids"] for text in texts),
        "logits": top_logits(llm, france + answer["greedy_ids"][:ANSWER_TOKENS]),
        "greedy": answer,
    }
    out.write_text(dumps(document))


if __name__ == "__main__":
    main()
