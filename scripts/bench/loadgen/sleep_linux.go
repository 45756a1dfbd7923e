package main

import (
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

func newPacer() *pacer {
	p := &pacer{procs: runtime.GOMAXPROCS(0)}
	if p.procs < 2 {
		runtime.GOMAXPROCS(2)
	}
	runtime.LockOSThread()
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0) // best effort: 50 µs if refused
	// A higher weight than the connections' threads on the same core, so that the kernel lets
	// the pacer run as it wakes instead of at the end of their slice (best effort: root only).
	syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), -15)
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
