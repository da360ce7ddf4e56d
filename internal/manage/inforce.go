package manage

import (
	"net"
	"slices"
	"strconv"

	"petal/internal/httpgate"
)

// Where a server setting in force came from.
const (
	SourceFlag     = "flag"     // petal serve's command line (or $PETAL_API_KEY)
	SourceSettings = "settings" // the settings file, as the Settings screen saved it
	SourceDefault  = "default"  // neither: the built-in default
)

// The server settings, by their JSON names: the ones a server applies at
// start and reports in force.
const (
	FieldContextLength  = "context_length"
	FieldPort           = "port"
	FieldExpose         = "expose"
	FieldAPIKey         = "api_key"
	FieldAllowedOrigins = "allowed_origins"
	FieldPrefixCacheDir = "prefix_cache_dir"
	FieldPrefixCacheGB  = "prefix_cache_gb"
	FieldParallel       = "parallel"
	FieldSpeculative    = "speculative"
)

// Words in force for a key, which is never sent back.
const (
	keySet    = "set"
	keyNotSet = "not set"
)

// InForce is one server setting as the running server applies it: its
// value (for a key only whether one is required) and where it came from.
type InForce struct {
	Value  any    `json:"value"`
	Source string `json:"source"`
}

// Overrides are the server settings given on petal serve's command line;
// a nil field was not given and leaves the saved setting in force.
type Overrides struct {
	// Addr is host:port; it sets the port, and whether the server is
	// exposed (a host that is not loopback).
	Addr *string
	// APIKey is the key every caller must send ("" for none).
	APIKey         *string
	AllowedOrigins *[]string
	ContextLength  *int
	// PrefixCacheDir and PrefixCacheGB are the prefix cache's disk tier,
	// as in Settings.
	PrefixCacheDir *string
	PrefixCacheGB  *float64
	// Parallel is how many requests decode together, as in Settings.
	Parallel *int
	// Speculative is "auto", "off" or "on", as in Settings.
	Speculative *string
}

// Applied is how a server starts: saved settings with the command line's
// overrides laid over them.
type Applied struct {
	// Addr is where to listen: loopback unless exposed.
	Addr string
	// APIKey is the one key every caller must send, "" for none: the API
	// key, else, on an exposed server, the access token.
	APIKey         string
	AllowedOrigins []string
	ContextLength  int
	// PrefixCacheDir ("" for the default folder) and PrefixCacheGB
	// (AutoPrefixCacheGB, 0 for off) are where the disk tier keeps its
	// snapshots and how much disk they may take.
	PrefixCacheDir string
	PrefixCacheGB  float64
	// Parallel is how many requests decode together: AutoParallel leaves
	// it to the memory-fit check.
	Parallel int
	// Speculative is "auto", "off" or "on" (Settings.Speculative).
	Speculative string
	// running is what was applied in Settings' terms, and the values
	// restart_required compares the saved ones with.
	running Settings
	inForce map[string]InForce
	// pinned are the fields a flag sets, in the order of serverFields.
	pinned []string
}

// serverFields are the settings a server applies at start, in the order
// the Settings screen shows them.
var serverFields = []string{FieldContextLength, FieldPort, FieldExpose, FieldAPIKey, FieldAllowedOrigins, FieldPrefixCacheDir, FieldPrefixCacheGB, FieldParallel, FieldSpeculative}

// Hosts a server listens on: loopback alone, or every interface when the
// settings expose it.
const (
	loopbackHost = "127.0.0.1"
	exposedHost  = "0.0.0.0"
)

// Apply lays o over the saved settings and records the result as the
// settings in force, which the settings routes then report (in_force,
// overridden_by_flag) and compare the saved ones with (restart_required).
// It is called once, when the server starts.
func (st *SettingsStore) Apply(o Overrides) (Applied, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	saved := st.cur
	src := func(field string) string {
		if st.inFile[field] {
			return SourceSettings
		}
		return SourceDefault
	}
	run := saved
	a := Applied{inForce: map[string]InForce{}}
	sources := map[string]string{}
	for _, f := range serverFields {
		sources[f] = src(f)
	}
	pin := func(fields ...string) {
		for _, f := range fields {
			sources[f] = SourceFlag
		}
	}

	if o.ContextLength != nil {
		run.ContextLength = *o.ContextLength
		pin(FieldContextLength)
	}
	host := loopbackHost
	if saved.Expose {
		host = exposedHost
	}
	a.Addr = net.JoinHostPort(host, strconv.Itoa(saved.Port))
	if o.Addr != nil {
		a.Addr = *o.Addr
		h, port, err := net.SplitHostPort(a.Addr)
		if err != nil {
			return Applied{}, err
		}
		// Port 0 asks the listener for any free port: the routes then
		// report the one it took (Options.Running's).
		run.Port, _ = strconv.Atoi(port)
		run.Expose = !httpgate.LoopbackHost(h)
		pin(FieldPort, FieldExpose)
	}
	a.APIKey = saved.APIKey
	switch {
	case o.APIKey != nil:
		run.APIKey, a.APIKey = *o.APIKey, *o.APIKey
		pin(FieldAPIKey)
	case saved.APIKey == "" && run.Expose && saved.AccessToken != "":
		// Other machines need the access token; as in the desktop app,
		// the server takes it as its one key.
		a.APIKey = saved.AccessToken
		sources[FieldAPIKey] = src("access_token")
	}
	a.AllowedOrigins = slices.Clone(saved.AllowedOrigins)
	if o.AllowedOrigins != nil {
		a.AllowedOrigins = slices.Clone(*o.AllowedOrigins)
		pin(FieldAllowedOrigins)
	}
	if a.AllowedOrigins == nil {
		a.AllowedOrigins = []string{}
	}
	run.AllowedOrigins = slices.Clone(a.AllowedOrigins)
	a.ContextLength = run.ContextLength
	if o.PrefixCacheDir != nil {
		run.PrefixCacheDir = *o.PrefixCacheDir
		pin(FieldPrefixCacheDir)
	}
	if o.PrefixCacheGB != nil {
		run.PrefixCacheGB = *o.PrefixCacheGB
		pin(FieldPrefixCacheGB)
	}
	a.PrefixCacheDir, a.PrefixCacheGB = run.PrefixCacheDir, run.PrefixCacheGB
	if o.Parallel != nil {
		run.Parallel = *o.Parallel
		pin(FieldParallel)
	}
	a.Parallel = run.Parallel
	if o.Speculative != nil {
		run.Speculative = *o.Speculative
		pin(FieldSpeculative)
	}
	run.Speculative = SpeculativeMode(run.Speculative)
	a.Speculative = run.Speculative

	key := keyNotSet
	if a.APIKey != "" {
		key = keySet
	}
	values := map[string]any{
		FieldContextLength:  run.ContextLength,
		FieldPort:           run.Port,
		FieldExpose:         run.Expose,
		FieldAPIKey:         key,
		FieldAllowedOrigins: run.AllowedOrigins,
		FieldPrefixCacheDir: run.PrefixCacheDir,
		FieldPrefixCacheGB:  run.PrefixCacheGB,
		FieldParallel:       run.Parallel,
		FieldSpeculative:    run.Speculative,
	}
	for _, f := range serverFields {
		a.inForce[f] = InForce{Value: values[f], Source: sources[f]}
		if sources[f] == SourceFlag {
			a.pinned = append(a.pinned, f)
		}
	}
	a.running = run
	st.applied = &a
	return a, nil
}

// FromSettings lists the server settings, by their JSON names, whose
// value in force came from the settings file.
func (a Applied) FromSettings() []string {
	var out []string
	for _, f := range serverFields {
		if a.inForce[f].Source == SourceSettings {
			out = append(out, f)
		}
	}
	return out
}

// state is what the settings routes answer besides the saved settings:
// what is in force, what waits for a restart and what a flag pins.
// running are the values the server says it applied (from its listener,
// so the port it took for port 0); a store no server applied (the desktop
// app lays no flags over it) is reported from them alone, with the saved
// file as their source.
func (st *SettingsStore) state(running Settings) (inForce map[string]InForce, restart, pinned []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	inForce = map[string]InForce{}
	pinned = []string{}
	if a := st.applied; a != nil {
		port := running.Port
		running = a.running
		running.Port = port
		for f, e := range a.inForce {
			inForce[f] = e
		}
		inForce[FieldPort] = InForce{Value: port, Source: inForce[FieldPort].Source}
		pinned = append(pinned, a.pinned...)
	} else {
		key := keyNotSet
		if oneKey(running) != "" {
			key = keySet
		}
		if running.AllowedOrigins == nil {
			running.AllowedOrigins = []string{}
		}
		values := map[string]any{FieldContextLength: running.ContextLength, FieldPort: running.Port, FieldExpose: running.Expose,
			FieldAPIKey: key, FieldAllowedOrigins: running.AllowedOrigins,
			FieldPrefixCacheDir: running.PrefixCacheDir, FieldPrefixCacheGB: running.PrefixCacheGB, FieldParallel: running.Parallel,
			FieldSpeculative: SpeculativeMode(running.Speculative)}
		for _, f := range serverFields {
			source := SourceDefault
			if st.inFile[f] {
				source = SourceSettings
			}
			inForce[f] = InForce{Value: values[f], Source: source}
		}
	}
	// A pinned field keeps its flag's value at the next start too, as far
	// as the saved settings go: only the others can wait for a restart.
	next := st.cur
	for _, f := range pinned {
		switch f {
		case FieldContextLength:
			next.ContextLength = running.ContextLength
		case FieldPort:
			next.Port = running.Port
		case FieldExpose:
			next.Expose = running.Expose
		case FieldAPIKey:
			next.APIKey = running.APIKey
		case FieldAllowedOrigins:
			next.AllowedOrigins = running.AllowedOrigins
		case FieldPrefixCacheDir:
			next.PrefixCacheDir = running.PrefixCacheDir
		case FieldPrefixCacheGB:
			next.PrefixCacheGB = running.PrefixCacheGB
		case FieldParallel:
			next.Parallel = running.Parallel
		case FieldSpeculative:
			next.Speculative = running.Speculative
		}
	}
	return inForce, restartFields(running, next), pinned
}
