// stallprobe measures how often this machine takes a core away: it spins reading the clock
// for -duration and counts the gaps over -min between two readings (the host descheduling
// the vCPU, interrupts, kernel threads). Run one per core, pinned, with nothing else busy.
// A p99 at a low load cannot be shown below the stall length once stalls cover more than
// about 1% of requests' lifetimes; the benchmark records this beside its latencies.
// Prints one JSON object.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"runtime"
	"sort"
	"time"
)

type result struct {
	Label      string  `json:"label"`
	Seconds    float64 `json:"seconds"`
	Gaps       int     `json:"gaps"`
	StalledMS  float64 `json:"stalled_ms"`
	PerSecond  float64 `json:"stalled_ms_per_s"`
	OverOneMS  int     `json:"gaps_over_1ms"`
	LongestMS  float64 `json:"longest_ms"`
	MinGapUsec int64   `json:"min_gap_us"`
}

func main() {
	duration := flag.Duration("duration", 5*time.Second, "how long to spin")
	minGap := flag.Duration("min", 200*time.Microsecond, "the shortest gap counted")
	label := flag.String("label", "", "label for the output")
	flag.Parse()
	runtime.LockOSThread()
	var gaps []time.Duration
	start := time.Now()
	last := start
	end := start.Add(*duration)
	for last.Before(end) {
		now := time.Now()
		if d := now.Sub(last); d > *minGap {
			gaps = append(gaps, d)
		}
		last = now
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	r := result{Label: *label, Seconds: last.Sub(start).Seconds(), Gaps: len(gaps), MinGapUsec: minGap.Microseconds()}
	var total time.Duration
	for _, g := range gaps {
		total += g
		if g > time.Millisecond {
			r.OverOneMS++
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	r.StalledMS = ms(total)
	r.PerSecond = math.Round(r.StalledMS/r.Seconds*1000) / 1000
	r.Seconds = math.Round(r.Seconds*1000) / 1000
	if len(gaps) > 0 {
		r.LongestMS = ms(gaps[len(gaps)-1])
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}
