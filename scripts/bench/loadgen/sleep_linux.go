package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

// pacer sleeps until each scheduled send on an OS thread of its own, in nanosleep with the
// timer slack at 1 ns, so a request is released within microseconds of its time. The
// connections' goroutines keep a second P (the generator is pinned to one core, where Go
// would start with one): while the pacer's thread sleeps in the kernel they run undisturbed.
type pacer struct{ procs int }

const prSetTimerslack = 29

// warned: the pacer is made for the warm-up and again for the measured run; say it once.
var warned bool

func newPacer() *pacer {
	p := &pacer{procs: runtime.GOMAXPROCS(0)}
	if p.procs < 2 {
		runtime.GOMAXPROCS(2)
	}
	runtime.LockOSThread()
	// Best effort, but never silent: without them the figures still hold (latency counts from
	// the scheduled time, and send_delay_* shows how late requests left), only less tightly.
	var refused []string
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0); errno != 0 {
		refused = append(refused, fmt.Sprintf("timer slack stays at the default 50 µs (%v)", errno))
	}
	// A higher weight than the connections' threads on the same core, so that the kernel lets
	// the pacer run as it wakes instead of at the end of their slice (root only).
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), -15); err != nil {
		refused = append(refused, fmt.Sprintf("priority not raised (%v; needs root or CAP_SYS_NICE)", err))
	}
	if len(refused) > 0 && !warned {
		warned = true
		for _, r := range refused {
			fmt.Fprintf(os.Stderr, "loadgen: warning: pacer %s: requests may leave later; send_delay_* shows by how much\n", r)
		}
	}
	return p
}

func (p *pacer) until(due time.Time) {
	for w := time.Until(due); w > 0; w = time.Until(due) {
		ts := syscall.NsecToTimespec(int64(w))
		syscall.Nanosleep(&ts, nil) // EINTR: the loop sleeps the rest
	}
}

func (p *pacer) done() {
	// The thread goes back to Go's pool: with the default slack and weight again.
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 0, 0) // 0: the thread's default
	syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 0)
	runtime.UnlockOSThread()
	runtime.GOMAXPROCS(p.procs)
}
