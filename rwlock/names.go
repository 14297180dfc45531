package rwlock

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/locktrace"
)

// What a user sees names the name, never a read key (name, readSep, a
// number). A read lease's grant keeps the name (see view.Acquire), so the
// readers' Locker names it in everything about the lease. Only an acquire
// under way is known to that Locker by its read key: the errors, log lines
// and trace events of a read acquire have the key cut back to the name on
// their way out of the package (nameErr, cutHandler, cutTrace), each
// knowing the key it cuts (no guess at what looks like one).

// rename returns s with key, as %q prints it or raw, replaced by its name.
func rename(s, key string) string {
	name := nameOf(key)
	if name == key {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, strconv.Quote(key), strconv.Quote(name)), key, name)
}

// nameError is an error whose message names a read key: Error is the
// message with the key replaced by the name; Unwrap is the error, so
// errors.Is and errors.As see what they saw.
type nameError struct {
	err error
	key string
}

func (e *nameError) Error() string { return rename(e.err.Error(), e.key) }
func (e *nameError) Unwrap() error { return e.err }

// nameErr returns err, or err as a nameError if key is a read key.
func nameErr(err error, key string) error {
	if err == nil || nameOf(key) == key {
		return err
	}
	return &nameError{err, key}
}

// readOptions returns opts for the readers' Locker: its log lines and the
// trace events of its acquires name the name.
func readOptions(opts fencedlock.Options) fencedlock.Options {
	if opts.Logger != nil {
		opts.Logger = slog.New(cutHandler{opts.Logger.Handler()})
	}
	if opts.Trace != nil {
		opts.Trace = cutTrace(*opts.Trace)
	}
	return opts
}

// cutHandler passes records to h; a record whose "key" is a read key (the
// Locker's lines about an acquire) goes with the key replaced by its name
// in the message and in every attribute (strings, errors, groups).
type cutHandler struct{ h slog.Handler }

func (c cutHandler) Enabled(ctx context.Context, l slog.Level) bool { return c.h.Enabled(ctx, l) }

func (c cutHandler) Handle(ctx context.Context, r slog.Record) error {
	key := ""
	r.Attrs(func(a slog.Attr) bool {
		if v := a.Value.Resolve(); a.Key == "key" && v.Kind() == slog.KindString && nameOf(v.String()) != v.String() {
			key = v.String()
		}
		return key == ""
	})
	if key == "" {
		return c.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, rename(r.Message, key), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(renameAttr(a, key))
		return true
	})
	return c.h.Handle(ctx, out)
}

func (c cutHandler) WithAttrs(as []slog.Attr) slog.Handler { return cutHandler{c.h.WithAttrs(as)} }

func (c cutHandler) WithGroup(name string) slog.Handler { return cutHandler{c.h.WithGroup(name)} }

// renameAttr returns a with key replaced by its name.
func renameAttr(a slog.Attr, key string) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, rename(v.String(), key))
	case slog.KindGroup:
		g := v.Group()
		as := make([]any, len(g))
		for i, ga := range g {
			as[i] = renameAttr(ga, key)
		}
		return slog.Group(a.Key, as...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.Any(a.Key, nameErr(err, key))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// cutTrace returns t with the key and error of its acquire events (the
// only ones of the readers' Locker that carry a read key) replaced by the
// name.
func cutTrace(t locktrace.Trace) *locktrace.Trace {
	if start := t.AcquireStart; start != nil {
		t.AcquireStart = func(ctx context.Context, e locktrace.AcquireStartEvent) context.Context {
			e.Key = nameOf(e.Key)
			return start(ctx, e)
		}
	}
	if wait := t.AcquireWait; wait != nil {
		t.AcquireWait = func(ctx context.Context, e locktrace.AcquireWaitEvent) {
			e.Key, e.Err = nameOf(e.Key), nameErr(e.Err, e.Key)
			wait(ctx, e)
		}
	}
	if end := t.AcquireEnd; end != nil {
		t.AcquireEnd = func(ctx context.Context, e locktrace.AcquireEndEvent) {
			e.Key, e.Err = nameOf(e.Key), nameErr(e.Err, e.Key)
			end(ctx, e)
		}
	}
	return &t
}
