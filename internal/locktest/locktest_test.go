package locktest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/internal/locktest"
)

// fatalRecorder records Fatalf instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

func TestNew(t *testing.T) {
	b := memory.New()
	l := locktest.New(t, b, fencedlock.Options{TTL: time.Second})
	if l == nil {
		t.Fatal("New returned nil for valid options")
	}
	defer l.Close()

	r := &fatalRecorder{TB: t}
	locktest.New(r, b, fencedlock.Options{TTL: time.Nanosecond})
	if !strings.HasPrefix(r.msg, "fencedlock.New: ") || !strings.Contains(r.msg, "TTL") {
		t.Fatalf("New with a TTL fencedlock.New refuses: Fatalf(%q), want the error of fencedlock.New", r.msg)
	}
	t.Log(r.msg)
}
