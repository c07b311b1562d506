package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// window is one timed measurement: the events it moved, its wall time, and
// the CPU time used meanwhile by the whole machine (the database server
// included) and by this process (the clients and relays). On a shared
// machine whose speed drifts, CPU per event is steadier than events per
// second, and it says which side an overhead is on.
type window struct {
	events           int
	elapsed          time.Duration
	machine, process time.Duration
}

func (w window) rate() float64 { return float64(w.events) / w.elapsed.Seconds() }

// perEvent is machine and process CPU per event.
func (w window) perEvent() (machine, process time.Duration) {
	n := time.Duration(max(w.events, 1))
	return w.machine / n, w.process / n
}

// stopwatch starts a window.
type stopwatch struct {
	start            time.Time
	machine, process time.Duration
}

func startWatch() stopwatch {
	return stopwatch{start: time.Now(), machine: machineCPU(), process: processCPU()}
}

func (s stopwatch) stop(events int) window {
	return window{events: events, elapsed: time.Since(s.start),
		machine: machineCPU() - s.machine, process: processCPU() - s.process}
}

// processCPU is the user and system time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineCPU is the busy time of all CPUs from /proc/stat: user, nice,
// system, irq and softirq; not idle, iowait, or the time a hypervisor
// stole for other machines. 0 where /proc/stat cannot be read.
func machineCPU() time.Duration {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuString formats a series' median CPU per event.
func cpuString(machine, process time.Duration) string {
	return fmt.Sprintf("%s (this process %s)", us(machine), us(process))
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
