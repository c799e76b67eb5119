// Drives a running corral with the official OpenAI Node SDK, unmodified.
// Usage: node check.mjs BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8080/v1)
import OpenAI from "openai";
import assert from "node:assert/strict";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "not-needed" });
const messages = [{ role: "user", content: "Tell me a story." }];

const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0 });
assert.equal(chat.choices[0].message.role, "assistant");
console.log(`chat: ${chat.choices[0].finish_reason}, ${chat.usage.completion_tokens} tokens`);

let text = "";
let usage;
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  text += chunk.choices[0]?.delta?.content ?? "";
  usage = chunk.usage ?? usage;
}
assert.equal(text, chat.choices[0].message.content);
assert.equal(usage.completion_tokens, chat.usage.completion_tokens);
console.log("chat stream: same text as non-streaming");

const completion = await client.completions.create({ model, prompt: "Once", max_tokens: 4, temperature: 0 });
let streamed = "";
for await (const chunk of await client.completions.create({
  model, prompt: "Once", max_tokens: 4, temperature: 0, stream: true,
})) {
  streamed += chunk.choices[0]?.text ?? "";
}
assert.equal(streamed, completion.choices[0].text);
console.log("completions, streaming and not: same text");

await assert.rejects(
  client.chat.completions.create({ model: "no-such-model", messages }),
  (error) => error instanceof OpenAI.NotFoundError,
);
console.log("unknown model: NotFoundError");
console.log("all OpenAI Node SDK checks passed");
