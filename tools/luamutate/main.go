// Command luamutate runs mutation testing on the Redis backends' Lua
// scripts (internal/redisscript/*.lua): it makes small mutants of each
// script (a comparison flipped, a condition dropped, an expiry dropped,
// two writes swapped), runs the Redis conformance harness on each, and
// reports which mutants the suite killed and which survived.
//
// The scripts in the repository are only read, never edited. The test
// binary is built once, with `go build -overlay` replacing the function of
// internal/redisscript that reads the committed script files by one that
// reads a file from $LUAMUTATE_DIR when it holds one (the file of the
// package in the repository is untouched); each mutant then runs that
// binary with the mutated file in a directory of its own. The scripts are
// composed from the files (internal/luacompose), so a mutant of a shared
// block, in the file that holds it (release.lua, fenced_write.lua), runs in
// every script that includes it.
//
//	go run ./tools/luamutate -out docs/mutation-lua.txt
//
// It takes minutes (one run of the suite per mutant): `make mutation`
// runs it, `make test` does not. See docs/mutation.md for the last result
// and the classification of the survivors.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Mutant is one mutation of one line (or two, for a swap) of a script.
type Mutant struct {
	Script string // file name, such as "acquire.lua"
	Line   int    // 1-based line of the (first) changed line
	Op     string // the operator: flip, cond, expiry, swap
	From   string // the original line(s)
	To     string // the mutated line(s)
	src    string // the whole mutated script
}

// isCode reports whether line is Lua code (not blank, not a comment).
func isCode(line string) bool {
	t := strings.TrimSpace(line)
	return t != "" && !strings.HasPrefix(t, "--")
}

// code returns line without a trailing comment (a "--" outside quotes).
func code(line string) string {
	quote := byte(0)
	for i := 0; i+1 < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && line[i+1] == '-':
			return line[:i]
		}
	}
	return line
}

// outsideQuotes reports whether position i of s is outside string literals.
func outsideQuotes(s string, i int) bool {
	quote := byte(0)
	for j := 0; j < i; j++ {
		switch c := s[j]; {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
		}
	}
	return quote == 0
}

var (
	comparison = regexp.MustCompile(`==|~=|<=|>=|<|>`)
	flipped    = map[string]string{"==": "~=", "~=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
	condition  = regexp.MustCompile(`^(\s*(?:if|elseif|while)\s+)(.*?)(\s+(?:then|do)\s*)$`)
	expiryCall = regexp.MustCompile(`redis\.p?call\('(?:PEXPIRE|EXPIRE|PEXPIREAT|EXPIREAT)'[^)]*\)`)
	pxArg      = regexp.MustCompile(`,\s*'PX',\s*[^,)]+`)
	writeCall  = regexp.MustCompile(`^\s*redis\.p?call\('(SET|DEL|INCR|INCRBY|PEXPIRE|EXPIRE|PUBLISH|SPUBLISH|SADD|SREM|RPUSH|LPUSH|LREM|LPOP|HSET|ZADD|ZREM)'`)
)

// splitTop splits cond at the top-level (outside parentheses and quotes)
// occurrences of sep (" and " or " or ").
func splitTop(cond, sep string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(cond); i++ {
		switch cond[i] {
		case '(':
			depth++
		case ')':
			depth--
		}
		if depth == 0 && strings.HasPrefix(cond[i:], sep) && outsideQuotes(cond, i) {
			parts = append(parts, cond[start:i])
			start = i + len(sep)
		}
	}
	return append(parts, cond[start:])
}

// Mutants returns the mutants of the script src named name.
func Mutants(name, src string) []Mutant {
	lines := strings.Split(src, "\n")
	var out []Mutant
	add := func(i int, op string, repl ...string) {
		m := Mutant{Script: name, Line: i + 1, Op: op, From: strings.TrimSpace(lines[i]), To: strings.TrimSpace(repl[0])}
		mut := append([]string(nil), lines...)
		mut[i] = repl[0]
		if len(repl) == 2 { // a swap with the next code line
			j := nextCode(lines, i)
			mut[j] = repl[1]
			m.From += " / " + strings.TrimSpace(lines[j])
			m.To += " / " + strings.TrimSpace(repl[1])
		}
		m.src = strings.Join(mut, "\n")
		out = append(out, m)
	}
	for i, line := range lines {
		if !isCode(line) {
			continue
		}
		c := code(line)
		rest := line[len(c):]
		// Flip each comparison.
		for _, loc := range comparison.FindAllStringIndex(c, -1) {
			if !outsideQuotes(c, loc[0]) {
				continue
			}
			op := c[loc[0]:loc[1]]
			add(i, "flip", c[:loc[0]]+flipped[op]+c[loc[1]:]+rest)
		}
		// Drop a condition: the whole (always true), or one operand of
		// a top-level "and" / "or".
		if m := condition.FindStringSubmatch(c); m != nil {
			add(i, "cond", m[1]+"true"+m[3]+rest)
			for _, sep := range []string{" and ", " or "} {
				parts := splitTop(m[2], sep)
				if len(parts) < 2 {
					continue
				}
				for k := range parts {
					kept := append(append([]string(nil), parts[:k]...), parts[k+1:]...)
					add(i, "cond", m[1]+strings.Join(kept, sep)+m[3]+rest)
				}
			}
		}
		// Drop an expiry: a PEXPIRE call (as a statement: the line goes;
		// in an expression: it becomes 1), or the PX of a SET.
		if loc := expiryCall.FindStringIndex(c); loc != nil {
			if strings.TrimSpace(c[:loc[0]]) == "" && strings.TrimSpace(c[loc[1]:]) == "" {
				add(i, "expiry", "")
			} else {
				add(i, "expiry", c[:loc[0]]+"1"+c[loc[1]:]+rest)
			}
		}
		if loc := pxArg.FindStringIndex(c); loc != nil {
			add(i, "expiry", c[:loc[0]]+c[loc[1]:]+rest)
		}
		// Swap two writes in a row.
		if writeCall.MatchString(c) {
			if j := nextCode(lines, i); j >= 0 && writeCall.MatchString(code(lines[j])) {
				add(i, "swap", lines[j], lines[i])
			}
		}
	}
	return out
}

// nextCode returns the index of the next code line after i, skipping
// comments and blank lines, or -1.
func nextCode(lines []string, i int) int {
	for j := i + 1; j < len(lines); j++ {
		if isCode(lines[j]) {
			return j
		}
	}
	return -1
}

// result is the outcome of one mutant's run.
type result struct {
	Mutant
	Killed  bool
	By      string // the first failing test, or why it counts as killed
	Elapsed time.Duration
}

var failing = regexp.MustCompile(`--- FAIL: (\S+)`)

// reader is the function of internal/redisscript that reads a committed
// script file; the scripts Redis runs are composed from what it returns.
const reader = "func readScript(name string) (string, error) {"

// build builds the test binary of pkg into dir, with an overlay of
// internal/redisscript whose readScript reads $LUAMUTATE_DIR/<name> when
// that file exists, and returns its path. A mutant of a shared block (in
// its home file) thus reaches every script that includes it.
func build(root, dir, pkg string) (string, error) {
	pkgDir := filepath.Join(root, "internal/redisscript")
	files, err := filepath.Glob(filepath.Join(pkgDir, "*.go"))
	if err != nil {
		return "", err
	}
	replace := map[string]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if strings.HasSuffix(f, "_test.go") || !strings.Contains(string(src), reader) {
			continue
		}
		out := strings.Replace(string(src), reader, "func embeddedReadScript(name string) (string, error) {", 1)
		tmp := filepath.Join(dir, "overlay-"+filepath.Base(f))
		if err := os.WriteFile(tmp, []byte(out), 0o644); err != nil {
			return "", err
		}
		replace[f] = tmp
	}
	if len(replace) != 1 {
		return "", fmt.Errorf("internal/redisscript: %d files define %q, want 1", len(replace), reader)
	}
	added := "// Code generated by tools/luamutate for its test binary only.\n\npackage redisscript\n\n" +
		"import (\n\t\"os\"\n\t\"path/filepath\"\n)\n\n" + reader + "\n" +
		"\tif dir := os.Getenv(\"LUAMUTATE_DIR\"); dir != \"\" {\n" +
		"\t\tif b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {\n\t\t\treturn string(b), nil\n\t\t}\n\t}\n" +
		"\treturn embeddedReadScript(name)\n}\n"
	zz := filepath.Join(dir, "zz_luamutate.go")
	if err := os.WriteFile(zz, []byte(added), 0o644); err != nil {
		return "", err
	}
	replace[filepath.Join(pkgDir, "zz_luamutate.go")] = zz
	data, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	if err != nil {
		return "", err
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, data, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mutant.test")
	cmd := exec.Command("go", "test", "-overlay", ov, "-c", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the test binary: %v\n%s", err, out)
	}
	return bin, nil
}

// run runs the test binary on m and reports the outcome.
func run(ctx context.Context, bin, testDir, dir, logs, pattern string, timeout time.Duration, id int, m Mutant) result {
	start := time.Now()
	mdir := filepath.Join(dir, fmt.Sprint(id))
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return result{Mutant: m, By: "setup: " + err.Error()}
	}
	if m.src != "" {
		if err := os.WriteFile(filepath.Join(mdir, m.Script), []byte(m.src), 0o644); err != nil {
			return result{Mutant: m, By: "setup: " + err.Error()}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.count=1", "-test.failfast", "-test.run", pattern)
	cmd.Dir = testDir
	cmd.Env = append(os.Environ(), "LUAMUTATE_DIR="+mdir)
	out, err := cmd.CombinedOutput()
	if logs != "" {
		_ = os.WriteFile(filepath.Join(logs, fmt.Sprintf("%d.log", id)), out, 0o644)
	}
	r := result{Mutant: m, Elapsed: time.Since(start).Round(time.Second)}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		r.Killed, r.By = true, "timeout"
	default:
		r.Killed = true
		if f := failing.FindAllStringSubmatch(string(out), -1); len(f) > 0 {
			r.By = f[len(f)-1][1]
		} else {
			r.By = "test binary failed: " + lastLine(string(out))
		}
	}
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func main() {
	scripts := flag.String("scripts", "acquire.lua,renew.lua,release.lua,inspect.lua", "comma-separated scripts of internal/redisscript to mutate")
	pkg := flag.String("pkg", "./backend/redis/", "package whose tests run on each mutant")
	pattern := flag.String("run", "^TestConformance$", "tests to run on each mutant (go test -run)")
	jobs := flag.Int("j", 2, "mutants run at once")
	timeout := flag.Duration("timeout", 3*time.Minute, "bound of one mutant's run (a run that hits it counts as killed)")
	list := flag.Bool("list", false, "only list the mutants")
	only := flag.String("only", "", "run only the mutants with these ids (comma-separated), as listed by -list")
	outPath := flag.String("out", "", "also write the results, one mutant a line, to this file")
	logs := flag.String("logs", "", "write each mutant's test output to <id>.log in this directory")
	flag.Parse()

	root, err := os.Getwd()
	if err != nil {
		fatal(err)
	}
	all := loadMutants(root, *scripts)
	if *list {
		for i, m := range all {
			fmt.Printf("%3d %s:%d %s: %s -> %s\n", i, m.Script, m.Line, m.Op, m.From, m.To)
		}
		return
	}
	dir, err := os.MkdirTemp("", "luamutate")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)

	bin, err := build(root, dir, *pkg)
	if err != nil {
		fatal(err)
	}
	testDir := filepath.Join(root, *pkg)
	// The unmutated scripts must pass: otherwise every mutant is "killed".
	if r := run(context.Background(), bin, testDir, dir, *logs, *pattern, *timeout, -1, Mutant{}); r.Killed {
		fatal(fmt.Errorf("the tests fail on the unmutated scripts (%s)", r.By))
	}
	results := runAll(all, onlyIDs(*only), *jobs, func(i int, m Mutant) result {
		return run(context.Background(), bin, testDir, dir, *logs, *pattern, *timeout, i, m)
	})
	report(results, *outPath)
}

// loadMutants reads the comma-separated scripts of internal/redisscript
// below root and returns all their mutants, numbered in that order.
func loadMutants(root, scripts string) []Mutant {
	var all []Mutant
	for _, s := range strings.Split(scripts, ",") {
		src, err := os.ReadFile(filepath.Join(root, "internal/redisscript", s))
		if err != nil {
			fatal(fmt.Errorf("run from the repository's root: %w", err))
		}
		all = append(all, Mutants(s, string(src))...)
	}
	return all
}

// onlyIDs parses -only: the set of mutant ids to run (empty: all).
func onlyIDs(only string) map[int]bool {
	selected := map[int]bool{}
	for _, f := range strings.Split(only, ",") {
		var id int
		if _, err := fmt.Sscan(f, &id); err == nil {
			selected[id] = true
		}
	}
	return selected
}

// runAll runs the selected mutants, jobs at once, printing each result as
// it comes; results[i] is nil for a mutant not run.
func runAll(all []Mutant, selected map[int]bool, jobs int, runOne func(int, Mutant) result) []*result {
	results := make([]*result, len(all))
	sem := make(chan struct{}, jobs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, m := range all {
		if len(selected) > 0 && !selected[i] {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r := runOne(i, m)
			mu.Lock()
			results[i] = &r
			fmt.Printf("%3d %s:%d %s: %s -> %s: %s (%v)\n", i, m.Script, m.Line, m.Op, m.From, m.To, state(r), r.Elapsed)
			mu.Unlock()
		})
	}
	wg.Wait()
	return results
}

// state is a result as the report prints it.
func state(r result) string {
	if r.Killed {
		return "killed by " + r.By
	}
	return "SURVIVED"
}

// report prints the summary and, with outPath, writes one line a mutant
// run and the summary to it.
func report(results []*result, outPath string) {
	var lines []string
	killed, total := 0, 0
	for i, r := range results {
		if r == nil {
			continue
		}
		total++
		if r.Killed {
			killed++
		}
		lines = append(lines, fmt.Sprintf("%d\t%s:%d\t%s\t%s -> %s\t%s", i, r.Script, r.Line, r.Op, r.From, r.To, state(*r)))
	}
	summary := fmt.Sprintf("%d mutants, %d killed, %d survived", total, killed, total-killed)
	fmt.Println(summary)
	if outPath != "" {
		if err := os.WriteFile(outPath, []byte(strings.Join(append(lines, summary), "\n")+"\n"), 0o644); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "luamutate:", err)
	os.Exit(2)
}
