package checkpoint_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"petal/engine/checkpoint"
	"petal/engine/checkpoint/checkpointtest"
	"petal/engine/safetensors"
)

// writeMTP writes the tiny checkpoint and a head for it, mutated by mutate
// when set.
func writeMTP(t *testing.T, mutate func([]safetensors.NewTensor) []safetensors.NewTensor) string {
	t.Helper()
	o := checkpointtest.Tiny()
	dir := write(t, o)
	o.Mutate = mutate
	if err := checkpointtest.WriteMTP(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenMTP(t *testing.T) {
	m, err := checkpoint.Open(write(t, checkpointtest.Tiny()))
	if err != nil {
		t.Fatal(err)
	}
	if m.MTP != nil {
		t.Error("a folder without model-mtp.safetensors has a head")
	}
	m.Close()

	m, err = checkpoint.Open(writeMTP(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w, c := m.MTP, m.Config
	if w == nil {
		t.Fatal("no head bound")
	}
	if w.FC.Rows != c.Hidden || w.FC.Cols != 2*c.Hidden || w.FC.Bits != 4 {
		t.Errorf("fc %dx%d %d-bit", w.FC.Rows, w.FC.Cols, w.FC.Bits)
	}
	if w.Layer.Attn == nil || w.Layer.Kind != checkpoint.Attention || w.Layer.Delta != nil {
		t.Error("the head's layer is not a full-attention layer")
	}
	if r := w.Layer.MoE.Router; r.Bits != 8 || r.Experts != 0 || w.Layer.MoE.SharedExpertGate.Bits != 8 || w.Layer.MoE.Gate.Experts != c.Experts {
		t.Errorf("router %d-bit, shared gate %d-bit, experts %d", r.Bits, w.Layer.MoE.SharedExpertGate.Bits, w.Layer.MoE.Gate.Experts)
	}
	if !strings.Contains(w.Layer.Attn.Q.Name, "mtp.layers.0.self_attn.q_proj") {
		t.Errorf("q bound to %q", w.Layer.Attn.Q.Name)
	}
}

func TestOpenMTPDamaged(t *testing.T) {
	drop := func(name string) func([]safetensors.NewTensor) []safetensors.NewTensor {
		return func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			var out []safetensors.NewTensor
			for _, x := range ts {
				if !strings.HasSuffix(x.Name, name) {
					out = append(out, x)
				}
			}
			return out
		}
	}
	cases := []struct {
		name   string
		mutate func([]safetensors.NewTensor) []safetensors.NewTensor
		want   string
	}{
		{"missing", drop("mtp.layers.0.self_attn.k_proj.scales"), "mtp.layers.0.self_attn.k_proj.scales"},
		{"missing norm", drop("mtp.norm.weight"), "language_model.mtp.norm.weight"},
		{"foreign", func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			x := ts[0]
			x.Name = "language_model.model.layers.0.input_layernorm.weight"
			return append(ts, x)
		}, "not part of the MTP head"},
		{"second layer", func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			x := ts[0]
			x.Name = "language_model.mtp.layers.1.input_layernorm.weight"
			return append(ts, x)
		}, "mtp.layers.1.input_layernorm.weight"},
		{"shape", func(ts []safetensors.NewTensor) []safetensors.NewTensor {
			for i := range ts {
				if strings.HasSuffix(ts[i].Name, "mtp.fc.scales") {
					ts[i].Shape = []int{ts[i].Shape[0] * 2, ts[i].Shape[1] / 2}
				}
			}
			return ts
		}, "mtp.fc.scales"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkpoint.Open(writeMTP(t, tc.mutate))
			if !errors.Is(err, checkpoint.ErrBadModel) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), checkpoint.MTPFile) {
				t.Fatalf("err %v, want ErrBadModel naming %q and the file", err, tc.want)
			}
		})
	}
	t.Run("truncated", func(t *testing.T) {
		dir := writeMTP(t, nil)
		p := filepath.Join(dir, checkpoint.MTPFile)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		_, err = checkpoint.Open(dir)
		if !errors.Is(err, checkpoint.ErrBadModel) || !strings.Contains(err.Error(), checkpoint.MTPFile) {
			t.Fatalf("err %v, want ErrBadModel naming the file", err)
		}
	})
}
