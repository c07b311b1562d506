package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestServe(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, url string) {
		seed(t, url, deadSeed...)
		ctx, cancel := context.WithCancel(t.Context())
		var stdout, stderr bytes.Buffer
		listening := make(chan string, 1)
		c := &cli{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
			getenv:    func(k string) string { return map[string]string{"OUTBOX_TOKEN": "s3cret"}[k] },
			listening: func(addr string) { listening <- addr },
		}
		done := make(chan int, 1)
		go func() {
			done <- c.run(ctx, []string{"serve", "--database-url", url, "--addr", "127.0.0.1:0", "--token-env", "OUTBOX_TOKEN"})
		}()
		var base string
		select {
		case addr := <-listening:
			base = "http://" + addr
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, stderr.String())
		}
		get := func(path, token string) (int, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
			require.NoError(t, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return resp.StatusCode, string(body)
		}
		code, body := get("/healthz", "")
		require.Equal(t, http.StatusOK, code, body)
		code, body = get("/metrics", "s3cret")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `outbox_events{status="DEAD",topic="orders"} 2`)
		require.Contains(t, body, `outbox_events{status="NEW",topic="orders"} 2`)
		require.Contains(t, body, `outbox_events_oldest_pending_seconds{topic="orders"}`)
		require.Contains(t, body, "outbox_events_stats_ok 1")
		code, _ = get("/metrics", "")
		require.Equal(t, http.StatusUnauthorized, code)
		code, body = get("/", "s3cret")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "orders")
		code, _ = get("/", "")
		require.Equal(t, http.StatusUnauthorized, code)
		code, _ = get("/", "wrong")
		require.Equal(t, http.StatusUnauthorized, code)
		code, body = get("/dead?topic=payments", "s3cret")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "503 Service Unavailable")

		cancel()
		require.Equal(t, exitOK, <-done, stderr.String())
	})
}

func TestServeAuthorizationFlags(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "outbox.db")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no auth, not read-only", nil, "--read-only is required"},
		{"no auth, everywhere", []string{"--read-only", "--addr", ":8080"}, "--addr: without --token-env or --basic-auth-env, listen on a loopback address"},
		{"no auth, a host", []string{"--read-only", "--addr", "192.0.2.1:8080"}, "listen on a loopback address"},
		{"token unset", []string{"--token-env", "NOT_SET"}, "--token-env: environment variable NOT_SET is not set or empty"},
		{"password unset", []string{"--basic-auth-env", "NOT_SET"}, "--basic-auth-env: environment variable NOT_SET is not set or empty"},
		{"both", []string{"--basic-auth-env", "A", "--token-env", "B"}, "give one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := wmoutbox(t, nil, append([]string{"serve", "--database-url", url}, tt.args...)...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.want)
		})
	}
	require.True(t, loopback("localhost:1"))
	require.True(t, loopback("[::1]:1"))
	require.False(t, loopback("0.0.0.0:1"))
}
