package fencedlock_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/driver"
)

// spy records the owner tokens of the requests it passes on.
type spy struct {
	driver.Backend
	mu     sync.Mutex
	owners []string
	grants []driver.Grant
}

func (s *spy) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, err := s.Backend.Acquire(ctx, req)
	s.mu.Lock()
	s.owners = append(s.owners, req.Owner)
	s.grants = append(s.grants, g)
	s.mu.Unlock()
	return g, err
}

// TestOwnerNeverRendered: no fmt verb and no slog handler prints the owner
// token of a Lease, a Grant or an AcquireRequest.
func TestOwnerNeverRendered(t *testing.T) {
	s := &spy{Backend: memory.New()}
	defer s.Close()
	l := mustLocker(t, s, fencedlock.Options{TTL: time.Minute})
	defer l.Close()
	ls, err := l.TryAcquire(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	owner, g := s.owners[0], s.grants[0]
	req := driver.AcquireRequest{Key: "orders", Owner: owner, TTL: time.Minute}
	values := []struct {
		name string
		v    any
	}{
		{"*Lease", ls}, {"Grant", g}, {"*Grant", &g}, {"AcquireRequest", req}, {"*AcquireRequest", &req},
		{"struct holding a Grant", struct{ G driver.Grant }{g}},
	}
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%20v"} {
			out := fmt.Sprintf(verb, v.v)
			if strings.Contains(out, owner) || strings.Contains(out, fmt.Sprintf("%x", owner)) {
				t.Errorf("%s with %s prints the owner token: %s", v.name, verb, out)
			}
			if verb == "%+v" && !strings.Contains(out, "orders") {
				t.Errorf("%s with %s lost the key: %s", v.name, verb, out)
			}
		}
		for _, h := range []struct {
			name string
			make func(*bytes.Buffer) slog.Handler
		}{
			{"JSON", func(w *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(w, nil) }},
			{"text", func(w *bytes.Buffer) slog.Handler { return slog.NewTextHandler(w, nil) }},
		} {
			var buf bytes.Buffer
			slog.New(h.make(&buf)).Info("msg", "value", v.v)
			if out := buf.String(); strings.Contains(out, owner) {
				t.Errorf("slog %s handler prints the owner token of a %s: %s", h.name, v.name, out)
			} else if !strings.Contains(out, "orders") {
				t.Errorf("slog %s handler lost the key of a %s: %s", h.name, v.name, out)
			}
		}
	}
	if got := fmt.Sprintf("%+v", ls); t.Failed() {
		t.Logf("a lease renders as %s", got)
	}
}
