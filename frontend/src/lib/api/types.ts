// Types of the HTTP APIs the UI talks to: the OpenAI-compatible /v1 routes
// (internal/api) and the same-origin management routes under /manage
// (internal/manage). Field names are the wire names.

/** The error body every Petal route answers with. */
export interface ErrorBody {
  error: { message: string; type?: string; param?: string | null; code?: string | null };
}

// ---- /v1 ----

export type Role = 'system' | 'user' | 'assistant' | 'tool';

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A part of a message's content: text, or an image as a data: URL (the server fetches no other). */
export type ContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export interface ChatMessage {
  role: Role;
  content: string | ContentPart[];
  reasoning_content?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  stream: true;
  stream_options: { include_usage: boolean };
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  presence_penalty?: number;
  chat_template_kwargs?: { enable_thinking?: boolean };
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function?: { name?: string; arguments?: string };
}

export interface ChatChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: {
    index: number;
    delta: {
      role?: Role;
      content?: string;
      reasoning_content?: string;
      reasoning?: string;
      tool_calls?: ToolCallDelta[];
    };
    finish_reason: FinishReason | null;
  }[];
  /** null on every chunk but the last when the request asked for usage (as OpenAI sends it). */
  usage?: Usage | null;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export interface ModelInfo {
  id: string;
  object: 'model';
  owned_by: string;
  context_length: number;
  /** LM Studio's word: "vlm" for a model that reads images, "llm" for one that reads text only; older servers leave it out. */
  type?: 'llm' | 'vlm';
  /** What the model can do, as LM Studio says it; vision is false for a text-only model. Older servers leave it out. */
  capabilities?: { vision: boolean; trained_for_tool_use: boolean };
}

export interface ModelList {
  object: 'list';
  data: ModelInfo[];
}

// ---- /manage ----

/** What the loaded model is doing. */
export type ModelState = 'absent' | 'loading' | 'ready' | 'failed';

export interface Status {
  model: {
    /** The id API clients send. */
    name: string;
    /** What people are shown ("Demo model"); older servers leave it out. */
    display_name?: string;
    /** Whether this is the built-in demo model; older servers leave it out (the UI then goes by display_name). */
    demo?: boolean;
    /** Whether the model can think before answering; older servers leave it out (the UI then takes the demo as the one that never does). */
    thinks?: boolean;
    state: ModelState;
    context_length: number;
    backend: string;
    dir: string;
    /** Requests running on the model now; older servers leave it out. */
    requests_running?: number;
    /** How many requests may decode together (0 while none is served); older servers leave it out. */
    parallel?: number;
    error?: string;
  };
  /** The OpenAI base URL clients should use, e.g. http://127.0.0.1:8080/v1. */
  endpoint: string;
  api_key_required: boolean;
  /** Whether a download manager is wired in (the Setup screen needs it). */
  downloads: boolean;
  /** Whether a memory-fit estimator is wired in. */
  fit: boolean;
  /** Whether the server can load a downloaded model without a restart. */
  load: boolean;
  /** Whether the server can run petal doctor's checks (older servers lack the field). */
  doctor?: boolean;
}

/** The prefix cache's tier on disk (GET /manage/prefix-cache): snapshots of prompts already read, kept across restarts. */
export interface PrefixCacheStatus {
  /** False when the server runs without one; the other fields are then zero. */
  enabled: boolean;
  dir?: string;
  /** False once a full disk turned the tier off until Petal starts again. */
  on: boolean;
  budget_bytes: number;
  files: number;
  bytes: number;
}

/** What POST /manage/prefix-cache/clear removed. */
export interface PrefixCacheCleared {
  removed_files: number;
  removed_bytes: number;
}

/** One line of petal doctor's report. */
export interface DoctorCheck {
  section: 'device' | 'compile' | 'kernel' | 'model';
  name: string;
  pass: boolean;
  /** A check that could not run on this machine (a GPU below Apple7, a virtual machine's); message says why. Older servers leave it out. */
  skipped?: boolean;
  /** What was measured on a pass; the exact compiler or runtime message on a failure; the reason on a skip. */
  message: string;
  seconds: number;
  gb_per_s?: number;
  bandwidth_share?: number;
}

export interface DoctorReport {
  backend: string;
  device: string;
  os: string;
  arch: string;
  /** True when none failed and at least one ran. */
  pass: boolean;
  failed: number;
  /** How many checks were skipped; left out when none were (and by older servers). */
  skipped?: number;
  /** When the run started (RFC 3339). */
  started: string;
  seconds: number;
  checks: DoctorCheck[];
}

/** The answer of POST /manage/doctor: the checks, and the text petal doctor prints. */
export interface DoctorReply {
  report: DoctorReport;
  text: string;
}

export type Verdict = 'fits' | 'reduced' | 'no';

export interface FitReport {
  verdict: Verdict;
  max_context: number;
  context: number;
  working_set_bytes: number;
  weights_bytes: number;
  kv_bytes_per_token: number;
  /** Plain sentences petal fit prints; the Setup screen words its own verdict from the figures. */
  advice: string;
  /** Where the budget came from (Metal's working set, available memory, a simulated Mac). */
  working_set_source: string;
  /** The model the verdict is for. */
  model?: string;
  /** What would run the model on this machine: the NVIDIA GPU a cuda server runs on, Metal on an Apple silicon Mac, the CPU backend elsewhere. */
  backend?: 'metal' | 'cpu' | 'cuda';
  /** Bytes one decode step reads at this context (petal bench --dry-run's count). */
  decode_bytes_per_token?: number;
  /** The CPU backend's rate at this model's shape, measured on this machine; sent where backend is cpu. */
  cpu_decode?: CPUDecodeFigure;
  /** Why there is no cpu_decode where backend is cpu: the measurement failed. */
  cpu_decode_error?: string;
  /** About what a download of the model fetches. */
  download_bytes?: number;
}

export interface CPUDecodeFigure {
  read_bytes_per_second: number;
  /** read_bytes_per_second over decode_bytes_per_token: the most a decode bound by weight reads reaches. */
  tokens_per_second: number;
  /** The CPU measured and the cores used. */
  machine: string;
  /** When (RFC 3339). */
  measured: string;
  /** What was timed, and where the figure is kept. */
  how: string;
}

export type DownloadState = 'idle' | 'running' | 'paused' | 'verifying' | 'done' | 'failed' | 'cancelled';

export interface DownloadStatus {
  state: DownloadState;
  repo: string;
  revision: string;
  /** The folder the model is downloaded into. */
  dir: string;
  bytes_done: number;
  bytes_total: number;
  /** Bytes per second over the last few seconds. */
  speed: number;
  /** Seconds left at the current speed; 0 when unknown. */
  eta_seconds: number;
  /** The last failure; while state is running it is the attempt that failed and will be retried. */
  error?: DownloadError;
  /** While a running download retries a connection: why, and when the next attempt starts. */
  retry?: DownloadRetry;
}

/** Mirrors manage.DownloadRetry. */
export interface DownloadRetry {
  /** dns, no_route, refused, tls, timeout, server or network. */
  reason: string;
  /** Words for the user. */
  message: string;
  /** The underlying error, for a disclosure. */
  detail: string;
  /** The Hub was not reached at all. */
  unreachable: boolean;
  /** When attempt `attempt` starts (RFC 3339). */
  next_attempt_at: string;
  attempt: number;
  max_attempts: number;
}

export interface DownloadError {
  code: string;
  /** Words for the user. */
  message: string;
  /** The underlying error as the server saw it, for a disclosure; servers that send only message leave it out. */
  detail?: string;
}

export type DownloadAction = 'start' | 'pause' | 'resume' | 'cancel' | 'verify' | 'delete';

export type SamplingPreset = 'thinking' | 'coding' | 'instruct';

export interface Settings {
  context_length: number;
  thinking: boolean;
  preset: SamplingPreset;
  port: number;
  expose: boolean;
  access_token: string;
  api_key: string;
  allowed_origins: string[];
  start_at_login: boolean;
  prefix_cache_dir?: string;
  prefix_cache_gb?: number;
  /** Requests decoded together: 0 for auto (as many as the memory fits, at most 4), 1 to 8; older servers leave it out. */
  parallel?: number;
  /** Drafting with the model's MTP head: 'auto' (also '' or absent), 'off' or 'on'; older servers leave it out. */
  speculative?: string;
}

/** Where a value the server runs with came from. */
export type SettingSource = 'flag' | 'settings' | 'default';

/** A value the server runs with now, and where it came from. */
export interface InForce<T> {
  value: T;
  source: SettingSource;
}

/** The settings the running server applies, each with its source. */
export interface InForceSettings {
  context_length?: InForce<number>;
  port?: InForce<number>;
  expose?: InForce<boolean>;
  /** Whether a key is required; the key itself is never sent back in this form. */
  api_key?: InForce<'set' | 'not set'>;
  allowed_origins?: InForce<string[]>;
  /** The prefix cache's folder on disk; "" for the default one. */
  prefix_cache_dir?: InForce<string>;
  /** The disk tier's budget in GB: -1 for auto (10% of the free disk, at most 20 GB), 0 for off. */
  prefix_cache_gb?: InForce<number>;
  /** Requests decoded together: 0 for auto (the memory fit's count), else the number asked. */
  parallel?: InForce<number>;
  /** Drafting with the model's MTP head: 'auto', 'off' or 'on'. */
  speculative?: InForce<string>;
}

/** The server-side settings' names, as restart_required and overridden_by_flag list them. */
export type ServerSetting = keyof InForceSettings;

export interface SettingsReply {
  settings: Settings;
  /** Saved settings whose value differs from the one in force (and no flag pins): they apply at the next start. */
  restart_required: string[];
  /** What the server runs with now; older servers leave it out. */
  in_force?: InForceSettings;
  /** Saved settings a command-line flag overrides; older servers leave it out. */
  overridden_by_flag?: string[];
}
