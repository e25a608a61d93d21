package reconciler

import (
	"strings"
	"testing"
	"time"
	// The tests read IANA zones whether or not the machine has zoneinfo,
	// as the daemon does (jobs imports the same).
	_ "time/tzdata"
)

// mustWindows parses s or fails the test.
func mustWindows(t testing.TB, s string) Windows {
	t.Helper()
	ws, err := ParseMaintenanceWindows(s)
	if err != nil {
		t.Fatalf("ParseMaintenanceWindows(%q): %v", s, err)
	}
	return ws
}

// TestParseMaintenanceWindows: what each form of the grammar reads as, and
// how String writes it back.
func TestParseMaintenanceWindows(t *testing.T) {
	cases := []struct {
		in   string
		want string // String of the result
	}{
		{"Sat 02:00-05:00 UTC", "Sat 02:00-05:00 UTC"},
		{"Mon-Fri 22:00-23:30 Europe/Berlin", "Mon-Fri 22:00-23:30 Europe/Berlin"},
		{"Sat 02:00-05:00 UTC, Sun 02:00-05:00 UTC", "Sat 02:00-05:00 UTC, Sun 02:00-05:00 UTC"},
		{"  sat   02:00-05:00   UTC ,sun 02:00-05:00 UTC  ", "Sat 02:00-05:00 UTC, Sun 02:00-05:00 UTC"},
		{"02:00-05:00 UTC", "02:00-05:00 UTC"},
		{"Fri-Mon 22:00-02:00 America/New_York", "Fri-Mon 22:00-02:00 America/New_York"},
		{"Mon-Mon 01:00-02:00 UTC", "Mon 01:00-02:00 UTC"},
		{"00:00-24:00 UTC", "00:00-24:00 UTC"},
		{"00:00-00:00 Etc/UTC", "00:00-00:00 Etc/UTC"},
		{"SUN 23:59-00:01 Asia/Kolkata", "Sun 23:59-00:01 Asia/Kolkata"},
	}
	for _, c := range cases {
		ws := mustWindows(t, c.in)
		if got := ws.String(); got != c.want {
			t.Errorf("%q reads as %q, want %q", c.in, got, c.want)
		}
	}
	w := mustWindows(t, "Fri-Mon 22:00-02:00 Europe/Berlin")[0]
	if w.EveryDay || w.From != time.Friday || w.To != time.Monday || w.Start != 22*60 || w.End != 2*60 || w.Zone.String() != "Europe/Berlin" {
		t.Errorf("Fri-Mon 22:00-02:00 Europe/Berlin reads as %+v", w)
	}
}

// TestParseMaintenanceWindowsErrors: each error names the window by its
// place and says what is wrong, so that the InvalidSpec condition and
// `validate` point at the culprit.
func TestParseMaintenanceWindowsErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "names no window"},
		{"   ", "names no window"},
		{"Sat 02:00-25:00 UTC", `window 1: end "25:00" is not a time of day HH:MM (00:00 to 24:00)`},
		{"Sat 24:00-02:00 UTC", `window 1: start "24:00" is not a time of day HH:MM (00:00 to 23:59)`},
		{"Sat 2:00-05:00 UTC", `window 1: start "2:00" is not a time of day HH:MM`},
		{"Sat 02:60-05:00 UTC", `window 1: start "02:60" is not a time of day HH:MM`},
		{"Sat 02:00-05:00 UTC, Sun 02:00-05:00 Mars/Olympus", `window 2: zone "Mars/Olympus" is not a time zone (UTC, or an IANA name such as Europe/Berlin)`},
		{"Sat 02:00-05:00 UTC,", "window 2: is empty"},
		{"Sat,Sun 02:00-05:00 UTC", `window 1: "Sat" is not "[<days>] HH:MM-HH:MM <zone>"`},
		{"Saturday 02:00-05:00 UTC", `window 1: days "Saturday" are not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun) or a range of days such as Mon-Fri`},
		{"Mon-Xyz 02:00-05:00 UTC", `window 1: days "Mon-Xyz" are not a day`},
		{"Sat 02:00 UTC", `window 1: "02:00" is not a span of time HH:MM-HH:MM`},
		{"Sat 02:00-05:00", `window 1: "Sat 02:00-05:00" names no zone: end it with UTC or an IANA name`},
		{"02:00-05:00", `window 1: "02:00-05:00" is not "[<days>] HH:MM-HH:MM <zone>"`},
		{"Sat 02:00 - 05:00 UTC", `window 1: "Sat 02:00 - 05:00 UTC" is not`},
		{"Sat 02:00-05:00 Local", `window 1: zone "Local" is refused`},
		{"Sat 02:00-05:00 ../etc/passwd", `window 1: zone "../etc/passwd" is not a time zone`},
	}
	for _, c := range cases {
		_, err := ParseMaintenanceWindows(c.in)
		if err == nil {
			t.Errorf("%q parsed", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %q, want it to contain %q", c.in, err, c.want)
		}
	}
}

// at is a time of day on a date in a zone, for the tables.
func at(t testing.TB, zone string, y int, m time.Month, d, hh, mm int) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return time.Date(y, m, d, hh, mm, 0, 0, loc)
}

// TestWindowsOpenAndNextStart: whether an instant is inside, and when the
// next window opens, for every kind of window: a day, a range, a range
// that wraps past Sunday, every day, one that crosses midnight, a whole
// day, and two windows in different zones. 2026-01-03 is a Saturday.
func TestWindowsOpenAndNextStart(t *testing.T) {
	cases := []struct {
		name    string
		windows string
		now     time.Time
		open    bool
		next    time.Time // NextStart(now)
	}{
		{"before a Saturday window", "Sat 02:00-05:00 UTC", at(t, "UTC", 2026, 1, 3, 1, 59), false, at(t, "UTC", 2026, 1, 3, 2, 0)},
		{"at its start", "Sat 02:00-05:00 UTC", at(t, "UTC", 2026, 1, 3, 2, 0), true, at(t, "UTC", 2026, 1, 10, 2, 0)},
		{"inside", "Sat 02:00-05:00 UTC", at(t, "UTC", 2026, 1, 3, 4, 59), true, at(t, "UTC", 2026, 1, 10, 2, 0)},
		{"at its end (excluded)", "Sat 02:00-05:00 UTC", at(t, "UTC", 2026, 1, 3, 5, 0), false, at(t, "UTC", 2026, 1, 10, 2, 0)},
		{"a Sunday", "Sat 02:00-05:00 UTC", at(t, "UTC", 2026, 1, 4, 3, 0), false, at(t, "UTC", 2026, 1, 10, 2, 0)},
		{"Mon-Fri on a Friday", "Mon-Fri 22:00-23:30 Europe/Berlin", at(t, "Europe/Berlin", 2026, 1, 9, 23, 0), true, at(t, "Europe/Berlin", 2026, 1, 12, 22, 0)},
		{"Mon-Fri on a Saturday", "Mon-Fri 22:00-23:30 Europe/Berlin", at(t, "Europe/Berlin", 2026, 1, 10, 22, 30), false, at(t, "Europe/Berlin", 2026, 1, 12, 22, 0)},
		{"Mon-Fri read in UTC", "Mon-Fri 22:00-23:30 Europe/Berlin", at(t, "UTC", 2026, 1, 9, 21, 15), true, at(t, "Europe/Berlin", 2026, 1, 12, 22, 0)},
		{"Fri-Mon wraps: Sunday", "Fri-Mon 10:00-11:00 UTC", at(t, "UTC", 2026, 1, 4, 10, 30), true, at(t, "UTC", 2026, 1, 5, 10, 0)},
		{"Fri-Mon wraps: Tuesday", "Fri-Mon 10:00-11:00 UTC", at(t, "UTC", 2026, 1, 6, 10, 30), false, at(t, "UTC", 2026, 1, 9, 10, 0)},
		{"every day", "02:00-05:00 UTC", at(t, "UTC", 2026, 1, 6, 6, 0), false, at(t, "UTC", 2026, 1, 7, 2, 0)},
		{"crosses midnight: after it", "Fri 22:00-02:00 UTC", at(t, "UTC", 2026, 1, 10, 1, 30), true, at(t, "UTC", 2026, 1, 16, 22, 0)},
		{"crosses midnight: not from Saturday", "Fri 22:00-02:00 UTC", at(t, "UTC", 2026, 1, 10, 23, 0), false, at(t, "UTC", 2026, 1, 16, 22, 0)},
		{"ends at 24:00", "Sat 22:00-24:00 UTC", at(t, "UTC", 2026, 1, 3, 23, 59), true, at(t, "UTC", 2026, 1, 10, 22, 0)},
		{"ends at 24:00: midnight is out", "Sat 22:00-24:00 UTC", at(t, "UTC", 2026, 1, 4, 0, 0), false, at(t, "UTC", 2026, 1, 10, 22, 0)},
		{"a whole day", "00:00-00:00 UTC", at(t, "UTC", 2026, 1, 4, 13, 7), true, at(t, "UTC", 2026, 1, 5, 0, 0)},
		{"two zones: the sooner", "Sat 02:00-03:00 Asia/Tokyo, Sat 02:00-03:00 America/Los_Angeles", at(t, "UTC", 2026, 1, 2, 12, 0),
			false, at(t, "Asia/Tokyo", 2026, 1, 3, 2, 0)},
		{"two zones: the other", "Sat 02:00-03:00 Asia/Tokyo, Sat 02:00-03:00 America/Los_Angeles", at(t, "America/Los_Angeles", 2026, 1, 3, 2, 30),
			true, at(t, "Asia/Tokyo", 2026, 1, 10, 2, 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := mustWindows(t, c.windows)
			if got := ws.Open(c.now); got != c.open {
				t.Errorf("Open(%v) = %v, want %v", c.now, got, c.open)
			}
			if got := ws.NextStart(c.now); !got.Equal(c.next) {
				t.Errorf("NextStart(%v) = %v, want %v", c.now, got, c.next)
			}
		})
	}
	if !(Windows(nil)).Open(epoch) || !(Windows(nil)).NextStart(epoch).IsZero() {
		t.Error("no windows must be always open, with no start")
	}
	if !(Windows{{EveryDay: true, Start: 60, End: 120}}).Open(epoch.Add(90 * time.Minute)) {
		t.Error("a window without a zone reads as UTC")
	}
}

// TestWindowsDaylightSaving: a window keeps its wall-clock hours across a
// change of the zone's offset. Europe/Berlin goes from +01:00 to +02:00 at
// 02:00 on 2026-03-29 (02:00-03:00 is skipped) and back at 03:00 on
// 2026-10-25 (02:00-03:00 happens twice).
func TestWindowsDaylightSaving(t *testing.T) {
	ws := mustWindows(t, "01:00-04:00 Europe/Berlin")
	utc := func(m time.Month, d, hh, mm int) time.Time { return time.Date(2026, m, d, hh, mm, 0, 0, time.UTC) }
	cases := []struct {
		now  time.Time
		open bool
	}{
		// Spring: 01:00 CET is 00:00Z, 04:00 CEST is 02:00Z: two hours.
		{utc(3, 28, 23, 59), false},
		{utc(3, 29, 0, 0), true},
		{utc(3, 29, 1, 59), true},
		{utc(3, 29, 2, 0), false},
		// Autumn: 01:00 CEST is 23:00Z the day before, 04:00 CET 03:00Z: four hours.
		{utc(10, 24, 22, 59), false},
		{utc(10, 24, 23, 0), true},
		{utc(10, 25, 2, 59), true},
		{utc(10, 25, 3, 0), false},
		// A summer day: 01:00 CEST is 23:00Z.
		{utc(7, 1, 22, 59), false},
		{utc(7, 1, 23, 0), true},
	}
	for _, c := range cases {
		if got := ws.Open(c.now); got != c.open {
			t.Errorf("Open(%v) = %v, want %v", c.now, got, c.open)
		}
	}
	if got, want := ws.NextStart(utc(3, 28, 12, 0)), utc(3, 29, 0, 0); !got.Equal(want) {
		t.Errorf("NextStart before spring = %v, want %v", got, want)
	}
	if got, want := ws.NextStart(utc(3, 29, 12, 0)), utc(3, 29, 23, 0); !got.Equal(want) {
		t.Errorf("NextStart after spring = %v, want %v (01:00 CEST)", got, want)
	}
	// A window inside the skipped hour still opens that day, wherever
	// time.Date puts it, and is never zero or in the past.
	gap := mustWindows(t, "02:15-02:45 Europe/Berlin")
	if next := gap.NextStart(utc(3, 28, 12, 0)); next.IsZero() || !next.After(utc(3, 28, 12, 0)) || next.After(utc(3, 29, 12, 0)) {
		t.Errorf("NextStart of a window in the skipped hour = %v", next)
	}
}

// FuzzParseMaintenanceWindows: the parser never panics; what it accepts
// writes back (String) to text that parses to the same windows, and
// answers Open and NextStart without panicking, NextStart after the time
// asked and within two weeks and a day of it (a week more when a clock
// change swallows one), at a moment the windows are
// open.
func FuzzParseMaintenanceWindows(f *testing.F) {
	for _, s := range []string{
		"Sat 02:00-05:00 UTC", "Mon-Fri 22:00-23:30 Europe/Berlin", "Sat 02:00-05:00 UTC, Sun 02:00-05:00 UTC",
		"02:00-05:00 UTC", "Fri-Mon 22:00-02:00 America/New_York", "00:00-24:00 UTC", "00:00-00:00 Etc/UTC",
		"Sat 02:00-25:00 UTC", "Sat,Sun 02:00-05:00 UTC", ",", "sun 23:59-00:01 Asia/Kolkata", "01:00-04:00 Europe/Berlin",
	} {
		f.Add(s, int64(0))
		f.Add(s, int64(1774743300)) // 2026-03-29T00:15:00Z, the spring change in Berlin
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		ws, err := ParseMaintenanceWindows(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "window ") && !strings.HasPrefix(err.Error(), "names no window") {
				t.Fatalf("%q: error %q does not name the window", s, err)
			}
			return
		}
		if len(ws) == 0 {
			t.Fatalf("%q: parsed to no window without an error", s)
		}
		text := ws.String()
		again, err := ParseMaintenanceWindows(text)
		if err != nil {
			t.Fatalf("%q wrote back as %q, which does not parse: %v", s, text, err)
		}
		if len(again) != len(ws) {
			t.Fatalf("%q: %d windows, %q: %d", s, len(ws), text, len(again))
		}
		for i := range ws {
			a, b := ws[i], again[i]
			if a.EveryDay != b.EveryDay || a.Start != b.Start || a.End != b.End || a.Zone.String() != b.Zone.String() ||
				(!a.EveryDay && (a.From != b.From || a.To != b.To)) {
				t.Fatalf("%q: window %d %+v reads back from %q as %+v", s, i+1, a, text, b)
			}
		}
		if again.String() != text {
			t.Fatalf("%q: String is not stable: %q then %q", s, text, again.String())
		}
		// Years far from now say nothing about zones and overflow
		// time.Date's arithmetic: keep the instant within 1900..2200.
		now := time.Unix(unix%(200*365*86400)+(-70*365*86400), 0).UTC()
		open := ws.Open(now)
		next := ws.NextStart(now)
		if next.IsZero() || !next.After(now) || next.Sub(now) > 15*24*time.Hour {
			t.Fatalf("%q at %v: next start %v", s, now, next)
		}
		if !ws.Open(next) {
			t.Fatalf("%q: closed at its own next start %v (asked at %v, open then: %v)", s, next, now, open)
		}
	})
}
