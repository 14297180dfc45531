package etcd

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ClientLogger returns a logger for the etcd client (clientv3.Config.Logger)
// that writes the client's records to log instead of printing its own JSON
// on standard error, with the outcomes that fencedlock's calls expect
// demoted to DEBUG:
//
//   - "retrying of unary invoker failed" and "retrying RecvMsg": a failed
//     attempt of a call, whose error reaches the Locker, which reports it
//     (or expects it) itself;
//   - a record whose error is a lease etcd no longer has (a revocation or a
//     keepalive of a lease that expired while the process was paused: the
//     Locker reports that lease lost) or a cancelled call.
//
// What remains (the client's own trouble: a full keepalive queue, a failed
// token refresh) keeps its level. A nil log is slog.Default().
//
//	cli, err := clientv3.New(clientv3.Config{
//		Endpoints: endpoints,
//		Logger:    etcd.ClientLogger(logger),
//	})
func ClientLogger(log *slog.Logger) *zap.Logger {
	if log == nil {
		log = slog.Default()
	}
	return zap.New(&slogCore{log: log})
}

// expectedRecord reports whether a record of the etcd client with message
// msg and error err (nil if none) is an outcome fencedlock expects.
func expectedRecord(msg string, err error) bool {
	switch msg {
	case "retrying of unary invoker failed", "retrying RecvMsg", "retrying of unary invoker":
		return true
	}
	if err == nil {
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) ||
		strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())
}

// slogCore is a zapcore.Core that writes to an slog.Logger, demoting the
// expected records (expectedRecord) to DEBUG.
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
	if expectedRecord(e.Message, err) {
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
