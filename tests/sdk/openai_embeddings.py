"""The embeddings API as the official OpenAI Python SDK sees it from corral. Run by
tests/tests/e2e/embeddings.rs as

    python openai_embeddings.py BASE_URL MODEL SENTENCES_JSON

Embeds the sentences three ways (the SDK's default, which asks for base64 and decodes it; float;
base64 asked for explicitly) and prints one JSON object per way with the vectors as the SDK
handed them over, for the test to compare with the reference vectors.
"""

import array
import base64
import json
import sys

import openai


def floats(embedding, encoding):
    """The SDK decodes base64 itself when it chose it; asked for explicitly, it hands over the
    string, little-endian float32 bytes."""
    if encoding == "base64":
        assert isinstance(embedding, str), type(embedding)
        return array.array("f", base64.b64decode(embedding)).tolist()
    assert isinstance(embedding, list), type(embedding)
    return [float(value) for value in embedding]


def main():
    base_url, model, sentences = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    api = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    for encoding in (None, "float", "base64"):
        kwargs = {} if encoding is None else {"encoding_format": encoding}
        response = api.embeddings.create(model=model, input=sentences, **kwargs)
        assert response.object == "list", response
        assert response.model == model, response.model
        assert [item.index for item in response.data] == list(range(len(sentences))), response
        assert all(item.object == "embedding" for item in response.data), response
        vectors = [floats(item.embedding, encoding) for item in response.data]
        usage = response.usage
        assert usage.prompt_tokens == usage.total_tokens > 0, usage
        print(json.dumps({"encoding": encoding or "default", "vectors": vectors,
                          "prompt_tokens": usage.prompt_tokens}))


if __name__ == "__main__":
    main()
