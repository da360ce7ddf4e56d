package engine

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"petal/engine/sample"
	"petal/engine/spec"
)

// PrefillPiece is how many prompt tokens go through the model between two
// cancellation checks. It matches the GPU backend's prefill chunk, so a
// piece is one command buffer there.
const PrefillPiece = 512

// MinPiece is the fewest tokens a piece of a prompt has, unless the
// stretch between two cut points (the prompt's ends and its Splits) is
// shorter: the CPU backend's products round a piece of fewer tokens in
// another order, so a prompt cut anywhere else would give other logits,
// and a reply would depend on how its prompt was cut (by the requests
// running beside it).
const MinPiece = 4

// pieceEnd is where the piece of a prompt from fed ends, toward the next
// cut point end, taking at most max tokens when it can without leaving a
// piece of fewer than MinPiece tokens on either side; fed when it cannot
// (the piece waits for a larger max).
func pieceEnd(fed, end, max int) int {
	n := end - fed
	switch {
	case n <= max:
		return end
	case max < MinPiece:
		return fed
	case n-max >= MinPiece:
		return fed + max
	case n-MinPiece >= MinPiece:
		return end - MinPiece
	}
	return end
}

// Picker picks each next token on the host from a step's logits: the CPU
// sampler for sampled requests.
type Picker interface {
	Next(logits []float32) (int, error)
}

// Constraint limits each pick to the ids a grammar allows after the ids
// picked before. The mask is a bitset (bit id%64 of word id/64 set: id
// allowed) that the CPU backend applies to its logits and a GPU backend
// uploads into its sampler's mask (31 KB at 248k ids, never the logits).
type Constraint interface {
	// Allowed fills mask, vocab bits, with the ids the next pick may take;
	// false means no constraint for this pick (mask untouched).
	Allowed(mask []uint64) bool
	// Advance follows the id picked, after Token took it without stopping.
	Advance(id int) error
}

// Decode is one generation on a sequence: a prompt fed to it, then tokens
// picked one by one.
type Decode struct {
	// Prompt is appended to what the sequence holds; at least one token.
	Prompt []int
	// MaxTokens bounds the tokens picked; at least one.
	MaxTokens int
	// Picker, when set, picks every token from logits brought to the host
	// (unless Sampling lets the device draw). Nil, and no Sampling, picks
	// the most likely id below Limit on the backend's device: the GPU
	// writes it into the next step's input and keeps a second step in
	// flight, and no logits are read back.
	Picker Picker
	// Sampling, when set, is a sampled request's settings for a backend
	// that draws on its device (then it ignores Picker, reads no logits
	// back and keeps two steps in flight); a backend that cannot uses
	// Picker, which must be set too.
	Sampling *Sampling
	// Limit bounds the ids picked on the device (the ids the tokenizer can
	// produce); 0 means the whole vocabulary.
	Limit int
	// Splits, ascending, are points inside the prompt (0 < n < len(Prompt))
	// where AtSplit sees the sequence holding the prompt up to n (the prefix
	// cache takes snapshots there); points outside are ignored.
	Splits  []int
	AtSplit func(n int, seq Sequence)
	// Token receives every picked token in order, as soon as the host has
	// it (on the GPU the step after it is already submitted); stop ends
	// the generation after it and the step in flight is discarded. An
	// error ends it too and Run returns it.
	Token func(id int) (stop bool, err error)
	// Logprobs, when set, receives each picked token's log probability
	// and its TopLogprobs (0..sample.MaxTopLogprobs) most likely
	// alternatives, just before Token gets the id: a device reads back
	// only those (sample.Sampler.NextLogprobs's definition), never the
	// logits. It needs Sampling on a device that draws, else a Picker that
	// is a LogprobPicker.
	Logprobs    func(sample.Logprobs)
	TopLogprobs int
	// Constraint, when set, masks every pick; it needs a Picker (the
	// device's argmax takes no mask, its sampler does).
	Constraint Constraint
	// Speculate says whether the host loop drafts with the model's head
	// (engine.Drafter) and verifies the drafts: spec.Off runs as without a
	// head. A device loop ignores it.
	Speculate spec.Mode
	// SpecMemory, when set, carries the speculative policy's measures
	// between the decodes of one model (spec.Memory).
	SpecMemory *spec.Memory
	// Yield, when set, is asked by a device loop (Decoder) before it
	// commits each next step: true makes the loop end after the token in
	// flight, which it hands to Token and leaves unfed (and, under a
	// Constraint, not yet followed by Advance), as if MaxTokens ended
	// there; so a batched scheduler takes the sequence back when another
	// request arrives.
	Yield func() bool
}

// LogprobPicker is a Picker that also reports the logprobs of its pick.
type LogprobPicker interface {
	Picker
	NextLogprobs(logits []float32, top int) (int, sample.Logprobs, error)
}

// Sampling is what a device needs to draw as the CPU sampler does.
type Sampling struct {
	// Params are the request's settings, Seed set.
	Params sample.Params
	// Prompt is every prompt id the penalties count, cached ones included.
	Prompt []int
	// Bias is the request's logit bias, added before the penalties as
	// sample.Sampler.SetLogitBias does.
	Bias sample.LogitBias
}

// DecodeStats is what one Run did.
type DecodeStats struct {
	// Tokens is how many tokens were picked.
	Tokens int
	// LogitsReadBytes counts logits copied from device memory to the host.
	LogitsReadBytes int64
	// HostTime is the time the host spent preparing decode steps: encoding
	// and submitting them on the GPU, computing them on the CPU backend
	// (for a step picked on the host from a device's logits, its whole
	// Forward, the wait included).
	HostTime time.Duration
	// Drafted counts the drafts verified, Accepted those that stood
	// (speculative decoding: each verify step yields Accepted/Drafted + 1
	// tokens on average).
	Drafted, Accepted int
}

// Decoder is a sequence that runs the decode loop on its own device (the
// GPU backend): it feeds tail, the last piece of the prompt, and picks
// tokens on the device, with the argmax when d has neither Picker nor
// Sampling, else with the sampler. Run checks d first, and runs the host
// loop on it for a request picked on the host (a Picker alone).
type Decoder interface {
	Decode(ctx context.Context, tail []int, d *Decode) (DecodeStats, error)
}

// DecodePath says how a model's sequences decode, for the server's log.
func DecodePath(m Model) string {
	if p, ok := m.(interface{ DecodePath() string }); ok {
		return p.DecodePath()
	}
	return "host loop: each step computed on the CPU, the next token picked from its logits"
}

// Run is the decode loop every caller shares (the service, petal generate,
// petal bench, petal chat, the app): it feeds d.Prompt in pieces of
// PrefillPiece tokens, checking ctx between them, then picks tokens until
// Token says stop, MaxTokens were picked or ctx ends (with its cause).
// Afterwards seq holds the prompt and the fed tokens: every picked token
// but possibly the last (Len says how many).
func Run(ctx context.Context, seq Sequence, vocab int, d *Decode) (DecodeStats, error) {
	if err := d.check(vocab); err != nil {
		return DecodeStats{}, err
	}
	var st DecodeStats
	// Drafting is set before the prompt, so the head sees all of it.
	dr, drafting := speculates(seq, d)
	pos := 0
	splits := d.Splits
	for {
		for len(splits) > 0 && splits[0] <= pos {
			splits = splits[1:]
		}
		cut := len(d.Prompt)
		if len(splits) > 0 && splits[0] < cut {
			cut = splits[0]
		}
		end := pieceEnd(pos, cut, PrefillPiece)
		if end == len(d.Prompt) {
			break
		}
		if ctx.Err() != nil {
			return st, context.Cause(ctx)
		}
		if err := seq.Forward(d.Prompt[pos:end], nil); err != nil {
			return st, fmt.Errorf("engine: prefill: %w", err)
		}
		pos = end
		if len(splits) > 0 && pos == splits[0] && d.AtSplit != nil {
			d.AtSplit(pos, seq)
		}
	}
	if ctx.Err() != nil {
		return st, context.Cause(ctx)
	}
	dec, onDevice := seq.(Decoder)
	if onDevice && (d.Picker == nil || d.Sampling != nil) {
		return dec.Decode(ctx, d.Prompt[pos:], d)
	}
	if drafting {
		return specDecode(ctx, dr, vocab, d.Prompt[pos:], d)
	}
	return hostDecode(ctx, seq, vocab, d.Prompt[pos:], d, onDevice)
}

// hostDecode is the loop that picks on the host: each step's logits are in
// host memory already on the CPU backend, or copied there from a device's
// (onDevice), and counted.
func hostDecode(ctx context.Context, seq Sequence, vocab int, tail []int, d *Decode, onDevice bool) (DecodeStats, error) {
	var st DecodeStats
	read := int64(0)
	if onDevice {
		read = int64(4 * vocab)
	}
	logits := make([]float32, vocab)
	p := newPicker(d, vocab)
	if err := seq.Forward(tail, logits); err != nil {
		return st, fmt.Errorf("engine: prefill: %w", err)
	}
	st.LogitsReadBytes += read
	one := make([]int, 1)
	for {
		id, err := p.pick(logits)
		if err != nil {
			return st, err
		}
		st.Tokens++
		stop, err := d.Token(id)
		if err != nil || stop || st.Tokens == d.MaxTokens {
			return st, err
		}
		if d.Constraint != nil {
			if err := d.Constraint.Advance(id); err != nil {
				return st, err
			}
		}
		if ctx.Err() != nil {
			return st, context.Cause(ctx)
		}
		one[0] = id
		start := time.Now()
		err = seq.Forward(one, logits)
		st.HostTime += time.Since(start)
		if err != nil {
			return st, fmt.Errorf("engine: decoding: %w", err)
		}
		st.LogitsReadBytes += read
	}
}

// MaskLogits sets to -Inf the logits whose bit in allowed (a Constraint's
// mask) is clear, visiting only those.
func MaskLogits(logits []float32, allowed []uint64) {
	inf := float32(math.Inf(-1))
	for w, a := range allowed {
		lo := 64 * w
		if lo >= len(logits) {
			return
		}
		row := logits[lo:min(lo+64, len(logits))]
		for banned := ^a; banned != 0; banned &= banned - 1 {
			if i := bits.TrailingZeros64(banned); i < len(row) {
				row[i] = inf
			}
		}
	}
}

// Greedy runs the decode loop with the most likely token each step until
// maxTokens or a token in eos (kept in the result), and returns the
// tokens.
func Greedy(ctx context.Context, seq Sequence, vocab int, prompt []int, maxTokens int, eos []int) ([]int, error) {
	var out []int
	_, err := Run(ctx, seq, vocab, &Decode{
		Prompt: prompt, MaxTokens: maxTokens,
		Token: func(id int) (bool, error) {
			out = append(out, id)
			return slices.Contains(eos, id), nil
		},
	})
	return out, err
}
