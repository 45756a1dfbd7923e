//go:build !linux

package main

import "time"

// pacer elsewhere: Go's timers (millisecond wake-ups when idle; the bench runs on Linux).
type pacer struct{}

func newPacer() *pacer               { return &pacer{} }
func (p *pacer) until(due time.Time) { time.Sleep(time.Until(due)) }
func (p *pacer) done()               {}
