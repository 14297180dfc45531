//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	redisb "github.com/fencedlock/fencedlock/backend/redis"
)

// TestInspectWatch follows a key on a real redis-server with `inspect
// --watch --json` while the test takes it, renews it, releases it, and a
// second holder takes it over: the watch prints exactly the four changes
// (free, held by the first with fence 1, free, held by the second with
// fence 2; renewals are not changes) and exits 0 on SIGINT. The text form
// and --log-format json are checked on the same server.
func TestInspectWatch(t *testing.T) {
	s, url := redisServer(t)
	env := []string{"FENCEDLOCK_REDIS=" + url}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.Client(t, nil)
	b, err := redisb.New(c, redisb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l1 := mustLocker(t, b, fencedlock.Options{TTL: 900 * time.Millisecond}) // renews every 300 ms
	defer l1.Close()
	l2 := mustLocker(t, b, fencedlock.Options{TTL: 10 * time.Second})
	defer l2.Close()

	w := bin.Start(t, env, "inspect", "--watch", "--json", "--interval", "50ms", "k")
	text := bin.Start(t, env, "inspect", "--watch", "--interval", "50ms", "k")
	lines := func(p string) int { return strings.Count(p, "\n") }
	waitLines := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for lines(w.Stdout.String()) < n || lines(text.Stdout.String()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("watch printed %d lines, want %d:\n%s\nstderr:\n%s", lines(w.Stdout.String()), n, w.Stdout, w.Stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitLines(1)
	a, err := l1.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	waitLines(2)
	time.Sleep(time.Second) // three renewals: no change to print
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitLines(3)
	bl, err := l2.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	waitLines(4)
	time.Sleep(200 * time.Millisecond)
	_ = w.Cmd.Process.Signal(syscall.SIGINT)
	_ = text.Cmd.Process.Signal(syscall.SIGINT)
	if code := w.Wait(10 * time.Second); code != exitOK {
		t.Errorf("watch exit %d on SIGINT, want 0; stderr:\n%s", code, w.Stderr)
	}
	if code := text.Wait(10 * time.Second); code != exitOK {
		t.Errorf("text watch exit %d on SIGINT, want 0; stderr:\n%s", code, text.Stderr)
	}
	t.Logf("inspect --watch:\n%s", text.Stdout)

	type state struct {
		held   bool
		holder string
		fence  uint64
	}
	want := []state{{false, "", 0}, {true, a.Holder(), 1}, {false, "", 1}, {true, bl.Holder(), 2}}
	got := strings.Split(strings.TrimSpace(w.Stdout.String()), "\n")
	if len(got) != len(want) {
		t.Fatalf("watch printed %d changes, want %d:\n%s", len(got), len(want), w.Stdout)
	}
	var prev time.Time
	for i, line := range got {
		var o inspectOutput
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if (state{o.Held, o.Holder, o.Fence}) != want[i] || o.At == nil || o.At.Before(prev) || o.Key != "k" {
			t.Errorf("change %d: %s, want %+v", i, line, want[i])
		}
		if o.At != nil {
			prev = *o.At
		}
	}
	tl := strings.Split(strings.TrimSpace(text.Stdout.String()), "\n")
	for i, w := range []string{`"k" free`, `"k" held by holder ` + a.Holder() + `, fence 1, lease ends in`, `"k" free (last fence 1)`, `"k" held by holder ` + bl.Holder() + `, fence 2`} {
		if i >= len(tl) || !strings.Contains(tl[i], w) {
			t.Errorf("text line %d lacks %q:\n%s", i, w, text.Stdout)
		}
	}

	// --log-format json: the errors on stderr are JSON records; the one
	// that ends the command is an ERROR.
	code, p := bin.Run(t, []string{"FENCEDLOCK_REDIS=redis://127.0.0.1:1"}, "inspect", "--log-format", "json", "k")
	var rec map[string]any
	if code != exitBackend || json.Unmarshal([]byte(strings.Split(p.Stderr.String(), "\n")[0]), &rec) != nil || rec["level"] != "ERROR" || rec["cmd"] != "inspect" || !strings.Contains(fmt.Sprint(rec["msg"]), "is the server running") {
		t.Errorf("inspect --log-format json on a dead server: exit %d, stderr %q", code, p.Stderr)
	}
}
