package api

import (
	"petal/engine/sample"
	"petal/internal/service"
)

// logprobsParams checks a request's logprobs switch and top_logprobs
// (0..sample.MaxTopLogprobs, only with logprobs, as OpenAI has it).
func logprobsParams(on bool, top *int) (bool, int, error) {
	if top == nil {
		return on, 0, nil
	}
	if *top < 0 || *top > sample.MaxTopLogprobs {
		return false, 0, badParam("top_logprobs", "top_logprobs %d must be in [0, %d]", *top, sample.MaxTopLogprobs)
	}
	if !on && *top > 0 {
		return false, 0, badParam("top_logprobs", "top_logprobs needs logprobs set to true")
	}
	return on, *top, nil
}

// byteList is b as JSON numbers, as OpenAI sends a token's bytes.
func byteList(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// chatLogprobsOf is a chat choice's logprobs: nil (null) unless asked.
func chatLogprobsOf(asked bool, lps []service.TokenLogprob) *chatLogprobs {
	if !asked {
		return nil
	}
	lp := &chatLogprobs{Content: make([]chatTokenLogprob, len(lps))}
	for i, t := range lps {
		c := chatTokenLogprob{Token: t.Token.Text, Logprob: t.Logprob, Bytes: byteList(t.Token.Bytes), TopLogprobs: make([]chatTopLogprob, len(t.Top))}
		for j, a := range t.Top {
			c.TopLogprobs[j] = chatTopLogprob{Token: a.Token.Text, Logprob: a.Logprob, Bytes: byteList(a.Token.Bytes)}
		}
		lp.Content[i] = c
	}
	return lp
}

// ollamaLogprobs is Ollama's logprobs list (0.12+): the chat entries'
// shape, at the top level of the response.
func ollamaLogprobs(asked bool, lps []service.TokenLogprob) []chatTokenLogprob {
	if lp := chatLogprobsOf(asked, lps); lp != nil {
		return lp.Content
	}
	return nil
}

// completionLogprobs is the legacy completions' logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// completionLogprobsOf is a completion choice's logprobs, nil unless
// asked; offsets count bytes of the choice's text from *offset on, which
// it moves past the tokens (a stream's next chunk goes on from there).
func completionLogprobsOf(asked bool, lps []service.TokenLogprob, offset *int) *completionLogprobs {
	if !asked {
		return nil
	}
	n := len(lps)
	lp := &completionLogprobs{Tokens: make([]string, n), TokenLogprobs: make([]float64, n), TopLogprobs: make([]map[string]float64, n), TextOffset: make([]int, n)}
	for i, t := range lps {
		lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i] = t.Token.Text, t.Logprob, *offset
		*offset += len(t.Token.Bytes)
		top := make(map[string]float64, len(t.Top))
		for _, a := range t.Top {
			if _, ok := top[a.Token.Text]; !ok {
				top[a.Token.Text] = a.Logprob
			}
		}
		lp.TopLogprobs[i] = top
	}
	return lp
}
