//go:build !unix

package reconciler

// processCPUTime is not measured off unix; the cpu-ns/op metric is then 0.
func processCPUTime() int64 { return 0 }
