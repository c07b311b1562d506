package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// window is one timed measurement: the events it moved, its wall time, the
// CPU time used meanwhile by the whole machine (the database server
// included) and by this process (the clients and relays), and the bytes
// the database server wrote to its write-ahead log. On a shared machine
// whose speed drifts, CPU per event is steadier than events per second,
// and it says which side an overhead is on; the log is the database's
// work for an event, which the machine's speed does not change at all.
type window struct {
	events           int
	elapsed          time.Duration
	machine, process time.Duration
	wal              int64           // bytes; -1 when the server's position could not be read
	duplicates       int             // deliveries that repeated an event, counted after the window
	handoffs         []time.Duration // ordered: from an event's handler to the next of its aggregate's (see handoffs)
	versions         *rowVersions    // the table's row versions per event, counted after the window; nil when not
	walSender        time.Duration   // a log relay's: the CPU its WAL sender used, per event; 0 when unknown
}

func (w window) rate() float64 { return float64(w.events) / w.elapsed.Seconds() }

// perEvent is machine and process CPU per event.
func (w window) perEvent() (machine, process time.Duration) {
	n := time.Duration(max(w.events, 1))
	return w.machine / n, w.process / n
}

// walPerEvent is the log bytes per event, -1 when unknown.
func (w window) walPerEvent() float64 {
	if w.wal < 0 {
		return -1
	}
	return float64(w.wal) / float64(max(w.events, 1))
}

// stopwatch starts a window; it reads the log position on db, the
// server's, which counts every database on it: the program runs alone.
type stopwatch struct {
	ctx              context.Context
	db               *pgxpool.Pool
	start            time.Time
	machine, process time.Duration
	wal              int64
}

func startWatch(ctx context.Context, db *pgxpool.Pool) stopwatch {
	return stopwatch{ctx: ctx, db: db, wal: walPosition(ctx, db),
		start: time.Now(), machine: machineCPU(), process: processCPU()}
}

func (s stopwatch) stop(events int) window {
	w := window{events: events, elapsed: time.Since(s.start),
		machine: machineCPU() - s.machine, process: processCPU() - s.process, wal: -1}
	if end := walPosition(s.ctx, s.db); s.wal >= 0 && end >= 0 {
		w.wal = end - s.wal
	}
	return w
}

// walPosition is how many bytes the server has inserted into its
// write-ahead log since it was created, -1 when it cannot be read.
func walPosition(ctx context.Context, db *pgxpool.Pool) int64 {
	var pos int64
	if err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&pos); err != nil {
		return -1
	}
	return pos
}

// processCPU is the user and system time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU is the user and system time of process pid of this
// machine, which must be a PostgreSQL server's; false when it is not, or
// cannot be read.
func postgresCPU(pid int) (time.Duration, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses.
	open, closing := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
	if open < 0 || closing < open || string(stat[open+1:closing]) != "postgres" {
		return 0, false
	}
	fields := strings.Fields(string(stat[closing+1:])) // from state, the third field
	if len(fields) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // the 14th field
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, true
}

// machineCPU is the busy time of all CPUs; 0 where /proc/stat cannot be
// read.
func machineCPU() time.Duration { return readCPUTimes().busy }

// cpuTimes are the first line of /proc/stat, summed over all CPUs: busy
// (user, nice, system, irq, softirq), idle (idle and iowait), and the time
// a hypervisor stole for other machines while this one had work to run.
// All zero where /proc/stat cannot be read.
type cpuTimes struct{ busy, idle, steal time.Duration }

func readCPUTimes() cpuTimes {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" { // up to steal
		return cpuTimes{}
	}
	var ticks [9]int64 // cpu user nice system idle iowait irq softirq steal
	for i := 1; i < len(ticks); i++ {
		if ticks[i], err = strconv.ParseInt(fields[i], 10, 64); err != nil {
			return cpuTimes{}
		}
	}
	d := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return cpuTimes{
		busy:  d(ticks[1] + ticks[2] + ticks[3] + ticks[6] + ticks[7]),
		idle:  d(ticks[4] + ticks[5]),
		steal: d(ticks[8]),
	}
}

// stolenShare is the share of the CPU time between start and t that a
// hypervisor stole, -1 when unknown.
func (t cpuTimes) stolenShare(start cpuTimes) float64 {
	steal := t.steal - start.steal
	all := t.busy - start.busy + t.idle - start.idle + steal
	if all <= 0 {
		return -1
	}
	return float64(steal) / float64(all)
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuString formats a series' median CPU per event.
func cpuString(machine, process time.Duration) string {
	return fmt.Sprintf("%s (this process %s)", us(machine), us(process))
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

// walString formats a series' median log bytes per event.
func walString(perEvent float64) string {
	if perEvent < 0 {
		return "?"
	}
	return thousands(int64(perEvent+0.5)) + " B"
}
