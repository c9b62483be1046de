package variables

import (
	"testing"
	"time"
)

func TestTimeFunctions(t *testing.T) {
	now = func() time.Time { return time.Date(2023, 1, 12, 19, 5, 59, 0, time.UTC) }
	defer func() { now = time.Now }()
	runQueries(t, map[string]queryCase{
		"time_add keeps the offset":         {expr: "time_add('2023-01-12T12:37:56-05:00', '6h')", want: "2023-01-12T18:37:56-05:00"},
		"time_add a bad duration":           {expr: "time_add('2023-01-12T12:37:56Z', 'soon')", wantErr: true},
		"time_after":                        {expr: "time_after('2023-01-12T14:07:55-05:00', '2023-01-12T19:05:59Z')", want: true},
		"time_after an earlier time":        {expr: "time_after('2023-01-12T19:05:59Z', '2023-01-13T19:05:59Z')", want: false},
		"time_before":                       {expr: "time_before('2023-01-12T19:05:59Z', '2023-01-13T19:05:59Z')", want: true},
		"time_before a later time":          {expr: "time_before('2023-01-12T19:05:59Z', '2023-01-11T19:05:59Z')", want: false},
		"time_between":                      {expr: "time_between('2023-01-12T19:05:59Z', '2023-01-01T19:05:59Z', '2023-01-15T19:05:59Z')", want: true},
		"time_between outside":              {expr: "time_between('2023-01-12T19:05:59Z', '2023-01-01T19:05:59Z', '2023-01-11T19:05:59Z')", want: false},
		"time_diff":                         {expr: "time_diff('2023-01-10T00:00:00Z', '2023-01-11T00:00:00Z')", want: "24h0m0s"},
		"time_diff backwards":               {expr: "time_diff('2023-01-12T00:00:00Z', '2023-01-11T00:00:00Z')", want: "-24h0m0s"},
		"time_now_utc":                      {expr: "time_now_utc()", want: "2023-01-12T19:05:59Z"},
		"time_parse a layout":               {expr: "time_parse('Mon Jan 02 2006 15:04:05 -0700', 'Fri Jun 22 2022 17:45:00 +0100')", want: "2022-06-22T17:45:00+01:00"},
		"time_parse epoch seconds":          {expr: "time_parse('1702691171', '1702691171')", want: "2023-12-16T01:46:11Z"},
		"time_parse garbage":                {expr: "time_parse('2006', 'never')", wantErr: true},
		"time_since with an end":            {expr: "time_since('', '2022-04-10T03:14:05-07:00', '2022-04-11T03:14:05-07:00')", want: "24h0m0s"},
		"time_since with a layout":          {expr: "time_since('Mon Jan _2 15:04:05 MST 2006', 'Mon Jan 02 15:04:05 MST 2021', 'Mon Jan 10 03:14:16 MST 2021')", want: "180h10m11s"},
		"time_since until now":              {expr: "time_since('', '2023-01-12T18:05:59Z', '')", want: "1h0m0s"},
		"time_since Helm's format":          {expr: "time_since('2006-Jan-02', '2020-Jan-14', '2020-Jan-17')", want: "72h0m0s"},
		"time_to_cron":                      {expr: "time_to_cron('2022-04-11T03:14:05-07:00')", want: "14 3 11 4 1"},
		"time_truncate to an hour":          {expr: "time_truncate('2023-01-12T17:37:00Z', '1h')", want: "2023-01-12T17:00:00Z"},
		"time_truncate to two hours":        {expr: "time_truncate('2023-01-12T17:37:00Z', '2h')", want: "2023-01-12T16:00:00Z"},
		"time_truncate by nothing fails":    {expr: "time_truncate('2023-01-12T17:37:00Z', '0s')", wantErr: true},
		"time_utc":                          {expr: "time_utc('2021-01-02T18:04:05-05:00')", want: "2021-01-02T23:04:05Z"},
		"time_utc a half-hour offset":       {expr: "time_utc('2021-01-02T02:04:05+08:30')", want: "2021-01-01T17:34:05Z"},
		"a time that is not RFC 3339 fails": {expr: "time_utc('yesterday')", wantErr: true},
	})
}
