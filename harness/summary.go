package harness

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/grafana/sobek"

	"github.com/kvstrand/mocker/harness/metrics"
)

// groupTree records the groups and checks seen during the test for the
// summary's root_group.
type groupTree struct {
	mu    sync.Mutex
	root  *groupNode
	index map[string]*groupNode
}

type groupNode struct {
	name, path string
	groups     []*groupNode
	checks     []*checkNode
	checkIdx   map[string]*checkNode
}

type checkNode struct {
	name    string
	path    string
	counter checkCounter
}

func newGroupTree() *groupTree {
	root := &groupNode{checkIdx: map[string]*checkNode{}}
	return &groupTree{root: root, index: map[string]*groupNode{"": root}}
}

// group returns the node for a "::a::b" path, creating it and its parents.
func (g *groupTree) group(path string) *groupNode {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.groupLocked(path)
}

func (g *groupTree) groupLocked(path string) *groupNode {
	if n, ok := g.index[path]; ok {
		return n
	}
	cut := strings.LastIndex(path, "::")
	parent := g.groupLocked(path[:cut])
	n := &groupNode{name: path[cut+2:], path: path, checkIdx: map[string]*checkNode{}}
	parent.groups = append(parent.groups, n)
	g.index[path] = n
	return n
}

func (g *groupTree) check(groupPath, name string) *checkCounter {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.groupLocked(groupPath)
	c, ok := n.checkIdx[name]
	if !ok {
		c = &checkNode{name: name, path: groupPath + "::" + name}
		n.checkIdx[name] = c
		n.checks = append(n.checks, c)
	}
	return &c.counter
}

func pathID(path string) string {
	sum := md5.Sum([]byte(path))
	return hex.EncodeToString(sum[:])
}

// toMap renders the tree in k6's root_group shape.
func (g *groupTree) toMap() map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.root.toMap()
}

func (n *groupNode) toMap() map[string]any {
	groups := make([]any, 0, len(n.groups))
	for _, c := range n.groups {
		groups = append(groups, c.toMap())
	}
	checks := make([]any, 0, len(n.checks))
	for _, c := range n.checks {
		checks = append(checks, map[string]any{
			"name": c.name, "path": c.path, "id": pathID(c.path),
			"passes": c.counter.passes.Load(), "fails": c.counter.fails.Load(),
		})
	}
	return map[string]any{"name": n.name, "path": n.path, "id": pathID(n.path), "groups": groups, "checks": checks}
}

func (t *testRun) summaryOptions(d time.Duration) metrics.SummaryOptions {
	return metrics.SummaryOptions{
		TrendStats:      t.opts.SummaryTrendStats,
		TimeUnit:        t.opts.SummaryTimeUnit,
		TestRunDuration: d,
		NoColor:         t.cfg.NoColor,
		IsStdOutTTY:     t.cfg.StdoutTTY,
		IsStdErrTTY:     t.cfg.StderrTTY,
		RootGroup:       t.groups.toMap(),
	}
}

// writeSummary produces the end-of-test outputs: --summary-export, then
// handleSummary's files or the text summary followed by plugin sections.
func (t *testRun) writeSummary(v0 *vu, d time.Duration) error {
	opts := t.summaryOptions(d)
	data := t.coll.SummaryData(opts)
	if t.setupJSON != "" {
		var sd any
		if json.Unmarshal([]byte(t.setupJSON), &sd) == nil {
			data["setup_data"] = sd
		}
	}
	plugins := t.addSummaryData(data)
	t.observeSummaryData(data, t.logger.Error)
	if t.cfg.SummaryExport != "" {
		if err := writeLegacyExport(t.cfg.SummaryExport, data, plugins); err != nil {
			return exitErrorf(ExitInvalidConfig, "--summary-export %s: %v", t.cfg.SummaryExport, err)
		}
	}
	if fn, ok := v0.fns["handleSummary"]; ok {
		err := t.handleSummary(v0, fn, data)
		if err == nil {
			return nil
		}
		t.logger.Error("handleSummary failed; printing the default summary instead", "error", exceptionText(err))
	}
	opts.NoColor = opts.NoColor || !t.cfg.StdoutTTY // k6 colours only a terminal
	if err := metrics.WriteTextSummary(t.cfg.Stdout, data, opts); err != nil {
		return fmt.Errorf("writing the summary: %w", err)
	}
	for _, h := range summaryHooks() {
		h(t.cfg.Stdout)
	}
	for _, f := range t.summarySections() {
		f(t.cfg.Stdout)
	}
	return nil
}

// handleSummary calls the script's handleSummary and writes what it
// returned. Only an exception (or a result that is not an object) is an
// error, which makes the caller print the default summary; a key that
// cannot be written is logged and the other keys are still written, as k6
// does, without changing the exit code.
func (t *testRun) handleSummary(v0 *vu, fn sobek.Callable, data map[string]any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encoding summary data: %w", err)
	}
	ctx, cancel := contextWithTimeout(t, 2*time.Minute)
	defer cancel()
	release := v0.activate(ctx)
	defer release()
	arg, err := jsonParse(v0.rt, string(raw))
	if err != nil {
		return err
	}
	ret, err := v0.callValue(fn, arg)
	if err != nil {
		return err
	}
	if ret == nil || sobek.IsUndefined(ret) || sobek.IsNull(ret) {
		return nil
	}
	obj, ok := ret.(*sobek.Object)
	if !ok {
		return fmt.Errorf("handleSummary must return an object mapping stdout, stderr or file paths to contents, got %s", ret.String())
	}
	keys := obj.Keys()
	sort.Strings(keys)
	for _, k := range keys {
		val := obj.Get(k)
		var b []byte
		if ab, ok := val.Export().(sobek.ArrayBuffer); ok {
			b = ab.Bytes()
		} else {
			b = []byte(val.String())
		}
		var err error
		switch k {
		case "stdout":
			_, err = t.cfg.Stdout.Write(b)
		case "stderr":
			_, err = t.stderr.Write(b)
		default:
			err = os.WriteFile(k, b, 0o644)
		}
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is already in the message
			}
			t.logger.Error(fmt.Sprintf("could not save some summary information: %s: %v", k, err))
		}
	}
	return nil
}

// writeLegacyExport writes k6's --summary-export shape: metric values
// flattened into each metric, Rate's "rate" named "value", thresholds
// mapped to true when they FAILED, root_group's groups and checks as
// objects keyed by name rather than arrays; plus the plugins' keys.
func writeLegacyExport(path string, data, plugins map[string]any) error {
	out := map[string]any{"root_group": legacyGroup(data["root_group"])}
	if sd, ok := data["setup_data"]; ok {
		out["setup_data"] = sd
	}
	flat := map[string]any{}
	ms, _ := data["metrics"].(map[string]any)
	for name, m := range ms {
		mm, _ := m.(map[string]any)
		entry := map[string]any{}
		values, _ := mm["values"].(map[string]any)
		for k, v := range values {
			if mm["type"] == "rate" && k == "rate" {
				k = "value"
			}
			entry[k] = v
		}
		if ths, ok := mm["thresholds"].(map[string]any); ok {
			failed := map[string]any{}
			for src, r := range ths {
				okv := true
				if rm, isMap := r.(map[string]any); isMap {
					okv, _ = rm["ok"].(bool)
				}
				failed[src] = !okv
			}
			entry["thresholds"] = failed
		}
		flat[name] = entry
	}
	out["metrics"] = flat
	maps.Copy(out, plugins)
	b, err := json.MarshalIndent(out, "", "    ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// legacyGroup turns one root_group node (and its descendants) from the
// handleSummary shape, where groups and checks are arrays, into the
// --summary-export shape, where they are objects keyed by name.
func legacyGroup(g any) any {
	m, ok := g.(map[string]any)
	if !ok {
		return g
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	if groups, ok := m["groups"].([]any); ok {
		byName := make(map[string]any, len(groups))
		for _, sub := range groups {
			if sm, ok := sub.(map[string]any); ok {
				name, _ := sm["name"].(string)
				byName[name] = legacyGroup(sm)
			}
		}
		out["groups"] = byName
	}
	if checks, ok := m["checks"].([]any); ok {
		byName := make(map[string]any, len(checks))
		for _, c := range checks {
			if cm, ok := c.(map[string]any); ok {
				name, _ := cm["name"].(string)
				byName[name] = cm
			}
		}
		out["checks"] = byName
	}
	return out
}
