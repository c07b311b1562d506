package watermilladapter_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The relay's tests wait on the database and on the fake clock, seldom
	// on the CPU: run more of them at once than -parallel's default,
	// GOMAXPROCS, unless -parallel says otherwise. internal/testdb bounds
	// the databases they use at once.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", "8"); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}
