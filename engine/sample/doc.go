// Package sample picks the next token from a row of logits and decides when
// generation stops.
//
// # Sampling
//
// A [Sampler] applies, in this order (Hugging Face's order):
//  1. masking: ids at or above the tokenizer's size (the padding rows of the
//     embedding, 248077..248319 for Qwen3.6) are never picked;
//  2. repetition penalty, Hugging Face semantics: every distinct id of the
//     prompt and of the generated tokens has its logit divided by the
//     penalty if positive, multiplied by it if negative;
//  3. presence and frequency penalties, OpenAI semantics, over generated
//     tokens only: logit -= presence·[count > 0] + frequency·count;
//  4. temperature; 0 (below [GreedyBelow]) means greedy: argmax, lowest id
//     on ties;
//  5. top-k, then top-p (the smallest set of most likely tokens whose mass
//     reaches p, after top-k), then min-p (tokens at least min-p times as
//     likely as the most likely one);
//  6. a draw from what is left.
//
// Nothing sorts the vocabulary: top-k is a bounded heap over one pass, and
// top-p without top-k finds the bucket of a log-weight histogram where the
// mass reaches p, then sorts only the tokens above it, bucket by bucket.
// Per token on a 248320-wide row (BenchmarkNext, one shared core): greedy
// and the model card's top-k 20 take under a millisecond; top-p alone or no
// filter at all, which need every token's weight, take a few.
//
// # Reproducibility
//
// Draws come from a counter-based generator, Philox4x32-10 ([Draw]): the
// n-th token recorded in a generation (sampled, greedy or forced by
// [Sampler.Accept], counting from 0) uses the 64-bit word Draw(seed, n),
// turned into a uniform number u in [0, 1) from its top 53 bits, and picks
// the token where u·(total weight) falls in the cumulative weights of the
// tokens left, in id order. The GPU sampler (shaders/sample.metal) computes
// the same words from the seed and a counter it keeps on the GPU, so it
// needs no generator state from the host; it takes the top 24 bits in
// float32. The same seed, parameters and logits give the same tokens on
// every platform and every run.
//
// # Logprobs
//
// [Sampler.NextLogprobs] reports log probabilities from the log-softmax of
// the penalised logits over the ids the tokenizer produces, at temperature
// 1 and before top-k, top-p and min-p: what the model, with the request's
// penalties, thinks of each token, whatever the draw settings.
//
// # Stopping
//
// [Sampler.IsEOS] reports the end-of-sequence ids. A [Stopper] watches the
// decoded text for stop strings, which may span tokens: it never emits a
// stop string, holds back only the end of the text that could still become
// one, and stops at the stop string that completes first.
//
// # Defaults
//
// [ReadGenerationConfig] reads a checkpoint's generation_config.json and
// [Defaults] combines it with the model card's recommended settings
// ([Preset]).
package sample
