//go:build unix

// Package rwinspecttest is the scenario of `fencedlock inspect` and
// `fencedlock list` on read-write locks, run by the CLI's tests against
// each server (redis-server in cmd/fencedlock, etcd in its etcdtest
// module).
package rwinspecttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/clitest"
)

// Lease is one lease of a read-write lock in the JSON of inspect and list.
type Lease struct {
	Holder string `json:"holder"`
	Fence  uint64 `json:"fence"`
	TTLms  int64  `json:"ttl_ms"`
}

// RW is a read-write lock in the JSON of inspect and list.
type RW struct {
	Key            string  `json:"key"`
	Kind           string  `json:"kind"`
	Held           bool    `json:"held"`
	Mode           string  `json:"mode"`
	Writer         *Lease  `json:"writer"`
	Readers        []Lease `json:"readers"`
	WritersWaiting int     `json:"writers_waiting"`
	Fence          uint64  `json:"fence"`
}

// Inspected is the JSON of inspect KEY.
type Inspected struct {
	Key  string `json:"key"`
	Held bool   `json:"held"`
	Kind string `json:"kind"`
	RW   *RW    `json:"rwlock"`
}

// Setup is the server a scenario runs against.
type Setup struct {
	Bin *clitest.Bin
	Env []string // names the server
	// Secrets, if not nil, returns the owner tokens the server holds for
	// the read-write lock KEY now: none may appear in any output.
	Secrets func(t *testing.T, key string) []string
	// KeepsFence: the server keeps the last fence of a free read-write
	// lock (Redis), so inspect still finds it once free.
	KeepsFence bool
}

const timeout = 30 * time.Second

// holder is a `run --read` or `run --write` of key whose command writes
// its fence and holder id to a file, then waits for its go file.
type holder struct {
	proc       *clitest.Proc
	file, goOn string
}

func start(t *testing.T, s Setup, mode, key, dir, name string) holder {
	h := holder{file: filepath.Join(dir, name), goOn: filepath.Join(dir, name+".go")}
	h.proc = s.Bin.Start(t, s.Env, "run", mode, "--ttl", "30s", key, "--", "/bin/sh", "-c",
		`echo "$FENCEDLOCK_FENCE $FENCEDLOCK_HOLDER" > `+h.file+`.tmp; mv `+h.file+`.tmp `+h.file+
			`; i=0; while [ ! -e `+h.goOn+` ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done`)
	return h
}

// lease waits for h's command to write its fence and holder id.
func (h holder) lease(t *testing.T) Lease {
	t.Helper()
	f := strings.Fields(clitest.WaitFile(t, h.file, timeout))
	if len(f) != 2 {
		t.Fatalf("the command wrote %q, want its fence and holder id", f)
	}
	var l Lease
	if err := json.Unmarshal([]byte(f[0]), &l.Fence); err != nil {
		t.Fatal(err)
	}
	l.Holder = f[1]
	return l
}

// end lets h's command end and waits for run to exit 0.
func (h holder) end(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(h.goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := h.proc.Wait(timeout); code != 0 {
		t.Errorf("run: exit %d; stderr:\n%s", code, h.proc.Stderr)
	}
}

// Run: two `run --read` holders of a read-write lock and a `run --write`
// waiting for it, then the writer holding it, each as inspect (text and
// JSON) and list (text and JSON) show it; then free.
func Run(t *testing.T, s Setup, key string) {
	c := &scenario{t: t, s: s, key: key}
	dir := t.TempDir()
	r1, r2 := start(t, s, "--read", key, dir, "r1"), start(t, s, "--read", key, dir, "r2")
	l1, l2 := r1.lease(t), r2.lease(t)
	if l2.Fence < l1.Fence {
		l1, l2 = l2, l1
	}
	w := start(t, s, "--write", key, dir, "w")
	c.readers(l1, l2)

	r1.end(t)
	r2.end(t)
	lw := w.lease(t)
	c.writer(lw, l2)

	w.end(t)
	code, got := c.inspect()
	if code != 1 || (got.RW != nil && got.RW.Held) || (s.KeepsFence && (got.Kind != "rwlock" || got.RW.Fence != lw.Fence)) {
		t.Errorf("inspect once free: exit %d, %+v %+v; want 1, not held", code, got, got.RW)
	}
	c.noSecrets(r1.proc.Stderr.String(), r2.proc.Stderr.String(), w.proc.Stderr.String())
}

// scenario is one Run: the commands' outputs so far and the owner tokens
// read from the server.
type scenario struct {
	t       *testing.T
	s       Setup
	key     string
	outputs []string
	secrets []string
}

// run runs the CLI with args and returns its exit code and stdout.
func (c *scenario) run(args ...string) (int, string) {
	c.t.Helper()
	code, p := c.s.Bin.Run(c.t, c.s.Env, args...)
	c.outputs = append(c.outputs, p.Stdout.String(), p.Stderr.String())
	return code, p.Stdout.String()
}

// inspect runs inspect --json of the key.
func (c *scenario) inspect() (int, Inspected) {
	c.t.Helper()
	code, out := c.run("inspect", "--json", c.key)
	var got Inspected
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		c.t.Fatalf("inspect --json %s: exit %d, %v: %q", c.key, code, err, out)
	}
	return code, got
}

// await inspects the key until ok says it is as expected (the writer's
// intent, its grant are events in another process), then reads the owner
// tokens from the server.
func (c *scenario) await(what string, ok func(Inspected) bool) Inspected {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, got := c.inspect()
		if ok(got) {
			if c.s.Secrets != nil {
				c.secrets = append(c.secrets, c.s.Secrets(c.t, c.key)...)
			}
			return got
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("inspect %s never showed %s; last: %+v %+v", c.key, what, got, got.RW)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// want checks that out holds every line of lines.
func (c *scenario) want(out string, lines ...string) {
	c.t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			c.t.Errorf("output lacks %q:\n%s", l, out)
		}
	}
}

// readers checks inspect and list while the readers l1 and l2 (by fence)
// hold the key and a writer waits.
func (c *scenario) readers(l1, l2 Lease) {
	t, key := c.t, c.key
	got := c.await("a writer waiting", func(i Inspected) bool { return i.RW != nil && i.RW.WritersWaiting == 1 })
	rw := got.RW
	if got.Kind != "rwlock" || got.Held || rw.Kind != "rwlock" || rw.Key != key || !rw.Held || rw.Mode != "read" || rw.Writer != nil ||
		len(rw.Readers) != 2 || rw.Readers[0].Holder != l1.Holder || rw.Readers[0].Fence != l1.Fence ||
		rw.Readers[1].Holder != l2.Holder || rw.Readers[1].Fence != l2.Fence || rw.Readers[0].TTLms <= 0 || rw.Readers[1].TTLms > 30000 ||
		(c.s.KeepsFence && rw.Fence != l2.Fence) {
		t.Errorf("inspect --json with two readers and a writer waiting: %+v %+v; readers %+v %+v", got, rw, l1, l2)
	}
	code, out := c.run("inspect", key)
	if code != 0 {
		t.Errorf("inspect with two readers: exit %d, want 0 (held)", code)
	}
	c.want(out, `key:     "`+key+`"`, "kind:    a read-write lock", `read-write lock "`+key+`":`, "held:    read (2 readers)",
		"waiting: 1 writer", "read   "+l1.Holder, "read   "+l2.Holder)
	_, out = c.run("list", key)
	c.want(out, "HELD ", "read  "+l1.Holder, "read  "+l2.Holder, `"`+key+`" (read-write lock, 1 writer waiting)`)
	_, out = c.run("list", "--json", key)
	var listed RW
	if err := json.Unmarshal([]byte(out), &listed); err != nil || strings.Count(out, "\n") != 1 || listed.Kind != "rwlock" || len(listed.Readers) != 2 || listed.WritersWaiting != 1 {
		t.Errorf("list --json %s: %v: %q", key, err, out)
	}
}

// writer checks inspect and list while the writer lw holds the key, after
// the readers (the later of them l2).
func (c *scenario) writer(lw, l2 Lease) {
	got := c.await("the writer", func(i Inspected) bool { return i.RW != nil && i.RW.Writer != nil })
	rw := got.RW
	if rw.Mode != "write" || *rw.Writer != (Lease{Holder: lw.Holder, Fence: lw.Fence, TTLms: rw.Writer.TTLms}) || rw.Writer.TTLms <= 0 ||
		len(rw.Readers) != 0 || rw.WritersWaiting != 0 || lw.Fence <= l2.Fence || (c.s.KeepsFence && rw.Fence != lw.Fence) {
		c.t.Errorf("inspect --json with the writer: %+v %+v, want writer %+v", rw, rw.Writer, lw)
	}
	_, out := c.run("inspect", c.key)
	c.want(out, "held:    write (1 writer)", "write  "+lw.Holder)
	_, out = c.run("list", c.key)
	c.want(out, "write "+lw.Holder, `"`+c.key+`" (read-write lock)`)
}

// noSecrets checks that no output, the commands' and the holders'
// (others), shows an owner token read from the server.
func (c *scenario) noSecrets(others ...string) {
	for _, secret := range c.secrets {
		for _, o := range append(c.outputs, others...) {
			if strings.Contains(o, secret) {
				c.t.Fatalf("an output shows an owner token:\n%s", o)
			}
		}
	}
	if c.s.Secrets != nil && len(c.secrets) != 3 {
		c.t.Errorf("read %d owner tokens from the server, want 3 (2 readers, the writer)", len(c.secrets))
	}
}
