package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFirstLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte(" Mitigation: PTI \nmore\n"), 0o600))
	require.Equal(t, "Mitigation: PTI", firstLine(path))
	require.Equal(t, "?", firstLine(filepath.Join(t.TempDir(), "missing")))
}

func TestMachineCosts(t *testing.T) {
	require.Positive(t, syscallCost())
	require.Positive(t, threadRoundTrip())
	require.Equal(t, "1.12 µs", durationString(1123*time.Nanosecond))
	require.Equal(t, "68 µs", durationString(67980*time.Nanosecond))
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" { // other architectures name the model otherwise
		require.NotEqual(t, "?", cpuModel(), "read from /proc/cpuinfo")
	}
}
