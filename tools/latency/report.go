package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// report is what the tool measured; -json prints it as is.
type report struct {
	URL               string         `json:"url"`
	ShortTokens       int            `json:"short_max_tokens"`
	StreamTokens      int            `json:"stream_max_tokens"`
	AgentPromptTokens int            `json:"agent_prompt_tokens"`
	EOSBias           map[string]int `json:"eos_logit_bias"`
	Alone             []outcome      `json:"alone"`
	BehindStream      behindCase     `json:"behind_stream"`
	BehindAgent       behindCase     `json:"behind_agent"`
	BehindBoth        behindCase     `json:"behind_both"`
	Burst             burstCase      `json:"burst"`
}

// behindCase is a short request sent behind long ones (the stream first
// when both), and those.
type behindCase struct {
	Short outcome   `json:"short"`
	Long  []outcome `json:"long"`
}

// burstCase is short requests fired together during a stream.
type burstCase struct {
	Sent   int       `json:"sent"`
	Short  []outcome `json:"short"`
	Stream outcome   `json:"stream"`
}

// tally counts a burst's outcomes: answered (200), refused with 429, and
// anything else; and the answered ones' times, sorted.
func (b burstCase) tally() (answered, refused, other int, secs []float64) {
	for _, o := range b.Short {
		switch o.Status {
		case http.StatusOK:
			answered++
			secs = append(secs, o.Secs)
		case http.StatusTooManyRequests:
			refused++
		default:
			other++
		}
	}
	slices.Sort(secs)
	return answered, refused, other, secs
}

// duration writes seconds as the table does: milliseconds under a
// second, else seconds to a tenth.
func duration(secs float64) string {
	if secs < 1 {
		return fmt.Sprintf("%.0f ms", secs*1000)
	}
	return fmt.Sprintf("%.1f s", secs)
}

// span writes the range of secs (sorted), one value when all round alike.
func span(secs []float64) string {
	if len(secs) == 0 {
		return "none"
	}
	lo, hi := duration(secs[0]), duration(secs[len(secs)-1])
	if lo == hi {
		return lo
	}
	if strings.HasSuffix(lo, " ms") == strings.HasSuffix(hi, " ms") {
		return strings.TrimSuffix(strings.TrimSuffix(lo, " ms"), " s") + "-" + hi
	}
	return lo + " to " + hi
}

// shortCell is a short request's cell: its time, or why it has none.
func shortCell(o outcome) string {
	if o.Status != http.StatusOK {
		return "failed: " + o.describe()
	}
	return duration(o.Secs)
}

// longCell says what a long request did.
func longCell(what string, o outcome) string {
	if o.Status != http.StatusOK || o.Err != "" {
		return what + " failed: " + o.describe()
	}
	cached := ""
	if o.CachedTokens > 0 {
		cached = fmt.Sprintf(" (%d from the prefix cache)", o.CachedTokens)
	}
	return fmt.Sprintf("%s: %d prompt%s + %d reply tokens in %s", what, o.PromptTokens, cached, o.CompletionTokens, duration(o.Secs))
}

// thousands writes n (not negative) with commas, as the table does.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// writeTable writes the table with the figures of r, and what the
// long requests did beside.
func writeTable(w io.Writer, r *report) {
	alone := make([]float64, len(r.Alone))
	for i, o := range r.Alone {
		alone[i] = o.Secs
	}
	slices.Sort(alone)
	streamWhat := fmt.Sprintf("a streamed reply of %s tokens", thousands(r.StreamTokens))
	agentWhat := fmt.Sprintf("an agent prompt of %s tokens", thousands(r.AgentPromptTokens))
	fmt.Fprintf(w, "| what ran | the short request (a %d-token `/v1/completions`) | the long requests |\n|---|---|---|\n", r.ShortTokens)
	runs := "runs"
	if len(alone) == 1 {
		runs = "run"
	}
	fmt.Fprintf(w, "| alone | %s (%d %s) | |\n", span(alone), len(alone), runs)
	fmt.Fprintf(w, "| behind %s | %s | %s |\n", streamWhat, shortCell(r.BehindStream.Short), longCells(r.BehindStream.Long, "stream"))
	fmt.Fprintf(w, "| behind %s | %s | %s |\n", agentWhat, shortCell(r.BehindAgent.Short), longCells(r.BehindAgent.Long, "agent"))
	fmt.Fprintf(w, "| behind both | %s | %s |\n", shortCell(r.BehindBoth.Short), longCells(r.BehindBoth.Long, "stream", "agent"))
	answered, refused, other, secs := r.Burst.tally()
	cell := fmt.Sprintf("%d answered after %s, %d refused with 429", answered, span(secs), refused)
	if other > 0 {
		cell += fmt.Sprintf(", %d failed otherwise", other)
	}
	fmt.Fprintf(w, "| %d short requests during one stream | %s | %s |\n", r.Burst.Sent, cell, longCell("stream", r.Burst.Stream))
}

// longCells names each long request's cell by what, in order.
func longCells(long []outcome, what ...string) string {
	var cells []string
	for i, o := range long {
		cells = append(cells, longCell(what[i], o))
	}
	return strings.Join(cells, "; ")
}
