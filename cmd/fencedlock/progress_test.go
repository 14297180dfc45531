//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
)

func TestProgressAfter(t *testing.T) {
	want := []time.Duration{2 * time.Second, 10 * time.Second, time.Minute, time.Minute, time.Minute}
	for n, w := range want {
		if got := progressAfter(n); got != w {
			t.Errorf("progressAfter(%d) = %v, want %v", n, got, w)
		}
	}
}

// TestRunProgressBacksOff waits 200 s (in a synctest bubble: fake time)
// for a key held by another holder, and checks that run reports at once,
// then after 2 s, 10 s more, and then every minute: 0, 2, 12, 72, 132 and 192 s
// waited, naming the holder and its remaining lease each time.
func TestRunProgressBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.NewStore()
		hb := store.Backend()
		defer hb.Close()
		holder := mustLocker(t, hb, fencedlock.Options{TTL: 10 * time.Minute})
		defer holder.Close()
		lease, err := holder.TryAcquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		// run's acquire step itself: run installs signal handlers, which a
		// bubble does not allow.
		e, _, errb := memEnv(store, nil)
		b := store.Backend()
		defer b.Close()
		locker := mustLocker(t, b, fencedlock.Options{TTL: 10 * time.Second})
		defer locker.Close()
		f := runFlags{wait: 200 * time.Second}
		got, code := e.acquire(context.Background(), locker, b, "k", &f, make(chan os.Signal), &progress{e: e, key: "k"}, time.Now())
		if got != nil || code != exitNotAcquired {
			t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitNotAcquired, errb)
		}
		var waited []string
		for _, line := range strings.Split(errb.String(), "\n") {
			if !strings.Contains(line, "waiting for") {
				continue
			}
			if !strings.Contains(line, "held by holder "+lease.Holder()) || !strings.Contains(line, "lease ends in") {
				t.Errorf("progress line does not name the holder and its lease: %s", line)
			}
			waited = append(waited, line[strings.LastIndex(line, "waited ")+len("waited "):])
		}
		want := []string{"0s", "2s", "12s", "1m12s", "2m12s", "3m12s"}
		if strings.Join(waited, " ") != strings.Join(want, " ") {
			t.Errorf("progress reported after %q waited, want %q; stderr:\n%s", waited, want, errb)
		}
	})
}

// TestRunLogFormatJSON: with --log-format json every line run writes on
// standard error is one slog JSON record: progress at INFO with the key,
// holder, fence and remaining lease as attributes, the failure at WARN.
func TestRunLogFormatJSON(t *testing.T) {
	store := memory.NewStore()
	holdMemKey(t, store, "k")
	e, _, errb := memEnv(store, nil)
	code := e.main(context.Background(), []string{"run", "--log-format", "json", "--wait", "2500ms", "k", "--", "true"})
	if code != exitNotAcquired {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitNotAcquired, errb)
	}
	var waiting, warn int
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line is not JSON: %q (%v)", line, err)
		}
		if rec["cmd"] != "run" || rec["time"] == nil {
			t.Errorf("record lacks cmd or time: %s", line)
		}
		switch {
		case rec["msg"] == "waiting":
			waiting++
			if rec["level"] != "INFO" || rec["key"] != "k" || rec["held"] != true || len(rec["holder"].(string)) != 16 || rec["fence"] == nil || rec["ttl_ms"] == nil || rec["waited_ms"] == nil {
				t.Errorf("waiting record: %s", line)
			}
		case rec["level"] == "WARN":
			warn++
			if !strings.Contains(rec["msg"].(string), "not acquired") || strings.HasPrefix(rec["msg"].(string), "fencedlock") {
				t.Errorf("warning record: %s", line)
			}
		}
	}
	if waiting != 2 || warn != 1 {
		t.Errorf("%d waiting and %d warning records, want 2 and 1:\n%s", waiting, warn, errb)
	}

	// A command that runs: acquired, then its exit, as INFO records.
	store = memory.NewStore()
	e, out, errb := memEnv(store, nil)
	if code := e.main(context.Background(), []string{"run", "--log-format", "json", "k", "--", "/bin/sh", "-c", "echo out; echo err >&2"}); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb)
	}
	text := errb.String()
	if !strings.Contains(text, `"msg":"acquired"`) || !strings.Contains(text, `"fence":1`) || !strings.Contains(text, `exited (exit code 0); released`) {
		t.Errorf("stderr lacks the acquired and exit records:\n%s", text)
	}
	// COMMAND's own output is left as it is.
	if out.String() != "out\n" || !strings.Contains(text, "\nerr\n") && !strings.HasPrefix(text, "err\n") {
		t.Errorf("COMMAND's output was rewritten: stdout %q, stderr:\n%s", out, text)
	}
	if code := e.main(context.Background(), []string{"run", "--log-format", "xml", "k", "--", "true"}); code != exitUsage {
		t.Errorf("--log-format xml: exit %d, want %d", code, exitUsage)
	}
}
