package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/fencedlock/fencedlock/fencing"
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
	return openResources(t, "sqlite", dsn, "integer")
}

var sqliteTable = fencing.SQLTable{Table: "resources", Placeholder: fencing.Question}

func readSQLiteRow(t *testing.T, db *sql.DB, key string) row {
	t.Helper()
	return readRowAt(t, db, "?", key)
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
	concurrentWriters(t, db, sqliteTable, "?", "SQLite")
}
