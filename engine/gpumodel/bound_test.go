package gpumodel

import (
	"testing"

	"petal/engine/checkpoint"
)

// Every command buffer of the 35B plan, prefill and decode, stays within
// the bound at the contexts a user reaches, up to the model's last
// position: the chunk that ends there and the last decode step.
func TestCommandBuffersBounded35B(t *testing.T) {
	cfg := checkpoint.Qwen36()
	for _, ctx := range []int{0, 32768, 131072, 262144} {
		pos := min(ctx, cfg.MaxPositions-defaultPrefillChunk)
		p, err := DryRunPrefill(cfg, pos, defaultPrefillChunk)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DryRun(cfg, min(ctx, cfg.MaxPositions-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("context %d: prefill chunk after %d in %d command buffers, the largest %+v, %.1f ms; decode %+v, %.1f ms",
			ctx, pos, p.CommandBuffers, p.MaxCommandBuffer, p.MaxCommandBuffer.M1Millis(), d.MaxCommandBuffer, d.MaxCommandBuffer.M1Millis())
		if ms := p.MaxCommandBuffer.M1Millis(); ms > maxCommandBufferMillis {
			t.Errorf("context %d: a prefill command buffer of %.0f ms on the M1, bound %v", ctx, ms, maxCommandBufferMillis)
		}
		if ms := d.MaxCommandBuffer.M1Millis(); ms > maxCommandBufferMillis {
			t.Errorf("context %d: a decode command buffer of %.0f ms on the M1, bound %v", ctx, ms, maxCommandBufferMillis)
		}
	}
}
