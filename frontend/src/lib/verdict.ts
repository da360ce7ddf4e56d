// The Model screen's one verdict on the 35B model: whether it fits this
// machine's memory and, where the CPU backend would run it, whether it is
// fast enough to chat with, said once, so that the screen never shows a
// green "fits" above a red "too slow".

import type { FitReport, Verdict } from './api/types';
import { formatBytes, formatTokens } from './format';

/** Decode rates below this many tokens per second are too slow to chat with. */
export const USABLE_TOKENS_PER_S = 5;

export interface SetupVerdict {
  /** The colour: fits green, reduced amber, no red. */
  level: Verdict;
  headline: string;
  /** Sentences that say why. */
  detail: string;
  /** Whether downloading is what the screen recommends; when not, Download is offered "anyway", not as the main button. */
  recommendDownload: boolean;
}

/** A tokens-per-second figure as the screen rounds it: two decimals below 1, one above. */
export function formatRate(tps: number): string {
  return tps < 1 ? tps.toFixed(2) : tps.toFixed(1);
}

/** What would run the model here, for people. */
function runner(fit: FitReport): string {
  switch (fit.backend) {
    case 'metal':
      return 'this Mac’s GPU';
    case 'cuda':
      return 'this machine’s NVIDIA GPU';
    case 'cpu':
      return 'the CPU (no supported GPU here)';
    default:
      return 'this machine';
  }
}

/** The memory the verdict measured against, as the budget's kind of memory. */
export function memoryLabel(fit: FitReport): string {
  switch (fit.backend) {
    case 'metal':
      return 'GPU memory Petal may use';
    case 'cuda':
      return 'GPU memory';
    default:
      return 'Memory available';
  }
}

/** The need against the memory, in the screen's one unit (decimal GB, as the download's size). */
function memorySentence(fit: FitReport): string {
  const need = fit.weights_bytes + fit.kv_bytes_per_token * fit.context;
  return `The weights and ${formatTokens(fit.context)} tokens of context need about ${formatBytes(need)} of the ${formatBytes(fit.working_set_bytes)} available.`;
}

export function setupVerdict(fit: FitReport): SetupVerdict {
  if (fit.verdict === 'no') {
    return {
      level: 'no',
      headline: 'Does not fit this machine',
      detail: `Even a short context needs more than the ${formatBytes(fit.working_set_bytes)} of memory available here (the weights alone are ${formatBytes(fit.weights_bytes)}).`,
      recommendDownload: false,
    };
  }
  const context =
    fit.verdict === 'reduced' ? ` at up to ${formatTokens(fit.max_context)} tokens of context` : '';
  if (fit.backend === 'cpu') {
    const cpu = fit.cpu_decode;
    if (!cpu) {
      return {
        level: 'reduced',
        headline: `Fits in memory${context}; its speed on this CPU is not known`,
        detail: `It would run on ${runner(fit)}. ${memorySentence(fit)} This machine’s CPU speed could not be measured${fit.cpu_decode_error ? ` (${fit.cpu_decode_error})` : ''}, so the screen cannot say how fast it would answer.`,
        recommendDownload: true,
      };
    }
    const rate = formatRate(cpu.tokens_per_second);
    const why = `Each token reads ${formatBytes(fit.decode_bytes_per_token ?? 0)} of weights and cache, and this machine’s CPU (${cpu.machine}) read weights at ${formatBytes(cpu.read_bytes_per_second)}/s: about ${rate} tokens per second at most.`;
    if (cpu.tokens_per_second < USABLE_TOKENS_PER_S) {
      return {
        level: 'no',
        headline: `Too slow to chat with here: about ${rate} tokens per second`,
        detail: `It fits in memory${context}, but it would run on ${runner(fit)}. ${why} A Mac with Apple silicon, or an NVIDIA GPU, runs it many times faster.`,
        recommendDownload: false,
      };
    }
    return {
      level: fit.verdict,
      headline: `Runs here on the CPU at about ${rate} tokens per second${context}`,
      detail: `${memorySentence(fit)} ${why}`,
      recommendDownload: true,
    };
  }
  return {
    level: fit.verdict,
    headline: fit.verdict === 'fits' ? `Fits this machine, with up to ${formatTokens(fit.max_context)} tokens of context` : `Fits${context}`,
    detail: `It would run on ${runner(fit)}. ${memorySentence(fit)}`,
    recommendDownload: true,
  };
}
