// Drives a running corral's Messages API with the official Anthropic Node SDK, unmodified.
// Usage: node anthropic.mjs ROOT_URL MODEL   (ROOT_URL like http://127.0.0.1:8080: the SDK adds /v1)
import Anthropic from "@anthropic-ai/sdk";
import assert from "node:assert/strict";

const [baseURL, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: "not-needed", maxRetries: 0 });
const messages = [{ role: "user", content: "Tell me a story." }];
const textOf = (message) => message.content.filter((b) => b.type === "text").map((b) => b.text).join("");

const message = await client.messages.create({ model, max_tokens: 8, messages, temperature: 0 });
assert.equal(message.type, "message");
assert.equal(message.role, "assistant");
assert.ok(["end_turn", "max_tokens"].includes(message.stop_reason), message.stop_reason);
const prompt = message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0);
console.log(`messages: ${message.stop_reason}, ${message.usage.output_tokens} tokens`);

let text = "";
const stream = client.messages.stream({ model, max_tokens: 8, messages, temperature: 0 });
stream.on("text", (delta) => { text += delta; });
const final = await stream.finalMessage();
assert.equal(text, textOf(message));
assert.equal(textOf(final), textOf(message));
assert.equal(final.usage.output_tokens, message.usage.output_tokens);
console.log("messages stream: same text as non-streaming");

const counted = await client.messages.countTokens({ model, messages });
assert.equal(counted.input_tokens, prompt);
console.log(`count_tokens: ${counted.input_tokens}, as the answer's usage`);

const weather = {
  name: "get_weather",
  description: "The current weather in a city.",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", maxLength: 24 } },
    required: ["city"],
    additionalProperties: false,
  },
};
const called = await client.messages.create({
  model, max_tokens: 200, temperature: 0, tools: [weather],
  tool_choice: { type: "any", disable_parallel_tool_use: true },
  messages: [{ role: "user", content: "What is the weather in Paris?" }],
});
const call = called.content.find((block) => block.type === "tool_use");
assert.equal(called.stop_reason, "tool_use");
assert.equal(call.name, "get_weather");
assert.equal(typeof call.input.city, "string");
console.log(`tool_use: ${JSON.stringify(call.input)}`);

await assert.rejects(
  client.messages.create({ model: "no-such-model", max_tokens: 4, messages }),
  (error) => error instanceof Anthropic.NotFoundError,
);
console.log("unknown model: NotFoundError");
await assert.rejects(
  client.messages.create({
    model, max_tokens: 4,
    messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "https://example.com/a.png" } }] }],
  }),
  (error) => error instanceof Anthropic.BadRequestError,
);
console.log("image block: BadRequestError");
console.log("all Anthropic Node SDK checks passed");
