package harness

import (
	"context"
	"sync"
)

// eventLoop lets Go code finish JS work from other goroutines: a slot is
// reserved on the VU goroutine (RegisterCallback), filled from anywhere,
// and the VU goroutine runs the queued functions until no slot is open.
// sobek runs promise jobs itself whenever the outermost call returns, so a
// callback that resolves a promise also runs the awaiting async code.
type eventLoop struct {
	mu      sync.Mutex
	queue   []func() error
	spare   []func() error
	pending int
	gen     uint64 // bumped by reset; stale slots are ignored
	wake    Gate   // opened when a slot is filled
	onReset func() // forgets work that would fill slots later (timers)
	onWait  func() // the VU is about to wait for a slot to be filled
}

func newEventLoop(c Clock) *eventLoop {
	return &eventLoop{wake: c.NewGate()}
}

func (l *eventLoop) registerCallback() func(func() error) {
	l.mu.Lock()
	l.pending++
	gen := l.gen
	l.mu.Unlock()
	var once sync.Once
	return func(f func() error) {
		once.Do(func() {
			l.mu.Lock()
			if l.gen != gen {
				l.mu.Unlock()
				return
			}
			l.pending--
			l.queue = append(l.queue, f)
			l.mu.Unlock()
			l.wake.Open()
		})
	}
}

// drain runs queued callbacks until none are queued or reserved. It
// returns the first callback error, or ctx's error when ctx ends first.
func (l *eventLoop) drain(ctx context.Context) error {
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			pending := l.pending
			l.mu.Unlock()
			if pending == 0 {
				return nil
			}
			if l.onWait != nil {
				l.onWait()
			}
			if !l.wake.Wait(ctx) {
				return ctx.Err()
			}
			continue
		}
		batch := l.queue
		l.queue = l.spare[:0]
		l.mu.Unlock()
		for i, f := range batch {
			if err := f(); err != nil {
				clear(batch[i+1:]) // the iteration is over; the rest must not run
				return err
			}
		}
		clear(batch)
		l.spare = batch[:0]
	}
}

// reset forgets every queued callback and reserved slot; called when an
// iteration ends abnormally, so the next one starts clean.
func (l *eventLoop) reset() {
	l.mu.Lock()
	if l.pending != 0 || len(l.queue) != 0 {
		l.gen++
		l.pending = 0
		clear(l.queue)
		l.queue = l.queue[:0]
	}
	l.mu.Unlock()
	if l.onReset != nil {
		l.onReset()
	}
}
