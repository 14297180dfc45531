// Number formats, Markdown table cells and text helpers shared by the tables and the chart.

package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

func fmtRate(v float64) string {
	switch {
	case v >= 100:
		return thousands(int64(math.Round(v)))
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func fmtDur(ns float64) string {
	d := time.Duration(ns)
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

// fmtCPU is a CPU time per operation, in microseconds with two digits
// (the server's share of a cycle is tens of microseconds).
func fmtCPU(ns float64) string {
	return strconv.FormatFloat(ns/1e3, 'f', 1, 64) + " µs"
}

func fmtNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return thousands(int64(math.Round(v)))
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func fmtRatio(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "x"
}

// fmtSpread is a median ratio with the range of the per-pass ratios.
func fmtSpread(s spread, ok bool) string {
	if !ok {
		return "–"
	}
	if s.n < 2 {
		return fmtRatio(s.med, true)
	}
	return fmt.Sprintf("%.2fx (%.2f–%.2f)", s.med, s.lo, s.hi)
}

func cell(r *runData, scenario, lib, unit string, f func(float64) string) string {
	v, ok := r.get(scenario, lib, unit)
	if !ok {
		return "–"
	}
	return f(v)
}

type table struct {
	head []string
	rows [][]string
}

// markdown is t as String renders it, or "_not run_" if it has no row
// (its scenario was not measured).
func (t *table) markdown() string {
	if len(t.rows) == 0 {
		return "_not run_\n"
	}
	return t.String()
}

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for i := range t.head {
		if i == 0 {
			b.WriteString(" --- |")
		} else {
			b.WriteString(" ---: |")
		}
	}
	b.WriteByte('\n')
	for _, row := range t.rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "(version not recorded)"
	}
	return s
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// plural is "1 run", "3 runs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
