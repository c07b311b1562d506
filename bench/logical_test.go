package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestOnThisMachine(t *testing.T) {
	for host, local := range map[string]bool{
		"127.0.0.1": true, "::1": true, "localhost": true, "/var/run/postgresql": true,
		"db.internal": false, "10.0.0.7": false, "": false,
	} {
		require.Equal(t, local, onThisMachine(host), host)
	}
}

// findScript takes the first candidate that is an executable file, and
// the tests, which run in bench/, find the repository's script.
func TestFindScript(t *testing.T) {
	dir := t.TempDir()
	plain, exe := filepath.Join(dir, "plain"), filepath.Join(dir, "exe")
	require.NoError(t, os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755))

	got, err := findScript([]string{filepath.Join(dir, "missing"), dir, plain, exe})
	require.NoError(t, err)
	require.Equal(t, exe, got)

	_, err = findScript([]string{plain, dir})
	require.EqualError(t, err, "scripts/pg-logical not found: run the bench from the repository (go run ./bench)")

	got, err = findScript(scriptCandidates())
	require.NoError(t, err)
	want, err := filepath.Abs(filepath.Join("..", logicalScript))
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// On a server with wal_level = logical, as CI's is, ensureLogical runs
// nothing. A test never restarts a server: on another level it skips
// (fails under CI=true).
func TestEnsureLogicalLeavesALogicalServerAlone(t *testing.T) {
	server := testServer(t)
	cfg, err := pgx.ParseConfig(server)
	require.NoError(t, err)
	level, err := walLevel(t.Context(), cfg)
	require.NoError(t, err)
	if level != "logical" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("wal_level is %s: .ci/run runs scripts/pg-logical first", level)
		}
		t.Skipf("wal_level is %s, not logical: run scripts/pg-logical first", level)
	}
	require.NoError(t, ensureLogical(t.Context(), server))
}
