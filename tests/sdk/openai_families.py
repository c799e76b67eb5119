"""Each model family corral serves, as the official OpenAI Python SDK sees it. Run by
tests/tests/e2e/families.rs as

    python openai_families.py BASE_URL FAMILIES_JSON

where FAMILIES_JSON lists each family as {"model", "call_grammar", "thinks", "thinking_output",
"thinking_grammar", "thinking_kwargs"} (the template variables that turn thinking on). For each:
a chat completion, a call forced to a named tool, a streamed chat, a JSON answer under
response_format, and then the family's own formats: a call written in its real models' syntax
(forced by `call_grammar`) must come back parsed, and its thinking (as the family writes it)
must come back as reasoning exactly when the family thinks. Every family
is checked even after one fails; the script prints what each check saw as one JSON object and
exits non-zero if any failed. The models have random weights: nothing here depends on what they
say, only on the shape of what corral sends back."""

import json
import sys
import traceback

import jsonschema
import openai
from openai.types.chat import ChatCompletionChunk

from shared import QUESTION, WEATHER_DESCRIPTION, WEATHER_PARAMETERS

ASK = [{"role": "user", "content": QUESTION}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": WEATHER_DESCRIPTION,
        "parameters": WEATHER_PARAMETERS,
    },
}
# Short answers: one token is one character here.
MAX_TOKENS = 8
# Room for the longest call the schema allows, every character of the city escaped.
CALL_MAX_TOKENS = 400
PARIS = {"city": "Paris", "unit": "celsius"}
# What `thinking_output` thinks and answers.
THOUGHT, ANSWER = "hmm\n", "fine"


def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)


def text_of(message):
    """The answer and the thinking (a family that thinks may spend its tokens there)."""
    reasoning = (message.model_extra or {}).get("reasoning_content") or ""
    return message.content or "", reasoning


def chat(api, model):
    response = api.chat.completions.create(
        model=model, messages=ASK, max_tokens=MAX_TOKENS, temperature=0)
    choice = response.choices[0]
    assert response.object == "chat.completion" and response.model == model, response
    assert choice.finish_reason in ("stop", "length"), choice
    assert choice.message.role == "assistant" and not choice.message.tool_calls, choice
    assert 1 <= response.usage.completion_tokens <= MAX_TOKENS, response.usage
    content, reasoning = text_of(choice.message)
    return {"finish_reason": choice.finish_reason, "content": content, "reasoning": reasoning,
            "completion_tokens": response.usage.completion_tokens}


def forced_call(api, model):
    choice = {"type": "function", "function": {"name": "get_weather"}}
    response = api.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], tool_choice=choice,
        parallel_tool_calls=False, max_tokens=CALL_MAX_TOKENS, temperature=0)
    answer = response.choices[0]
    assert answer.finish_reason == "tool_calls", answer
    calls = answer.message.tool_calls
    assert calls and len(calls) == 1, answer.message
    call = calls[0]
    assert call.type == "function" and call.id.startswith("call_"), call
    assert call.function.name == "get_weather", call
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER_PARAMETERS)
    assert not answer.message.content, answer.message
    return {"arguments": arguments}


def stream(api, model, whole):
    """The same chat streamed, read line by line: `data:` chunks the SDK's type parses, one
    finish reason, the usage, then `[DONE]`; the text is the unstreamed answer's."""
    with api.chat.completions.with_streaming_response.create(
        model=model, messages=ASK, max_tokens=MAX_TOKENS, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ) as response:
        payloads = [line.removeprefix("data: ") for line in response.iter_lines()
                    if line.startswith("data: ")]
    assert payloads and payloads[-1] == "[DONE]", payloads[-3:]
    chunks = [ChatCompletionChunk.model_validate_json(payload) for payload in payloads[:-1]]
    content, reasoning, finishes, usage = "", "", [], None
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk" and chunk.model == model, chunk
        usage = chunk.usage or usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    assert finishes == [whole["finish_reason"]], finishes
    assert (content, reasoning) == (whole["content"], whole["reasoning"]), (content, reasoning)
    assert usage and usage.completion_tokens == whole["completion_tokens"], usage
    return {"chunks": len(chunks)}


def native_call(api, model, grammar):
    """Under tool_choice auto, the family's own call syntax is read as a call, not as text."""
    response = api.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], max_tokens=CALL_MAX_TOKENS, temperature=0,
        extra_body={"grammar": grammar})
    answer = response.choices[0]
    assert answer.finish_reason == "tool_calls", answer
    assert not answer.message.content, answer.message
    calls = [(call.function.name, json.loads(call.function.arguments))
             for call in answer.message.tool_calls]
    assert calls == [("get_weather", PARIS)], calls
    return {"calls": len(calls)}


def thinking(api, model, thinks, output, grammar, kwargs):
    """The family's thinking `output` (written by `grammar`, with its special tokens) is
    reasoning and an answer for a family that thinks, and plain text for one that does not."""
    response = api.chat.completions.create(
        model=model, messages=ASK, max_tokens=MAX_TOKENS * 8, temperature=0,
        extra_body={"grammar": grammar, "chat_template_kwargs": kwargs})
    content, reasoning = text_of(response.choices[0].message)
    expected = (THOUGHT, ANSWER) if thinks else ("", output)
    assert (reasoning, content) == expected, (reasoning, content)
    return {"reasoning": reasoning}


def structured(api, model):
    """A JSON answer under response_format, in content, also where the prompt opened the
    model's thinking (the grammar binds the answer, so the block is closed first)."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    response = api.chat.completions.create(
        model=model, messages=ASK, max_tokens=32, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "answer", "schema": schema, "strict": True}})
    content, reasoning = text_of(response.choices[0].message)
    assert not reasoning, reasoning
    answer = json.loads(content)
    jsonschema.validate(answer, schema)
    return {"answer": answer}


def check(api, family):
    model = family["model"]
    seen = {}
    try:
        seen["chat"] = chat(api, model)
        seen["forced_call"] = forced_call(api, model)
        seen["stream"] = stream(api, model, seen["chat"])
        seen["structured"] = structured(api, model)
        seen["native_call"] = native_call(api, model, family["call_grammar"])
        seen["thinking"] = thinking(api, model, family["thinks"], family["thinking_output"],
                                    family["thinking_grammar"], family["thinking_kwargs"])
    except Exception:  # noqa: BLE001 - every failure is reported, then the next model runs
        seen["failed"] = traceback.format_exc()
    return seen


if __name__ == "__main__":
    base_url, families = sys.argv[1], json.loads(sys.argv[2])
    api = client(base_url)
    report = {family["model"]: check(api, family) for family in families}
    print(json.dumps(report, indent=1))
    sys.exit(1 if any("failed" in seen for seen in report.values()) else 0)
