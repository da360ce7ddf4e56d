package gpumodel

import (
	"path/filepath"
	"testing"

	"petal/gpu"
	"petal/gpu/record"
)

// extents is a recording device that, like the Metal driver, asks where a
// shard's tensors lie before wrapping it.
type extents struct {
	*record.Device
	told [][]gpu.Extent
}

func (e *extents) WrapNoCopyTensors(mem []byte, tensors []gpu.Extent) (gpu.Buffer, error) {
	e.told = append(e.told, tensors)
	return e.Device.WrapNoCopy(mem)
}

// TestLoadTellsTheDriverWhereTensorsLie: without the extents a driver
// limited by maxBufferLength cannot split a long shard into views, and
// refuses it.
func TestLoadTellsTheDriverWhereTensorsLie(t *testing.T) {
	dev := &extents{Device: record.New()}
	m, err := Open(filepath.Join(fixturesDir, "tiny-a"), dev)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(dev.told) != len(m.ckpt.Shards) {
		t.Fatalf("driver told of %d shards' tensors, the model has %d shards", len(dev.told), len(m.ckpt.Shards))
	}
	for i, s := range m.ckpt.Shards {
		ts := s.Tensors()
		if len(dev.told[i]) != len(ts) {
			t.Fatalf("shard %d: told of %d tensors, it holds %d", i, len(dev.told[i]), len(ts))
		}
		for j, e := range dev.told[i] {
			if e.Name != ts[j].Name || e.Offset != int(ts[j].Offset) || e.Len != len(ts[j].Data) || e.Offset+e.Len > len(s.Data) {
				t.Errorf("shard %d tensor %d: told %+v, it is %s at %d, %d bytes", i, j, e, ts[j].Name, ts[j].Offset, len(ts[j].Data))
			}
		}
	}
}
