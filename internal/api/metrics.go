package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"petal/internal/service"
)

// metrics writes the service's counters in the Prometheus text format.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	m := s.svc.Metrics()
	var b strings.Builder
	metric := func(name, kind, help string, value float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, kind, name, num(value))
	}
	metric("petal_requests_completed_total", "counter", "Generations that finished.", float64(m.Completed))
	metric("petal_requests_failed_total", "counter", "Generations that failed or were cancelled.", float64(m.Failed))
	metric("petal_requests_rejected_total", "counter", "Requests refused because the queue was full.", float64(m.Rejected))
	metric("petal_queue_depth", "gauge", "Requests waiting for the model.", float64(m.Waiting))
	metric("petal_requests_running", "gauge", "Requests holding the model.", float64(m.Running))
	metric("petal_parallel", "gauge", "Requests that may decode together (--parallel, or what the memory fit left room for).", float64(m.Parallel))
	metric("petal_batch_size", "gauge", "Replies decoded together in the latest batched step.", float64(m.Batch))
	metric("petal_batch_steps_total", "counter", "Batched steps run (none while requests run one at a time).", float64(m.Steps))
	metric("petal_batch_rows_total", "counter", "Sequences' rows in the batched steps: decoded replies and prompt pieces.", float64(m.StepRows))
	metric("petal_prompt_tokens_total", "counter", "Prompt tokens of finished prefills.", float64(m.PromptTokens))
	metric("petal_prompt_cached_tokens_total", "counter", "Prompt tokens served from the prefix cache.", float64(m.CachedTokens))
	metric("petal_completion_tokens_total", "counter", "Generated tokens.", float64(m.CompletionTokens))
	metric("petal_decode_seconds_total", "counter", "Time spent generating tokens.", m.DecodeSeconds)
	metric("petal_decode_tokens_per_second", "gauge", "Decode speed of the latest generation.", m.LastTokensPerSecond)
	metric("petal_logits_readback_bytes_total", "counter", "Logits copied from the device to the host; unchanged while requests decode on the device.", float64(m.LogitsReadbackBytes))
	metric("petal_decode_host_seconds_total", "counter", "Host time spent preparing decode steps: encoding and submitting them on a GPU, computing them on the CPU backend.", m.DecodeHostSeconds)
	metric("petal_spec_drafted_total", "counter", "Tokens the model's MTP head drafted and a verify step checked.", float64(m.SpecDrafted))
	metric("petal_spec_accepted_total", "counter", "Drafted tokens that the verify step kept.", float64(m.SpecAccepted))
	tokensPerStep := 1.0
	if m.SpecDrafted > 0 {
		tokensPerStep += float64(m.SpecAccepted) / float64(m.SpecDrafted)
	}
	metric("petal_spec_tokens_per_step", "gauge", "Tokens a verify step yielded on average (1 plus the drafts' acceptance); 1 before any draft.", tokensPerStep)
	metric("petal_prefix_cache_entries", "gauge", "Sequences held by the prefix cache.", float64(m.CacheEntries))
	metric("petal_prefix_cache_bytes", "gauge", "Memory held by the prefix cache.", float64(m.CacheBytes))
	metric("petal_prefix_cache_memory_hits_total", "counter", "Requests whose prompt start came from the prefix cache's memory tier.", float64(m.CacheMemoryHits))
	metric("petal_prefix_cache_disk_hits_total", "counter", "Requests whose prompt start came from the prefix cache's disk tier.", float64(m.CacheDiskHits))
	if d := m.Disk; d != nil {
		on := 0.0
		if d.On {
			on = 1
		}
		metric("petal_prefix_disk_load_seconds_total", "counter", "Time spent finding and loading snapshots from the disk tier, over the hits.", d.LoadSeconds)
		metric("petal_prefix_disk_loaded_tokens_total", "counter", "Prompt tokens restored from the disk tier.", float64(d.HitTokens))
		metric("petal_prefix_disk_misses_total", "counter", "Disk tier lookups that found no snapshot.", float64(d.Misses))
		metric("petal_prefix_disk_writes_total", "counter", "Snapshots written to the disk tier.", float64(d.Writes))
		metric("petal_prefix_disk_dropped_total", "counter", "Snapshots dropped because the write queue was full.", float64(d.Dropped))
		metric("petal_prefix_disk_rejected_total", "counter", "Snapshot files deleted as damaged, foreign or of an older format.", float64(d.Rejected))
		metric("petal_prefix_disk_files", "gauge", "Snapshot files in the disk tier's folder.", float64(d.Files))
		metric("petal_prefix_disk_bytes", "gauge", "Bytes in the disk tier's folder.", float64(d.Bytes))
		metric("petal_prefix_disk_on", "gauge", "1 while the disk tier takes snapshots, 0 once a full disk turned it off.", on)
	}
	const wait = "petal_queue_wait_seconds"
	fmt.Fprintf(&b, "# HELP %s Time requests that got the model waited for it in the queue.\n# TYPE %s summary\n%s_sum %s\n%s_count %d\n",
		wait, wait, wait, num(m.QueueWaitSeconds), wait, m.QueueWaits)
	const ttft = "petal_time_to_first_token_seconds"
	fmt.Fprintf(&b, "# HELP %s Time from request to first token, queueing included.\n# TYPE %s histogram\n", ttft, ttft)
	for i, le := range service.TTFTBuckets {
		fmt.Fprintf(&b, "%s_bucket{le=\"%s\"} %d\n", ttft, num(le), m.TTFTCumulative[i])
	}
	fmt.Fprintf(&b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n", ttft, m.TTFTCount, ttft, num(m.TTFTSum), ttft, m.TTFTCount)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String())) // a failed write means the scraper left
	return nil
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
