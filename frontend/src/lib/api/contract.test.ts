// The JSON in contract/ is written by the Go servers through their real
// handlers (frontend/contract_test.go). Each file is checked here against the
// type the UI reads it as. The specs below are typed so that the compiler
// makes them list every field of their interface, required ones as required
// and optional ones as optional: a field added to types.ts needs a spec, and
// a field Go stops sending, renames or retypes fails here.

import { describe, expect, it } from 'vitest';
import type {
  CPUDecodeFigure,
  ChatChunk,
  DoctorCheck,
  DoctorReply,
  DoctorReport,
  DownloadError,
  DownloadRetry,
  DownloadStatus,
  ErrorBody,
  FitReport,
  InForce,
  InForceSettings,
  ModelInfo,
  ModelList,
  PrefixCacheCleared,
  PrefixCacheStatus,
  Settings,
  SettingsReply,
  Status,
  ToolCallDelta,
  Usage,
} from './types';

import apiChatStream from './contract/api-chat-stream.json';
import apiError from './contract/api-error.json';
import apiModels from './contract/api-models.json';
import manageDownloadIdle from './contract/manage-download-idle.json';
import manageDownloadRetrying from './contract/manage-download-retrying.json';
import manageError from './contract/manage-error.json';
import managePrefixCache from './contract/manage-prefix-cache.json';
import managePrefixCacheCleared from './contract/manage-prefix-cache-cleared.json';
import manageSettings from './contract/manage-settings.json';
import manageStatus from './contract/manage-status.json';
import manageStatusFailed from './contract/manage-status-failed.json';
import runtimeDoctor from './contract/runtime-doctor.json';
import runtimeFitCPU from './contract/runtime-fit-cpu.json';
import runtimeFitCUDA from './contract/runtime-fit-cuda.json';
import runtimeFitMetal from './contract/runtime-fit-metal.json';

/**
 * A runtime check of a value of type V. The phantom _v makes Check<V>
 * invariant in V, so a spec whose checks disagree with the interface's field
 * types (a number checked as a string, a missing "| null") does not compile.
 */
type Check<V> = { (v: unknown, at: string): string[]; readonly _v?: (x: V) => V; readonly optional?: never };
type Optional<V> = { (v: unknown, at: string): string[]; readonly _v?: (x: V) => V; readonly optional: true };

/** A spec names every key of T with a check of its type; optional keys (and only they) take opt(). */
type Spec<T> = {
  [K in keyof T]-?: object extends Pick<T, K> ? Optional<Exclude<T[K], undefined>> : Check<T[K]>;
};

function kind<V>(name: 'string' | 'number' | 'boolean'): Check<V> {
  return (v, at) => (typeof v === name ? [] : [`${at}: ${JSON.stringify(v)} is not a ${name}`]);
}
const str = kind<string>('string');
const num = kind<number>('number');
const bool = kind<boolean>('boolean');

function oneOf<V extends string>(...values: V[]): Check<V> {
  return (v, at) => (values.includes(v as V) ? [] : [`${at}: ${JSON.stringify(v)} is not one of ${values.join(', ')}`]);
}

function nullable<V>(c: Check<V>): Check<V | null> {
  return (v, at) => (v === null ? [] : c(v, at));
}

function arr<V>(c: Check<V>): Check<V[]> {
  return (v, at) => (Array.isArray(v) ? v.flatMap((e, i) => c(e, `${at}[${i}]`)) : [`${at} is not an array`]);
}

/** An optional field: absent is fine; present, it must pass c. */
function opt<V>(c: Check<V>): Optional<V> {
  return Object.assign((v: unknown, at: string) => (v === undefined ? [] : c(v, at)), { optional: true as const });
}

type AnyCheck = ((v: unknown, at: string) => string[]) & { optional?: boolean };

function obj<T>(spec: Spec<T>): Check<T> {
  return (v, at) => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return [`${at} is not an object`];
    const o = v as Record<string, unknown>;
    return Object.entries(spec as Record<string, AnyCheck>).flatMap(([k, c]) =>
      !(k in o) && !c.optional ? [`${at}.${k} is missing`] : c(o[k], `${at}.${k}`),
    );
  };
}

/** The optional keys of a spec that a value lacks: a fixture meant to show every field must have them all. */
function absentOptional<T>(spec: Spec<T>, v: unknown): string[] {
  const o = v as Record<string, unknown>;
  return Object.entries(spec as Record<string, AnyCheck>)
    .filter(([k, c]) => c.optional && !(k in o))
    .map(([k]) => k);
}

const errorBody = obj<ErrorBody>({
  error: obj<ErrorBody['error']>({ message: str, type: opt(str), param: opt(nullable(str)), code: opt(nullable(str)) }),
});

const modelInfo: Spec<ModelInfo> = {
  id: str,
  object: oneOf('model'),
  owned_by: str,
  context_length: num,
  type: opt(oneOf('llm', 'vlm')),
  capabilities: opt(obj<NonNullable<ModelInfo['capabilities']>>({ vision: bool, trained_for_tool_use: bool })),
};
const modelList = obj<ModelList>({ object: oneOf('list'), data: arr(obj(modelInfo)) });

const usage = obj<Usage>({
  prompt_tokens: num,
  completion_tokens: num,
  total_tokens: num,
  prompt_tokens_details: opt(obj<NonNullable<Usage['prompt_tokens_details']>>({ cached_tokens: num })),
});

type Choice = ChatChunk['choices'][number];
const toolCallDelta = obj<ToolCallDelta>({
  index: num,
  id: opt(str),
  type: opt(oneOf('function')),
  function: opt(obj<NonNullable<ToolCallDelta['function']>>({ name: opt(str), arguments: opt(str) })),
});
const chatChunk = obj<ChatChunk>({
  id: str,
  object: oneOf('chat.completion.chunk'),
  created: num,
  model: str,
  choices: arr(
    obj<Choice>({
      index: num,
      delta: obj<Choice['delta']>({
        role: opt(oneOf('system', 'user', 'assistant', 'tool')),
        content: opt(str),
        reasoning_content: opt(str),
        reasoning: opt(str),
        tool_calls: opt(arr(toolCallDelta)),
      }),
      finish_reason: nullable(oneOf('stop', 'length', 'tool_calls')),
    }),
  ),
  usage: opt(nullable(usage)),
});

const statusModel: Spec<Status['model']> = {
  name: str,
  display_name: opt(str),
  demo: opt(bool),
  thinks: opt(bool),
  state: oneOf('absent', 'loading', 'ready', 'failed'),
  context_length: num,
  backend: str,
  dir: str,
  requests_running: opt(num),
  parallel: opt(num),
  error: opt(str),
};
const statusSpec: Spec<Status> = {
  model: obj(statusModel),
  endpoint: str,
  api_key_required: bool,
  downloads: bool,
  fit: bool,
  load: bool,
  doctor: opt(bool),
};

const downloadErrorSpec: Spec<DownloadError> = { code: str, message: str, detail: opt(str) };
const downloadRetrySpec: Spec<DownloadRetry> = {
  reason: str,
  message: str,
  detail: str,
  unreachable: bool,
  next_attempt_at: str,
  attempt: num,
  max_attempts: num,
};
const downloadSpec: Spec<DownloadStatus> = {
  state: oneOf('idle', 'running', 'paused', 'verifying', 'done', 'failed', 'cancelled'),
  repo: str,
  revision: str,
  dir: str,
  bytes_done: num,
  bytes_total: num,
  speed: num,
  eta_seconds: num,
  error: opt(obj(downloadErrorSpec)),
  retry: opt(obj(downloadRetrySpec)),
};

const settingsSpec: Spec<Settings> = {
  context_length: num,
  thinking: bool,
  preset: oneOf('thinking', 'coding', 'instruct'),
  port: num,
  expose: bool,
  access_token: str,
  api_key: str,
  allowed_origins: arr(str),
  start_at_login: bool,
  prefix_cache_dir: opt(str),
  prefix_cache_gb: opt(num),
  parallel: opt(num),
  speculative: opt(str),
};
function inForce<V>(value: Check<V>): Check<InForce<V>> {
  return obj<InForce<V>>({ value, source: oneOf('flag', 'settings', 'default') });
}
const inForceSpec: Spec<InForceSettings> = {
  context_length: opt(inForce(num)),
  port: opt(inForce(num)),
  expose: opt(inForce(bool)),
  api_key: opt(inForce(oneOf('set', 'not set'))),
  allowed_origins: opt(inForce(arr(str))),
  prefix_cache_dir: opt(inForce(str)),
  prefix_cache_gb: opt(inForce(num)),
  parallel: opt(inForce(num)),
  speculative: opt(inForce(str)),
};
const settingsReply = obj<SettingsReply>({
  settings: obj(settingsSpec),
  restart_required: arr(str),
  in_force: opt(obj(inForceSpec)),
  overridden_by_flag: opt(arr(str)),
});

const prefixCacheSpec: Spec<PrefixCacheStatus> = { enabled: bool, dir: opt(str), on: bool, budget_bytes: num, files: num, bytes: num };
const prefixCacheCleared: Spec<PrefixCacheCleared> = { removed_files: num, removed_bytes: num };

const doctorCheckSpec: Spec<DoctorCheck> = {
  section: oneOf('device', 'compile', 'kernel', 'model'),
  name: str,
  pass: bool,
  skipped: opt(bool),
  message: str,
  seconds: num,
  gb_per_s: opt(num),
  bandwidth_share: opt(num),
};
const doctorReport = obj<DoctorReport>({
  backend: str,
  device: str,
  os: str,
  arch: str,
  pass: bool,
  failed: num,
  skipped: opt(num),
  started: str,
  seconds: num,
  checks: arr(obj(doctorCheckSpec)),
});
const doctorReply = obj<DoctorReply>({ report: doctorReport, text: str });

const cpuDecodeSpec: Spec<CPUDecodeFigure> = { read_bytes_per_second: num, tokens_per_second: num, machine: str, measured: str, how: str };
const fitSpec: Spec<FitReport> = {
  verdict: oneOf('fits', 'reduced', 'no'),
  max_context: num,
  context: num,
  working_set_bytes: num,
  weights_bytes: num,
  kv_bytes_per_token: num,
  advice: str,
  working_set_source: str,
  model: opt(str),
  backend: opt(oneOf('metal', 'cpu', 'cuda')),
  decode_bytes_per_token: opt(num),
  cpu_decode: opt(obj(cpuDecodeSpec)),
  cpu_decode_error: opt(str),
  download_bytes: opt(num),
};

describe('the JSON the Go servers write matches the UI types', () => {
  it.each([
    ['api-error.json', apiError, errorBody],
    ['manage-error.json', manageError, errorBody],
    ['api-models.json', apiModels, modelList],
    ['manage-status.json', manageStatus, obj(statusSpec)],
    ['manage-status-failed.json', manageStatusFailed, obj(statusSpec)],
    ['manage-download-retrying.json', manageDownloadRetrying, obj(downloadSpec)],
    ['manage-download-idle.json', manageDownloadIdle, obj(downloadSpec)],
    ['manage-settings.json', manageSettings, settingsReply],
    ['manage-prefix-cache.json', managePrefixCache, obj(prefixCacheSpec)],
    ['manage-prefix-cache-cleared.json', managePrefixCacheCleared, obj(prefixCacheCleared)],
    ['runtime-doctor.json', runtimeDoctor, doctorReply],
    ['runtime-fit-metal.json', runtimeFitMetal, obj(fitSpec)],
    ['runtime-fit-cpu.json', runtimeFitCPU, obj(fitSpec)],
    ['runtime-fit-cuda.json', runtimeFitCUDA, obj(fitSpec)],
  ] as const)('%s', (name, fixture, check) => {
    expect(check(fixture, name)).toEqual([]);
  });

  it('api-chat-stream.json: every chunk, with the reply, the reasoning and the usage the chat store reads', () => {
    expect(apiChatStream.flatMap((c, i) => chatChunk(c, `chunk ${i}`))).toEqual([]);
    const chunks = apiChatStream as unknown as ChatChunk[];
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    const reasoning = chunks.map((c) => c.choices[0]?.delta.reasoning_content ?? '').join('');
    expect(text).toBe('Hello there.');
    expect(reasoning).toContain('Plan.');
    expect(chunks.at(-1)?.usage?.completion_tokens).toBeGreaterThan(0);
    expect(chunks.some((c) => c.choices[0]?.finish_reason === 'stop')).toBe(true);
  });

  it('the fixtures that show every field have every optional field', () => {
    const st = manageStatus as unknown as Status;
    // demo and thinks: the UI reads them once the server sends them, and goes by the display name until then.
    const unsent = ['demo', 'thinks'];
    expect(
      absentOptional(statusSpec, st).concat(absentOptional(statusModel, st.model).filter((k) => k !== 'error' && !unsent.includes(k))),
    ).toEqual([]);
    expect(
      absentOptional(statusModel, (manageStatusFailed as unknown as Status).model).filter((k) => k !== 'display_name' && !unsent.includes(k)),
    ).toEqual([]);
    const dl = manageDownloadRetrying as unknown as DownloadStatus;
    expect(absentOptional(downloadSpec, dl)).toEqual([]);
    expect(absentOptional(downloadErrorSpec, dl.error)).toEqual([]);
    const checks = (runtimeDoctor as unknown as DoctorReply).report.checks;
    // skipped is sent only where a check could not run (a GPU below Apple7); the simulator runs them all.
    expect(absentOptional(doctorCheckSpec, checks.find((c) => c.section === 'kernel')).filter((k) => k !== 'skipped')).toEqual([]);
    // cpu_decode_error stands in for cpu_decode when the measurement fails.
    expect(absentOptional(fitSpec, runtimeFitCPU).filter((k) => k !== 'cpu_decode_error')).toEqual([]);
    expect(runtimeFitMetal.backend).toBe('metal');
    expect('cpu_decode' in runtimeFitMetal).toBe(false);
    expect(runtimeFitCUDA.backend).toBe('cuda');
    expect('cpu_decode' in runtimeFitCUDA).toBe(false);
  });

  it('a spec refuses what the UI could not read', () => {
    expect(obj(statusSpec)({ ...manageStatus, model: { ...manageStatus.model, state: 'sleeping' } }, 's')).toEqual([
      's.model.state: "sleeping" is not one of absent, loading, ready, failed',
    ]);
    const { endpoint: _, ...noEndpoint } = manageStatus;
    expect(obj(statusSpec)(noEndpoint, 's')).toEqual(['s.endpoint is missing']);
    expect(obj(downloadSpec)({ ...manageDownloadIdle, bytes_done: '5' }, 'd')).toEqual(['d.bytes_done: "5" is not a number']);
  });
});
