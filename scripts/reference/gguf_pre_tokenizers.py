"""Records llama.cpp's token ids for tricky strings under each `tokenizer.ggml.pre` corral serves:
for each one, a vocab-only GGUF of one small byte-level BPE vocabulary (the 256 byte tokens, a few
merges, a few whole words no merge reaches, which only llama.cpp's `ignore_merges` pre-tokenizers
find, and one control token, also the bos) is tokenized by llama.cpp (llama-cpp-python,
`special=True`, with the special tokens the pre-tokenizer adds: the file does not say whether to
add bos, so llama.cpp adds it for the pre-tokenizers that default to it).
The JSON holds the vocabulary and merges too, so the Rust test rebuilds the same GGUF without
Python. `regexes` groups the names by the split llama.cpp's source (`src/llama-vocab.cpp` of the
same sdist) gives each, so that the test can check that names with different splits get
different ids on these texts. Run with a venv holding gguf==0.19.0 and llama-cpp-python==0.3.36:
    python gguf_pre_tokenizers.py tests/data/gguf_pre_tokenizers.json LLAMA_VOCAB_CPP
"""

import json
import re
import sys
import tempfile
from pathlib import Path

import gguf
from llama_cpp import Llama


def byte_tokens(vocab):
    """GPT-2's byte-to-character table for the first `vocab` bytes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(vocab)]


MERGES = [
    "H e", "l l", "He ll", "Hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d",
    "' s", "1 2", "12 3", "Ġ Ġ", "ĠĠ ĠĠ", "Ċ Ċ", "i n", "in g", "Ġ a", "e r",
    "Ġ t", "h e", "Ġt he", "C a", "m e", "l C",
    # Across a boundary only some splits make: a combining mark after its letter (its first
    # byte, 0xCC, is "Ì"; Qwen3.5's split keeps marks with letters, Qwen2's does not), and a
    # lower-case letter before an upper-case one (o200k's split cuts camel case there).
    "e Ì", "x l", "xl C",
]
# Whole words no merge spells: llama.cpp takes them as one token where the pre-tokenizer ignores
# merges (llama3, glm4, tekken), and spells them in pieces elsewhere.
WHOLE = ["ĠWorld", "Tokens", "Ġcan't"]
CONTROL = "<|endoftext|>"
# Every name worker/src/gguf/tokenizer.rs serves but `gpt2`, corral's spelling of `gpt-2`, which
# llama.cpp refuses (the Rust test checks this list covers the rest).
PRES = [
    "default",
    "gpt-2", "phi-2", "olmo", "mpt", "jais", "exaone4", "trillion", "granite-docling",
    "smollm", "refact", "starcoder", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2",
    "llama-bpe", "llama3", "llama-v3", "pixtral", "falcon3", "falcon-h1", "lfm2",
    "glm4", "glm5",
    "dbrx", "smaug-bpe", "chatglm-bpe",
    "qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "kormo", "f2llmv2", "grok-2", "hunyuan",
    "solar-open",
    "qwen35",
    "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2",
    "tekken",
    "deepseek-v3",
    "deepseek-llm",
    "kimi-k2",
]

TEXTS = [
    "Hello world, it's the 2024 World! I'VE DON'T can't we'd they'll I'm",
    "HelloWorld CamelCaseXMLParser iPhone getHTTPResponse Tokens",
    "digits 1 12 123 1234 12345678 3.14159 1,000,000 ٣٤٥",
    "line1\nline2\r\n\n\n  indented\tTab\n\n  \n",
    "   leading and trailing spaces   ",
    "héllo naïve café e\u0301 日本語の文章 Ελληνικά Привет 🙂👍🏽 ﬁ",
    f"{CONTROL}special{CONTROL} text {CONTROL}",
    "a/b/c http://x.y/z?q=1&r=2 <tag attr=\"v\"/> $x+=y**2; // done...",
    "Hello\n\nWorld  the  world\t\tthe end",
    "xlCx wilCo re\u0301sume\u0301",
    # An apostrophe no letter precedes: Kimi K2's split joins it to the word after it, so "e r"
    # merges there; Llama 3's takes "'re" as a contraction first.
    "'rer 2'rer\n'rer",
]


def regex_groups(vocab_cpp):
    """Each served name's group: names whose llama.cpp pre-tokenizer type splits by the same
    regexes share a number."""
    source = Path(vocab_cpp).read_text()
    types = {}
    start = 0
    for assignment in re.finditer(r"pre_type = (LLAMA_VOCAB_PRE_TYPE_\w+);", source):
        # Only the names of a condition choosing the type, not a test such as `is_kimi_k2`'s.
        conditions = re.findall(
            r'tokenizer_pre == "([^"]+)"\s*(?:\|\||\)\s*\{)', source[start : assignment.start()]
        )
        for name in conditions:
            types.setdefault(name, assignment.group(1))
        start = assignment.end()
    constructor = source[source.index("llm_tokenizer_bpe(const llama_vocab & vocab)") :]
    constructor = constructor[: constructor.index("\n    }\n")]
    regexes, labels = {}, []
    for line in constructor.splitlines():
        line = line.strip()
        if line.startswith("case "):
            labels.append(line.removeprefix("case ").rstrip(":"))
        elif line.startswith("default:"):
            labels.append("default")
        elif line.startswith('"') and labels:
            for label in labels:
                regexes.setdefault(label, []).append(line.rstrip(","))
        elif line.startswith("break;"):
            labels = []
    groups = {}
    numbered = {}
    for name in PRES:
        split = tuple(regexes.get(types.get(name, "default"), regexes["default"]))
        groups[name] = numbered.setdefault(split, len(numbered))
    return groups


def vocabulary():
    tokens = byte_tokens(256)
    for merge in MERGES:
        merged = merge.replace(" ", "")
        if merged not in tokens:
            tokens.append(merged)
    tokens += WHOLE + [CONTROL]
    return tokens


def write(path, pre, tokens):
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(8)
    writer.add_head_count(1)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    types = [gguf.TokenType.NORMAL] * (len(tokens) - 1) + [gguf.TokenType.CONTROL]
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(len(tokens) - 1)
    writer.add_eos_token_id(len(tokens) - 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    out, vocab_cpp = Path(sys.argv[1]), sys.argv[2]
    tokens = vocabulary()
    ids = {}
    with tempfile.TemporaryDirectory() as scratch:
        for pre in PRES:
            path = Path(scratch) / f"{pre}.gguf"
            write(path, pre, tokens)
            llama = Llama(model_path=str(path), vocab_only=True, verbose=False)
            ids[pre] = [llama.tokenize(text.encode(), add_bos=True, special=True) for text in TEXTS]
            del llama
    reference = {
        "about": "scripts/reference/gguf_pre_tokenizers.py: llama.cpp's (llama-cpp-python 0.3.36) "
        "token ids for `texts` under each tokenizer.ggml.pre, on the vocabulary `tokens` "
        "(the last one a control token, the bos and eos) with `merges`, bos added where llama.cpp "
        "adds it when the file does not say",
        "tokens": tokens,
        "merges": MERGES,
        "texts": TEXTS,
        "ids": ids,
        "regexes": regex_groups(vocab_cpp),
    }
    out.write_text(json.dumps(reference, ensure_ascii=False, indent=None) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
