package variables

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	jpfunctions "github.com/jmespath-community/go-jmespath/pkg/functions"
)

const rfc3339 = time.RFC3339

// now is the clock of time_now, time_now_utc and time_since; tests replace it.
var now = time.Now

func parseTime(fn, s string) (time.Time, error) {
	t, err := time.Parse(rfc3339, s)
	if err != nil {
		return t, fmt.Errorf("%s: %q is not an RFC 3339 time", fn, s)
	}
	return t, nil
}

func parseDuration(fn, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration", fn, s)
	}
	return d, nil
}

// jpTimeSince: time_since(layout, start, end) is end-start; an empty layout
// is RFC 3339, an empty end is now.
func jpTimeSince(a []any) (any, error) {
	layout := str(a[0])
	if layout == "" {
		layout = rfc3339
	}
	start, err := time.Parse(layout, str(a[1]))
	if err != nil {
		return nil, fmt.Errorf("time_since: %w", err)
	}
	end := now()
	if e := str(a[2]); e != "" {
		if end, err = time.Parse(layout, e); err != nil {
			return nil, fmt.Errorf("time_since: %w", err)
		}
	}
	return end.Sub(start).String(), nil
}

func jpTimeAdd(a []any) (any, error) {
	t, err := parseTime("time_add", str(a[0]))
	if err != nil {
		return nil, err
	}
	d, err := parseDuration("time_add", str(a[1]))
	if err != nil {
		return nil, err
	}
	return t.Add(d).Format(rfc3339), nil
}

// jpTimeParse: time_parse(layout, value) in RFC 3339; a value that does not
// fit the layout but is a whole number is read as Unix seconds (UTC).
func jpTimeParse(a []any) (any, error) {
	t, err := time.Parse(str(a[0]), str(a[1]))
	if err == nil {
		return t.Format(rfc3339), nil
	}
	if sec, errInt := strconv.ParseInt(str(a[1]), 10, 64); errInt == nil {
		return time.Unix(sec, 0).UTC().Format(rfc3339), nil
	}
	return nil, fmt.Errorf("time_parse: %w", err)
}

// jpTimeToCron: the five-field cron schedule ("minute hour day month
// weekday") of a time, in the time's own zone.
func jpTimeToCron(a []any) (any, error) {
	t, err := parseTime("time_to_cron", str(a[0]))
	if err != nil {
		return nil, err
	}
	return fmt.Sprintf("%d %d %d %d %d", t.Minute(), t.Hour(), t.Day(), int(t.Month()), int(t.Weekday())), nil
}

func jpTimeUTC(a []any) (any, error) {
	t, err := parseTime("time_utc", str(a[0]))
	if err != nil {
		return nil, err
	}
	return t.UTC().Format(rfc3339), nil
}

// jpTimeDiff: time_diff(start, end) is the duration end-start.
func jpTimeDiff(a []any) (any, error) {
	start, err := parseTime("time_diff", str(a[0]))
	if err != nil {
		return nil, err
	}
	end, err := parseTime("time_diff", str(a[1]))
	if err != nil {
		return nil, err
	}
	return end.Sub(start).String(), nil
}

// timeCompare: time_before(a, b) is a < b, time_after(a, b) a > b.
func timeCompare(holds func(a, b int) bool) jpfunctions.JpFunction {
	return func(a []any) (any, error) {
		x, err := parseTime("time comparison", str(a[0]))
		if err != nil {
			return nil, err
		}
		y, err := parseTime("time comparison", str(a[1]))
		if err != nil {
			return nil, err
		}
		return holds(x.Compare(y), 0), nil
	}
}

// jpTimeBetween: time_between(t, start, end) is start < t < end.
func jpTimeBetween(a []any) (any, error) {
	var ts [3]time.Time
	for i := range ts {
		t, err := parseTime("time_between", str(a[i]))
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	return ts[0].After(ts[1]) && ts[0].Before(ts[2]), nil
}

// jpTimeTruncate rounds a time down to a multiple of a duration.
func jpTimeTruncate(a []any) (any, error) {
	t, err := parseTime("time_truncate", str(a[0]))
	if err != nil {
		return nil, err
	}
	d, err := parseDuration("time_truncate", str(a[1]))
	if err != nil {
		return nil, err
	}
	if d <= 0 {
		return nil, errors.New("time_truncate: the duration must be positive")
	}
	return t.Truncate(d).Format(rfc3339), nil
}
