"""The OpenAI Responses API as the official OpenAI Python SDK sees it from corral: text,
streaming, a function-call round trip over previous_response_id, structured outputs, and the
stored responses. Run by tests/tests/e2e/responses.rs as

    python openai_responses.py BASE_URL CHECK MODEL

Each check asserts what the SDK hands its caller and exits non-zero with the reason otherwise.
"""

import json
import sys

import jsonschema
import openai

from shared import PERSON, QUESTION, WEATHER_DESCRIPTION, WEATHER_PARAMETERS

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": WEATHER_DESCRIPTION,
    "parameters": WEATHER_PARAMETERS,
    "strict": True,
}
ASK = QUESTION


def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)


def check_call(item):
    assert item.type == "function_call", item
    assert item.id.startswith("fc_") and item.call_id.startswith("call_"), item
    assert item.name == "get_weather", item
    arguments = json.loads(item.arguments)
    jsonschema.validate(arguments, WEATHER["parameters"])
    return arguments


def text(api, model):
    """A string input answered with one message; the response is stored, retrieved, deleted,
    and then a 404 naming it."""
    response = api.responses.create(
        model=model, input="Say hello.", instructions="Be brief.", max_output_tokens=16,
        temperature=0, metadata={"test": "text"},
    )
    assert response.id.startswith("resp_"), response
    assert response.object == "response", response
    assert response.status in ("completed", "incomplete"), response
    assert response.output[0].type == "message", response
    assert response.output_text == response.output[0].content[0].text, response
    assert response.metadata == {"test": "text"}, response.metadata
    usage = response.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0, usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens, usage
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens", response

    stored = api.responses.retrieve(response.id)
    assert stored.id == response.id and stored.output_text == response.output_text, stored
    deleted = api.responses.delete(response.id)
    assert deleted is None or getattr(deleted, "deleted", True), deleted
    for attempt in (lambda: api.responses.retrieve(response.id),
                    lambda: api.responses.delete(response.id),
                    lambda: api.responses.retrieve("resp_unknown")):
        try:
            attempt()
        except openai.NotFoundError as error:
            assert "resp_" in error.message, error.message
        else:
            raise AssertionError("no 404 for a deleted or unknown id")
    try:
        api.responses.create(model=model, input="x", previous_response_id="resp_gone")
    except openai.NotFoundError as error:
        assert "resp_gone" in error.message, error.message
    else:
        raise AssertionError("no 404 for an unknown previous_response_id")
    # A hosted tool is left out of the prompt and named in a header; an unknown type is a 400.
    raw = api.responses.with_raw_response.create(
        model=model, input="x", max_output_tokens=4, tools=[{"type": "web_search"}])
    assert raw.headers["x-corral-dropped-tools"] == "web_search", raw.headers
    assert raw.parse().status in ("completed", "incomplete"), raw.parse()
    try:
        api.responses.create(model=model, input="x", tools=[{"type": "teleport"}])
    except openai.BadRequestError as error:
        assert error.body["param"] == "tools[0].type", error.body
    else:
        raise AssertionError("no 400 for an unknown tool type")
    return {"text": response.output_text, "status": response.status}


def stream(api, model):
    """create(stream=True): the raw events in order, their text deltas adding up to the final
    object's text; then responses.stream with a forced call, assembled by the SDK."""
    events = list(api.responses.create(model=model, input="Say hello.", max_output_tokens=16,
                                       stream=True))
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert [event.sequence_number for event in events] == list(range(len(events))), types
    final = events[-1].response
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == final.output_text, (deltas, final.output_text)
    assert api.responses.retrieve(final.id).output_text == final.output_text

    with api.responses.stream(
        model=model, input=ASK, tools=[WEATHER], tool_choice="required",
        parallel_tool_calls=False, max_output_tokens=200,
    ) as streamed:
        seen = [event.type for event in streamed]
        response = streamed.get_final_response()
    assert "response.function_call_arguments.delta" in seen, seen
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1, response
    return {"events": len(types), "call": check_call(calls[0])}


def round_trip(api, model):
    """A forced call, then its output sent back on previous_response_id: the model answers
    with a message, the conversation continued on the server."""
    first = api.responses.create(
        model=model, input=ASK, tools=[WEATHER], tool_choice="required",
        parallel_tool_calls=False, temperature=0, max_output_tokens=200,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1, first
    arguments = check_call(calls[0])
    result = {"city": arguments["city"], "temperature": 21, "unit": arguments["unit"], "sky": "sunny"}
    # The agent wants the answer now: with "none" a small model does not call again.
    final = api.responses.create(
        model=model, previous_response_id=first.id, tools=[WEATHER], tool_choice="none",
        input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                "output": json.dumps(result)}],
        temperature=0, max_output_tokens=60,
    )
    assert final.previous_response_id == first.id, final
    assert [item.type for item in final.output] == ["message"], final
    answer = final.output_text
    assert "<tool_call>" not in answer and "<tool_response>" not in answer, answer
    return {"call": {"name": calls[0].name, "arguments": arguments}, "answer": answer}


def json_schema(api, model):
    """text.format json_schema: the output parses and validates, several times over."""
    answers = []
    for _ in range(3):
        response = api.responses.create(
            model=model, input="Describe a person as JSON.", temperature=1.0,
            max_output_tokens=200,
            text={"format": {"type": "json_schema", "name": "person", "schema": PERSON,
                             "strict": True}},
        )
        assert response.status == "completed", response
        assert response.text.format.type == "json_schema", response.text
        answer = json.loads(response.output_text)
        jsonschema.validate(answer, PERSON)
        answers.append(answer)
    return {"answers": answers}


CHECKS = {
    "text": text,
    "stream": stream,
    "round-trip": round_trip,
    "json-schema": json_schema,
}

if __name__ == "__main__":
    base_url, check, model = sys.argv[1:4]
    print(json.dumps(CHECKS[check](client(base_url), model)))
