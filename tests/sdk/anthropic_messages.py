"""What a client built on the official `anthropic` Python SDK sees from corral's Messages API.
Run by tests/tests/e2e/anthropic.rs as

    python anthropic_messages.py BASE_URL CHECK MODEL [API_KEY]

BASE_URL is the server's root (the SDK adds /v1). The SDK (2.12) no longer takes temperature or
top_k as arguments, so greedy requests pass them in extra_body. Each check asserts what the SDK
hands its caller, prints a JSON summary, and exits non-zero with the reason otherwise.
"""

import json
import re
import sys

import anthropic
import jsonschema

from shared import (ANSWER_ONLY, PERSON, QUESTION, THINKING_THEN_ANSWER, WEATHER_DESCRIPTION,
                    WEATHER_PARAMETERS, WORDS)

GREEDY = {"temperature": 0}
ASK = [{"role": "user", "content": QUESTION}]

WEATHER = {
    "name": "get_weather",
    "description": WEATHER_DESCRIPTION,
    "input_schema": WEATHER_PARAMETERS,
}

def client(base_url, api_key="unused"):
    return anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=600)


def streamed(api, **request):
    """The text the stream's events carried, and the message the SDK assembled from them."""
    with api.messages.stream(**request) as stream:
        text = "".join(stream.text_stream)
        return text, stream.get_final_message()


def text_of(message):
    return "".join(block.text for block in message.content if block.type == "text")


def basics(api, model):
    """create and stream agree on text, stop reason and usage; max_tokens stops; a stop
    sequence cuts the text; count_tokens counts what create's usage reports."""
    request = dict(model=model, max_tokens=6, messages=ASK, extra_body=GREEDY)
    message = api.messages.create(**request)
    assert message.type == "message" and message.role == "assistant", message
    assert message.id.startswith("msg_"), message.id
    assert message.model == model, message.model
    # Random weights do not end a turn within six tokens.
    assert message.stop_reason == "max_tokens", message
    assert message.usage.output_tokens == 6, message.usage
    prompt = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert prompt > 0, message.usage

    text, final = streamed(api, **request)
    assert text == text_of(message) == text_of(final), (text, message, final)
    assert final.stop_reason == "max_tokens", final
    assert final.usage.output_tokens == 6, final.usage
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == prompt

    counted = api.messages.count_tokens(model=model, messages=ASK)
    assert counted.input_tokens == prompt, (counted, message.usage)
    # The system prompt is counted (templates may add a default one, so compare two).
    short = api.messages.count_tokens(model=model, messages=ASK, system="Be brief.")
    long = api.messages.count_tokens(
        model=model, messages=ASK, system=[{"type": "text", "text": "Be brief and precise."}])
    assert long.input_tokens > short.input_tokens, (short, long)

    # A grammar (corral's extension) makes the words certain; the stop sequence cuts them.
    forced = dict(model=model, max_tokens=20, messages=ASK,
                  extra_body={"grammar": 'start: "alpha beta gamma"', **GREEDY})
    whole = api.messages.create(**forced)
    assert text_of(whole) == "alpha beta gamma", whole
    assert whole.stop_reason == "end_turn", whole
    cut = api.messages.create(**forced, stop_sequences=[" gamma", "zeta"])
    assert text_of(cut) == "alpha beta", cut
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == " gamma", cut
    text, final = streamed(api, **forced, stop_sequences=[" beta"])
    assert text == "alpha" and text_of(final) == "alpha", (text, final)
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == " beta", final
    return {"text": text_of(message), "prompt_tokens": prompt}


def json_schema(api, model):
    """output_config.format json_schema, created and streamed: the text validates."""
    output_config = {"format": {"type": "json_schema", "schema": PERSON}}
    messages = [{"role": "user", "content": "Describe a person as JSON."}]
    for seed in range(3):
        request = dict(model=model, max_tokens=600, messages=messages, output_config=output_config,
                       extra_body={"seed": seed})
        message = api.messages.create(**request)
        assert message.stop_reason == "end_turn", message
        jsonschema.validate(json.loads(text_of(message)), PERSON)
        text, final = streamed(api, **request)
        jsonschema.validate(json.loads(text), PERSON)
        assert text == text_of(final), (text, final)
    return {"seeds": 3}


def check_tool_use(message):
    calls = [block for block in message.content if block.type == "tool_use"]
    assert message.stop_reason == "tool_use", message
    assert len(calls) == 1, message.content
    call = calls[0]
    assert call.id.startswith("toolu_") and call.name == "get_weather", call
    jsonschema.validate(call.input, WEATHER["input_schema"])
    return call


def tool_round_trip(api, model, max_tokens=200):
    """tool_choice any: one tool_use block whose input validates (created and streamed); its
    tool_result sent back with tool_choice none gets a text answer."""
    first = api.messages.create(
        model=model, max_tokens=max_tokens, messages=ASK, tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body=GREEDY,
    )
    call = check_tool_use(first)
    _, streamed_first = streamed(
        api, model=model, max_tokens=max_tokens, messages=ASK, tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body=GREEDY,
    )
    assert check_tool_use(streamed_first).input == call.input, (streamed_first, call)

    result = {"city": call.input["city"], "temperature": 21, "unit": call.input["unit"], "sky": "sunny"}
    messages = ASK + [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": json.dumps(result)},
        ]},
    ]
    # The client wants the answer now: with "none" a small model does not call again.
    final = api.messages.create(
        model=model, max_tokens=60, messages=messages, tools=[WEATHER],
        tool_choice={"type": "none"}, extra_body=GREEDY,
    )
    assert final.stop_reason in ("end_turn", "max_tokens"), final
    answer = text_of(final)
    assert answer.strip(), final
    assert "<tool_call>" not in answer and "<tool_response>" not in answer, answer
    assert not [block for block in final.content if block.type == "tool_use"], final
    return {"call": {"name": call.name, "input": call.input}, "answer": answer}




def thinking(api, model):
    """A model whose template thinks, forced by a grammar into a think block then an answer:
    the thinking comes back as a thinking block, created and streamed; thinking disabled reaches
    the template, which closes the block in the prompt."""
    ask = [{"role": "user", "content": "Think, then answer."}]
    request = dict(model=model, max_tokens=200, messages=ask,
                   thinking={"type": "enabled", "budget_tokens": 1024},
                   extra_body={"grammar": THINKING_THEN_ANSWER, "seed": 1})
    message = api.messages.create(**request)
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "text"], message.content
    assert re.fullmatch(WORDS + "\n", message.content[0].thinking), message.content
    assert re.fullmatch(WORDS, message.content[1].text), message.content
    _, final = streamed(api, **request)
    assert [block.model_dump() for block in final.content] == \
        [block.model_dump() for block in message.content], (final.content, message.content)

    plain = api.messages.create(
        model=model, max_tokens=200, messages=ask, thinking={"type": "disabled"},
        extra_body={"grammar": ANSWER_ONLY, "seed": 1},
    )
    assert [block.type for block in plain.content] == ["text"], plain.content
    # The prompt's whole length: Anthropic's input_tokens leave out what the prefix cache served.
    def prompt(usage):
        return usage.input_tokens + usage.cache_read_input_tokens
    assert prompt(plain.usage) > prompt(message.usage), (plain.usage, message.usage)
    return {"thinking": message.content[0].thinking}


def thinking_budget(api, model):
    """An R1-style template opens the think block in the prompt, so random weights think until
    something closes it: budget_tokens does, after that many tokens, and the answer follows."""
    ask = [{"role": "user", "content": "Think, then answer."}]
    sampling = {"temperature": 1.0, "seed": 3}
    budgeted = api.messages.create(
        model=model, max_tokens=40, messages=ask, extra_body=sampling,
        thinking={"type": "enabled", "budget_tokens": 6},
    )
    # Six tokens of thinking, then the worker's "</think>": the rest is the answer.
    assert [block.type for block in budgeted.content] == ["thinking", "text"], budgeted.content
    unbounded = api.messages.create(
        model=model, max_tokens=40, messages=ask, extra_body=sampling,
        thinking={"type": "adaptive"},
    )
    assert [block.type for block in unbounded.content] == ["thinking"], unbounded.content
    assert unbounded.stop_reason == "max_tokens", unbounded
    assert len(budgeted.content[0].thinking) < len(unbounded.content[0].thinking), (
        budgeted.content[0].thinking, unbounded.content[0].thinking)
    return {"budgeted": [block.model_dump() for block in budgeted.content]}


def errors(api, model):
    """The SDK's typed errors, each from Anthropic's error shape."""
    try:
        api.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
        raise AssertionError("an unknown model was served")
    except anthropic.NotFoundError as error:
        assert error.status_code == 404 and error.body["error"]["type"] == "not_found_error", error.body
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    try:
        api.messages.create(model=model, max_tokens=5, messages=[{"role": "user", "content": [image]}])
        raise AssertionError("an image was accepted")
    except anthropic.BadRequestError as error:
        assert error.body["error"]["type"] == "invalid_request_error", error.body
        assert "image" in error.body["error"]["message"], error.body
    try:
        # The SDK requires max_tokens; a raw post shows the server does too.
        api.post("/v1/messages", cast_to=object, body={"model": model, "messages": ASK})
        raise AssertionError("a request without max_tokens was accepted")
    except anthropic.BadRequestError as error:
        assert "max_tokens" in error.body["error"]["message"], error.body
    message = api.messages.create(model=model, max_tokens=2, messages=ASK)
    assert message.stop_reason in ("end_turn", "max_tokens"), message
    return {"ok": True}


def authentication(api, model, key):
    """With an API key configured: a wrong one is AuthenticationError, the right one (sent as
    x-api-key, as the SDK does) is served."""
    try:
        client(api.base_url, "wrong-key").messages.create(model=model, max_tokens=2, messages=ASK)
        raise AssertionError("a wrong key was accepted")
    except anthropic.AuthenticationError as error:
        assert error.body["error"]["type"] == "authentication_error", error.body
    message = client(api.base_url, key).messages.create(model=model, max_tokens=2, messages=ASK)
    assert message.usage.output_tokens > 0, message
    return {"ok": True}


CHECKS = {
    "basics": basics,
    "json-schema": json_schema,
    "tool-round-trip": tool_round_trip,
    "thinking": thinking,
    "thinking-budget": thinking_budget,
    "errors": errors,
}

if __name__ == "__main__":
    base_url, check, model = sys.argv[1:4]
    if check == "authentication":
        print(json.dumps(authentication(client(base_url), model, sys.argv[4])))
    else:
        print(json.dumps(CHECKS[check](client(base_url), model)))
