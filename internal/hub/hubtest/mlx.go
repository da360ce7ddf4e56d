package hubtest

import (
	"testing"

	"petal/engine/checkpoint/checkpointtest"
)

// MLXLayout copies the checkpoint folder src to a new folder with every
// shard written as MLX's mx.save_safetensors lays it out (see
// [checkpointtest.RewriteMLX]: no header padding, tensors back to back in
// an order other than the header's, a 3-byte tensor in the first shard,
// whose data section starts at dataMod modulo 16), for a fake Hub to
// serve.
func MLXLayout(t testing.TB, src string, dataMod int) string {
	t.Helper()
	dst := t.TempDir()
	if err := checkpointtest.RewriteMLX(src, dst, dataMod); err != nil {
		t.Fatal(err)
	}
	return dst
}
