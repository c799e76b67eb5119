"""Writes tests/data/minilm_reference.json: all-MiniLM-L6-v2's sentence vectors, as
sentence-transformers' SentenceTransformer.encode returns them (mean pooled, normalized), for a
few varied sentences, their token counts and ids ([CLS] and [SEP] included, as the model reads
them at its max_seq_length), and a small retrieval example: document indices best first by cosine
with the query, and each document's cosine in document order.

Usage: minilm_reference.py MODEL_DIR OUT_JSON (run by regenerate.sh in its embedding venv).
"""

import json
import sys

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street corner.",
    "Embeddings map text to vectors; similar texts land close together.",
    "Hello!!! Are you there??? (Just checking...)",
    "Café au lait, naïve façade, résumé — déjà vu.",
    "東京は日本の首都です。",
    "Привет, как дела? Всё хорошо.",
    "fn main() { println!(\"{}\", 2 + 2); } // prints 4",
    "Don't panic: it's only 3.14159 miles to the U.S.-Canada border, isn't it?",
    "a",
    # Longer than the 128 tokens the shipped tokenizer.json truncates to, shorter than the
    # model's max_seq_length of 256: a reader that keeps tokenizer.json's truncation differs here.
    " ".join(
        [
            "In the early morning the fishing boats left the harbour one by one, their engines",
            "humming over the grey water while gulls circled above the masts and the old",
            "lighthouse keeper watched from the cliff, counting them as his father had done",
            "before him, and his grandfather before that, through storms and calm seasons alike,",
            "noting in a leather-bound log the name of every vessel, the hour it departed, the",
            "direction of the wind, the height of the swell and, when they came back at dusk,",
            "the weight of the catch and whether any man had been lost to the sea; the log ran",
            "to forty volumes now, stacked on shelves in the damp stone room at the foot of the",
            "tower, and nobody but the keeper had ever read a single page of it.",
        ]
    ),
]

QUERY = "How do I keep my houseplants alive?"
DOCUMENTS = [
    "Water most indoor plants when the top inch of soil feels dry, and give them bright, indirect light.",
    "The stock market fell sharply on Tuesday after the central bank raised interest rates.",
    "Repotting a root-bound plant into a slightly larger pot helps it grow.",
    "Our team won the championship after a dramatic penalty shootout.",
    "Overwatering is the most common reason houseplants die; make sure the pot drains.",
    "The recipe calls for two cups of flour, one egg and a pinch of salt.",
    "Ferns and peace lilies like humidity, so mist their leaves or set them on a pebble tray.",
    "The new smartphone has a faster processor and a better camera.",
]


def rounded(values):
    # Nine significant digits round-trip any f32.
    return [float(f"{v:.9g}") for v in values]


def main():
    model_dir, out_path = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    model = SentenceTransformer(model_dir, device="cpu")
    embeddings = model.encode(SENTENCES, convert_to_numpy=True, batch_size=4)
    token_ids = [model.tokenize([s])["input_ids"][0].tolist() for s in SENTENCES]

    query = model.encode([QUERY], convert_to_numpy=True)[0]
    documents = model.encode(DOCUMENTS, convert_to_numpy=True)
    scores = documents.astype(np.float64) @ query.astype(np.float64)
    scores /= np.linalg.norm(documents.astype(np.float64), axis=1) * np.linalg.norm(query)
    ranking = sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i])

    reference = {
        "model": "all-MiniLM-L6-v2",
        "versions": {
            "sentence-transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "max_seq_length": model.max_seq_length,
        "sentences": SENTENCES,
        "embeddings": [rounded(e) for e in embeddings],
        "token_counts": [len(ids) for ids in token_ids],
        "token_ids": token_ids,
        "retrieval": {
            "query": QUERY,
            "documents": DOCUMENTS,
            "ranking": ranking,
            # In document order: scores[i] is document i's cosine with the query.
            "scores": rounded(scores),
        },
    }
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(reference, out, ensure_ascii=False, indent=1)
        out.write("\n")
    gaps = np.diff(sorted(scores, reverse=True))
    print(f"token counts {reference['token_counts']}; ranking {ranking}")
    print(f"scores {[round(float(s), 4) for s in sorted(scores, reverse=True)]}; min gap {-gaps.max():.4f}")


if __name__ == "__main__":
    main()
