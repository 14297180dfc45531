package fencing

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Errors of the SQL guard.
var (
	// ErrNoRow is wrapped by the error of [SQLTable.Set] when no row has
	// the key: the guard updates rows, it does not create them.
	ErrNoRow = errors.New("fencing: no such row")
	// ErrInvalidTable is wrapped by errors about an [SQLTable] that cannot
	// be used: a missing or malformed table or column name, an unknown
	// placeholder style. Nothing was sent to the database.
	ErrInvalidTable = errors.New("fencing: invalid sql table description")
)

// Placeholder is the bind parameter style of a database driver.
type Placeholder int

const (
	// Dollar numbers parameters $1, $2, ... (PostgreSQL: pgx). The
	// zero value.
	Dollar Placeholder = iota
	// Question writes every parameter as ? (MySQL, SQLite).
	Question
)

// Dialect decides how [SQLTable] quotes the names it writes into SQL text.
type Dialect int

const (
	// ANSI quotes names in double quotes, an embedded double quote
	// doubled: PostgreSQL, SQLite (and MySQL in ANSI_QUOTES mode). The
	// zero value.
	ANSI Dialect = iota
	// MySQL quotes names in backticks, an embedded backtick doubled
	// (MySQL, MariaDB). It needs Placeholder Question.
	MySQL
)

// SQLTable describes a table whose rows are guarded by fencing tokens, for
// use with database/sql. Each guarded row carries, next to the data, the
// highest token accepted for it and the holder id that presented it. The
// shape, with the default column names (PostgreSQL):
//
//	CREATE TABLE resources (
//	    key    text   PRIMARY KEY,
//	    value  text,
//	    fence  bigint NOT NULL DEFAULT 0,  -- highest token accepted; 0: none yet
//	    holder text   NOT NULL DEFAULT ''  -- holder id that presented it
//	);
//
// A row must exist before it is guarded (insert it with fence 0); the guard
// only updates. Tokens are stored as signed 64-bit integers, so tokens
// above math.MaxInt64 are refused (no backend grants them: Redis fences
// stay at or below 2^53, etcd revisions are int64).
//
// The rule ([Check]) is part of the UPDATE's WHERE clause:
//
//	UPDATE "resources" SET "value" = $1, "fence" = $2, "holder" = $3
//	 WHERE "key" = $4 AND ("fence" < $2 OR ("fence" = $2 AND "holder" = $3))
//
// so the check and the write are one statement: the database takes the
// row lock and re-evaluates the condition on the latest row version
// (PostgreSQL at READ COMMITTED and above, MySQL InnoDB, SQLite), and a
// rejected write changes nothing. A rejection is recognised by zero rows
// affected, so the driver must report matched rows: with MySQL
// (github.com/go-sql-driver/mysql) set clientFoundRows=true in the DSN,
// or a repeated identical write by the same holder reads as a rejection.
// Use [SQLTable.Where] to add the same rule to your own UPDATE statements.
//
// Every name is quoted for the Dialect, so keywords and SQL functions
// (key, order, user: unquoted, PostgreSQL reads user as CURRENT_USER and
// the UPDATE would match every row) are plain column names, and a quote
// inside a name is escaped. A quoted name is exact: on PostgreSQL a table
// created as CREATE TABLE Resources is named resources (unquoted names
// fold to lower case), so write "resources". Table may be
// schema-qualified with one dot ("app.resources" is table resources of
// schema app); column names are taken whole. Empty names, names with a NUL
// byte and a Table with more than one dot are refused before anything is
// sent.
type SQLTable struct {
	Table string // table name, e.g. "resources" or "app.resources"; required

	// Column names; empty means the default in parentheses.
	KeyColumn    string // ("key") the primary key
	ValueColumn  string // ("value") the column Set writes
	FenceColumn  string // ("fence") bigint, the highest accepted token
	HolderColumn string // ("holder") text, the holder id of that token

	// Placeholder is the driver's parameter style. Default Dollar.
	Placeholder Placeholder

	// Dialect decides the quoting of names. Default ANSI (PostgreSQL,
	// SQLite); MySQL for backticks.
	Dialect Dialect
}

// SQLExecer is what the guard needs of a database handle: *sql.DB,
// *sql.Tx and *sql.Conn all implement it.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// quoted is an SQLTable whose names are quoted for its dialect, ready to
// be written into SQL text.
type quoted struct {
	SQLTable
	name                          string // Table as the user gave it, for messages
	table, key, value, fence, hol string
}

// quoteName quotes one identifier for d.
func quoteName(d Dialect, name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	return q + strings.ReplaceAll(name, q, q+q) + q
}

// resolved returns t with defaults filled in and its names quoted, or an
// error wrapping ErrInvalidTable.
func (t SQLTable) resolved() (quoted, error) {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&t.KeyColumn, "key")
	def(&t.ValueColumn, "value")
	def(&t.FenceColumn, "fence")
	def(&t.HolderColumn, "holder")
	r := quoted{SQLTable: t, name: t.Table}
	if t.Placeholder != Dollar && t.Placeholder != Question {
		return r, fmt.Errorf("fencing: unknown sql placeholder style %d: %w", t.Placeholder, ErrInvalidTable)
	}
	if t.Dialect != ANSI && t.Dialect != MySQL {
		return r, fmt.Errorf("fencing: unknown sql dialect %d: %w", t.Dialect, ErrInvalidTable)
	}
	if t.Dialect == MySQL && t.Placeholder != Question {
		return r, fmt.Errorf("fencing: sql dialect MySQL needs Placeholder Question: %w", ErrInvalidTable)
	}
	check := func(what, name string) error {
		if name == "" || strings.IndexByte(name, 0) >= 0 {
			return fmt.Errorf("fencing: sql %s name %q is empty or holds a NUL byte: %w", what, name, ErrInvalidTable)
		}
		return nil
	}
	parts := strings.Split(t.Table, ".")
	if len(parts) > 2 {
		return r, fmt.Errorf("fencing: sql table name %q has more than one dot (schema.table): %w", t.Table, ErrInvalidTable)
	}
	for i, p := range parts {
		if err := check("table", p); err != nil {
			return r, err
		}
		parts[i] = quoteName(t.Dialect, p)
	}
	r.table = strings.Join(parts, ".")
	for _, n := range []struct {
		what string
		name string
		dst  *string
	}{
		{"key column", t.KeyColumn, &r.key}, {"value column", t.ValueColumn, &r.value},
		{"fence column", t.FenceColumn, &r.fence}, {"holder column", t.HolderColumn, &r.hol},
	} {
		if err := check(n.what, n.name); err != nil {
			return r, err
		}
		*n.dst = quoteName(t.Dialect, n.name)
	}
	return r, nil
}

// param returns the placeholder of the parameter numbered n (1-based) in
// t's style.
func (t SQLTable) param(n int) string {
	if t.Placeholder == Question {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

// checkToken refuses tokens the guard cannot apply, and an empty holder id
// (the token and holder id are presented together; an empty id would let
// any two holders of a duplicated token pass as one).
func checkToken(token Token, holder string) error {
	if token == 0 {
		return fmt.Errorf("fencing: zero token: %w", ErrInvalidToken)
	}
	if uint64(token) > math.MaxInt64 {
		return fmt.Errorf("fencing: token %d does not fit a bigint column: %w", token, ErrInvalidToken)
	}
	if holder == "" {
		return fmt.Errorf("fencing: empty holder id: %w", ErrInvalidToken)
	}
	return nil
}

// Where returns the guard condition for an UPDATE of your own, with the
// arguments to bind, numbering its parameters from first (ignored with
// Question, where arguments bind in order of appearance):
//
//	("fence" < $3 OR ("fence" = $3 AND "holder" = $4))   args: token, holder          (Dollar)
//	(`fence` < ? OR (`fence` = ? AND `holder` = ?))      args: token, token, holder   (Question, MySQL)
//
// The column names in it are quoted for the Dialect; quote the names of
// your own statement the same way.
// Set the fence and holder columns to the same token and holder in the
// UPDATE, and treat zero rows affected as a rejection (call
// [SQLTable.Stale] to build the error). The error wraps ErrInvalidTable or
// ErrInvalidToken.
func (t SQLTable) Where(token Token, holder string, first int) (cond string, args []any, err error) {
	r, err := t.resolved()
	if err != nil {
		return "", nil, err
	}
	if err := checkToken(token, holder); err != nil {
		return "", nil, err
	}
	return where(r, token, holder, first)
}

func where(r quoted, token Token, holder string, first int) (string, []any, error) {
	if r.Placeholder == Question {
		return fmt.Sprintf("(%s < ? OR (%s = ? AND %s = ?))", r.fence, r.fence, r.hol),
			[]any{int64(token), int64(token), holder}, nil
	}
	tp, hp := r.param(first), r.param(first+1)
	return fmt.Sprintf("(%s < %s OR (%s = %s AND %s = %s))", r.fence, tp, r.fence, tp, r.hol, hp),
		[]any{int64(token), holder}, nil
}

// Set writes value to the value column of the row with key if the fencing
// rule accepts token from holder, and records token and holder in the same
// UPDATE. It returns nil if the row was written; a *[StaleError] (wrapping
// [ErrStale]) carrying the row's accepted token and holder if the rule
// rejected the write, which then changed nothing; an error wrapping
// [ErrNoRow] if no row has the key; errors wrapping [ErrInvalidToken] or
// [ErrInvalidTable] for bad input, before anything is sent.
//
// A rejection costs a second statement (a SELECT of the row's fence and
// holder) to build the StaleError. Run Set inside a transaction (db a
// *sql.Tx) to combine it with other statements; the guard then holds the
// row lock until the transaction ends.
func (t SQLTable) Set(ctx context.Context, db SQLExecer, key, value any, token Token, holder string) error {
	r, err := t.resolved()
	if err != nil {
		return err
	}
	if err := checkToken(token, holder); err != nil {
		return err
	}
	var q strings.Builder
	var args []any
	if r.Placeholder == Question {
		fmt.Fprintf(&q, "UPDATE %s SET %s = ?, %s = ?, %s = ? WHERE %s = ? AND ",
			r.table, r.value, r.fence, r.hol, r.key)
		args = []any{value, int64(token), holder, key}
	} else {
		// $2 and $3 serve both the SET and the condition.
		fmt.Fprintf(&q, "UPDATE %s SET %s = $1, %s = $2, %s = $3 WHERE %s = $4 AND ",
			r.table, r.value, r.fence, r.hol, r.key)
		args = []any{value, int64(token), holder, key}
	}
	cond, cargs, err := where(r, token, holder, 2)
	if err != nil {
		return err
	}
	q.WriteString(cond)
	if r.Placeholder == Question {
		args = append(args, cargs...)
	}
	res, err := db.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return fmt.Errorf("fencing: sql update of %s: %w", r.name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fencing: sql update of %s: rows affected: %w", r.name, err)
	}
	if n > 0 {
		return nil
	}
	return stale(ctx, r, db, key, token, holder)
}

// Stale builds the error for an UPDATE guarded by [SQLTable.Where] that
// affected no row: it reads the row's fence and holder and returns a
// *[StaleError] (wrapping [ErrStale]), or an error wrapping [ErrNoRow] if
// the row does not exist. If the row now accepts token (it was deleted
// and inserted again in between), the error says so and wraps neither:
// retry the write.
func (t SQLTable) Stale(ctx context.Context, db SQLExecer, key any, token Token, holder string) error {
	r, err := t.resolved()
	if err != nil {
		return err
	}
	return stale(ctx, r, db, key, token, holder)
}

func stale(ctx context.Context, r quoted, db SQLExecer, key any, token Token, holder string) error {
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s = %s",
		r.fence, r.hol, r.table, r.key, r.param(1))
	var fence int64
	var from string
	switch err := db.QueryRowContext(ctx, q, key).Scan(&fence, &from); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("fencing: sql update of %s: key %v: %w", r.name, key, ErrNoRow)
	case err != nil:
		return fmt.Errorf("fencing: sql update of %s: reading the fence after a rejected update: %w", r.name, err)
	case fence < 0:
		return fmt.Errorf("fencing: sql update of %s: key %v holds negative fence %d", r.name, key, fence)
	}
	if err := Check(Token(fence), from, token, holder); err != nil {
		return err
	}
	if Token(fence) == token && from == holder {
		return fmt.Errorf("fencing: sql update of %s: key %v matched no row, but the row holds token %d from this holder: "+
			"it was written in between, or the driver reports changed rather than matched rows (MySQL: set clientFoundRows=true)", r.name, key, token)
	}
	return fmt.Errorf("fencing: sql update of %s: key %v matched no row, but the row now accepts token %d (it changed in between); retry", r.name, key, token)
}
