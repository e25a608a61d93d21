package reconciler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Maintenance windows (DESIGN §3b, statefulset_maintenance_window): the
// spans of wall-clock time, in a zone, on some days of the week, in which
// a set's voluntary disruptions may start. A window is wall clock in its
// zone, so that "02:00" stays 02:00 across daylight saving. Whether one is
// open is a question about Input.Now: nothing here reads a clock.

// minutesPerDay bounds a window's times: 00:00 is 0, 24:00 is 1440.
const minutesPerDay = 24 * 60

// Window is one maintenance window: a span of wall-clock time in a zone,
// on some days of the week. Its text is "[<days>] HH:MM-HH:MM <zone>"
// (ParseMaintenanceWindows).
type Window struct {
	// EveryDay is set when the window names no days: it opens every day.
	EveryDay bool
	// From and To are the days the window may start on, From through To
	// going forward through the week: Mon-Fri is Monday to Friday, and
	// Fri-Mon wraps past Sunday. One day has From == To. Unused when
	// EveryDay.
	From, To time.Weekday
	// Start and End are minutes after midnight, wall clock in Zone: Start
	// from 0 (00:00) to 1439 (23:59), End from 0 to 1440 (24:00). An End
	// not after Start crosses midnight: the window ends on the day after
	// the one it started on (22:00-02:00, and 00:00-00:00 is a whole day).
	Start, End int
	// Zone is the time zone the times are read in; nil reads as UTC.
	Zone *time.Location
}

// Windows are the maintenance windows of a set; none means no window
// restricts anything (disruptions may start at any time).
type Windows []Window

// dayNames are the three-letter day names of the grammar, by time.Weekday.
var dayNames = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// windowForm is the grammar of one window, for error messages.
const windowForm = `"[<days>] HH:MM-HH:MM <zone>", such as "Sat 02:00-05:00 UTC" or "Mon-Fri 22:00-23:30 Europe/Berlin"`

// ParseMaintenanceWindows reads statefulset_maintenance_window: one or more
// windows separated by commas, each "[<days>] HH:MM-HH:MM <zone>".
//
//   - <days> is a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun; any case) or a
//     range of days joined by '-' (Mon-Fri; Fri-Mon wraps past Sunday). It
//     names the days a window starts on. Without it the window opens every
//     day. Days that are not one range take one window each, as the comma
//     already separates windows: "Sat 02:00-05:00 UTC, Tue 02:00-05:00 UTC".
//   - HH:MM-HH:MM is the start and the end, wall clock in the zone, 00:00
//     to 23:59 (the end may be 24:00). An end not after the start crosses
//     midnight: "Fri 22:00-02:00 UTC" ends on Saturday at 02:00.
//   - <zone> is UTC or an IANA time zone name (Europe/Berlin), loaded with
//     time.LoadLocation; "Local" is refused, as the daemon's own zone would
//     differ from one machine to the next.
//
// An error names the window by its place in the list and what is wrong
// with it. Only the zone lookup touches the system (its zoneinfo, or the
// copy time/tzdata embeds); the windows' methods are pure.
func ParseMaintenanceWindows(s string) (Windows, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("names no window: write one or more windows " + windowForm + ", separated by commas")
	}
	var ws Windows
	for i, part := range strings.Split(s, ",") {
		w, err := parseWindow(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("window %d: %w", i+1, err)
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// parseWindow reads one window of ParseMaintenanceWindows.
func parseWindow(s string) (Window, error) {
	fields := strings.Fields(s)
	var w Window
	switch len(fields) {
	case 0:
		return w, errors.New("is empty: windows are separated by commas, " + windowForm)
	case 2:
		if _, _, err := parseDays(fields[0]); err == nil {
			return w, fmt.Errorf("%q names no zone: end it with UTC or an IANA name such as Europe/Berlin", s)
		}
		w.EveryDay = true
	case 3:
		from, to, err := parseDays(fields[0])
		if err != nil {
			return w, err
		}
		w.From, w.To = from, to
		fields = fields[1:]
	default:
		return w, fmt.Errorf("%q is not %s", s, windowForm)
	}
	start, end, ok := strings.Cut(fields[0], "-")
	if !ok {
		return w, fmt.Errorf("%q is not a span of time HH:MM-HH:MM", fields[0])
	}
	var err error
	if w.Start, err = parseClock(start, minutesPerDay-1); err != nil {
		return w, fmt.Errorf("start %q is not a time of day HH:MM (00:00 to 23:59)", start)
	}
	if w.End, err = parseClock(end, minutesPerDay); err != nil {
		return w, fmt.Errorf("end %q is not a time of day HH:MM (00:00 to 24:00)", end)
	}
	if w.Zone, err = parseZone(fields[1]); err != nil {
		return w, err
	}
	return w, nil
}

// parseDays reads "Mon" or "Mon-Fri".
func parseDays(s string) (from, to time.Weekday, err error) {
	a, b, isRange := strings.Cut(s, "-")
	from, okA := parseDay(a)
	to, okB := from, true
	if isRange {
		to, okB = parseDay(b)
	}
	if !okA || !okB {
		return 0, 0, fmt.Errorf("days %q are not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun) or a range of days such as Mon-Fri", s)
	}
	return from, to, nil
}

func parseDay(s string) (time.Weekday, bool) {
	for d, name := range dayNames {
		if strings.EqualFold(s, name) {
			return time.Weekday(d), true
		}
	}
	return 0, false
}

// parseClock reads "HH:MM" (two digits each) into minutes after midnight,
// at most max.
func parseClock(s string, max int) (int, error) {
	if len(s) != 5 || s[2] != ':' || !isDigits(s[:2]) || !isDigits(s[3:]) {
		return 0, errors.New("not HH:MM")
	}
	h, _ := strconv.Atoi(s[:2])
	m, _ := strconv.Atoi(s[3:])
	if m > 59 || h*60+m > max {
		return 0, errors.New("out of range")
	}
	return h*60 + m, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseZone loads a zone by name; UTC needs no zoneinfo.
func parseZone(name string) (*time.Location, error) {
	switch name {
	case "UTC":
		return time.UTC, nil
	case "Local":
		return nil, errors.New(`zone "Local" is refused: the daemon's local zone differs between machines; name the zone, such as UTC or Europe/Berlin`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("zone %q is not a time zone (UTC, or an IANA name such as Europe/Berlin): %w", name, err)
	}
	return loc, nil
}

// zone is w.Zone, UTC when unset (a Window built by hand).
func (w Window) zone() *time.Location {
	if w.Zone == nil {
		return time.UTC
	}
	return w.Zone
}

// startsOn reports whether the window may start on day d.
func (w Window) startsOn(d time.Weekday) bool {
	switch {
	case w.EveryDay:
		return true
	case w.From <= w.To:
		return d >= w.From && d <= w.To
	default: // wraps past Sunday
		return d >= w.From || d <= w.To
	}
}

// on returns the span of the window that starts on the date y-m-d in its
// zone, if it starts that day. Both ends are wall-clock times of that
// zone, so a window keeps its hours across daylight saving; on the day the
// clock skips an hour, a time inside the gap is where time.Date puts it,
// and a span the gap swallows is empty that day.
func (w Window) on(y int, m time.Month, d int) (start, end time.Time, ok bool) {
	loc := w.zone()
	// The weekday of the civil date, read where no clock change can move
	// midnight to the day before (some zones skip 00:00).
	if !w.startsOn(time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()) {
		return time.Time{}, time.Time{}, false
	}
	start = time.Date(y, m, d, 0, w.Start, 0, 0, loc)
	endDay := d
	if w.End <= w.Start {
		endDay++ // crosses midnight
	}
	end = time.Date(y, m, endDay, 0, w.End, 0, 0, loc)
	return start, end, end.After(start)
}

// Open reports whether t is inside the window: at or after a start, and
// before that span's end.
func (w Window) Open(t time.Time) bool {
	y, m, d := t.In(w.zone()).Date()
	// A span lasts at most a day (and the hour daylight saving adds), so
	// only one that started today or yesterday can hold t; the days around
	// them are asked too, for a zone whose clock change moves a start
	// across midnight.
	for back := 2; back >= -1; back-- {
		if s, e, ok := w.on(y, m, d-back); ok && !t.Before(s) && t.Before(e) {
			return true
		}
	}
	return false
}

// NextStart is the first start of the window after t, in its zone; zero if
// it never starts (no span of it is ever open).
func (w Window) NextStart(t time.Time) time.Time {
	y, m, d := t.In(w.zone()).Date()
	// Every day of the week comes within eight days of yesterday; a span
	// daylight saving swallows is looked past for another week.
	for k := -1; k <= 15; k++ {
		if s, _, ok := w.on(y, m, d+k); ok && s.After(t) {
			return s
		}
	}
	return time.Time{}
}

// String is the window as ParseMaintenanceWindows reads it back.
func (w Window) String() string {
	var b strings.Builder
	if !w.EveryDay {
		b.WriteString(dayNames[w.From%7])
		if w.To != w.From {
			b.WriteString("-" + dayNames[w.To%7])
		}
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "%02d:%02d-%02d:%02d %s", w.Start/60, w.Start%60, w.End/60, w.End%60, w.zone().String())
	return b.String()
}

// Open reports whether t is inside any of the windows. No windows at all
// is always open: nothing restricts the set.
func (ws Windows) Open(t time.Time) bool {
	if len(ws) == 0 {
		return true
	}
	for _, w := range ws {
		if w.Open(t) {
			return true
		}
	}
	return false
}

// NextStart is the first start of any window after t, in that window's
// zone; zero if none ever starts.
func (ws Windows) NextStart(t time.Time) time.Time {
	var next time.Time
	for _, w := range ws {
		if s := w.NextStart(t); !s.IsZero() && (next.IsZero() || s.Before(next)) {
			next = s
		}
	}
	return next
}

// String is the windows as ParseMaintenanceWindows reads them back,
// separated by ", ".
func (ws Windows) String() string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	return strings.Join(parts, ", ")
}
