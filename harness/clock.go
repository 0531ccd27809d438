package harness

import "time"

// Clock is the time source of the harness's timers (setTimeout and
// setInterval): what time it is, and a way to be woken once a duration has
// passed on it. WallClock is the real clock; a virtual clock can replace it
// without the timers changing.
type Clock interface {
	// Now returns the clock's current time.
	Now() time.Time
	// AfterFunc calls f, on its own goroutine, once d has passed on the
	// clock. stop cancels the call and reports whether it did (false when
	// f has already been started or stopped).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// WallClock is the Clock of real time.
type WallClock struct{}

// Now returns time.Now().
func (WallClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (WallClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
