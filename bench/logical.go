package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// logicalScript is the script that sets wal_level = logical on this
// machine's PostgreSQL, relative to the repository's root.
const logicalScript = "scripts/pg-logical"

// ensureLogical makes sure the PostgreSQL server of the URL server runs
// with wal_level = logical, which logical decoding (the log-mode
// scenarios) needs and PostgreSQL does not start with. When it does not
// and the server is on this machine, ensureLogical prints one line and
// runs logicalScript, which sets the level and restarts the server,
// then checks the level again. It returns an error when the level is not
// logical and cannot be made so: a server on another host, no script,
// the script failing. Call it before opening connections that must
// last: the restart ends every session on the server.
func ensureLogical(ctx context.Context, server string) error {
	cfg, err := pgx.ParseConfig(server)
	if err != nil {
		return fmt.Errorf("wal_level: database URL: %w", err)
	}
	level, err := walLevel(ctx, cfg)
	if err != nil || level == "logical" {
		return err
	}
	if !onThisMachine(cfg.Host) {
		return fmt.Errorf("wal_level is %s on %s, another machine: set wal_level = logical there and restart it", level, cfg.Host)
	}
	script, err := findScript(scriptCandidates())
	if err != nil {
		return fmt.Errorf("wal_level is %s: %w", level, err)
	}
	fmt.Printf("wal_level is %s on %s:%d: running %s, which sets it to logical and restarts PostgreSQL\n",
		level, cfg.Host, cfg.Port, logicalScript)
	cmd := exec.CommandContext(ctx, script, cfg.Host, strconv.Itoa(int(cfg.Port)))
	cmd.Env = append(os.Environ(), "PGUSER="+cfg.User)
	if cfg.Password != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+cfg.Password)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("wal_level is %s: %s: %w: %s", level, logicalScript, err, strings.TrimSpace(string(out)))
	}
	if level, err = walLevel(ctx, cfg); err == nil && level != "logical" {
		err = fmt.Errorf("wal_level is still %s after %s", level, logicalScript)
	}
	return err
}

// walLevel reads the server's wal_level on a connection of its own.
func walLevel(ctx context.Context, cfg *pgx.ConnConfig) (string, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", fmt.Errorf("wal_level: connect: %w", err)
	}
	defer conn.Close(context.Background())
	var level string
	if err := conn.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		return "", fmt.Errorf("wal_level: %w", err)
	}
	return level, nil
}

// onThisMachine tells whether host, as a connection string gives it,
// is this machine: a loopback name or address, or a Unix socket's
// directory.
func onThisMachine(host string) bool {
	switch host {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return strings.HasPrefix(host, "/")
}

// scriptCandidates are where logicalScript may be: the program runs from
// the repository's root (go run ./bench) or from bench (go -C bench run
// .), and was built from the sources beside this file.
func scriptCandidates() []string {
	candidates := []string{logicalScript, filepath.Join("..", logicalScript)}
	if _, file, _, ok := runtime.Caller(0); ok {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", logicalScript))
	}
	return candidates
}

// findScript returns the first of candidates that is an executable file.
func findScript(candidates []string) (string, error) {
	for _, path := range candidates {
		if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0 {
			return filepath.Abs(path)
		}
	}
	return "", errors.New(logicalScript + " not found: run the bench from the repository (go run ./bench)")
}
