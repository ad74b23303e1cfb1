//go:build unix

package main

import "syscall"

// selfUsage is this process's CPU time (user and system), its voluntary and involuntary context
// switches and its minor page faults so far.
func selfUsage() (cpuNs, vol, invol, faults int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0, 0, 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), int64(ru.Nvcsw), int64(ru.Nivcsw), int64(ru.Minflt)
}
