"""What the SDK checks share: the weather tool's parameters, the JSON shape of a person, and
the grammars that make a random-weight model write words or think. Every string and number is
bounded: random weights rarely close an unbounded string."""

QUESTION = "What is the weather in Paris, in celsius?"

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER_DESCRIPTION = "The current weather in a city."

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": ["string", "null"], "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "email", "tags"],
    "additionalProperties": False,
}

WORDS = r"[a-z]{3,10}( [a-z]{3,10}){1,3}"
THINKING_THEN_ANSWER = f'start: "<think>\\n" /{WORDS}/ "\\n</think>\\n\\n" /{WORDS}/'
ANSWER_ONLY = f"start: /{WORDS}/"
