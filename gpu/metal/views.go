package metal

import (
	"fmt"

	"petal/gpu"
)

// Metal makes no buffer longer than the device's maxBufferLength (about
// half the memory on some Macs), so a checkpoint shard longer than that is
// wrapped as several no-copy views. View k starts at k*step and is at most
// limit bytes long, limit rounded down to whole pages (a no-copy buffer
// starts on a page and spans whole pages). With step = limit - the
// largest tensor, rounded down to a page, a tensor starting at offset o
// lies wholly inside view o/step: it starts less than step into that view
// and is no longer than limit - step. So a binding resolves its offset to
// a view with one division, and nothing needs the tensor's length then.

// viewPlan is how a region of n bytes is wrapped: count views, view k from
// k*step, each at most length bytes.
type viewPlan struct {
	count, step, length int
}

// planViews plans the views of a region of n bytes for a device whose
// buffers hold at most limit bytes, on pages of page bytes. One view
// suffices when the region fits; else tensors says where the region's
// tensors lie, and the plan fails only when one of them cannot fit a
// view.
func planViews(n, limit, page int, tensors []gpu.Extent) (viewPlan, error) {
	length := limit / page * page
	padded := roundUp(n, page)
	if padded <= length {
		return viewPlan{count: 1, length: padded}, nil
	}
	if len(tensors) == 0 {
		return viewPlan{}, fmt.Errorf("%w: a %d-byte region is longer than this GPU's buffers (maxBufferLength %d bytes) and its tensors were not given (gpu.WrapTensors), so it cannot be split", gpu.ErrInvalid, n, limit)
	}
	var largest gpu.Extent
	for _, t := range tensors {
		if t.Offset < 0 || t.Len < 0 || t.Offset > n-t.Len {
			return viewPlan{}, fmt.Errorf("%w: tensor %s (%d bytes at %d) is outside its %d-byte region", gpu.ErrInvalid, t.Name, t.Len, t.Offset, n)
		}
		if t.Len > largest.Len {
			largest = t
		}
	}
	step := (length - largest.Len) / page * page
	if step <= 0 {
		return viewPlan{}, fmt.Errorf("%w: tensor %s is %d bytes, more than one buffer of this GPU holds: maxBufferLength is %d bytes, and a no-copy view spans whole %d-byte pages", gpu.ErrUnsupported, largest.Name, largest.Len, limit, page)
	}
	return viewPlan{count: (padded-length+step-1)/step + 1, step: step, length: length}, nil
}

// bounds is where view k starts and how long it is, in a region padded to
// padded bytes.
func (p viewPlan) bounds(k, padded int) (start, length int) {
	start = k * p.step
	return start, min(p.length, padded-start)
}

// resolve is the view holding offset and offset within it.
func (p viewPlan) resolve(offset int) (k, local int) {
	if p.count == 1 {
		return 0, offset
	}
	k = min(offset/p.step, p.count-1)
	return k, offset - k*p.step
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
