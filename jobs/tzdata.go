package jobs

// The zones of statefulset_maintenance_window are IANA names, loaded with
// time.LoadLocation when the annotations are parsed. The daemon's
// container image and a minimal host may have no zoneinfo at all, so the
// zone database is compiled in (about 450 kB): every binary that parses a
// parent job (the agent, `validate`) reads the same zones everywhere.
import _ "time/tzdata"
