package api

import (
	"bufio"
	"fmt"
	"net/http"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"petal/engine"
	"petal/internal/service"
	"petal/internal/service/servicetest"
)

// benchReply is the scripted reply of the load benchmark: reasoning, then
// an answer, 200 tokens in all with the test tokenizer (one per byte).
var benchReply = "Let me see." + "</think>\n\n" + strings.Repeat("word ", 37)

// BenchmarkStreamingClients runs N concurrent streaming clients against the
// server over loopback TCP, on a scripted model that costs almost nothing,
// so what is measured is the server: queueing, template, tokenizer,
// sampler, detokenizer, parser, JSON and SSE. It reports the throughput,
// time to first token (p50, p99; queueing behind the other clients
// included), and the server's cost per token next to that of the bare
// engine loop (Forward and argmax) on the same model.
func BenchmarkStreamingClients(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			ts := newTestServer(b, service.Options{QueueLimit: n}, Options{}, constant(benchReply))
			var ttfts []time.Duration
			tokens := 0
			start := time.Now()
			for b.Loop() {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ttft, count, err := streamOnce(ts.URL, i)
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						ttfts = append(ttfts, ttft)
						tokens += count
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			elapsed := time.Since(start)
			slices.Sort(ttfts)
			b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tok/s")
			b.ReportMetric(float64(ttfts[len(ttfts)/2].Microseconds())/1000, "ttft-p50-ms")
			b.ReportMetric(float64(ttfts[len(ttfts)*99/100].Microseconds())/1000, "ttft-p99-ms")
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(tokens), "server-ns/tok")
			b.ReportMetric(bareLoopNsPerToken(b, ts), "bare-ns/tok")
		})
	}
}

// streamOnce streams one chat and returns the time to the first generated
// text and the number of completion tokens.
func streamOnce(url string, i int) (time.Duration, int, error) {
	body := fmt.Sprintf(`{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"client %d"}]}`, i)
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var ttft time.Duration
	count := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if ttft == 0 && (strings.Contains(line, `"reasoning_content"`) || strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`)) {
			ttft = time.Since(start)
		}
		if rest, ok := strings.CutPrefix(line, `data: {"id"`); ok && strings.Contains(rest, `"usage"`) {
			if _, err := fmt.Sscanf(rest[strings.Index(rest, `"completion_tokens":`):], `"completion_tokens":%d`, &count); err != nil {
				return 0, 0, err
			}
		}
	}
	if count == 0 || ttft == 0 {
		return 0, 0, fmt.Errorf("client %d: stream without tokens or usage", i)
	}
	return ttft, count, sc.Err()
}

// bareLoopNsPerToken times greedy decoding of the same reply straight on
// the scripted model, without the server.
func bareLoopNsPerToken(b *testing.B, ts *testServer) float64 {
	prompt, err := ts.svc.Tokens(b.Context(), &service.Request{Messages: nil, Prompt: new("<|im_start|>user\nclient 0<|im_end|>\n<|im_start|>assistant\n<think>\n")})
	if err != nil {
		b.Fatal(err)
	}
	const rounds = 200
	start := time.Now()
	tokens := 0
	for range rounds {
		seq, err := ts.model.NewSequence()
		if err != nil {
			b.Fatal(err)
		}
		out, err := engine.Greedy(b.Context(), seq, servicetest.Vocab, prompt, 1<<20, []int{servicetest.EndID})
		if err != nil {
			b.Fatal(err)
		}
		seq.Close()
		tokens += len(out)
	}
	return float64(time.Since(start).Nanoseconds()) / float64(tokens)
}

// BenchmarkOversizedRequests sends 8 concurrent chat requests of a 16 MB
// message each, which the context cannot hold, and reports the peak of the
// Go heap while they are answered (before the bound on pre-queue work, the
// same requests reached 5.9 GB of RSS; with json.Decoder reading each body
// into a buffer that doubles, 577-641 MB): each body is read as it arrives
// into one buffer of its size, only MaxDecoding are decoded at a time, only
// service.MaxPreparing are rendered at a time, and none is tokenized.
func BenchmarkOversizedRequests(b *testing.B) {
	const clients = 8
	ts := newTestServer(b, service.Options{}, Options{}, constant("hi"))
	body := `{"messages":[{"role":"user","content":"` + strings.Repeat("a", MaxBodyBytes-100) + `"}]}`
	var peak uint64
	for b.Loop() {
		runtime.GC()
		stop := make(chan struct{})
		sampled := make(chan uint64)
		go func() { sampled <- heapPeak(stop) }()
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				resp, err := http.DefaultClient.Do(post(b, ts.URL+"/v1/chat/completions", body))
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					b.Errorf("status %d, want 400 (context_length_exceeded)", resp.StatusCode)
				}
			})
		}
		wg.Wait()
		close(stop)
		peak = max(peak, <-sampled)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
}

// heapPeak samples the heap's live and unswept objects every millisecond
// until stop and returns the largest.
func heapPeak(stop <-chan struct{}) uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(s)
		peak = max(peak, s[0].Value.Uint64())
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
	}
}
