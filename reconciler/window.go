package reconciler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Maintenance windows (DESIGN §3b, statefulset_maintenance_window): outside
// every window of a set no voluntary disruption of a Ready pod starts. A
// rollout (a template change, `rollout restart`), a drift repair, a volume
// expansion and a scale-down wait for the next window; a pod that is down
// already is still replaced, a pod on a draining node still leaves within
// the budget, a `pod replace` (the operator's explicit delete) and the
// set's deletion still go. A held step is reported like any other hold
// (HoldWaitingForMaintenanceWindow, until the next window opens), the set
// shows ConditionWaitingForMaintenanceWindow, and the wait does not count
// against the progress deadline. `rollout approve` lets one step through.
//
// The time is Input.Now: the gate reads no clock. A window is a wall-clock
// span in its zone, so that "02:00" stays 02:00 across daylight saving.

// ConditionWaitingForMaintenanceWindow is true while a voluntary disruption
// waits for the set's next maintenance window; its message names when that
// opens. It is absent otherwise.
const ConditionWaitingForMaintenanceWindow ConditionType = "WaitingForMaintenanceWindow"

// ReasonOutsideMaintenanceWindow: WaitingForMaintenanceWindow is true
// because Now is outside every window of statefulset_maintenance_window.
const ReasonOutsideMaintenanceWindow = "OutsideMaintenanceWindow"

// HoldWaitingForMaintenanceWindow: a voluntary disruption of the ordinal
// (a rollout, a repair, an expansion, a scale-down) waits for the next
// maintenance window; `rollout approve` lets one step go now.
const HoldWaitingForMaintenanceWindow = "WaitingForMaintenanceWindow"

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

// voluntaryCause reports whether a deletion for cause is a disruption the
// maintenance window governs: a rollout (a template change, `rollout
// restart`), a drift repair, a volume expansion and a scale-down. A drain's
// evacuation follows the drain, a `pod replace` is the operator's explicit
// delete, the set's deletion was asked for, and an ended or duplicate pod
// disrupts nothing: none of them waits for a window. (A Recreate's stop is
// a rollout: its gate asks the window once for the whole stop, recreate.go.)
func voluntaryCause(cause DeleteCause) bool {
	switch cause {
	case CauseUpdate, CauseRepair, CauseResize, CauseScaleDown:
		return true
	}
	return false
}

// outsideWindow reports whether the maintenance window keeps p's
// disruption for cause from starting now: the set has windows, none is open
// at Now, the cause is voluntary, and p is a Ready pod that is not on a
// draining node. A pod that is down already is replaced at any time, and
// one on a draining node must leave anyway.
func (r *reconciler) outsideWindow(p *Pod, cause DeleteCause) bool {
	return len(r.spec.MaintenanceWindows) > 0 && voluntaryCause(cause) && runningAndReady(p) && !p.Terminating &&
		!p.NodeDraining && !r.spec.MaintenanceWindows.Open(r.now)
}

// mayDisruptInWindow is mayDisrupt behind the maintenance window: outside
// every window a voluntary disruption of a Ready pod is held until the
// next one opens, unless the operator approved a step that none has used
// (`rollout approve`). The approval answers for the whole step, as it does
// for a disruption check or a supervised leader: when mayDisrupt spent it
// already, it is not spent again, and a step that still waits (the leader
// goes last) leaves it for the next decision.
func (r *reconciler) mayDisruptInWindow(p *Pod, cause DeleteCause) bool {
	if !r.outsideWindow(p, cause) {
		return r.mayDisrupt(p, cause)
	}
	if !r.approvalPending() {
		r.holdForWindow(p)
		return false
	}
	used := r.status.ApprovalUsed
	if !r.mayDisrupt(p, cause) {
		return false
	}
	if r.status.ApprovalUsed == used {
		r.useApproval()
	}
	return true
}

// holdForWindow records that p's disruption waits for the next window:
// a hold until it opens, which Output.Requeue then covers.
func (r *reconciler) holdForWindow(p *Pod) {
	next := r.spec.MaintenanceWindows.NextStart(r.now)
	r.noteHeld(Hold{Ordinal: p.Ordinal, Step: StepDisrupt, Until: next, Reason: HoldWaitingForMaintenanceWindow,
		Message: "outside statefulset_maintenance_window; the next window opens at " + windowTime(next) +
			" (`nomad-statefulset rollout approve " + r.spec.Name + "` lets one step go now)"})
}

// windowTime renders a window's start in RFC 3339 with its zone's offset,
// and as the zone's wall clock with the zone's name.
func windowTime(t time.Time) string {
	if t.IsZero() {
		return "never (no window ever opens)"
	}
	return t.Format(time.RFC3339) + " (" + t.Format("Mon 15:04") + " " + t.Location().String() + ")"
}

// windowHold returns the first hold this decision made for the window.
func (r *reconciler) windowHold() (Hold, bool) {
	for _, h := range r.held {
		if h.Reason == HoldWaitingForMaintenanceWindow {
			return h, true
		}
	}
	return Hold{}, false
}

// waitedForWindow reports whether st was computed while a step waited for
// a maintenance window. The progress deadline did not run then, so the
// decision after such a status starts it afresh, as after rest.
func waitedForWindow(st Status) bool {
	for _, c := range st.Conditions {
		if c.Type == ConditionWaitingForMaintenanceWindow {
			return c.Status
		}
	}
	return false
}

// windowClock keeps the progress deadline from counting a wait for the
// window. It reports whether this decision waits for one; while it does,
// the progress time stays where the previous waiting status left it
// unless the set progressed, so a long wait stores no new status on every
// pass, and the deadline neither fires nor is requeued for.
func (r *reconciler) windowClock() bool {
	if _, ok := r.windowHold(); !ok {
		return false
	}
	prev := r.in.Previous
	if waitedForWindow(prev) && !prev.LastProgressTime.IsZero() && !r.progressed() {
		r.status.LastProgressTime = prev.LastProgressTime
	}
	return true
}

// windowCondition is the WaitingForMaintenanceWindow condition while a
// step waits for the window, or nothing.
func (r *reconciler) windowCondition() (Condition, bool) {
	h, ok := r.windowHold()
	if !ok {
		return Condition{}, false
	}
	return r.keepTransition(Condition{Type: ConditionWaitingForMaintenanceWindow, Status: true, Reason: ReasonOutsideMaintenanceWindow,
		Message: "no rollout, repair, volume expansion or scale-down starts outside " + r.spec.MaintenanceWindows.String() +
			"; the next window opens at " + windowTime(h.Until) + "; waiting: " + PodName(r.spec.Name, h.Ordinal) +
			"; `nomad-statefulset rollout approve " + r.spec.Name + "` lets one step go now"}), true
}
