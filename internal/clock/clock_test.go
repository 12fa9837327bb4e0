package clock

import (
	"testing"
	"time"
)

func TestManualTimersFireInOrderWhenDue(t *testing.T) {
	start := time.Unix(1000, 0)
	m := NewManual(start)
	late := m.NewTimer(2 * time.Second)
	early := m.NewTimer(time.Second)
	stopped := m.NewTimer(time.Second)
	if !stopped.Stop() {
		t.Fatal("stopping an armed timer reported false")
	}
	if m.Timers() != 2 {
		t.Fatalf("%d timers armed, want 2", m.Timers())
	}
	m.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("fired before it was due")
	default:
	}
	m.Advance(time.Millisecond)
	if got := <-early.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("fired at %v", got)
	}
	m.Advance(time.Second)
	<-late.C()
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if m.Now() != start.Add(2*time.Second) || m.Timers() != 0 {
		t.Fatalf("now %v, %d timers", m.Now(), m.Timers())
	}
	if zero := m.NewTimer(0); zero == nil {
		t.Fatal("nil timer")
	} else {
		<-zero.C() // a timer for now fires at once
	}
}
