//go:build unix

package main

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	pgb "github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/fencing"
)

// postgresWant is the form of --postgres, for error messages.
const postgresWant = "want postgres://[user[:password]@]host[:port]/dbname[?sslmode=...] or key=value pairs; percent-encode / ? # @ in a password"

// dsnPassword finds the password of a key=value connection string:
// password=word or password='quoted \' word'.
var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)`)

// postgresPassword returns the password written in a connection string (a
// URL or key=value pairs), "" if none.
func postgresPassword(raw string) string {
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok {
				return pw
			}
		}
		if err == nil && u.Query().Get("password") != "" {
			return u.Query().Get("password")
		}
	}
	if m := dsnPassword.FindStringSubmatch(raw); m != nil {
		return strings.Trim(m[2], "'")
	}
	return ""
}

// redactPostgres hides the password of a connection string: in the user
// information of a URL (and a password= query parameter) or in a
// password=... pair.
func redactPostgres(raw string) string {
	s := raw
	if strings.Contains(s, "://") {
		s = redactURL(s)
	}
	return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
}

// scrub removes the password pw from an error text, whatever quoting the
// error used.
func scrub(msg, raw, pw string) string {
	msg = strings.ReplaceAll(msg, raw, redactPostgres(raw))
	if pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
		msg = strings.ReplaceAll(msg, url.QueryEscape(pw), "xxxxx")
	}
	return msg
}

// postgresConfig parses --postgres into a pool configuration; its errors
// never hold the password.
func postgresConfig(raw string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("--postgres %s: malformed connection string: %s (%s)",
			redactPostgres(raw), scrub(err.Error(), raw, postgresPassword(raw)), postgresWant)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	// A command holds one lock: a few connections are plenty.
	cfg.MaxConns = 4
	return cfg, nil
}

// postgresBackend is the CLI's PostgreSQL backend: the lock tables, and
// the fenced key-value table (postgres.KV, default table) as the
// resources release --force writes barriers to.
type postgresBackend struct {
	*pgb.Backend
	kv *pgb.KV
}

// FenceBarrier implements fenceBarrier on the KV table's key.
func (b postgresBackend) FenceBarrier(ctx context.Context, key string, token fencing.Token, holder string) error {
	return b.kv.FenceBarrier(ctx, key, token, holder)
}

func openPostgres(ctx context.Context, c backendConfig) (driver.Backend, func(), error) {
	pool, b, err := dialPostgres(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = b.Close(); pool.Close() }, nil
}

// dialPostgres connects to the database c names, checks that it answers,
// and returns the pool with the backend on it (tables created if missing).
func dialPostgres(ctx context.Context, c backendConfig) (*pgxpool.Pool, postgresBackend, error) {
	cfg, err := postgresConfig(c.postgresURL)
	if err != nil {
		return nil, postgresBackend{}, err
	}
	pw := cfg.ConnConfig.Password
	fail := func(err error) error {
		return fmt.Errorf("connecting to %s: %s (is the server running, and are the address and credentials right?)",
			c.describe(), scrub(err.Error(), c.postgresURL, pw))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, postgresBackend{}, fail(err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, postgresBackend{}, fail(err)
	}
	b, err := pgb.New(ctx, pool, pgb.Options{})
	if err != nil {
		pool.Close()
		return nil, postgresBackend{}, fmt.Errorf("%s: %s", c.describe(), scrub(err.Error(), c.postgresURL, pw))
	}
	kv, err := pgb.NewKV(ctx, pool, "", true)
	if err != nil {
		pool.Close()
		return nil, postgresBackend{}, err
	}
	return pool, postgresBackend{Backend: b, kv: kv}, nil
}

// keyLister is the listing capability of the PostgreSQL backend
// (postgres.Backend.Keys).
type keyLister interface {
	driver.Inspector
	Keys(ctx context.Context, prefix, after string, limit int) ([]string, error)
}

// listPostgres pages through the lock keys starting with prefix
// (postgres.Backend.Keys, f.count a page) and inspects each.
func listPostgres(ctx context.Context, db driver.Backend, prefix string, sink *listSink) error {
	b, ok := db.(keyLister)
	if !ok {
		return fmt.Errorf("the backend cannot list its keys")
	}
	sink.in = b
	f, after := sink.f, ""
	for first := true; ; first = false {
		if !first {
			if err := pause(ctx, f.pace); err != nil {
				return err
			}
		}
		keys, err := b.Keys(ctx, prefix, after, int(f.count))
		if err != nil {
			return err
		}
		names := make([]listed, len(keys))
		for i, k := range keys {
			names[i] = listed{name: k}
		}
		if err := sink.inspect(ctx, names); err != nil {
			return err
		}
		if len(keys) < int(f.count) {
			return nil
		}
		after = keys[len(keys)-1]
	}
}
