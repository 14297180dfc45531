package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/fencing"
)

// quoteANSI quotes a name as PostgreSQL and SQLite read it: in double
// quotes, an embedded double quote doubled. The tests write their own
// CREATE TABLE statements with it.
func quoteANSI(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// namesCase is a table whose identifiers are keywords, functions of SQL or
// need quoting.
type namesCase struct {
	name                      string
	table                     string // as SQLTable.Table
	create                    string // the table as CREATE TABLE names it
	key, value, fence, holder string
}

var namesCases = []namesCase{
	// PostgreSQL reads an unquoted user as CURRENT_USER: WHERE user = $4
	// is true on every row for key "postgres".
	{name: "user", table: "accounts", key: "user", value: "value", fence: "fence", holder: "holder"},
	{name: "current_user", table: "accounts", key: "current_user", value: "value", fence: "fence", holder: "holder"},
	{name: "session_user", table: "accounts", key: "session_user", value: "value", fence: "fence", holder: "holder"},
	{name: "keywords", table: "order", key: "key", value: "order", fence: "select", holder: "from"},
	{name: "mixed case", table: "Mixed Table", key: "Mixed Case", value: "Value", fence: "Fence Col", holder: "HOLDER"},
	{name: "quotes", table: `we"ird`, key: `k"ey`, value: `va"l"ue`, fence: `"fence"`, holder: "hol`der"},
}

// sqlNamesDB is a database the names test runs on.
type sqlNamesDB struct {
	db    *sql.DB
	base  fencing.SQLTable // Placeholder (and Dialect) of the database
	param func(n int) string
}

// testSQLNames creates each table of namesCases with rows alice, bob and
// the database's own user name, and checks that Set writes exactly the row
// of its key: on the old code an unquoted "user" column matched every row.
func testSQLNames(t *testing.T, d sqlNamesDB, userName string) {
	ctx := context.Background()
	for _, nc := range namesCases {
		t.Run(nc.name, func(t *testing.T) {
			create := nc.create
			if create == "" {
				create = quoteANSI(nc.table)
			}
			// Every case gets its own table: drop a previous one.
			if _, err := d.db.Exec(`DROP TABLE IF EXISTS ` + create); err != nil {
				t.Fatal(err)
			}
			if _, err := d.db.Exec(`CREATE TABLE ` + create + ` (` +
				quoteANSI(nc.key) + ` text PRIMARY KEY, ` +
				quoteANSI(nc.value) + ` text, ` +
				quoteANSI(nc.fence) + ` bigint NOT NULL DEFAULT 0, ` +
				quoteANSI(nc.holder) + ` text NOT NULL DEFAULT '')`); err != nil {
				t.Fatal(err)
			}
			rows := []string{"alice", "bob", userName}
			for _, r := range rows {
				if _, err := d.db.Exec(`INSERT INTO `+create+` (`+quoteANSI(nc.key)+`, `+quoteANSI(nc.value)+`) VALUES (`+d.param(1)+`, 'initial')`, r); err != nil {
					t.Fatal(err)
				}
			}
			tab := d.base
			tab.Table, tab.KeyColumn, tab.ValueColumn, tab.FenceColumn, tab.HolderColumn = nc.table, nc.key, nc.value, nc.fence, nc.holder
			read := func(key string) (value string, fence int64, holder string) {
				t.Helper()
				q := `SELECT ` + quoteANSI(nc.value) + `, ` + quoteANSI(nc.fence) + `, ` + quoteANSI(nc.holder) +
					` FROM ` + create + ` WHERE ` + quoteANSI(nc.key) + ` = ` + d.param(1)
				if err := d.db.QueryRow(q, key).Scan(&value, &fence, &holder); err != nil {
					t.Fatalf("reading %s: %v", key, err)
				}
				return
			}
			if err := tab.Set(ctx, d.db, userName, "written", 7, "A"); err != nil {
				t.Fatalf("Set(%q): %v", userName, err)
			}
			for _, r := range rows {
				v, f, h := read(r)
				want := r == userName
				if got := v == "written" && f == 7 && h == "A"; got != want || (!want && (v != "initial" || f != 0 || h != "")) {
					t.Errorf("after Set(%q): row %s = (%q, %d, %q)", userName, r, v, f, h)
				}
			}
			if err := tab.Set(ctx, d.db, "alice", "alice's", 3, "B"); err != nil {
				t.Fatalf("Set(alice): %v", err)
			}
			if v, f, h := read("alice"); v != "alice's" || f != 3 || h != "B" {
				t.Errorf("alice = (%q, %d, %q)", v, f, h)
			}
			if err := tab.Set(ctx, d.db, "alice", "older", 2, "C"); !isStale(err, 3, "B") {
				t.Errorf("older write to alice: %v", err)
			}
			if v, _, _ := read("alice"); v != "alice's" {
				t.Errorf("rejected write changed alice to %q", v)
			}
			if err := tab.Set(ctx, d.db, "carol", "x", 9, "A"); !errors.Is(err, fencing.ErrNoRow) {
				t.Errorf("Set(carol): %v, want ErrNoRow", err)
			}
			// Where in an UPDATE of one's own, with the quoted names.
			cond, args, err := tab.Where(4, "D", 2)
			if err != nil {
				t.Fatal(err)
			}
			q := `UPDATE ` + create + ` SET ` + quoteANSI(nc.value) + ` = 'own' WHERE ` + quoteANSI(nc.key) + ` = ` + d.param(1) + ` AND ` + cond
			res, err := d.db.Exec(q, append([]any{"bob"}, args...)...)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Errorf("own UPDATE with Where: %d rows", n)
			}
		})
	}
}

func isStale(err error, accepted fencing.Token, from string) bool {
	var se *fencing.StaleError
	return errors.As(err, &se) && se.Accepted == accepted && se.AcceptedFrom == from
}

// TestSQLNamesPostgres runs testSQLNames on PostgreSQL, whose user is
// "postgres" (the superuser of testserver.StartPostgres).
func TestSQLNamesPostgres(t *testing.T) {
	db := openPG(t)
	var user string
	if err := db.QueryRow(`SELECT current_user`).Scan(&user); err != nil {
		t.Fatal(err)
	}
	testSQLNames(t, sqlNamesDB{db: db, base: fencing.SQLTable{}, param: func(n int) string { return "$" + strconv.Itoa(n) }}, user)
}

// TestSQLNameInjection: a name is a name, never SQL. A table name holding
// a quote and a statement reaches PostgreSQL as one quoted identifier (no
// such relation), and the statement in it is not run.
func TestSQLNameInjection(t *testing.T) {
	db := openPG(t)
	if _, err := db.Exec(`INSERT INTO resources (key) VALUES ('k')`); err != nil {
		t.Fatal(err)
	}
	for _, tab := range []fencing.SQLTable{
		{Table: `resources"; DROP TABLE resources; --`},
		{Table: "resources", KeyColumn: `key" = "key" OR "key`},
	} {
		err := tab.Set(context.Background(), db, "k", "v", 1, "A")
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("%+v: %v, want an unknown relation or column", tab, err)
		}
	}
	if r := readRow(t, db, "k"); r.fence != 0 || r.value.Valid {
		t.Fatalf("row changed: %+v", r)
	}
}

// TestSQLQuoting pins the SQL text of each dialect through Where.
func TestSQLQuoting(t *testing.T) {
	for _, tc := range []struct {
		tab  fencing.SQLTable
		want string
	}{
		{fencing.SQLTable{Table: "t", FenceColumn: `f"x`, HolderColumn: "user"}, `("f""x" < $3 OR ("f""x" = $3 AND "user" = $4))`},
		{fencing.SQLTable{Table: "t", Placeholder: fencing.Question}, `("fence" < ? OR ("fence" = ? AND "holder" = ?))`},
		{fencing.SQLTable{Table: "t", FenceColumn: "f`x", HolderColumn: "key", Dialect: fencing.MySQL, Placeholder: fencing.Question}, "(`f``x` < ? OR (`f``x` = ? AND `key` = ?))"},
	} {
		got, _, err := tc.tab.Where(1, "A", 3)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %s (%v), want %s", tc.tab, got, err, tc.want)
		}
	}
}
