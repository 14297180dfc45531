//go:build unix

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// Log formats of run and inspect (--log-format): text is the default, one
// human line per message on standard error; json makes every message
// fencedlock itself writes there one slog JSON record, for log pipelines.
// COMMAND's own output is never rewritten.
const (
	logText = "text"
	logJSON = "json"
)

// logFormatFlag registers --log-format on fs.
func logFormatFlag(fs *flag.FlagSet, v *string) {
	fs.StringVar(v, "log-format", logText, "`format` of fencedlock's messages on standard error: text, or json (one slog JSON record per message)")
}

// checkLogFormat validates --log-format.
func checkLogFormat(v string) error {
	if v != logText && v != logJSON {
		return fmt.Errorf("--log-format %q: want text or json", v)
	}
	return nil
}

// jsonLines turns each line written to it into one slog JSON record on
// the underlying writer: msg is the line without its "fencedlock ...: "
// prefix; a line that starts with "(" continues the line before it (an
// error and its hint, written together) and joins its record. The lines
// written unstructured are the unusual paths, and most of them end the
// command with an error (no backend, a lost lease, a command that could
// not start): they are ERROR records. The few that report an outcome the
// user asked for, or a retry, are WARN (see lineLevel). Structured
// messages (progress) go through [jsonLines.logger] at INFO.
type jsonLines struct {
	mu  sync.Mutex
	buf []byte
	log *slog.Logger
}

func newJSONLines(w io.Writer, cmd string) *jsonLines {
	return &jsonLines{log: slog.New(slog.NewJSONHandler(w, nil)).With("cmd", cmd)}
}

// logger is the structured logger behind the writer.
func (j *jsonLines) logger() *slog.Logger { return j.log }

func (j *jsonLines) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = append(j.buf, p...)
	for {
		i := bytes.IndexByte(j.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(j.buf[:i])
		j.buf = j.buf[i+1:]
		// Continuation lines already written join this record.
		for bytes.HasPrefix(j.buf, []byte("(")) {
			k := bytes.IndexByte(j.buf, '\n')
			if k < 0 {
				break
			}
			line += " " + string(j.buf[:k])
			j.buf = j.buf[k+1:]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		msg := stripPrefix(line)
		j.log.Log(context.Background(), lineLevel(msg), msg)
	}
}

// notErrors are the unstructured messages that do not end the command
// with an error: outcomes the user asked for (--try on a held key, --wait
// expired, an interrupt before COMMAND started), a release that failed
// while the lock expires on its own, and inspect --watch retrying.
var notErrors = []string{
	"is held", "not acquired after", "interrupted by", "expires on its own", "retrying every", "again",
}

// lineLevel is the level of an unstructured message: ERROR unless it is
// one of notErrors (WARN).
func lineLevel(msg string) slog.Level {
	for _, s := range notErrors {
		if strings.Contains(msg, s) {
			return slog.LevelWarn
		}
	}
	return slog.LevelError
}

// stripPrefix removes "fencedlock: " or "fencedlock CMD: " from a line.
func stripPrefix(line string) string {
	if rest, ok := strings.CutPrefix(line, "fencedlock: "); ok {
		return rest
	}
	if rest, ok := strings.CutPrefix(line, "fencedlock "); ok {
		if cmd, msg, ok := strings.Cut(rest, ": "); ok && !strings.Contains(cmd, " ") {
			return msg
		}
	}
	return line
}
