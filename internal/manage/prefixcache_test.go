package manage

import (
	"errors"
	"testing"
)

type fakePrefixCache struct {
	files int
	bytes int64
	err   error
}

func (c *fakePrefixCache) PrefixCacheStatus() PrefixCacheStatus {
	return PrefixCacheStatus{Enabled: true, Dir: "/cache/petal/prefix", On: true, BudgetBytes: 5e9, Files: c.files, Bytes: c.bytes}
}

func (c *fakePrefixCache) ClearPrefixCache() (int, int64, error) {
	if c.err != nil {
		return 0, 0, c.err
	}
	files, bytes := c.files, c.bytes
	c.files, c.bytes = 0, 0
	return files, bytes, nil
}

func TestPrefixCacheRoutes(t *testing.T) {
	c := &fakePrefixCache{files: 3, bytes: 1200}
	f := newFixture(t, func(o *Options) { o.PrefixCache = c })
	r := f.do(t, "GET", "/manage/prefix-cache", "", nil)
	if r.status != 200 || r.body["enabled"] != true || r.body["files"] != 3.0 || r.body["bytes"] != 1200.0 || r.body["budget_bytes"] != 5e9 || r.body["dir"] != "/cache/petal/prefix" {
		t.Errorf("status: %d %v", r.status, r.body)
	}
	if r := f.do(t, "POST", "/manage/prefix-cache/clear", "{}", nil); r.status != 200 || r.body["removed_files"] != 3.0 || r.body["removed_bytes"] != 1200.0 {
		t.Errorf("clear: %d %v", r.status, r.body)
	}
	if r := f.do(t, "GET", "/manage/prefix-cache", "", nil); r.body["files"] != 0.0 {
		t.Errorf("after clear: %v", r.body)
	}
	if r := f.do(t, "POST", "/manage/prefix-cache/clear", `{"all":true}`, nil); r.status != 400 || errCode(r) != "bad_json" {
		t.Errorf("unknown field: %d %s", r.status, errCode(r))
	}
	c.err = errors.New("remove /home/x/.cache/petal/prefix/a.pfx: permission denied")
	if r := f.do(t, "POST", "/manage/prefix-cache/clear", "{}", nil); r.status != 500 || errCode(r) != "clear_failed" {
		t.Errorf("failed clear: %d %v", r.status, r.body)
	}

	bare := newFixture(t, nil)
	if r := bare.do(t, "GET", "/manage/prefix-cache", "", nil); r.status != 200 || r.body["enabled"] != false {
		t.Errorf("no tier: %d %v", r.status, r.body)
	}
	if r := bare.do(t, "POST", "/manage/prefix-cache/clear", "{}", nil); r.status != 404 || errCode(r) != "not_available" {
		t.Errorf("no tier, clear: %d %s", r.status, errCode(r))
	}
}
