package gpumodel

import (
	"testing"

	"petal/engine/checkpoint"
)

// The 35B shape's batched decode step, counted without weights: one
// command buffer within the bound; its levels do not depend on the rows
// beside one another, only its per-row ops do; the weights
// are read once for all rows, so the bytes moved per token fall as rows
// are added.
func TestDryRunStep35B(t *testing.T) {
	cfg := checkpoint.Qwen36()
	const pos = 4096
	const maxRows = 8 // the batch sizes petal bench --dry-run reports
	// A row's own ops: an attention layer's prep, decode parts and
	// merge, a DeltaNet layer's step and conv shift.
	perRow := 0
	for _, k := range cfg.Layers {
		perRow += map[checkpoint.LayerKind]int{checkpoint.Attention: 3, checkpoint.DeltaNet: 2}[k]
	}
	var prev BatchReport
	for rows := 1; rows <= maxRows; rows++ {
		r, err := DryRunStep(cfg, pos, rows)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d rows at %d: %d command buffers, %d dispatches, %d levels, %d weight bytes, %d cache bytes, %.1f ms on the M1, %.0f tok/s at 4.8 TB/s",
			rows, pos, r.CommandBuffers, r.Dispatches, r.Levels, r.WeightBytes, r.CacheBytes, r.MaxCommandBuffer.M1Millis(), r.TokensPerSecond(4.8e12))
		if r.CommandBuffers != 1 || r.MaxCommandBuffer.M1Millis() > maxCommandBufferMillis {
			t.Errorf("%d rows: %d command buffers, the largest %.0f ms on the M1", rows, r.CommandBuffers, r.MaxCommandBuffer.M1Millis())
		}
		if r.CacheBytes != int64(rows)*DecodeCacheBytes(cfg, pos) {
			t.Errorf("%d rows: cache bytes %d", rows, r.CacheBytes)
		}
		if rows > 2 {
			// One pass of the multi-row products: each row adds its own
			// attention and DeltaNet ops and reads the shared weights no
			// more.
			if d := r.Dispatches - prev.Dispatches; d != perRow || r.Levels != prev.Levels {
				t.Errorf("%d rows: %d more dispatches than %d rows (want %d), %d levels (%d)", rows, d, rows-1, perRow, r.Levels, prev.Levels)
			}
			if r.TokensPerSecond(1) <= prev.TokensPerSecond(1) {
				t.Errorf("%d rows move %d bytes, %d rows %d: no fewer per token", rows, r.BytesMoved(), rows-1, prev.BytesMoved())
			}
		}
		prev = r
	}
	for _, bad := range []int{0, DefaultPrefillChunk + 1} {
		if _, err := DryRunStep(cfg, pos, bad); err == nil {
			t.Errorf("a step of %d rows was accepted", bad)
		}
	}
	if _, err := DryRunStep(cfg, -1, 2); err == nil {
		t.Error("a step at position -1 was accepted")
	}
}
