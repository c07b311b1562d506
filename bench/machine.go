package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// machineLine describes what makes one machine's figures unlike another's
// beyond its core count: the CPU, the kernel and its mitigation for
// Meltdown, and what a system call and a hand-over between threads cost
// there. The relays are pipelines of goroutines on several connections, the
// raw loops one statement at a time on one connection, so the last two
// move the ratios between them from one machine to the next.
func machineLine() string {
	return fmt.Sprintf("machine: %s, kernel %s, Meltdown: %s; a system call %s, a round trip between two threads %s",
		cpuModel(), firstLine("/proc/sys/kernel/osrelease"),
		firstLine("/sys/devices/system/cpu/vulnerabilities/meltdown"),
		durationString(syscallCost()), durationString(threadRoundTrip()))
}

// cpuModel is the first "model name" of /proc/cpuinfo, "?" when unknown.
func cpuModel() string {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(info)) {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "?"
}

// firstLine is the first line of a small file, "?" when it cannot be read.
func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

// syscallCost is the time of getppid, a system call that does nothing and
// that no vDSO answers in user space: the price of entering the kernel.
func syscallCost() time.Duration {
	const n = 100_000
	start := time.Now()
	for range n {
		syscall.Getppid()
	}
	return time.Since(start) / n
}

// threadRoundTrip is the time for a message to go from one goroutine to
// another and back when each is locked to a thread of its own: each way, a
// sleeping thread is woken, as when a relay hands an event to a worker or
// a router on an idle processor.
func threadRoundTrip() time.Duration {
	const n = 5_000
	ping, pong := make(chan struct{}), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range ping {
			pong <- struct{}{}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	for range n {
		ping <- struct{}{}
		<-pong
	}
	elapsed := time.Since(start)
	close(ping)
	return elapsed / n
}

func durationString(d time.Duration) string {
	return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
}
