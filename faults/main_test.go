//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The crash and ordered-relays scenarios run relays as separate OS
// processes: this test binary started again with these variables set,
// which TestMain turns into a relay instead of a test run.
const (
	envRole     = "WMOUTBOX_FAULTS_ROLE"
	envDatabase = "WMOUTBOX_FAULTS_DATABASE_URL"
	envOwner    = "WMOUTBOX_FAULTS_OWNER"
	// envScenario picks the child relay's store, configuration and
	// handler: empty for the crash scenario's, scenarioOrdered for the
	// ordered relays', scenarioLiveness for the recovery after SIGKILL,
	// scenarioMySQLCrash for the crash scenario's on MySQL (envDatabase is
	// then a MySQL DSN), scenarioLogRelay for a relay in log mode, and
	// scenarioLogOrdered for an ordered one.
	envScenario = "WMOUTBOX_FAULTS_SCENARIO"
	// envSlot names the replication slot of a relay in log mode.
	envSlot = "WMOUTBOX_FAULTS_SLOT"

	roleRelay = "relay"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == roleRelay {
		os.Exit(runRelayProcess())
	}
	os.Exit(m.Run())
}

// The crashing relay's configuration, shared by the parent (which derives
// the duplicate bound from it) and the child processes. The lease is short
// so that a killed relay's claims come back within the test; the cold
// queue is small so that a relay never holds more claims than it works
// through well within one lease.
const (
	crashTopic        = "crash"
	crashWorkers      = 4
	crashColdQueue    = 40
	crashBatch        = 20
	crashLockTimeout  = 3 * time.Second
	crashPollInterval = 50 * time.Millisecond
)

// runRelayProcess is the child role: a relay whose handler records each
// delivery in the ledger table before acking (for the ordered relays, the
// scenario's handler, see orderedHandler). It runs until its standard
// input closes (a graceful stop) or it is killed.
func runRelayProcess() int {
	owner := os.Getenv(envOwner)
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "relay %s: %s: %v\n", owner, what, err)
		return 1
	}
	if os.Getenv(envScenario) == scenarioMySQLCrash {
		return runMySQLRelayProcess(owner, fail)
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv(envDatabase))
	if err != nil {
		return fail("parse database URL", err)
	}
	cfg.MaxConns = 6
	// The test finds each relay's sessions by name, its replication
	// connection among them (which copies the pool's settings).
	cfg.ConnConfig.RuntimeParams["application_name"] = owner
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail("open pool", err)
	}
	defer pool.Close()
	store, err := postgres.NewStore(pool, postgres.Config{})
	if err != nil {
		return fail("store", err)
	}
	subCfg := crashSubscriberConfig(owner)
	topic := crashTopic
	handler := func(msg *message.Message) error {
		return recordDelivered(msg.Context(), pool, msg.Metadata.Get(watermilladapter.MetadataEventID), owner)
	}
	switch os.Getenv(envScenario) {
	case scenarioOrdered:
		subCfg, topic = orderedSubscriberConfig(owner), orderedTopic
		handler = orderedHandler(pool, owner, dbOrderLog{pool: pool})
	case scenarioLiveness:
		subCfg, topic = livenessSubscriberConfig(owner), livenessTopic
		handler = livenessHandler(pool, owner)
	case scenarioLogRelay, scenarioLogOrdered:
		// The liveness scenario's relay, or the ordered relays', in log
		// mode.
		feed, err := postgres.NewLogFeed(store, logFeedConfig(owner, os.Getenv(envSlot)))
		if err != nil {
			return fail("log feed", err)
		}
		subCfg, topic = livenessSubscriberConfig(owner), logRelayTopic
		handler = logRelayHandler(pool, owner)
		if os.Getenv(envScenario) == scenarioLogOrdered {
			subCfg, topic = logOrderedSubscriberConfig(owner), orderedTopic
			handler = orderedHandler(pool, owner, dbOrderLog{pool: pool})
		}
		subCfg.Feed, subCfg.Logger = feed, childLogger()
	}
	sub, err := watermilladapter.NewSubscriber(store, subCfg)
	if err != nil {
		return fail("subscriber", err)
	}
	return runRelay(sub, topic, handler, fail)
}

// crashSubscriberConfig is the crashing relays' configuration (both
// stores').
func crashSubscriberConfig(owner string) watermilladapter.SubscriberConfig {
	return watermilladapter.SubscriberConfig{
		Owner:             owner,
		WorkerCount:       crashWorkers,
		ColdQueueCapacity: crashColdQueue,
		BatchSize:         crashBatch,
		PollInterval:      crashPollInterval,
		LockTimeout:       crashLockTimeout,
	}
}

// runRelay is the rest of the child role: it runs handler on sub's topic
// behind RecordErrors, says "relay running", and runs until its standard
// input closes (then it closes the router and sub) or it is killed.
func runRelay(sub *watermilladapter.Subscriber, topic string, handler message.NoPublishHandlerFunc, fail func(what string, err error) int) int {
	ctx := context.Background()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		return fail("router", err)
	}
	router.AddMiddleware(outboxmw.RecordErrors)
	router.AddConsumerHandler("record", topic, sub, handler)
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()
	fmt.Println("relay running")

	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it to stop us
	if err := router.Close(); err != nil {
		return fail("close router", err)
	}
	if err := <-done; err != nil {
		return fail("router", err)
	}
	if err := sub.Close(); err != nil {
		return fail("close subscriber", err)
	}
	return 0
}
