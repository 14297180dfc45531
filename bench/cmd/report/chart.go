// The SVG chart (bench/chart.svg).

package main

import (
	"fmt"
	"math"
	"strings"
)

// Chart layout, in pixels.
const (
	chartLabelW = 260 // library names, right-aligned
	chartPlotW  = 420 // the bars
	chartBarH   = 7
	chartGap    = 10 // between two libraries
	chartTop    = 60 // first panel's first bar
	chartWidth  = chartLabelW + chartPlotW + 40
)

// chartSeries is one bar of the first panel: a b.N scenario at one
// concurrency.
type chartSeries struct {
	scenario, label, color string
}

// chartHotPath lists the first panel's bars of each library.
var chartHotPath = []chartSeries{
	{"AcquireRelease/conc=1", "acquire+release, 1", "#4e79a7"},
	{"AcquireRelease/conc=64", "acquire+release, 64", "#a0cbe8"},
	{"Renew/conc=1", "renew, 1", "#f28e2b"},
	{"Renew/conc=64", "renew, 64", "#ffbe7d"},
}

// chart draws two panels: hot-path throughput relative to the baseline,
// and contended hand-offs per second (log scale).
func chart(r *runData) string {
	var present []string
	for _, lib := range libs {
		for _, s := range chartHotPath {
			if _, ok := r.opsPerSec(s.scenario, lib); ok {
				present = append(present, lib)
				break
			}
		}
	}
	var hand []string
	for _, lib := range libs {
		if _, ok := r.get("Contended", lib, "handoffs/s"); ok {
			hand = append(hand, lib)
		}
	}
	panel1H := len(present) * (len(chartHotPath)*chartBarH + chartGap)
	top2 := chartTop + panel1H + 70
	height := top2 + len(hand)*(chartBarH*2+chartGap) + 40

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	chartRatios(&b, r, present, panel1H)
	chartHandoffs(&b, r, hand, top2)
	b.WriteString("</svg>\n")
	return b.String()
}

// chartRatios draws the first panel: each library's hot-path throughput
// relative to the baseline, panel1H high.
func chartRatios(b *strings.Builder, r *runData, present []string, panel1H int) {
	const top = chartTop
	groupH := len(chartHotPath)*chartBarH + chartGap
	maxRatio := 1.0
	for _, lib := range present {
		for _, s := range chartHotPath {
			if v, ok := r.opsRatio(s.scenario, lib, baseline); ok {
				maxRatio = math.Max(maxRatio, v.med)
			}
		}
	}
	maxRatio = math.Ceil(maxRatio*4) / 4

	fmt.Fprintf(b, `<text x="10" y="20" font-size="14" font-weight="bold">Throughput relative to the raw rueidis baseline (same run; higher is better)</text>`+"\n")
	// Legend.
	lx := 10
	for _, s := range chartHotPath {
		fmt.Fprintf(b, `<rect x="%d" y="32" width="12" height="10" fill="%s"/><text x="%d" y="41">%s</text>`+"\n", lx, s.color, lx+16, esc(s.label))
		lx += 24 + 7*len(s.label)
	}
	x := func(v float64) float64 { return chartLabelW + v/maxRatio*chartPlotW }
	// Grid.
	for v := 0.0; v <= maxRatio+1e-9; v += 0.25 {
		stroke := "#ddd"
		if math.Abs(v-1) < 1e-9 {
			stroke = "#333"
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", x(v), top-5, x(v), top+panel1H, stroke)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%.2fx</text>`+"\n", x(v), top+panel1H+14, v)
	}
	for i, lib := range present {
		y := top + i*groupH
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", chartLabelW-8, y+len(chartHotPath)*chartBarH/2+4, esc(strings.ReplaceAll(display[lib], "**", "")))
		for j, s := range chartHotPath {
			sp, ok := r.opsRatio(s.scenario, lib, baseline)
			if !ok {
				continue
			}
			v := sp.med
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s: %.2fx</title></rect>`+"\n",
				chartLabelW, y+j*chartBarH, x(v)-chartLabelW, chartBarH-1, s.color, esc(lib), esc(s.label), v)
		}
	}
}

// chartHandoffs draws the second panel, from top2: contended hand-offs per
// second of each library in hand, log scale.
func chartHandoffs(b *strings.Builder, r *runData, hand []string, top2 int) {
	const barH, gap = chartBarH, chartGap
	maxH := 1.0
	for _, lib := range hand {
		v, _ := r.get("Contended", lib, "handoffs/s")
		maxH = math.Max(maxH, v)
	}
	fmt.Fprintf(b, `<text x="10" y="%d" font-size="14" font-weight="bold">Contended (16 workers, one key): hand-offs per second, log scale (higher is better)</text>`+"\n", top2-30)
	decades := math.Ceil(math.Log10(maxH))
	lxv := func(v float64) float64 {
		if v < 1 {
			v = 1
		}
		return chartLabelW + math.Log10(v)/decades*chartPlotW
	}
	for d := 0.0; d <= decades; d++ {
		v := math.Pow(10, d)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", lxv(v), top2-5, lxv(v), top2+len(hand)*(barH*2+gap))
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", lxv(v), top2+len(hand)*(barH*2+gap)+14, thousands(int64(v)))
	}
	for i, lib := range hand {
		y := top2 + i*(barH*2+gap)
		v, _ := r.get("Contended", lib, "handoffs/s")
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", chartLabelW-8, y+barH+4, esc(strings.ReplaceAll(display[lib], "**", "")))
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#59a14f"><title>%s: %.0f hand-offs/s</title></rect>`+"\n",
			chartLabelW, y, lxv(v)-chartLabelW, barH*2-2, esc(lib), v)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#333">%s</text>`+"\n", lxv(v)+4, y+barH+4, fmtRate(v))
	}
}
