package gpu

import (
	"bytes"
	"testing"
)

// sliceBuffer is host memory as a Buffer.
type sliceBuffer struct{ b []byte }

func (s *sliceBuffer) Len() int         { return len(s.b) }
func (s *sliceBuffer) Contents() []byte { return s.b }
func (s *sliceBuffer) Release()         {}

// bufferDevice makes sliceBuffers and counts them.
type bufferDevice struct {
	Device
	made int
}

func (d *bufferDevice) NewBuffer(n int) (Buffer, error) {
	d.made++
	return &sliceBuffer{make([]byte, n)}, nil
}

// uploadDevice is a bufferDevice with an Upload of its own.
type uploadDevice struct {
	bufferDevice
	uploads int
}

func (d *uploadDevice) Upload(mem []byte) (Buffer, error) {
	d.uploads++
	return &sliceBuffer{bytes.Clone(mem)}, nil
}

// Upload copies into a new buffer where the device has no Upload (the copy
// does not follow later changes to mem), and leaves it to the device's own
// where there is one.
func TestUpload(t *testing.T) {
	mem := []byte("misaligned tensor bytes")[3:]
	want := bytes.Clone(mem)
	plain := &bufferDevice{}
	b, err := Upload(plain, mem)
	if err != nil {
		t.Fatal(err)
	}
	mem[0] ^= 0xff
	if !bytes.Equal(b.Contents(), want) || plain.made != 1 {
		t.Fatalf("fallback: contents %q (want %q), %d buffers made", b.Contents(), want, plain.made)
	}
	own := &uploadDevice{}
	if _, err := Upload(own, mem); err != nil {
		t.Fatal(err)
	}
	if own.uploads != 1 || own.made != 0 {
		t.Fatalf("with Upload: %d uploads, %d buffers made; want 1 and 0", own.uploads, own.made)
	}
}
