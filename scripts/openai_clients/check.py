"""Drives a running corral with the official OpenAI Python SDK, unmodified.

Usage: check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8080/v1)
Prints one line per check and exits non-zero on the first failure.
"""

import sys

import openai


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="not-needed")
    messages = [{"role": "user", "content": "Tell me a story."}]

    chat = client.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0
    )
    assert chat.choices[0].message.role == "assistant"
    assert chat.usage.completion_tokens <= 8
    print(f"chat: {chat.choices[0].finish_reason}, usage {chat.usage}")

    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == chat.usage.completion_tokens
    assert text == chat.choices[0].message.content, (text, chat.choices[0].message.content)
    print(f"chat stream: {len(chunks)} chunks, same text as non-streaming")

    completion = client.completions.create(
        model=model, prompt="Once", max_tokens=4, temperature=0, logprobs=2
    )
    assert completion.choices[0].logprobs.tokens
    print(f"completions: {completion.choices[0].finish_reason}, usage {completion.usage}")

    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=model, prompt="Once", max_tokens=4, temperature=0, stream=True
        )
        if c.choices
    )
    assert streamed == completion.choices[0].text
    print("completions stream: same text as non-streaming")

    with_logprobs = client.chat.completions.create(
        model=model, messages=messages, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2
    )
    assert len(with_logprobs.choices[0].logprobs.content[0].top_logprobs) == 2
    print("chat logprobs: parsed")

    models = client.models.list()
    assert any(m.id == model for m in models.data)
    print(f"models: {[m.id for m in models.data]}")

    try:
        client.chat.completions.create(model="no-such-model", messages=messages)
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError as error:
        print(f"unknown model: NotFoundError {error.status_code}: {error.message}")
    try:
        client.chat.completions.create(model=model, messages=[])
        raise AssertionError("empty messages were accepted")
    except openai.BadRequestError as error:
        print(f"empty messages: BadRequestError {error.status_code}")
    print("all OpenAI Python SDK checks passed")


if __name__ == "__main__":
    main()
