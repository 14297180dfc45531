//go:build unix

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/fencedlock/fencedlock/backend/etcd"
	"go.uber.org/zap"
)

// The etcd client logs through zap, as JSON on standard error by default:
// after a pause it printed `"retrying of unary invoker failed" ...
// LeaseRevoke ... requested lease not found` warnings of its own. Its
// records go through the command's logger instead (etcdLogger, built on
// the backend's etcd.ClientLogger, which a library user can give their own
// client), and the expected ones are demoted to DEBUG, which the command
// does not print; what remains is logged at its level, WARN or above.

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
	return etcd.ClientLogger(slog.New(h))
}

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
