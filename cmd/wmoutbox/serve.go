package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
)

var serveCommand = &command{
	name:    "serve",
	args:    "[--addr HOST:PORT] [--read-only] [--token-env NAME | --basic-auth-env NAME]",
	summary: "serve the admin page, /metrics and /healthz over HTTP",
	help: `Serves, until SIGINT or SIGTERM (then it shuts down gracefully):

  /          the admin page (package admin): the overview, the dead letters,
             replay and purge (not with --read-only)
  /metrics   Prometheus metrics of the table, read with Store.Stats at each
             scrape: outbox_events{topic,status},
             outbox_events_oldest_pending_seconds{topic},
             outbox_events_claimed{owner,topic}, outbox_events_stats_ok;
             on PostgreSQL, the relays' gauges of the log slots,
             outbox_log_slot_lag_bytes{slot} and
             outbox_log_slot_confirmed_age_seconds{slot}, which a slot
             no relay reads any more then keeps
  /healthz   200 when the database answers, 503 otherwise (no
             authorization)

The admin page and /metrics need a bearer token (--token-env NAME) or a
basic-auth password (--basic-auth-env NAME, user --basic-auth-user) read
from the environment variable NAME: a secret never goes on the command
line, where ps shows it. With neither, --read-only and a loopback --addr
are required, and only the local host is answered.`,
	setup: func(fs *flag.FlagSet) action {
		var o serveOptions
		fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen on `HOST:PORT`")
		fs.BoolVar(&o.readOnly, "read-only", false, "no replay or purge from the admin page")
		fs.StringVar(&o.tokenEnv, "token-env", "", "require the bearer token in environment variable `NAME`")
		fs.StringVar(&o.basicEnv, "basic-auth-env", "", "require basic auth with the password in environment variable `NAME`")
		fs.StringVar(&o.basicUser, "basic-auth-user", "admin", "the basic-auth `user`")
		fs.BoolVar(&o.hidePayloads, "hide-payloads", false, "never show payloads or header values on the admin page")
		return func(ctx context.Context, c *cli, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			return serve(ctx, c, o)
		}
	},
}

type serveOptions struct {
	addr                          string
	readOnly, hidePayloads        bool
	tokenEnv, basicEnv, basicUser string
}

// authorization returns the admin configuration of the options' auth
// flags, the secrets read from the environment.
func (o *serveOptions) authorization(c *cli) (admin.Config, error) {
	cfg := admin.Config{ReadOnly: o.readOnly, HidePayloads: o.hidePayloads}
	secret := func(flagName, env string) (string, error) {
		v := c.getenv(env)
		if v == "" {
			return "", usagef("--%s: environment variable %s is not set or empty", flagName, env)
		}
		return v, nil
	}
	switch {
	case o.tokenEnv != "" && o.basicEnv != "":
		return cfg, usagef("--token-env and --basic-auth-env: give one")
	case o.tokenEnv != "":
		token, err := secret("token-env", o.tokenEnv)
		if err != nil {
			return cfg, err
		}
		cfg.Authorize = admin.BearerToken(token)
	case o.basicEnv != "":
		pass, err := secret("basic-auth-env", o.basicEnv)
		if err != nil {
			return cfg, err
		}
		if o.basicUser == "" {
			return cfg, usagef("--basic-auth-user: empty")
		}
		cfg.Authorize, cfg.Challenge = admin.BasicAuth(o.basicUser, pass), admin.BasicChallenge
	default:
		if !o.readOnly {
			return cfg, usagef("serve: without --token-env or --basic-auth-env, --read-only is required")
		}
		if !loopback(o.addr) {
			return cfg, usagef("--addr: without --token-env or --basic-auth-env, listen on a loopback address (127.0.0.1:8080), not %q", o.addr)
		}
	}
	return cfg, nil
}

// loopback reports whether addr's host is a loopback address or
// localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serve(ctx context.Context, c *cli, o serveOptions) error {
	cfg, err := o.authorization(c)
	if err != nil {
		return err
	}
	d, s, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	page, err := admin.New(s, cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(newStatsCollector(ctx, s)); err != nil {
		return err
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if cfg.Authorize != nil {
		metrics = requireAuth(cfg, metrics)
	}
	mux := http.NewServeMux()
	mux.Handle("/", page)
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		pingCtx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := d.ping(pingCtx); err != nil {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	addr := ln.Addr().String()
	fmt.Fprintf(c.stderr, "wmoutbox: serving %s (%s) on http://%s/ (metrics /metrics, health /healthz)\n", d.qualifiedTable(), d.dialect, addr)
	if c.listening != nil {
		c.listening(addr)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	fmt.Fprintln(c.stderr, "wmoutbox: stopped")
	return nil
}

// requireAuth answers 401 to a request cfg.Authorize refuses.
func requireAuth(cfg admin.Config, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := cfg.Authorize(r); !ok {
			if cfg.Challenge != "" {
				w.Header().Set("WWW-Authenticate", cfg.Challenge)
			}
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// statsCollector exports Store.Stats, read at each scrape, as gauges.
type statsCollector struct {
	ctx                         context.Context
	store                       operator
	events, oldest, claimed, ok *prometheus.Desc
	// slotLag and slotAge are the series of the relays in log mode
	// (prommetrics), under the same names so that the same alerts see
	// them: exported here too, they outlive the relays, and a slot left
	// behind when the relays went back to polling still shows.
	slotLag, slotAge *prometheus.Desc
}

// statsTimeout bounds the Stats of a scrape.
const statsTimeout = 10 * time.Second

func newStatsCollector(ctx context.Context, s operator) *statsCollector {
	return &statsCollector{
		ctx:   ctx,
		store: s,
		events: prometheus.NewDesc("outbox_events", "Events in the outbox table, by topic and status (NEW, RETRY, DONE, DEAD), read at the scrape.",
			[]string{"topic", "status"}, nil),
		oldest: prometheus.NewDesc("outbox_events_oldest_pending_seconds", "How long the topic's earliest due pending event has been due; 0 when none is.",
			[]string{"topic"}, nil),
		claimed: prometheus.NewDesc("outbox_events_claimed", "Events a relay owner holds claimed, by owner and topic.",
			[]string{"owner", "topic"}, nil),
		ok: prometheus.NewDesc("outbox_events_stats_ok", "1 when the scrape read the table's stats, 0 when that failed.", nil, nil),
		slotLag: prometheus.NewDesc("outbox_log_slot_lag_bytes", "Log a log slot holds back, from its confirmed position to the database's current one.",
			[]string{"slot"}, nil),
		slotAge: prometheus.NewDesc("outbox_log_slot_confirmed_age_seconds", "How long ago a reader last confirmed a position in a log slot; 0 when none of this module did.",
			[]string{"slot"}, nil),
	}
}

func (sc *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sc.events
	ch <- sc.oldest
	ch <- sc.claimed
	ch <- sc.ok
	ch <- sc.slotLag
	ch <- sc.slotAge
}

func (sc *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(sc.ctx, statsTimeout)
	defer cancel()
	st, err := sc.store.Stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(sc.ok, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(sc.ok, prometheus.GaugeValue, 1)
	for _, t := range st.Topics {
		for _, s := range []struct {
			status outbox.Status
			n      int64
		}{{outbox.StatusNew, t.New}, {outbox.StatusRetry, t.Retry}, {outbox.StatusDone, t.Done}, {outbox.StatusDead, t.Dead}} {
			ch <- prometheus.MustNewConstMetric(sc.events, prometheus.GaugeValue, float64(s.n), t.Topic, s.status.String())
		}
		var waited float64
		if !t.OldestDue.IsZero() {
			waited = st.At.Sub(t.OldestDue).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(sc.oldest, prometheus.GaugeValue, waited, t.Topic)
	}
	for _, cl := range st.Claims {
		ch <- prometheus.MustNewConstMetric(sc.claimed, prometheus.GaugeValue, float64(cl.Events), cl.Owner, cl.Topic)
	}
	for _, s := range st.Slots {
		ch <- prometheus.MustNewConstMetric(sc.slotLag, prometheus.GaugeValue, float64(s.LagBytes), s.Name)
		ch <- prometheus.MustNewConstMetric(sc.slotAge, prometheus.GaugeValue, s.ConfirmedAge.Seconds(), s.Name)
	}
}
