package scan

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/robfig/cron/v3"
)

// Annotations that give a policy its own background scan schedule.
const (
	AnnotationInterval = "scan.tally.dev/interval"
	AnnotationSchedule = "scan.tally.dev/schedule"
)

// schedule says when a policy's next full scan is due after the last one.
type schedule struct {
	interval time.Duration
	cron     cron.Schedule
}

func (s schedule) next(last time.Time) time.Time {
	if s.cron != nil {
		return s.cron.Next(last)
	}
	return last.Add(s.interval)
}

// period is the nominal time between scans, for spreading first scans.
func (s schedule) period(now time.Time) time.Duration {
	if s.cron != nil {
		n := s.cron.Next(now)
		return s.cron.Next(n).Sub(n)
	}
	return s.interval
}

// scheduleOf reads a policy's schedule annotations (at most one of them).
func scheduleOf(annotations map[string]string, global time.Duration) (schedule, error) {
	iv, hasInterval := annotations[AnnotationInterval]
	cr, hasCron := annotations[AnnotationSchedule]
	switch {
	case hasInterval && hasCron:
		return schedule{}, fmt.Errorf("a policy may have %s or %s, not both", AnnotationInterval, AnnotationSchedule)
	case hasInterval:
		d, err := time.ParseDuration(iv)
		if err != nil || d <= 0 {
			return schedule{}, fmt.Errorf("%s: %q is not a positive duration", AnnotationInterval, iv)
		}
		return schedule{interval: d}, nil
	case hasCron:
		c, err := cron.ParseStandard(cr)
		if err != nil {
			return schedule{}, fmt.Errorf("%s: %q is not a five-field cron schedule: %w", AnnotationSchedule, cr, err)
		}
		return schedule{cron: c}, nil
	}
	return schedule{interval: global}, nil
}

// jitter spreads the first scans of policies over their period, by a stable
// hash of the name, so that a fleet of policies never rescans all at once.
func jitter(name string, period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name)) // a hash.Hash's Write never returns an error
	return time.Duration(h.Sum64() % uint64(period))
}
