// Runs each real client SDK against a running `petal serve` (PETAL_URL,
// e.g. http://127.0.0.1:8080) and prints a table of clients x flows.
// Every flow checks what the SDK hands its caller, not the raw HTTP.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { generateText, streamText, generateObject, jsonSchema, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { constructLlmApi } from '@continuedev/openai-adapters';

globalThis.AI_SDK_LOG_WARNINGS = false; // the deprecation notes of generateObject are not failures

const base = process.env.PETAL_URL ?? 'http://127.0.0.1:8080';
const tries = Number(process.env.PETAL_SCHEMA_TRIES ?? 5);
const model = 'petal';
const user = 'Tell me about a person: name and age.';

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 40 },
    age: { type: 'integer', minimum: 0, maximum: 130 },
    tags: { type: 'array', items: { type: 'string', maxLength: 12 }, maxItems: 3 },
  },
  required: ['name', 'age', 'tags'],
  additionalProperties: false,
};

// obeys checks a parsed object against person by hand, as a caller would.
function obeys(v) {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error(`not an object: ${JSON.stringify(v)}`);
  const keys = Object.keys(v).sort().join(',');
  if (keys !== 'age,name,tags') throw new Error(`keys ${keys}`);
  if (typeof v.name !== 'string' || v.name.length > 40) throw new Error(`name ${JSON.stringify(v.name)}`);
  if (!Number.isInteger(v.age) || v.age < 0 || v.age > 130) throw new Error(`age ${v.age}`);
  if (!Array.isArray(v.tags) || v.tags.length > 3 || v.tags.some((t) => typeof t !== 'string' || t.length > 12)) throw new Error(`tags ${JSON.stringify(v.tags)}`);
  return v;
}

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

const ok = (cond, what) => { if (!cond) throw new Error(what); };

const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none' });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'none' });
const ollama = new Ollama({ host: base });
const provider = createOpenAICompatible({ name: 'petal', baseURL: `${base}/v1`, apiKey: 'none', supportsStructuredOutputs: true });
// The AI SDK's default OpenAI provider: the Responses API with store on,
// which sends its last turn's items back as item references.
const openaiDefault = createOpenAI({ baseURL: `${base}/v1`, apiKey: 'none' });

// searchTools are Claude Code's tool search: a ToolSearch tool, and tools
// deferred until a tool_reference loads them.
const searchTools = (deferred) => [
  { name: 'ToolSearch', description: 'Loads deferred tools', input_schema: { type: 'object', properties: { query: { type: 'string' } } } },
  { name: 'mcp__gh__create_issue', description: 'Opens an issue', input_schema: weather.function.parameters, ...(deferred ? { defer_loading: true } : {}) },
];
// Continue's OpenAI adapter as the README's autocomplete setup configures
// it (provider mistral, apiBase ending in a slash): its autocomplete calls
// fimStream, which posts to /v1/fim/completions.
const continueApi = constructLlmApi({ provider: 'mistral', apiBase: `${base}/v1/`, apiKey: 'none' });
const lc = new ChatOpenAI({ model, apiKey: 'none', configuration: { baseURL: `${base}/v1` }, maxTokens: 60 });

const flows = {
  openai: {
    chat: async () => {
      const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: user }], max_tokens: 40 });
      ok(typeof r.choices[0].message.content === 'string' && r.usage.completion_tokens > 0, 'no content or usage');
      ok(r._request_id?.startsWith('req_'), `request id ${r._request_id}`);
    },
    stream: async () => {
      const s = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: user }], max_tokens: 40, stream: true, stream_options: { include_usage: true } });
      let text = '', usage;
      for await (const c of s) { text += c.choices[0]?.delta?.content ?? ''; usage = c.usage ?? usage; }
      ok(text.length > 0 && usage?.completion_tokens > 0, 'no text or usage');
    },
    tools: async () => {
      const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weather], max_tokens: 60 });
      ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
    },
    structured: async () => {
      for (let i = 0; i < tries; i++) {
        const r = await openai.chat.completions.parse({ model, messages: [{ role: 'user', content: user }], max_tokens: 200,
          response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } } });
        obeys(r.choices[0].message.parsed);
      }
    },
    responses: async () => {
      const r = await openai.responses.create({ model, input: [{ role: 'developer', content: [{ type: 'input_text', text: 'Be brief.' }] }, { role: 'user', content: user }], max_output_tokens: 40, store: false });
      ok(typeof r.output_text === 'string' && r.usage.output_tokens > 0, 'no output_text');
      const s = openai.responses.stream({ model, input: user, max_output_tokens: 40, store: false });
      let deltas = '';
      s.on('response.output_text.delta', (e) => { deltas += e.delta; });
      const f = await s.finalResponse();
      ok(f.output_text === deltas && deltas.length > 0, `stream ${JSON.stringify(deltas)} vs ${JSON.stringify(f.output_text)}`);
      for (let i = 0; i < tries; i++) {
        const j = await openai.responses.create({ model, input: user, max_output_tokens: 200, text: { format: { type: 'json_schema', name: 'person', schema: person, strict: true } } });
        obeys(JSON.parse(j.output_text));
      }
    },
  },
  anthropic: {
    chat: async () => {
      const r = await anthropic.messages.create({ model, max_tokens: 40, messages: [{ role: 'user', content: user }] });
      ok(r.content.some((b) => b.type === 'text') && r.usage.output_tokens > 0, 'no text');
    },
    stream: async () => {
      const s = anthropic.messages.stream({ model, max_tokens: 40, system: 'Be brief.', messages: [{ role: 'user', content: user }] });
      let text = '';
      s.on('text', (t) => { text += t; });
      const m = await s.finalMessage();
      ok(text.length > 0 && m.usage.output_tokens > 0, 'no text');
    },
    tools: async () => {
      const r = await anthropic.messages.create({ model, max_tokens: 60, messages: [{ role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content: 'Let me check.' }, { role: 'system', content: 'Tools may be used.' }, { role: 'user', content: 'Go on.' }],
        tools: [{ name: 'get_weather', description: 'The weather', input_schema: weather.function.parameters }] });
      ok(['end_turn', 'max_tokens', 'tool_use'].includes(r.stop_reason), r.stop_reason);
    },
    structured: async () => {
      for (let i = 0; i < tries; i++) {
        const r = await anthropic.messages.create({ model, max_tokens: 200, messages: [{ role: 'user', content: user }], output_format: { type: 'json_schema', schema: person } });
        obeys(JSON.parse(r.content.find((b) => b.type === 'text').text));
      }
    },
    // toolsearch replays Claude Code's tool search: the ToolSearch call's
    // result loads a deferred tool by reference; count_tokens leaves
    // deferred tools out.
    toolsearch: async () => {
      const ask = { role: 'user', content: 'Open an issue about the login bug.' };
      const messages = [ask, { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'ToolSearch', input: { query: 'issue' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'tool_reference', tool_name: 'mcp__gh__create_issue' }] }] }];
      const r = await anthropic.messages.create({ model, max_tokens: 60, tools: searchTools(true), messages });
      ok(['end_turn', 'max_tokens', 'tool_use'].includes(r.stop_reason), r.stop_reason);
      const some = await anthropic.messages.countTokens({ model, tools: searchTools(true), messages: [ask] });
      const all = await anthropic.messages.countTokens({ model, tools: searchTools(false), messages: [ask] });
      ok(some.input_tokens < all.input_tokens, `count_tokens ${some.input_tokens} with the tool deferred, ${all.input_tokens} without`);
    },
    ps: async () => {
      const page = await anthropic.models.list();
      ok(page.data.length === 1 && page.data[0].type === 'model' && page.data[0].created_at, `models ${JSON.stringify(page.data)}`);
    },
  },
  ollama: {
    chat: async () => {
      const r = await ollama.chat({ model, messages: [{ role: 'user', content: user }], options: { num_predict: 40 } });
      ok(r.done && r.eval_count > 0 && r.eval_duration > 0, 'no timings');
    },
    stream: async () => {
      let text = '', last;
      for await (const c of await ollama.chat({ model, messages: [{ role: 'user', content: user }], stream: true, options: { num_predict: 40 } })) { text += c.message.content; last = c; }
      ok(text.length > 0 && last.done, 'no text');
    },
    tools: async () => {
      const r = await ollama.chat({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weather], options: { num_predict: 60 } });
      ok(r.done, 'not done');
    },
    structured: async () => {
      for (let i = 0; i < tries; i++) {
        const r = await ollama.chat({ model, messages: [{ role: 'user', content: user }], format: person, options: { num_predict: 200 } });
        obeys(JSON.parse(r.message.content));
      }
    },
    generate: async () => {
      let text = '', last;
      for await (const c of await ollama.generate({ model, prompt: user, stream: true, options: { num_predict: 30 } })) { text += c.response; last = c; }
      ok(text.length > 0 && last.done && last.context?.length > 0 && last.prompt_eval_duration > 0, 'no text, context or timings');
      const v = await ollama.version();
      ok(v.version >= '0.13.4', v.version);
    },
    ps: async () => {
      const ps = await ollama.ps();
      const tags = await ollama.list();
      const show = await ollama.show({ model });
      ok(ps.models.length === 1 && tags.models[0].size > 0 && tags.models[0].digest.length === 64, 'ps or tags');
      ok(Object.entries(show.model_info).some(([k, v]) => k.endsWith('.context_length') && v > 0), 'no context length');
      const e = await ollama.embed({ model, input: ['x', 'y'] });
      ok(e.embeddings.length === 2 && e.embeddings[0].length > 0, `embed gave ${e.embeddings.length} vectors`);
      try { await ollama.pull({ model: 'x' }); throw new Error('pull answered'); } catch (e) { ok(!/object Object/.test(e.message), `error "${e.message}"`); }
      // The served model, by its listed name: Ollama's progress to success.
      let last;
      for await (const p of await ollama.pull({ model: tags.models[0].name, stream: true })) last = p;
      ok(last?.status === 'success', `pull ended with ${JSON.stringify(last)}`);
    },
  },
  'ai-sdk': {
    chat: async () => {
      const r = await generateText({ model: provider(model), prompt: user, maxOutputTokens: 40 });
      ok(r.text.length > 0 && r.usage.outputTokens > 0, 'no text');
    },
    stream: async () => {
      const r = streamText({ model: provider(model), prompt: user, maxOutputTokens: 40 });
      let text = '';
      for await (const t of r.textStream) text += t;
      ok(text.length > 0, 'no text');
    },
    tools: async () => {
      const r = await generateText({ model: provider(model), prompt: 'Weather in Paris?', maxOutputTokens: 60,
        tools: { get_weather: tool({ description: 'The weather', inputSchema: jsonSchema(weather.function.parameters) }) } });
      ok(['stop', 'length', 'tool-calls'].includes(r.finishReason), r.finishReason);
    },
    structured: async () => {
      for (let i = 0; i < tries; i++) {
        const r = await generateObject({ model: provider(model), prompt: user, maxOutputTokens: 200, schema: jsonSchema(person) });
        obeys(r.object);
      }
    },
    // responses: the default OpenAI provider over two turns (the second
    // refers to the first's items by id), then a third by
    // previous_response_id.
    responses: async () => {
      const first = [{ role: 'user', content: 'My name is Ada.' }];
      const one = await generateText({ model: openaiDefault(model), messages: first, maxOutputTokens: 40 });
      const two = await generateText({ model: openaiDefault(model), messages: [...first, ...one.response.messages, { role: 'user', content: 'What is my name?' }], maxOutputTokens: 40 });
      ok(two.usage.outputTokens > 0, 'no second turn');
      const id = two.providerMetadata?.openai?.responseId;
      ok(id, `no response id in ${JSON.stringify(two.providerMetadata)}`);
      const three = await generateText({ model: openaiDefault(model), prompt: 'And again?', maxOutputTokens: 40, providerOptions: { openai: { previousResponseId: id } } });
      ok(three.usage.outputTokens > 0, 'no third turn');
    },
  },
  continue: {
    // fim: an autocomplete at the cursor, as Continue sends it (the stop
    // words of its Qwen coder FIM template), read from the adapter's chunks.
    fim: async () => {
      const stop = ['<|endoftext|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|fim_pad|>', '<|repo_name|>', '<|file_sep|>', '<|im_start|>', '<|im_end|>'];
      let text = '', chunks = 0;
      for await (const c of continueApi.fimStream({ model, prompt: 'def add(a, b):\n    return ', suffix: '\n\nprint(add(1, 2))\n',
        max_tokens: 32, temperature: 0.01, stop }, new AbortController().signal)) {
        text += c.choices[0]?.delta?.content ?? '';
        chunks++;
      }
      ok(chunks > 0 && !/<\|fim_/.test(text), `fim: ${chunks} chunks, ${JSON.stringify(text)}`);
    },
  },
  // llama.vscode is an editor extension with no headless mode: its /infill
  // request (llama.cpp's shape, its default settings and a chunk of
  // another file) is replayed as it sends it, and its reply read as it
  // reads it.
  'llama.vscode (replayed)': {
    fim: async () => {
      const r = await fetch(`${base}/infill`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({
        input_prefix: 'def add(a, b):\n', input_suffix: '\n\nprint(add(1, 2))\n', prompt: '    return ',
        input_extra: [{ filename: 'util.py', text: 'def sub(a, b):\n    return a - b\n' }],
        n_predict: 32, top_k: 40, top_p: 0.99, stream: false, samplers: ['top_k', 'top_p', 'infill'], cache_prompt: true,
        t_max_prompt_ms: 500, t_max_predict_ms: 1000 }) });
      const j = await r.json();
      ok(r.ok && typeof j.content === 'string' && j.stop === true && j.timings?.predicted_n >= 0, `infill ${r.status} ${JSON.stringify(j).slice(0, 200)}`);
    },
  },
  langchain: {
    chat: async () => {
      const r = await lc.invoke(user);
      ok(typeof r.content === 'string' && r.content.length > 0, 'no content');
    },
    stream: async () => {
      let text = '';
      for await (const c of await lc.stream(user)) text += c.content;
      ok(text.length > 0, 'no text');
    },
    tools: async () => {
      const r = await lc.bindTools([weather]).invoke('Weather in Paris?');
      ok(r !== undefined, 'no answer');
    },
    structured: async () => {
      const s = new ChatOpenAI({ model, apiKey: 'none', configuration: { baseURL: `${base}/v1` }, maxTokens: 200 })
        .withStructuredOutput({ ...person, title: 'person' }, { method: 'jsonSchema' });
      for (let i = 0; i < tries; i++) obeys(await s.invoke(user));
    },
  },
};

const columns = ['chat', 'stream', 'tools', 'toolsearch', 'structured', 'responses', 'generate', 'ps', 'fim'];
const rows = [];
let failed = 0;
for (const [client, fs] of Object.entries(flows)) {
  const row = { client, cells: {}, notes: [] };
  for (const col of columns) {
    if (!fs[col]) { row.cells[col] = '—'; continue; }
    const t0 = Date.now();
    try {
      await fs[col]();
      row.cells[col] = `ok (${((Date.now() - t0) / 1000).toFixed(1)}s)`;
    } catch (e) {
      failed++;
      row.cells[col] = 'FAIL';
      row.notes.push(`${col}: ${String(e?.message ?? e).slice(0, 300)}`);
    }
  }
  rows.push(row);
}
console.log(`| client | ${columns.join(' | ')} |`);
console.log(`| --- | ${columns.map(() => '---').join(' | ')} |`);
for (const r of rows) console.log(`| ${r.client} | ${columns.map((c) => r.cells[c]).join(' | ')} |`);
for (const r of rows) for (const n of r.notes) console.log(`${r.client} ${n}`);
console.log(`structured flows ran ${tries} tries each; ${failed} failed`);
process.exit(failed ? 1 : 0);
