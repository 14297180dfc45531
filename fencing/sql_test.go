package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/backend/memory"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/guardtest"
	"github.com/fencedlock/fencedlock/internal/history"
	"github.com/fencedlock/fencedlock/internal/testserver"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
)

// openPG starts a PostgreSQL server, opens it with pgx's database/sql driver and creates the
// documented table shape.
func openPG(t *testing.T) *sql.DB {
	t.Helper()
	return openResources(t, "pgx", testserver.StartPostgres(t).DSN(), "bigint")
}

// openResources opens dsn with the database/sql driver driverName, closed
// when the test ends, and creates the documented table shape, its fence
// column of type fenceType.
func openResources(t *testing.T, driverName, dsn, fenceType string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE resources (
	    key    text PRIMARY KEY,
	    value  text,
	    fence  ` + fenceType + ` NOT NULL DEFAULT 0,
	    holder text NOT NULL DEFAULT ''
	)`); err != nil {
		t.Fatal(err)
	}
	return db
}

type row struct {
	value  sql.NullString
	fence  int64
	holder string
}

// readRow reads the row of key on PostgreSQL.
func readRow(t *testing.T, db *sql.DB, key string) row {
	t.Helper()
	return readRowAt(t, db, "$1", key)
}

// readRowAt reads the row of key, the statement's placeholder written ph.
func readRowAt(t *testing.T, db *sql.DB, ph, key string) row {
	t.Helper()
	var r row
	if err := db.QueryRow(`SELECT value, fence, holder FROM resources WHERE key = `+ph, key).Scan(&r.value, &r.fence, &r.holder); err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	return r
}

// questionDB runs ?-style statements on PostgreSQL by numbering the
// placeholders, so the Question style is checked on a real server.
type questionDB struct{ db *sql.DB }

func numbered(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (d questionDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if strings.Contains(q, "$") {
		return nil, fmt.Errorf("dollar placeholder in a Question statement: %s", q)
	}
	return d.db.ExecContext(ctx, numbered(q), args...)
}

func (d questionDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return d.db.QueryRowContext(ctx, numbered(q), args...)
}

var ruleSteps = []struct {
	token  fencing.Token
	holder string
	accept bool
	why    string
}{
	{5, "A", true, "first write: fence 0 in the new row"},
	{5, "A", true, "equal token, same holder"},
	{5, "B", false, "equal token, another holder (a duplicated fence)"},
	{4, "A", false, "older token"},
	{6, "B", true, "greater token"},
	{5, "A", false, "older token after a newer one"},
	{1 << 53, "C", true, "2^53"},
	{1<<53 + 1, "D", true, "2^53+1"},
	{1 << 53, "C", false, "2^53 after 2^53+1"},
	{math.MaxInt64, "E", true, "largest bigint"},
	{math.MaxInt64 - 1, "F", false, "one below it"},
}

// TestSQLSetRule applies ruleSteps to one row with each placeholder style
// and checks the row and the error after every step.
func TestSQLSetRule(t *testing.T) {
	db := openPG(t)
	styles := []struct {
		name string
		tab  fencing.SQLTable
		exec fencing.SQLExecer
	}{
		{"dollar", fencing.SQLTable{Table: "resources"}, db},
		{"question", fencing.SQLTable{Table: "public.resources", Placeholder: fencing.Question}, questionDB{db}},
	}
	for _, st := range styles {
		t.Run(st.name, func(t *testing.T) {
			key := "orders-" + st.name
			if _, err := db.Exec(`INSERT INTO resources (key) VALUES ($1)`, key); err != nil {
				t.Fatal(err)
			}
			runRuleSteps(t, st.tab, st.exec, key, func() row { return readRow(t, db, key) })
		})
	}
}

// runRuleSteps applies ruleSteps to the row of key, which holds fence 0,
// reading it back with read after every step.
func runRuleSteps(t *testing.T, tab fencing.SQLTable, exec fencing.SQLExecer, key string, read func() row) {
	t.Helper()
	ctx := context.Background()
	var accepted fencing.Token
	var from string
	for i, s := range ruleSteps {
		before := read()
		value := fmt.Sprintf("v%d", i)
		err := tab.Set(ctx, exec, key, value, s.token, s.holder)
		after := read()
		if s.accept {
			if err != nil {
				t.Fatalf("step %d (%s): rejected: %v", i, s.why, err)
			}
			if after.value.String != value || after.fence != int64(s.token) || after.holder != s.holder {
				t.Fatalf("step %d (%s): row %+v", i, s.why, after)
			}
			accepted, from = s.token, s.holder
			continue
		}
		var se *fencing.StaleError
		if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("step %d (%s): %v, want a StaleError", i, s.why, err)
		}
		if se.Accepted != accepted || se.AcceptedFrom != from || se.Token != s.token || se.Holder != s.holder {
			t.Fatalf("step %d (%s): %+v, want accepted %d from %s", i, s.why, *se, accepted, from)
		}
		if before != after {
			t.Fatalf("step %d (%s): rejected write changed the row: %+v -> %+v", i, s.why, before, after)
		}
	}
}

// TestSQLMissingRow: the guard does not create rows; a missing one is
// reported with ErrNoRow and nothing is inserted.
func TestSQLMissingRow(t *testing.T) {
	db := openPG(t)
	err := fencing.SQLTable{Table: "resources"}.Set(context.Background(), db, "absent", "v", 3, "A")
	if !errors.Is(err, fencing.ErrNoRow) || errors.Is(err, fencing.ErrStale) {
		t.Fatalf("missing row: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM resources`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after writing a missing row (%v)", n, err)
	}
}

// countingDB counts the statements it is asked to run and runs none.
type countingDB struct{ n int }

func (c *countingDB) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	c.n++
	return nil, errors.New("must not be called")
}

func (c *countingDB) QueryRowContext(context.Context, string, ...any) *sql.Row {
	c.n++
	return nil
}

// TestSQLInvalid: bad input is refused before any statement, with an error
// wrapping a sentinel.
func TestSQLInvalid(t *testing.T) {
	ctx := context.Background()
	good := fencing.SQLTable{Table: "resources"}
	cases := []struct {
		name string
		tab  fencing.SQLTable
		tok  fencing.Token
		hold string
		want error
	}{
		{"zero token", good, 0, "A", fencing.ErrInvalidToken},
		{"token above int64", good, math.MaxInt64 + 1, "A", fencing.ErrInvalidToken},
		{"empty holder", good, 1, "", fencing.ErrInvalidToken},
		{"no table", fencing.SQLTable{}, 1, "A", fencing.ErrInvalidTable},
		{"empty schema", fencing.SQLTable{Table: ".resources"}, 1, "A", fencing.ErrInvalidTable},
		{"empty table after schema", fencing.SQLTable{Table: "app."}, 1, "A", fencing.ErrInvalidTable},
		{"NUL in column", fencing.SQLTable{Table: "resources", FenceColumn: "fe\x00nce"}, 1, "A", fencing.ErrInvalidTable},
		{"two dots", fencing.SQLTable{Table: "a.b.c"}, 1, "A", fencing.ErrInvalidTable},
		{"unknown placeholder", fencing.SQLTable{Table: "resources", Placeholder: 7}, 1, "A", fencing.ErrInvalidTable},
		{"unknown dialect", fencing.SQLTable{Table: "resources", Dialect: 7}, 1, "A", fencing.ErrInvalidTable},
		{"MySQL with Dollar", fencing.SQLTable{Table: "resources", Dialect: fencing.MySQL}, 1, "A", fencing.ErrInvalidTable},
	}
	for _, tc := range cases {
		var db countingDB
		err := tc.tab.Set(ctx, &db, "k", "v", tc.tok, tc.hold)
		if !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), "fencing: ") {
			t.Errorf("%s: Set: %v, want an error wrapping %v", tc.name, err, tc.want)
		}
		if _, _, err := tc.tab.Where(tc.tok, tc.hold, 1); !errors.Is(err, tc.want) {
			t.Errorf("%s: Where: %v, want an error wrapping %v", tc.name, err, tc.want)
		}
		if db.n != 0 {
			t.Errorf("%s: %d statements sent", tc.name, db.n)
		}
	}
}

// TestSQLWhereOwnUpdate uses Where in a statement of one's own, inside a
// transaction, and Stale after a rejection.
func TestSQLWhereOwnUpdate(t *testing.T) {
	db := openPG(t)
	ctx := context.Background()
	if _, err := db.Exec(`CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint, version bigint, fence bigint NOT NULL DEFAULT 0, holder text NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO accounts (id, balance, version) VALUES (1, 100, 0)`); err != nil {
		t.Fatal(err)
	}
	tab := fencing.SQLTable{Table: "accounts", KeyColumn: "id"}
	debit := func(tok fencing.Token, holder string, amount int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		cond, args, err := tab.Where(tok, holder, 3)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx,
			`UPDATE accounts SET balance = balance - $1, version = version + 1, fence = $3, holder = $4 WHERE id = $2 AND `+cond,
			append([]any{amount, 1}, args...)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return tab.Stale(ctx, tx, 1, tok, holder)
		}
		return tx.Commit()
	}
	if err := debit(10, "A", 30); err != nil {
		t.Fatal(err)
	}
	err := debit(9, "B", 50)
	var se *fencing.StaleError
	if !errors.As(err, &se) || se.Accepted != 10 || se.AcceptedFrom != "A" {
		t.Fatalf("older debit: %v", err)
	}
	var bal, ver, fence int64
	if err := db.QueryRow(`SELECT balance, version, fence FROM accounts WHERE id = 1`).Scan(&bal, &ver, &fence); err != nil {
		t.Fatal(err)
	}
	if bal != 70 || ver != 1 || fence != 10 {
		t.Fatalf("balance %d version %d fence %d, want 70 1 10", bal, ver, fence)
	}
	if err := tab.Stale(ctx, db, 2, 1, "A"); !errors.Is(err, fencing.ErrNoRow) {
		t.Fatalf("Stale of a missing row: %v", err)
	}
	// A row that accepts the token after all (changed in between, or a
	// driver counting changed rows) is neither stale nor missing.
	for _, tc := range []struct {
		tok  fencing.Token
		hold string
		want string
	}{{10, "A", "holds token 10 from this holder"}, {11, "B", "now accepts token 11"}} {
		err := tab.Stale(ctx, db, 1, tc.tok, tc.hold)
		if err == nil || errors.Is(err, fencing.ErrStale) || errors.Is(err, fencing.ErrNoRow) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Stale(%d, %s) on a row at fence 10 from A: %v", tc.tok, tc.hold, err)
		}
	}
}

// TestSQLConcurrentWriters: writers on separate connections present mixed
// tokens at once; the row ends with the greatest token and the value
// written with it. Each writer's tokens wrap around, so some of its writes
// are certainly older than one already accepted and must be rejected.
func TestSQLConcurrentWriters(t *testing.T) {
	db := openPG(t)
	db.SetMaxOpenConns(16)
	concurrentWriters(t, db, fencing.SQLTable{Table: "resources"}, "$1", "PostgreSQL")
}

// concurrentWriters runs 8 writers of 30 mixed tokens each on the row
// counter of db through tab at once (ph: the driver's placeholder), and
// checks that the row ends with the greatest token and its writer's value,
// and that some writes were accepted and some rejected.
func concurrentWriters(t *testing.T, db *sql.DB, tab fencing.SQLTable, ph, name string) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO resources (key) VALUES ('counter')`); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const writers, perWriter = 8, 30
	accepted, rejected := guardtest.MixedTokens(t, writers, perWriter, func(int) guardtest.Write {
		return func(tok fencing.Token, holder string) error {
			return tab.Set(ctx, db, "counter", tok.String()+"/"+holder, tok, holder)
		}
	})
	r := readRowAt(t, db, ph, "counter")
	maxTok := int64(writers * perWriter)
	if r.fence != maxTok || !strings.HasPrefix(r.value.String, strconv.FormatInt(maxTok, 10)+"/") || !strings.HasSuffix(r.value.String, "/"+r.holder) {
		t.Fatalf("final row %+v, want fence %d and its writer's value", r, maxTok)
	}
	if accepted+rejected != writers*perWriter || accepted == 0 || rejected == 0 {
		t.Fatalf("accepted %d rejected %d", accepted, rejected)
	}
	t.Logf("%d writes with mixed tokens on %s: %d accepted, %d rejected; final fence %d", writers*perWriter, name, accepted, rejected, r.fence)
}

// ExampleSQLTable_Set guards a row of a PostgreSQL table with the fence
// of a lease.
func ExampleSQLTable_Set() {
	var db *sql.DB // sql.Open("pgx", dsn), with the table of SQLTable's doc
	var fence fencing.Token
	var holder string // lease.Fence(), lease.Holder()
	if db == nil {
		return
	}
	tab := fencing.SQLTable{Table: "resources"}
	err := tab.Set(context.Background(), db, "orders", `{"next": 42}`, fence, holder)
	var stale *fencing.StaleError
	switch {
	case errors.As(err, &stale):
		fmt.Println("a newer holder wrote first:", stale.Accepted)
	case err != nil:
		fmt.Println(err)
	}
}

// TestSQLPausedHolderHistory runs the paused-holder workload against a row
// of PostgreSQL: workers (goroutines with their own Lockers on one
// in-memory lock store) increment a counter row under the lock, reading it
// and writing counter+1 with SQLTable.Set, recording every step in a
// history. The victim acquires first with ManualRenew and stops between
// its read and its write until its lease expired and others wrote. With
// the guard the history check passes and the victim is rejected; the
// negative control (a plain UPDATE) must fail the check.
func TestSQLPausedHolderHistory(t *testing.T) {
	db := openPG(t)
	for _, fenced := range []bool{true, false} {
		name := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
		t.Run(name, func(t *testing.T) {
			res, victim := sqlPauseWorkload(t, db, name, fenced)
			t.Logf("%s: %d writes attempted, %d accepted, %d rejected; paused holder's write: %s",
				name, res.Attempted, res.Accepted, res.Rejected, victim.Kind)
			err := res.Err()
			if fenced {
				if err != nil || victim.Kind != history.Rejected {
					t.Fatalf("with the guard: paused holder's write %s; check: %v", victim.Kind, err)
				}
				return
			}
			if err == nil || victim.Kind != history.Accepted || !res.Has(history.RuleStale) || !res.Has(history.RuleCounter) {
				t.Fatalf("negative control: paused holder's write %s; check: %v", victim.Kind, err)
			}
			t.Logf("negative control, as required, fails the check:\n%v", err)
		})
	}
}

func sqlPauseWorkload(t *testing.T, db *sql.DB, name string, fenced bool) (history.Result, history.Event) {
	const ttl = 300 * time.Millisecond
	key := "counter-" + name
	if _, err := db.Exec(`INSERT INTO resources (key, value) VALUES ($1, '0')`, key); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "history")
	store := memory.NewStore()
	tab := fencing.SQLTable{Table: "resources"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// round is one read-modify-write under the lock, recorded step by step.
	round := func(l *fencedlock.Locker, rec *history.Recorder, between func()) error {
		ls, err := l.Acquire(ctx, "pause-"+name)
		if err != nil {
			return err
		}
		ev := history.Event{Key: key, Fence: ls.Fence(), Holder: ls.Holder()}
		record := func(k history.Kind, msg string) error {
			e := ev
			e.Kind, e.Err = k, msg
			return rec.Record(e)
		}
		if err := record(history.Acquire, ""); err != nil {
			return err
		}
		var cur string
		if err := db.QueryRowContext(ctx, `SELECT value FROM resources WHERE key = $1`, key).Scan(&cur); err != nil {
			return err
		}
		ev.Value = cur
		if err := record(history.Read, ""); err != nil {
			return err
		}
		between()
		n, err := strconv.Atoi(cur)
		if err != nil {
			return err
		}
		ev.Value, ev.RMW, ev.Base = strconv.Itoa(n+1), true, cur
		if err := record(history.Attempt, ""); err != nil {
			return err
		}
		if fenced {
			err = tab.Set(ctx, db, key, ev.Value, ls.Fence(), ls.Holder())
		} else {
			_, err = db.ExecContext(ctx, `UPDATE resources SET value = $1 WHERE key = $2`, ev.Value, key)
		}
		switch {
		case err == nil:
			err = record(history.Accepted, "")
		case errors.Is(err, fencing.ErrStale):
			err = record(history.Rejected, err.Error())
		}
		if err != nil {
			return err
		}
		if err := ls.Release(ctx); err != nil && !errors.Is(err, fencedlock.ErrNotHeld) {
			return err
		}
		return nil
	}
	newLocker := func(proc string, manual bool) (*fencedlock.Locker, *history.Recorder) {
		l := mustLocker(t, store.Backend(), fencedlock.Options{TTL: ttl, ManualRenew: manual})
		t.Cleanup(func() { l.Close() })
		rec, err := history.Open(path, proc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rec.Close() })
		return l, rec
	}

	vl, vrec := newLocker("victim", true)
	inside, resume := make(chan struct{}), make(chan struct{})
	victimDone := make(chan error, 1)
	go func() {
		victimDone <- round(vl, vrec, func() { close(inside); <-resume })
	}()
	select {
	case <-inside:
	case err := <-victimDone:
		t.Fatalf("victim: %v", err)
	}
	pausedAt := time.Now()
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		l, rec := newLocker(fmt.Sprintf("worker%d", i), false)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for r := 0; r < 2000 && time.Since(start) < 30*time.Second && !stop.Load(); r++ {
				if errs[i] = round(l, rec, func() { time.Sleep(time.Millisecond) }); errs[i] != nil {
					return
				}
			}
		}()
	}
	time.Sleep(2*ttl - time.Since(pausedAt))
	if n, ok := history.WaitAccepted(path, "worker", 5, 20*time.Second); !ok {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("workers made %d writes in 20s (%v)", n, errs)
	}
	paused := time.Since(pausedAt)
	close(resume)
	verr := <-victimDone
	time.Sleep(ttl / 2)
	stop.Store(true)
	wg.Wait()
	if verr != nil {
		t.Fatalf("victim: %v", verr)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	var final string
	if err := db.QueryRow(`SELECT value FROM resources WHERE key = $1`, key).Scan(&final); err != nil {
		t.Fatal(err)
	}
	events, err := history.Finish(path, "parent", key, final)
	if err != nil {
		t.Fatal(err)
	}
	vw, _ := history.LastWrite(events, "victim")
	t.Logf("victim paused %v (TTL %v); final counter %s; %d events", paused.Round(time.Millisecond), ttl, final, len(events))
	return history.Check(events, history.Options{Initial: "0", Counter: true}), vw
}
