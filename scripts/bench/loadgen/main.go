// loadgen drives an admission webhook over TLS with keep-alive connections.
//
// Open loop at a fixed offered rate (-rate > 0): requests are scheduled at fixed intervals
// and latency is measured from the *scheduled* time, so a stalled server is charged for
// the queue it causes (no coordinated omission). The schedule is kept by one goroutine on an OS
// thread of its own that sleeps with nanosecond timer slack (sleep_linux.go): Go's own timers
// wake in whole milliseconds when nothing else is due (epoll's timeout), which made every
// request ~0.5 ms late before it was sent, a delay charged to every target alike. How late
// each request really started is reported beside its latency (send_delay_*). Saturation
// (-rate 0): -conns clients send back to back. With -pid, the target process's CPU time over the
// measured run (from /proc, user + system, all its threads) divided by the admissions answered:
// what one admission costs the server, a figure the machine's stalls do not move as they move
// req/s. Prints one JSON object.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Target     string  `json:"target"`
	Rate       float64 `json:"offered_rps"`
	Sent       int64   `json:"sent"`
	OK         int64   `json:"ok"`
	Errors     int64   `json:"errors"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"achieved_rps"`
	P50        float64 `json:"p50_ms"`
	P90        float64 `json:"p90_ms"`
	P99        float64 `json:"p99_ms"`
	Max        float64 `json:"max_ms"`
	// From the scheduled time to the start of the request on a connection: the generator's own
	// lateness (a stall of its core, its thread waking), or all connections busy.
	// Absent at saturation (no schedule); present, even when 0, at a fixed rate.
	SendDelayP50 *float64 `json:"send_delay_p50_ms,omitempty"`
	SendDelayP99 *float64 `json:"send_delay_p99_ms,omitempty"`
	SendDelayMax *float64 `json:"send_delay_max_ms,omitempty"`
	// With -pid: the server's CPU seconds over the measured run, and per admission answered.
	ServerCPU         *float64 `json:"server_cpu_s,omitempty"`
	CPUPerAdmissionUs *float64 `json:"server_cpu_us_per_admission,omitempty"`
}

// cpuSeconds is a process's user + system CPU time, all threads, from /proc/PID/stat.
func cpuSeconds(pid int, hz float64) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count the fields after its closing paren.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	utime, err1 := strconv.ParseFloat(fields[11], 64) // field 14 of the line
	stime, err2 := strconv.ParseFloat(fields[12], 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cannot read the CPU time of %d", pid)
	}
	return (utime + stime) / hz, nil
}

func main() {
	url := flag.String("url", "https://127.0.0.1:8443/mutate", "endpoint")
	caFile := flag.String("ca", "", "CA bundle (PEM)")
	rate := flag.Float64("rate", 0, "offered requests/s; 0 = saturation")
	duration := flag.Duration("duration", 10*time.Second, "measured duration")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured warm-up")
	conns := flag.Int("conns", 32, "concurrent keep-alive connections")
	bodies := flag.String("bodies", "", "directory of AdmissionReview JSON files, sent round robin")
	target := flag.String("target", "", "label for the output")
	pid := flag.Int("pid", 0, "the target server's process: report its CPU time per admission")
	hz := flag.Float64("hz", 100, "clock ticks per second of /proc's CPU times (getconf CLK_TCK)")
	flag.Parse()

	pool := x509.NewCertPool()
	pem, err := os.ReadFile(*caFile)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "cannot load CA", *caFile, err)
		os.Exit(2)
	}
	files, _ := filepath.Glob(filepath.Join(*bodies, "*.json"))
	var payloads [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			panic(err)
		}
		payloads = append(payloads, b)
	}
	if len(payloads) == 0 {
		fmt.Fprintln(os.Stderr, "no bodies in", *bodies)
		os.Exit(2)
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			MaxIdleConns:        *conns,
			MaxIdleConnsPerHost: *conns,
			MaxConnsPerHost:     *conns,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	var seq int64
	send := func() bool {
		i := atomic.AddInt64(&seq, 1)
		req, _ := http.NewRequest("POST", *url, bytes.NewReader(payloads[int(i)%len(payloads)]))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && bytes.Contains(body, []byte(`"allowed":true`))
	}

	var mu sync.Mutex
	var lat, delay []float64
	var ok, bad, sent int64
	// started < 0: no send delay to record (saturation has no schedule).
	record := func(d, started time.Duration, success bool) {
		atomic.AddInt64(&sent, 1)
		if !success {
			atomic.AddInt64(&bad, 1)
			return
		}
		atomic.AddInt64(&ok, 1)
		mu.Lock()
		lat = append(lat, float64(d.Microseconds())/1000)
		if started >= 0 {
			delay = append(delay, float64(started.Microseconds())/1000)
		}
		mu.Unlock()
	}

	run := func(d time.Duration, measure bool) time.Duration {
		start := time.Now()
		end := start.Add(d)
		var wg sync.WaitGroup
		if *rate <= 0 {
			for c := 0; c < *conns; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						t := time.Now()
						s := send()
						if measure {
							record(time.Since(t), -1, s)
						}
					}
				}()
			}
		} else {
			slots := make(chan time.Time, 1<<16)
			for c := 0; c < *conns; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for due := range slots {
						started := time.Since(due)
						s := send()
						if measure {
							record(time.Since(due), started, s)
						}
					}
				}()
			}
			interval := time.Duration(float64(time.Second) / *rate)
			pacer := newPacer()
			for i := 0; ; i++ {
				due := start.Add(time.Duration(i) * interval)
				if !due.Before(end) {
					break
				}
				pacer.until(due)
				slots <- due
			}
			pacer.done()
			close(slots)
		}
		wg.Wait()
		return time.Since(start)
	}

	serverCPU := func() float64 {
		if *pid <= 0 {
			return 0
		}
		seconds, err := cpuSeconds(*pid, *hz)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		return seconds
	}
	run(*warmup, false)
	cpu0 := serverCPU()
	elapsed := run(*duration, true)
	cpu1 := serverCPU()
	sort.Float64s(lat)
	sort.Float64s(delay)
	pct := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		return xs[int(p*float64(len(xs)-1))]
	}
	r := result{Target: *target, Rate: *rate, Sent: sent, OK: ok, Errors: bad, Seconds: elapsed.Seconds(),
		Throughput: float64(ok) / elapsed.Seconds(), P50: pct(lat, 0.50), P90: pct(lat, 0.90), P99: pct(lat, 0.99),
		Max: pct(lat, 1.0)}
	if *rate > 0 {
		p50, p99, top := pct(delay, 0.50), pct(delay, 0.99), pct(delay, 1.0)
		r.SendDelayP50, r.SendDelayP99, r.SendDelayMax = &p50, &p99, &top
	}
	if *pid > 0 && ok > 0 {
		used := cpu1 - cpu0
		perAdmission := used / float64(ok) * 1e6
		r.ServerCPU, r.CPUPerAdmissionUs = &used, &perAdmission
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}
