"""The sentence-transformers side of the embeddings bench (tests/benches/embeddings.rs).

Reads {"model": DIR, "sentences": [...], "cases": [{"batch": B, "requests": N}, ...]} as JSON on
stdin, and for each case encodes N batches of B sentences (taken in turn from the list), one
SentenceTransformer.encode call per batch as one HTTP request is for corral, after one warm-up
call. Prints one JSON object: {"versions": {...}, "threads": T, "cases": [{"batch", "seconds",
"embeddings", "tokens"}]}, tokens counted with [CLS] and [SEP] as the model sees them.
"""

import json
import sys
import time

import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer


def main():
    job = json.load(sys.stdin)
    model = SentenceTransformer(job["model"], device="cpu")
    sentences = job["sentences"]
    results = []
    for case in job["cases"]:
        batch = case["batch"]
        batches = [
            [sentences[(start + i) % len(sentences)] for i in range(batch)]
            for start in range(0, batch * case["requests"], batch)
        ]
        model.encode(batches[0], batch_size=batch)
        tokens = sum(int(model.tokenize(b)["attention_mask"].sum()) for b in batches)
        started = time.perf_counter()
        for b in batches:
            model.encode(b, batch_size=batch)
        seconds = time.perf_counter() - started
        results.append(
            {"batch": batch, "seconds": seconds, "embeddings": batch * len(batches), "tokens": tokens}
        )
    print(
        json.dumps(
            {
                "versions": {
                    "sentence-transformers": sentence_transformers.__version__,
                    "torch": torch.__version__,
                },
                "threads": torch.get_num_threads(),
                "cases": results,
            }
        )
    )


if __name__ == "__main__":
    main()
