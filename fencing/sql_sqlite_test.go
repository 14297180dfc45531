package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/guardtest"
	_ "modernc.org/sqlite"
)

// The SQL guard's tests on a second dialect: SQLite through
// modernc.org/sqlite (pure Go, no server), with Placeholder Question and
// the default ANSI quoting.

// openSQLite opens a new SQLite database file in the test's temporary
// directory, with the documented table shape. Writers on separate
// connections wait for each other's write lock (busy_timeout) instead of
// failing with SQLITE_BUSY.
func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "guard.db") + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE resources (
	    key    text    PRIMARY KEY,
	    value  text,
	    fence  integer NOT NULL DEFAULT 0,
	    holder text    NOT NULL DEFAULT ''
	)`); err != nil {
		t.Fatal(err)
	}
	return db
}

var sqliteTable = fencing.SQLTable{Table: "resources", Placeholder: fencing.Question}

func readSQLiteRow(t *testing.T, db *sql.DB, key string) row {
	t.Helper()
	var r row
	if err := db.QueryRow(`SELECT value, fence, holder FROM resources WHERE key = ?`, key).Scan(&r.value, &r.fence, &r.holder); err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return r
}

// TestSQLiteSetRule applies ruleSteps (tokens up to math.MaxInt64) on
// SQLite.
func TestSQLiteSetRule(t *testing.T) {
	db := openSQLite(t)
	if _, err := db.Exec(`INSERT INTO resources (key) VALUES ('orders')`); err != nil {
		t.Fatal(err)
	}
	runRuleSteps(t, sqliteTable, db, "orders", func() row { return readSQLiteRow(t, db, "orders") })
}

// TestSQLiteMissingRow: no row, ErrNoRow, nothing inserted.
func TestSQLiteMissingRow(t *testing.T) {
	db := openSQLite(t)
	err := sqliteTable.Set(context.Background(), db, "absent", "v", 3, "A")
	if !errors.Is(err, fencing.ErrNoRow) || errors.Is(err, fencing.ErrStale) {
		t.Fatalf("missing row: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM resources`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after writing a missing row (%v)", n, err)
	}
}

// TestSQLiteNames runs the quoted-names cases on SQLite. SQLite has no
// CURRENT_USER; "user" is a plain keyword there, and the rows are alice,
// bob and "postgres" as on PostgreSQL.
func TestSQLiteNames(t *testing.T) {
	db := openSQLite(t)
	testSQLNames(t, sqlNamesDB{db: db, base: sqliteTable, param: func(int) string { return "?" }}, "postgres")
}

// TestSQLiteConcurrentWriters: writers on separate connections present
// mixed tokens at once; the row ends with the greatest token and its
// writer's value.
func TestSQLiteConcurrentWriters(t *testing.T) {
	db := openSQLite(t)
	db.SetMaxOpenConns(8)
	if _, err := db.Exec(`INSERT INTO resources (key) VALUES ('counter')`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const writers, perWriter = 8, 30
	accepted, rejected := guardtest.MixedTokens(t, writers, perWriter, func(int) guardtest.Write {
		return func(tok fencing.Token, holder string) error {
			return sqliteTable.Set(ctx, db, "counter", tok.String()+"/"+holder, tok, holder)
		}
	})
	r := readSQLiteRow(t, db, "counter")
	maxTok := int64(writers * perWriter)
	if r.fence != maxTok || !strings.HasPrefix(r.value.String, strconv.FormatInt(maxTok, 10)+"/") || !strings.HasSuffix(r.value.String, "/"+r.holder) {
		t.Fatalf("final row %+v, want fence %d and its writer's value", r, maxTok)
	}
	if accepted+rejected != writers*perWriter || accepted == 0 || rejected == 0 {
		t.Fatalf("accepted %d rejected %d", accepted, rejected)
	}
	t.Logf("%d writes with mixed tokens on SQLite: %d accepted, %d rejected", writers*perWriter, accepted, rejected)
}
