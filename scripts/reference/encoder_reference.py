"""Writes tests/data/encoder_reference.json: transformers' outputs for the encoder and
decoder-embedding fixtures, exact references for corral's worker.

For each fixture, one input at a time (no padding), in f32 on the CPU:
- embedding fixtures: the token ids and token type ids the fixture's tokenizer.json gives, and the
  sentence vector, pooled as the fixture's 1_Pooling/config.json says (mean over tokens, or the
  last token) and L2-normalized; checked against sentence-transformers' encode of the same inputs.
  The decoder one also has queries encoded with its "query" prompt (prompt text + query).
- rerank fixtures: the token ids and token type ids of each (query, document) pair and the
  classifier's raw logit (no sigmoid), checked against sentence-transformers' CrossEncoder.

Usage: encoder_reference.py OUT_JSON NAME=DIR:ARGS... (run by embeddings.sh in its venv).
"""

import json
import sys

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import CrossEncoder, SentenceTransformer
from transformers import AutoModel, AutoModelForSequenceClassification

INPUTS = [
    "The river ran slowly past the old mill.",
    "a",
    "Hello!!! Are you there??? (Just checking...)",
    "Café au lait, naïve façade — déjà vu. 東京 😀",
    "fn main() { println!(\"{}\", x[i] + 1); }",
    "When the ferry finally came, the woman with the basket of bread and apples stepped aboard, "
    "paid the boatman two coins and sat on the bench by the rail, watching the town grow larger "
    "across the water as the morning light moved over the roofs.",
]
QUERIES = ["where does the river go", "What is the capital of Japan?"]
RERANK_QUERY = "Where did the woman buy bread?"
RERANK_DOCUMENTS = [
    "She bought bread and apples at the market in the town.",
    "The ferry had not come yet.",
    "fn main() { println!(\"hello\"); }",
    "Her brother was working in the city.",
    "",
]

ATOL = 1e-5


def rounded(values):
    # Nine significant digits round-trip any f32.
    return [float(f"{v:.9g}") for v in values]


def encode(tokenizer, text, pair=None):
    # tokenizer.json through the tokenizers library, as corral reads it: transformers' own call
    # drops an empty second text, where the pair template keeps its [SEP].
    encoding = tokenizer.encode(text, pair)
    return torch.tensor([encoding.ids]), torch.tensor([encoding.type_ids])


def pooled(model, tokenizer, text, pooling):
    ids, types = encode(tokenizer, text)
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if model.config.model_type == "bert":
        kwargs["token_type_ids"] = types
    with torch.no_grad():
        hidden = model(**kwargs).last_hidden_state[0]
    vector = hidden.mean(dim=0) if pooling == "mean" else hidden[-1]
    vector = torch.nn.functional.normalize(vector, dim=0)
    return ids[0].tolist(), types[0].tolist(), vector.numpy()


def embedding_reference(directory):
    with open(f"{directory}/1_Pooling/config.json") as f:
        pooling_config = json.load(f)
    pooling = "mean" if pooling_config["pooling_mode_mean_tokens"] else "last_token"
    model = AutoModel.from_pretrained(directory, torch_dtype=torch.float32).eval()
    tokenizer = tokenizers.Tokenizer.from_file(f"{directory}/tokenizer.json")
    st = SentenceTransformer(directory, device="cpu")
    result = {"kind": "embedding", "pooling": pooling, "inputs": INPUTS}
    rows = [pooled(model, tokenizer, text, pooling) for text in INPUTS]
    check(np.stack([r[2] for r in rows]), st.encode(INPUTS, batch_size=1), "inputs")
    result["token_ids"] = [r[0] for r in rows]
    result["token_type_ids"] = [r[1] for r in rows]
    result["embeddings"] = [rounded(r[2]) for r in rows]
    prompt = st.prompts.get("query")
    if prompt:
        rows = [pooled(model, tokenizer, prompt + q, pooling) for q in QUERIES]
        expected = st.encode(QUERIES, prompt_name="query", batch_size=1)
        check(np.stack([r[2] for r in rows]), expected, "queries")
        result["query_prompt"] = prompt
        result["queries"] = QUERIES
        result["query_token_ids"] = [r[0] for r in rows]
        result["query_embeddings"] = [rounded(r[2]) for r in rows]
    return result


def rerank_reference(directory):
    model = AutoModelForSequenceClassification.from_pretrained(
        directory, torch_dtype=torch.float32
    ).eval()
    tokenizer = tokenizers.Tokenizer.from_file(f"{directory}/tokenizer.json")
    ids, types, logits = [], [], []
    for document in RERANK_DOCUMENTS:
        pair_ids, pair_types = encode(tokenizer, RERANK_QUERY, document)
        with torch.no_grad():
            logit = model(
                input_ids=pair_ids,
                attention_mask=torch.ones_like(pair_ids),
                token_type_ids=pair_types,
            ).logits[0, 0]
        ids.append(pair_ids[0].tolist())
        types.append(pair_types[0].tolist())
        logits.append(float(logit))
    cross_encoder = CrossEncoder(directory, device="cpu")
    expected = cross_encoder.predict(
        [(RERANK_QUERY, d) for d in RERANK_DOCUMENTS],
        activation_fn=torch.nn.Identity(),
        batch_size=1,
    )
    check(np.array(logits), expected, "pairs")
    return {
        "kind": "rerank",
        "query": RERANK_QUERY,
        "documents": RERANK_DOCUMENTS,
        "token_ids": ids,
        "token_type_ids": types,
        "logits": rounded(logits),
    }


def check(actual, expected, what):
    worst = float(np.abs(actual - expected).max())
    if worst > ATOL:
        sys.exit(f"transformers and sentence-transformers differ by {worst} on the {what}")


def main():
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    out_path = sys.argv[1]
    fixtures = {}
    for spec in sys.argv[2:]:
        name, rest = spec.split("=", 1)
        directory, args = rest.split(":", 1)
        with open(f"{directory}/config.json") as f:
            architectures = json.load(f)["architectures"]
        if any(a.endswith("ForSequenceClassification") for a in architectures):
            reference = rerank_reference(directory)
        else:
            reference = embedding_reference(directory)
        fixtures[name] = {"args": args, **reference}
        print(f"{name}: {reference['kind']}")
    reference = {
        "versions": {
            "sentence-transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "fixtures": fixtures,
    }
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(reference, out, ensure_ascii=False, indent=1)
        out.write("\n")


if __name__ == "__main__":
    main()
