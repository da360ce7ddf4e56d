// The model card's sampling presets for Qwen3.6 (MODEL.md, "Sampling defaults").

import type { SamplingPreset } from './api/types';

export interface Sampling {
  temperature: number;
  top_p: number;
  top_k: number;
  presence_penalty: number;
}

export const PRESETS: Record<SamplingPreset, { label: string; sampling: Sampling }> = {
  thinking: { label: 'Thinking (general)', sampling: { temperature: 1.0, top_p: 0.95, top_k: 20, presence_penalty: 1.5 } },
  coding: { label: 'Precise coding', sampling: { temperature: 0.6, top_p: 0.95, top_k: 20, presence_penalty: 0 } },
  instruct: { label: 'No thinking (instruct)', sampling: { temperature: 0.7, top_p: 0.8, top_k: 20, presence_penalty: 1.5 } },
};
