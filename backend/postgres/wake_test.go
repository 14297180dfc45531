package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencedlock/fencedlock/backend/postgres"
	"github.com/fencedlock/fencedlock/driver"
)

// TestReleaseNotifiesOnlyWatchedKeys: a release NOTIFYs only while a
// listening waiter watches the key (a NOTIFY serializes commits
// cluster-wide): a raw LISTEN connection hears nothing from the release of
// an unwatched key, hears the release of a key a Listening watches (and
// the watcher is woken), and nothing once that watch stopped and its mark
// ran out.
func TestReleaseNotifiesOnlyWatchedKeys(t *testing.T) {
	srv, admin := server(t)
	ctx := t.Context()
	b := newBackend(t, admin, postgres.Options{})
	l, err := postgres.NewListening(ctx, admin, postgres.Options{}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	raw, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(context.Background())
	if _, err := raw.Exec(ctx, "LISTEN "+postgres.DefaultChannel); err != nil {
		t.Fatal(err)
	}
	// heard reports whether a notification arrives within d.
	heard := func(d time.Duration) bool {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		_, err := raw.WaitForNotification(wctx)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && wctx.Err() == nil {
			t.Fatalf("WaitForNotification: %v", err)
		}
		return err == nil
	}
	cycle := func(key string) {
		t.Helper()
		if err := b.Release(ctx, grab(t, b, key, "owner")); err != nil {
			t.Fatal(err)
		}
	}

	cycle("unwatched")
	if heard(500 * time.Millisecond) {
		t.Fatal("the release of a key nobody watches sent a NOTIFY")
	}

	g := grab(t, b, "watched", "holder")
	ch, stop, err := l.Watch(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past a refresh of the mark
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if !heard(10 * time.Second) {
		t.Fatal("the release of a watched key sent no NOTIFY")
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher of a released key was not woken")
	}
	stop()

	// The mark outlives the watch by at most wakeAhead (3 s).
	time.Sleep(3500 * time.Millisecond)
	cycle("watched")
	if heard(500 * time.Millisecond) {
		t.Fatal("a release NOTIFYd after the watch stopped and its mark ran out")
	}
}

// TestWakeColumnAdded: a lease table created before wake_until existed
// gains the column on New, and the backend works on it.
func TestWakeColumnAdded(t *testing.T) {
	_, admin := server(t)
	ctx := t.Context()
	if _, err := admin.Exec(ctx, `CREATE TABLE old_leases (key bytea PRIMARY KEY, owner bytea,
		fence bigint NOT NULL CHECK (fence >= 0), expires_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, admin, postgres.Options{LeaseTable: "old_leases", FenceTable: "old_fences"})
	var has bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = 'old_leases' AND column_name = 'wake_until')`).Scan(&has); err != nil || !has {
		t.Fatalf("wake_until on the old table: %v, %v", has, err)
	}
	g := grab(t, b, "k", "o")
	if err := b.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	// A second New reads the catalog and changes nothing.
	newBackend(t, admin, postgres.Options{LeaseTable: "old_leases", FenceTable: "old_fences"})
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Owner: "o2", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
}
