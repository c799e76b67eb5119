"""What an agent built on the official OpenAI Python SDK sees from corral: tool calls,
structured outputs and their errors. Run by tests/tests/e2e/agents.rs as

    python openai_agents.py BASE_URL CHECK MODEL

Each check asserts what the SDK hands its caller and exits non-zero with the reason otherwise.
"""

import json
import sys

import jsonschema
import openai

from shared import (ANSWER_ONLY, PERSON, QUESTION, THINKING_THEN_ANSWER, WEATHER_DESCRIPTION,
                    WEATHER_PARAMETERS, WORDS)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": WEATHER_DESCRIPTION,
        "parameters": WEATHER_PARAMETERS,
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {
                "zone": {"type": "string", "maxLength": 24},
                "hours": {"type": "integer", "minimum": -12, "maximum": 14},
            },
            "required": ["zone"],
            # Or random weights invent keys without end.
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}

ASK = [{"role": "user", "content": QUESTION}]


def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)


def check_call(call, allowed):
    assert call.type == "function", call
    assert call.id.startswith("call_"), call
    assert call.function.name in allowed, call
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return call.function.name, arguments


def required_calls(api, model, seeds):
    """tool_choice "required", one seed after another: every answer is one valid call and
    nothing else. Then with parallel calls allowed: every call made validates (random weights
    may go on calling until max_tokens, so the last one can be cut off)."""
    names = []
    for seed in range(seeds):
        response = api.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, seed=seed, temperature=1.0, max_tokens=600,
        )
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls", (seed, choice)
        assert len(choice.message.tool_calls) == 1, (seed, choice.message)
        names.append(check_call(choice.message.tool_calls[0], SCHEMAS)[0])
        assert not choice.message.content, (seed, choice.message.content)
    parallel = 0
    for seed in range(seeds, seeds + 5):
        response = api.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, tool_choice="required",
            seed=seed, temperature=1.0, max_tokens=600,
        )
        choice = response.choices[0]
        assert choice.finish_reason in ("tool_calls", "length"), (seed, choice)
        assert choice.message.tool_calls, (seed, choice.message)
        for call in choice.message.tool_calls:
            check_call(call, SCHEMAS)
        parallel = max(parallel, len(choice.message.tool_calls))
    return {"calls": len(names), "names": sorted(set(names)), "most_parallel": parallel}


def named_calls(api, model, seeds):
    """A named function, streamed and not, one call that validates against its schema; no tag
    text ever reaches content."""
    for seed in range(seeds):
        choice = {"type": "function", "function": {"name": "get_time"}}
        response = api.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
            parallel_tool_calls=False, seed=seed, temperature=1.0, max_tokens=600,
        )
        calls = response.choices[0].message.tool_calls
        assert len(calls) == 1, calls
        assert check_call(calls[0], ["get_time"])[0] == "get_time"

        stream = api.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
            parallel_tool_calls=False, seed=seed, temperature=1.0, max_tokens=600, stream=True,
        )
        content, assembled, finish = "", {}, None
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for part in delta.tool_calls or []:
                entry = assembled.setdefault(part.index, {"id": None, "name": None, "arguments": ""})
                if part.id:
                    assert entry["id"] is None, "a call's id comes once"
                    entry["id"] = part.id
                    assert part.type == "function"
                if part.function and part.function.name:
                    entry["name"] = part.function.name
                if part.function and part.function.arguments:
                    entry["arguments"] += part.function.arguments
            finish = chunk.choices[0].finish_reason or finish
        assert finish == "tool_calls", finish
        assert "<tool_call>" not in content and "</tool_call>" not in content, content
        assert list(assembled) == [0], assembled
        call = assembled[0]
        assert call["id"].startswith("call_") and call["name"] == "get_time", call
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS["get_time"])
    return {"seeds": seeds}


def json_schema(api, model, seeds):
    """response_format json_schema (strict), streamed and not: the content validates."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": PERSON, "strict": True},
    }
    messages = [{"role": "user", "content": "Describe a person as JSON."}]
    for seed in range(seeds):
        response = api.chat.completions.create(
            model=model, messages=messages, response_format=response_format,
            seed=seed, temperature=1.0, max_tokens=600,
        )
        choice = response.choices[0]
        assert choice.finish_reason == "stop", (seed, choice)
        jsonschema.validate(json.loads(choice.message.content), PERSON)

        stream = api.chat.completions.create(
            model=model, messages=messages, response_format=response_format,
            seed=seed, temperature=1.0, max_tokens=600, stream=True,
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        jsonschema.validate(json.loads(text), PERSON)
    # The SDK's own structured-output helper parses the answer into the schema's shape.
    parsed = api.chat.completions.parse(
        model=model, messages=messages, response_format=response_format,
        seed=0, temperature=1.0, max_tokens=600,
    )
    jsonschema.validate(json.loads(parsed.choices[0].message.content), PERSON)
    return {"seeds": seeds}


def json_object(api, model, _seeds):
    """response_format json_object, for a real model (random weights never close an object
    that no schema bounds): the content is a JSON object."""
    response = api.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Answer in JSON: what is the capital of France?"}],
        response_format={"type": "json_object"}, temperature=0, max_tokens=200,
    )
    assert response.choices[0].finish_reason == "stop", response
    answer = json.loads(response.choices[0].message.content)
    assert isinstance(answer, dict), answer
    return {"answer": answer}


def completion_grammar(api, model, seeds):
    """/v1/completions with response_format and corral's `grammar` extension."""
    for seed in range(seeds):
        response = api.completions.create(
            model=model, prompt="Is the sky blue? Answer:", max_tokens=50, seed=seed,
            temperature=1.0, extra_body={"grammar": 'start: " " ("yes" | "no")'},
        )
        assert response.choices[0].text in (" yes", " no"), response.choices[0].text
        response = api.completions.create(
            model=model, prompt="A person:", max_tokens=600, seed=seed, temperature=1.0,
            extra_body={"response_format": {
                "type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}},
        )
        jsonschema.validate(json.loads(response.choices[0].text), PERSON)
    return {"seeds": seeds}


def bad_input(api, model, _seeds):
    """Each mistake is a 400 naming the field, and the server keeps serving."""
    cases = [
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]},
         "tools[0].function.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "object"}}},
         "response_format.json_schema.schema"),
        # A schema llguidance cannot compile: refused by the worker before any compute.
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
            "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}}}}},
         "response_format"),
        ({"extra_body": {"grammar": "start: (((("}}, "grammar"),
    ]
    for extra, param in cases:
        try:
            api.chat.completions.create(model=model, messages=ASK, max_tokens=5, **extra)
        except openai.BadRequestError as error:
            body = error.body or {}
            assert error.status_code == 400, error
            assert (body.get("param") or "").startswith(param), (param, body)
            assert body.get("message"), body
        else:
            raise AssertionError(f"{extra} was accepted")
    response = api.chat.completions.create(model=model, messages=ASK, max_tokens=3)
    assert response.choices[0].finish_reason in ("stop", "length")
    return {"cases": len(cases)}


def round_trip(api, model, _seeds):
    """The weather round trip with a real model: a forced call, the tool's result, an answer."""
    messages = list(ASK)
    first = api.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER], tool_choice="required",
        temperature=0, max_tokens=200,
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls", first
    name, arguments = check_call(message.tool_calls[0], ["get_weather"])
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        result = {"city": arguments["city"], "temperature": 21, "unit": arguments["unit"], "sky": "sunny"}
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    # The agent wants the answer now: with "none" a model this small does not call again.
    final = api.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER], tool_choice="none",
        temperature=0, max_tokens=60,
    )
    answer = final.choices[0].message
    assert final.choices[0].finish_reason in ("stop", "length"), final
    assert answer.content and answer.content.strip(), answer
    assert "<tool_call>" not in answer.content and "<tool_response>" not in answer.content, answer
    return {"call": {"name": name, "arguments": arguments}, "answer": answer.content}




def reasoning(api, model, seeds):
    """A model whose template thinks (Qwen3's switch), its output forced by a grammar into a
    think block then an answer: the thinking comes back as reasoning_content, streamed and not,
    and no <think> text reaches content. enable_thinking false (or reasoning_effort none)
    reaches the template, which then closes the block in the prompt."""
    import re
    ask = [{"role": "user", "content": "Think, then answer."}]
    for seed in range(seeds):
        body = {"grammar": THINKING_THEN_ANSWER}
        whole = api.chat.completions.create(
            model=model, messages=ask, seed=seed, temperature=1.0, max_tokens=200,
            reasoning_effort="high", extra_body=body,
        )
        message = whole.choices[0].message
        thought = message.model_extra.get("reasoning_content")
        # As the model wrote it, up to </think>: the newline before the tag included.
        assert thought and re.fullmatch(WORDS + "\n", thought), message
        assert re.fullmatch(WORDS, message.content), message

        stream = api.chat.completions.create(
            model=model, messages=ask, seed=seed, temperature=1.0, max_tokens=200,
            reasoning_effort="high", extra_body=body, stream=True,
        )
        streamed_thought, streamed_text = "", ""
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            streamed_thought += (delta.model_extra or {}).get("reasoning_content") or ""
            text = delta.content or ""
            assert "<think" not in text and "</think" not in text, text
            streamed_text += text
        assert (streamed_thought, streamed_text) == (thought, message.content), (
            streamed_thought, streamed_text, thought, message.content)
        thinking_prompt = whole.usage.prompt_tokens

        for extra in ({"chat_template_kwargs": {"enable_thinking": False}}, {}):
            effort = {} if extra else {"reasoning_effort": "none"}
            plain = api.chat.completions.create(
                model=model, messages=ask, seed=seed, temperature=1.0, max_tokens=200,
                extra_body={"grammar": ANSWER_ONLY, **extra}, **effort,
            )
            message = plain.choices[0].message
            assert re.fullmatch(WORDS, message.content), message
            assert not (message.model_extra or {}).get("reasoning_content"), message
            # The template wrote the closed block into the prompt.
            assert plain.usage.prompt_tokens > thinking_prompt, (plain.usage, thinking_prompt)
    return {"seeds": seeds}


def auto_calls(api, model, seeds):
    """tool_choice auto, the model's output forced by a grammar into text then a Hermes call:
    the text is content, the call is parsed out of it, and streamed content never holds a tag
    or a piece of one, whatever the token boundaries."""
    import re
    arguments = json.dumps({"type": "object", "properties": {
        "zone": {"type": "string", "maxLength": 12}}, "required": ["zone"],
        "additionalProperties": False,
        # A user grammar's JSON gets llguidance's defaults, which allow free whitespace.
        "x-guidance": {"whitespace_flexible": False}})
    grammar = (f'start: /{WORDS}/ "\\n<tool_call>\\n{{\\"name\\": \\"get_time\\", '
               f'\\"arguments\\": " %json {arguments} "}}\\n</tool_call>"')
    for seed in range(seeds):
        request = dict(model=model, messages=ASK, tools=TOOLS, seed=seed, temperature=1.0,
                       max_tokens=300, extra_body={"grammar": grammar})
        whole = api.chat.completions.create(**request)
        choice = whole.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert re.fullmatch(WORDS, choice.message.content.strip()), choice.message
        assert len(choice.message.tool_calls) == 1, choice.message
        check_call(choice.message.tool_calls[0], ["get_time"])

        content, calls = "", {}
        for chunk in api.chat.completions.create(**request, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            assert "<" not in (delta.content or ""), delta
            content += delta.content or ""
            for part in delta.tool_calls or []:
                entry = calls.setdefault(part.index, {"name": "", "arguments": ""})
                entry["name"] += (part.function and part.function.name) or ""
                entry["arguments"] += (part.function and part.function.arguments) or ""
        assert content == choice.message.content, (content, choice.message.content)
        only = choice.message.tool_calls[0].function
        assert calls == {0: {"name": only.name, "arguments": only.arguments}}, calls
    return {"seeds": seeds}


CHECKS = {
    "auto-calls": auto_calls,
    "reasoning": reasoning,
    "required-calls": required_calls,
    "named-calls": named_calls,
    "json-schema": json_schema,
    "json-object": json_object,
    "completion-grammar": completion_grammar,
    "bad-input": bad_input,
    "round-trip": round_trip,
}

if __name__ == "__main__":
    base_url, check, model = sys.argv[1:4]
    seeds = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    print(json.dumps(CHECKS[check](client(base_url), model, seeds)))
