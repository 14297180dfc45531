//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The etcd client logs through zap, as JSON on standard error by default:
// after a pause it printed `"retrying of unary invoker failed" ...
// LeaseRevoke ... requested lease not found` warnings of its own. Its
// records go through the command's logger instead (etcdLogger), and the
// expected ones are demoted to DEBUG, which the command does not print:
//
//   - "retrying of unary invoker failed" and "retrying RecvMsg": each
//     failed attempt of a call; the call's error reaches fencedlock, which
//     reports it (or expects it) itself;
//   - any record whose error is a lease etcd no longer has (a revocation or
//     keepalive of a lease that expired while the process was paused: the
//     lease is reported lost by the Locker) or a cancelled call.
//
// What remains (the client's own trouble: a full keepalive queue, a failed
// token refresh) is logged at its level, WARN or above.

// expectedEtcdRecord reports whether a record of the etcd client is an
// expected outcome (DEBUG).
func expectedEtcdRecord(msg string, err error) bool {
	switch msg {
	case "retrying of unary invoker failed", "retrying RecvMsg", "retrying of unary invoker":
		return true
	}
	if err == nil {
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) || strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())
}

// etcdLogger returns the zap logger of the etcd client of a command whose
// flags are fs: records go to fs's output, as JSON records with
// --log-format json, as "fencedlock CMD: etcd client: ..." lines
// otherwise; DEBUG records (and the expected ones) are not printed. With
// no flag set (a test's config) the client logs nothing.
func etcdLogger(fs *flag.FlagSet) *zap.Logger {
	if fs == nil {
		return zap.NewNop()
	}
	w, name, format := fs.Output(), fs.Name(), logText
	if f := fs.Lookup("log-format"); f != nil {
		format = f.Value.String()
	}
	var h slog.Handler
	opts := &slog.HandlerOptions{Level: slog.LevelWarn}
	if format == logJSON {
		h = slog.NewJSONHandler(w, opts).WithAttrs([]slog.Attr{slog.String("cmd", name), slog.String("component", "etcd client")})
	} else {
		h = &lineHandler{w: w, prefix: "fencedlock " + name + ": etcd client: ", level: slog.LevelWarn}
	}
	return zap.New(&slogCore{log: slog.New(h)})
}

// slogCore is a zapcore.Core that writes to an slog.Logger, demoting the
// etcd client's expected records (expectedEtcdRecord) to DEBUG.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c *slogCore) Enabled(zapcore.Level) bool { return true }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	var err error
	for _, f := range append(append([]zapcore.Field(nil), c.fields...), fields...) {
		if f.Type == zapcore.ErrorType {
			if fe, ok := f.Interface.(error); ok {
				err = fe
			}
		}
		f.AddTo(enc)
	}
	level := slog.LevelInfo
	switch {
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	case e.Level == zapcore.WarnLevel:
		level = slog.LevelWarn
	case e.Level <= zapcore.DebugLevel:
		level = slog.LevelDebug
	}
	if expectedEtcdRecord(e.Message, err) {
		level = slog.LevelDebug
	}
	if !c.log.Enabled(context.Background(), level) {
		return nil
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	c.log.Log(context.Background(), level, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// lineHandler writes a record as one text line: prefix, message, then
// key=value attributes.
type lineHandler struct {
	w      io.Writer
	prefix string
	level  slog.Level
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	b.WriteByte('\n')
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lineHandler) WithGroup(string) slog.Handler      { return h }
