package watermilladapter

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/nilcheck"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// ErrSubscriberClosed is returned by [Subscriber.Subscribe] after Close.
var ErrSubscriberClosed = errors.New("watermilladapter: subscriber closed")

// ErrTopicSubscribed is returned by [Subscriber.Subscribe] for a topic
// this Subscriber already has a subscription to, unless
// SubscriberConfig.AllowSharedTopic is set.
var ErrTopicSubscribed = errors.New("watermilladapter: topic already subscribed")

// topicSubscribedError is [ErrTopicSubscribed] for topic: it names the
// package once, the operation, and the setting that allows it.
type topicSubscribedError string

func (topic topicSubscribedError) Error() string {
	return "watermilladapter: subscribe to " + string(topic) + ": topic already subscribed: " +
		"each subscription would get only some of its events (set SubscriberConfig.AllowSharedTopic to split them among subscriptions)"
}

// Is makes errors.Is(err, ErrTopicSubscribed) true.
func (topicSubscribedError) Is(target error) bool { return target == ErrTopicSubscribed }

// ErrNotRecorded is returned by [Subscriber.Close] when it gave up on
// recording outcomes or releasing claims because the database kept
// failing. Nothing is lost: those events are delivered again once their
// leases end.
var ErrNotRecorded = errors.New("watermilladapter: outcomes or releases not recorded before Close gave up")

// Defaults of [SubscriberConfig].
const (
	DefaultWorkerCount       = 4
	DefaultHotQueueCapacity  = 1000
	DefaultColdQueueCapacity = 1000
	DefaultBatchSize         = 50
	DefaultPollInterval      = 5 * time.Second
	DefaultWakeCooldown      = 5 * time.Millisecond
	DefaultDrainTimeout      = 5 * time.Second
	DefaultBacklogInterval   = 15 * time.Second
	DefaultLockTimeout       = 5 * time.Minute
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultHeartbeatTimeout  = 10 * time.Second
	DefaultOrderedRunLength  = 100

	// MinLockTimeout is the shortest SubscriberConfig.LockTimeout: an
	// event is handed to its handler only within the first half of its
	// lease, which the claim, the queue and the hand-over take from.
	MinLockTimeout = time.Second
)

// SubscriberConfig configures a [Subscriber]. Zero values mean the
// defaults.
type SubscriberConfig struct {
	// Owner identifies this relay in claims (locked_by). Give every
	// Subscriber an owner of its own: releases and failed outcomes apply to
	// the rows their owner holds, so relays sharing one could end each
	// other's claims. At most 128 characters of UTF-8, with no NUL.
	// Default: host name, process id and a random suffix.
	Owner string
	// WorkerCount is how many events of one subscription are in flight at
	// once: sent to the handler and not yet acked or nacked. Default 4.
	WorkerCount int
	// HotQueueCapacity bounds the events waiting after commit, per
	// subscription. When it is full, the commit still succeeds and the
	// event waits for the cold path. Default 1000.
	HotQueueCapacity int
	// ColdQueueCapacity bounds the claimed events waiting for a worker, per
	// subscription; claims never exceed the free space. Default 1000.
	ColdQueueCapacity int
	// BatchSize is the most events one claim takes, at most 10,000 (the
	// stores' limit). A claim takes no more than the room in the cold
	// queue, so one above ColdQueueCapacity acts as ColdQueueCapacity.
	// Default 50.
	BatchSize int
	// PollInterval is how long the cold path waits when there is no
	// backlog and nothing wakes it. Default 5s.
	PollInterval time.Duration
	// WakeCooldown is the least time between the start of a claim and a
	// claim that a wake-up ([Subscriber.Wake], a postgres.Listener)
	// brings: wake-ups within it wait for its end and make one claim
	// together. Writers committing thousands of events a second in other
	// processes then cost a claim of many events every few milliseconds
	// rather than a claim per notification, at the price of up to this
	// much latency on the cold path. Claims through a backlog, at the poll
	// interval, for retries and for the next event of an ordered aggregate
	// are not delayed. Default 5ms; a nanosecond
	// acts on every wake-up at once.
	WakeCooldown time.Duration
	// LockTimeout is the claim lease: the longest a live relay holds an
	// event, from its claim (or its write for the hot path) to its
	// outcome. A relay that dies loses its claims sooner, once its
	// heartbeat expires (see HeartbeatTimeout). Keep it well above the
	// longest handler time plus queueing: an event whose handler outlives
	// it may be claimed and delivered again, by another relay or by this
	// one; the late outcome then counts if it is an Ack, or a Nack while
	// no other relay claimed the event. An event that waited for half of
	// it, in the hot or cold queue or for the subscription's reader to
	// take it, is not handed to a handler but left to a claim after its
	// lease ends, so that its handler has at least half the lease. At
	// least [MinLockTimeout]. Default 5m.
	LockTimeout time.Duration
	// HeartbeatInterval is how often the relay renews its heartbeat, a row
	// of the table's lease table that says it is alive, and, once its own
	// heartbeats have succeeded without a break for HeartbeatTimeout,
	// hands back the claims of relays whose heartbeat expired: they are
	// delivered at once, by this relay or, told through Notify, by
	// others. Default 2s (or HeartbeatTimeout/5 when that is shorter).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a heartbeat lasts: a relay that has not
	// renewed it for this long is taken for dead, and its claims are
	// handed back, within HeartbeatTimeout plus HeartbeatInterval of its
	// last heartbeat. Clocks of the relays' hosts must agree to well
	// within it. A relay that was taken for dead while alive (a pause
	// longer than this, a network partition) logs a warning: what it had
	// in flight may be delivered twice. At least twice HeartbeatInterval
	// and below LockTimeout. Default 10s (or LockTimeout/2 when that is
	// shorter).
	HeartbeatTimeout time.Duration
	// SkipRecent leaves events younger than this to the hot path; after a
	// wake-up, a claim follows once the commits it announced are this old.
	// Default 0: hot-path events are written claimed, so the cold path
	// cannot race them anyway.
	SkipRecent time.Duration
	// Ordered delivers the events of an aggregate (AggregateType and
	// AggregateID, within a topic) one at a time, in the order they were
	// written: the next is handed over once the one before is acked
	// (claimed with it in a run, see OrderedRunLength, or after it), and
	// waits while it is retried, deferred, scheduled for later or DEAD
	// (until it is replayed or purged; the DEAD event's log line has
	// holds_back_aggregate=true). Events of different aggregates,
	// and events without an AggregateID, are delivered WorkerCount at a
	// time as usual. Give every relay of a topic the same setting: an
	// unordered one would deliver its events regardless. Ordered events
	// take no hot path; they are claimed once their commit is announced:
	// by a writer or Publisher whose HotPath is this Subscriber, or through
	// Notify and a postgres.Listener. The claims that follow a commit of
	// such a writer, a DONE or a retry coming due name the aggregates they
	// are for; the others, and one at least every PollInterval, walk the
	// topic's aggregates. The package doc says what transactions that
	// write one aggregate's events concurrently must do. Default false.
	Ordered bool
	// OrderedRunLength, with Ordered, is how many consecutive events of
	// an aggregate one claim takes together: its first event not DONE and
	// up to OrderedRunLength-1 after it, as far as each is due. One worker
	// delivers a run in order, each event as soon as the one before is
	// acked, while the DONEs are recorded in batches; another claim of the
	// aggregate follows once the run's last DONE is recorded. A Nack, a
	// DEAD event or Close ends a run: the events of it not handed out are
	// released, and the aggregate waits as Ordered says. The events a
	// claim holds, runs included, never exceed ColdQueueCapacity; a run
	// longer than ColdQueueCapacity acts as ColdQueueCapacity. A run is
	// leased as one, for LockTimeout from its claim: keep a run's handler
	// time well within half of it, since an event not handed out by then
	// is left to a later claim. 1 delivers one event of an aggregate per
	// claim. Default 100.
	OrderedRunLength int
	// RetryPolicy decides RETRY or DEAD after a Nack. One with a
	// Validate() error method (as [outbox.Backoff] has) is validated.
	// Default [outbox.Backoff]{} (200 ms, 60 s, 10 attempts, jitter).
	RetryPolicy outbox.RetryPolicy
	// DrainTimeout is how long Close waits for messages already handed to
	// handlers to be acked or nacked. Default 5s. Then it ends their
	// contexts and releases their events to be delivered again, with no
	// attempt spent; an Ack given as it does still counts, a Nack (as
	// handlers answer an ended context) does not, and whatever comes
	// later changes nothing. With Ordered, an event whose handler has
	// not returned is not released but left to its lease, so that the
	// next event of its aggregate cannot overtake it.
	DrainTimeout time.Duration
	// Metrics receives counters, queue depths, backlog and latency.
	// Default: none.
	Metrics outbox.Metrics
	// BacklogInterval is how often each subscription reports its queue
	// depths and reads its topic's backlog (pending count, oldest age)
	// for Metrics; each read is one query on the due index. With no
	// Metrics, nothing is read. As often, the Subscriber reads the pending
	// events of every topic (one query of the pending rows, on the due
	// index) for Metrics.Unserved and UnroutableAfter, when either is
	// set. Default 15s.
	BacklogInterval time.Duration
	// Logger receives what the relay has to say, at the levels
	// docs/operations.md lists: errors (a DEAD event, a failing claim or
	// status write) at error level, events left to a later claim at warn
	// level (counted: one line per topic and cause a minute at most), the
	// release of an earlier run's claims at info level. Default
	// slog.Default(), as every logger of this module. A router logging
	// through watermill.NewSlogLogger(logger) shares logger with it.
	Logger *slog.Logger
	// Notify, when set, is told the topics of the claims this subscriber
	// hands back (at Close, and for events its hot path could not take),
	// so that relays in other processes claim them at once rather than at
	// their next poll: usually a postgres.Notifier's Notify. Relays of
	// this process are woken either way. It must not block. Default: none.
	Notify func(topics []string)
	// ReleaseEarlierClaims hands back, as each subscription starts, the
	// claims that the pending events of its topic still hold for Owner
	// from before this Subscriber was made: those of an earlier run of
	// this relay that died without recording their outcomes (a crash, a
	// kill). They are delivered at once rather than when their leases
	// end, and an ordered relay's aggregates go on at once too. It needs
	// an Owner that is this relay's alone and stays the same across
	// restarts, such as the name of a StatefulSet's pod: another live
	// relay under the same Owner would lose its claims, and its events be
	// delivered twice; so would a Subscriber made again in the same
	// process while the one before still had handlers running. Only claims
	// made before this Subscriber, by its Clock (give it the store's), are
	// released, once per topic, before the topic's first claim and before
	// its hot path takes events. Claims made before migration 2 stay until
	// their lease ends. Default false.
	ReleaseEarlierClaims bool
	// UnroutableAfter, when set, makes DEAD the events of topics that no
	// subscription of this Subscriber serves once they have waited this
	// long, with last_error "no subscription for topic T within D": the
	// specification's rule for events no listener takes. It assumes this
	// Subscriber serves every topic of its table that anybody serves: a
	// topic served only by relays of other processes loses the events
	// those relays have not claimed within UnroutableAfter (during their
	// outage, say). Leave it off unless every relay of the table has the
	// same subscriptions. Events claimed by another relay are never
	// touched, nor any before this Subscriber's first subscription is
	// UnroutableAfter old. It takes the unserved topics' read (see
	// Metrics), and up to BatchSize events per topic per BacklogInterval.
	// Default 0: an unserved topic's events stay pending, counted by
	// Metrics.Unserved.
	UnroutableAfter time.Duration
	// AllowSharedTopic lets Subscribe be called more than once for one
	// topic on this Subscriber: the subscriptions then share the topic's
	// events, each event going to one of them, as consumers of one queue
	// do. Off by default, a second Subscribe to a topic fails with
	// [ErrTopicSubscribed]: two router handlers on one topic usually mean
	// that one of them was meant for another topic, and each would see
	// only some of its events. Set it to split a topic's load among
	// several handlers. Default false.
	AllowSharedTopic bool
	// Clock tells the time of claims, outcomes and retries, and runs every
	// wait of the relay (polls, cooldowns, lingers, timeouts): give it the
	// store's clock (its dialect Config.Clock). Default
	// [outbox.SystemClock].
	Clock outbox.Clock
	// Feed, when set, puts the relay in log mode: it delivers the events
	// the feed streams from the database's log of commits (a PostgreSQL
	// logical replication slot: postgres.NewLogFeed), in commit order,
	// rather than claim them, and claims only retries, events scheduled
	// for later, and the NEW events the feed leaves to the table (those
	// of topics no subscription of this Subscriber served when they were
	// streamed, those of an ordered aggregate behind a failed event, and
	// those the log no longer holds: see outboxdriver.FeedHandler). A
	// relay whose feed waits for another reader of the log (a standby)
	// claims no NEW event; once the reader dies it takes the log over.
	// There is no hot path in log mode: HotPath and Committed of writers
	// need not name this Subscriber, and cross-process Notify is not
	// needed. Ordered, the events of an aggregate are delivered in commit
	// order one at a time, across WorkerCount workers, and an aggregate
	// whose earlier event is unfinished in the table (left by a reader of
	// the log before this one) follows it through claims until the
	// claims have delivered every earlier event; this needs a store whose
	// driver implements outboxdriver.FeedOrderer (PostgreSQL's does),
	// else NewSubscriber fails. Give every relay
	// of the table a feed of the same log, and the same subscriptions.
	// Default: none (claims, the hot path and Notify deliver).
	Feed outboxdriver.Feed
	// Tracer, when set, observes the relay's statements: each claim, and
	// each batched statement recording outcomes or releasing claims (see
	// [Tracer]); package outboxotel's RelayTracer makes spans of them.
	// Default: none.
	Tracer Tracer
}

func (c SubscriberConfig) withDefaults() (SubscriberConfig, error) {
	for name, v := range map[string]int{"WorkerCount": c.WorkerCount, "HotQueueCapacity": c.HotQueueCapacity,
		"ColdQueueCapacity": c.ColdQueueCapacity, "BatchSize": c.BatchSize, "OrderedRunLength": c.OrderedRunLength} {
		if v < 0 {
			return c, fmt.Errorf("%w: subscriber %s is negative", outbox.ErrInvalidRequest, name)
		}
	}
	for name, v := range map[string]time.Duration{"PollInterval": c.PollInterval, "LockTimeout": c.LockTimeout,
		"HeartbeatInterval": c.HeartbeatInterval, "HeartbeatTimeout": c.HeartbeatTimeout,
		"SkipRecent": c.SkipRecent, "DrainTimeout": c.DrainTimeout, "BacklogInterval": c.BacklogInterval,
		"WakeCooldown": c.WakeCooldown, "UnroutableAfter": c.UnroutableAfter} {
		if v < 0 {
			return c, fmt.Errorf("%w: subscriber %s is negative", outbox.ErrInvalidRequest, name)
		}
	}
	if c.LockTimeout != 0 && c.LockTimeout < MinLockTimeout {
		return c, fmt.Errorf("%w: subscriber LockTimeout %s is below %s", outbox.ErrInvalidRequest, c.LockTimeout, MinLockTimeout)
	}
	if v, ok := c.RetryPolicy.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return c, fmt.Errorf("subscriber RetryPolicy: %w", err)
		}
	}
	c.WorkerCount = cmpOr(c.WorkerCount, DefaultWorkerCount)
	c.HotQueueCapacity = cmpOr(c.HotQueueCapacity, DefaultHotQueueCapacity)
	c.ColdQueueCapacity = cmpOr(c.ColdQueueCapacity, DefaultColdQueueCapacity)
	c.BatchSize = cmpOr(c.BatchSize, DefaultBatchSize)
	c.OrderedRunLength = cmpOr(c.OrderedRunLength, DefaultOrderedRunLength)
	c.PollInterval = cmpOr(c.PollInterval, DefaultPollInterval)
	c.WakeCooldown = cmpOr(c.WakeCooldown, DefaultWakeCooldown)
	c.LockTimeout = cmpOr(c.LockTimeout, DefaultLockTimeout)
	if err := c.heartbeatDefaults(); err != nil {
		return c, err
	}
	c.DrainTimeout = cmpOr(c.DrainTimeout, DefaultDrainTimeout)
	c.BacklogInterval = cmpOr(c.BacklogInterval, DefaultBacklogInterval)
	if nilcheck.Is(c.Metrics) {
		c.Metrics = nopMetrics{}
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = outbox.Backoff{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if nilcheck.Is(c.Clock) {
		c.Clock = outbox.SystemClock{}
	}
	if nilcheck.Is(c.Tracer) {
		c.Tracer = nil
	}
	if nilcheck.Is(c.Feed) {
		c.Feed = nil
	}
	if c.ReleaseEarlierClaims && c.Owner == "" {
		return c, fmt.Errorf("%w: subscriber ReleaseEarlierClaims needs an Owner that stays the same across restarts", outbox.ErrInvalidRequest)
	}
	if c.Owner == "" {
		c.Owner = ident.Owner(maxOwnerLen)
	}
	// Every claim would fail the same way, only logged, and leave the
	// cold path dead: reject now what the table would reject then.
	if reason := codec.CheckText(c.Owner, maxOwnerLen); reason != "" {
		return c, fmt.Errorf("%w: subscriber Owner: %s", outbox.ErrInvalidRequest, reason)
	}
	if c.BatchSize > maxBatchSize {
		return c, fmt.Errorf("%w: subscriber BatchSize %d exceeds %d", outbox.ErrInvalidRequest, c.BatchSize, maxBatchSize)
	}
	c.BatchSize = min(c.BatchSize, c.ColdQueueCapacity)
	c.OrderedRunLength = min(c.OrderedRunLength, c.ColdQueueCapacity)
	return c, nil
}

// heartbeatDefaults sets the heartbeat's defaults, scaled down to a short
// LockTimeout, or says why the values set are invalid.
func (c *SubscriberConfig) heartbeatDefaults() error {
	c.HeartbeatTimeout = cmpOr(c.HeartbeatTimeout, min(DefaultHeartbeatTimeout, c.LockTimeout/2))
	c.HeartbeatInterval = cmpOr(c.HeartbeatInterval, min(DefaultHeartbeatInterval, c.HeartbeatTimeout/5))
	switch {
	case c.HeartbeatTimeout < 2*c.HeartbeatInterval:
		return fmt.Errorf("%w: subscriber HeartbeatTimeout %s is below twice HeartbeatInterval %s",
			outbox.ErrInvalidRequest, c.HeartbeatTimeout, c.HeartbeatInterval)
	case c.HeartbeatTimeout >= c.LockTimeout:
		return fmt.Errorf("%w: subscriber HeartbeatTimeout %s is not below LockTimeout %s",
			outbox.ErrInvalidRequest, c.HeartbeatTimeout, c.LockTimeout)
	}
	return nil
}

// Limits of [SubscriberConfig]: the owner's column holds 128 characters,
// and a claim takes at most 10,000 events.
const (
	maxOwnerLen  = 128
	maxBatchSize = 10000
)

func cmpOr[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Subscriber is a Watermill message.Subscriber that relays outbox events:
// the outbox's dispatcher and poller. Each Subscribe call gets a
// subscription with bounded hot and cold queues, a claim loop (the cold
// path) and WorkerCount workers that hand events to the output channel as
// messages and turn their Ack into DONE and their Nack into RETRY, DEAD or
// a deferral (see [RecordError]).
//
// Messages carry the published UUID, payload and metadata, plus
// [MetadataEventID], [MetadataAttempt] and [MetadataSource]. A message's
// context ends when it is acked or nacked, or when the subscriber closes.
//
// Events of a topic that no subscription of this Subscriber serves stay
// pending in the table for a relay that serves the topic, counted by
// Metrics.Unserved; with SubscriberConfig.UnroutableAfter set, they go
// DEAD once they have waited that long. Subscribe and Close are safe for concurrent use;
// Close is idempotent and closes the output channels before it returns.
type Subscriber struct {
	driver   outboxdriver.Executor
	cfg      SubscriberConfig
	owner    string
	made     time.Time                // claims of the owner from before are an earlier run's
	earlier  map[string]chan struct{} // by topic: see subscription.earlier
	inflight *inFlight
	settler  *settler
	drops    *dropLog
	beats    *heartbeat
	feed     *feedReader // nil without a Feed
	stopFeed context.CancelFunc
	feedDone chan struct{} // closed when the feed's goroutine ends; nil before it starts

	mu   sync.Mutex
	subs map[string][]*subscription
	next map[string]int // round robin of hot events among a topic's subscriptions
	// unserved are, ordered in log mode, the aggregates of topics with no
	// subscription whose streamed events were left to claims (see
	// feedSubscription).
	unserved map[string]map[outboxdriver.Aggregate]struct{}
	closed   bool
	wg       sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	checked atomic.Bool // the store's table passed its check
	// schema checks the table at the first Subscribe; nil when the
	// store's driver cannot.
	schema outboxdriver.SchemaChecker
	// slots reports the log slots (see reportSlots); nil when the
	// store's driver has none.
	slots *slotReporter

	started   time.Time          // of the first subscription; zero before
	stopped   context.Context    // ended by Close
	stopWatch context.CancelFunc // ends stopped
}

var (
	_ message.Subscriber = (*Subscriber)(nil)
	_ outbox.HotPath     = (*Subscriber)(nil)
)

// NewSubscriber returns a subscriber relaying events from store.
func NewSubscriber[Tx any](store *outbox.Store[Tx], cfg SubscriberConfig) (*Subscriber, error) {
	if store == nil {
		return nil, fmt.Errorf("watermilladapter: new subscriber: %w: no store", outbox.ErrInvalidRequest)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// A delivery starts with at least half its claim left: an event
	// claimed again later is due again, as it is for other relays, and a
	// handler that hangs does not hold it here for good.
	inflight := newInFlight(cfg.LockTimeout/2, cfg.Clock)
	s := &Subscriber{
		driver:   store.Driver(),
		cfg:      cfg,
		owner:    cfg.Owner,
		made:     cfg.Clock.Now(),
		earlier:  make(map[string]chan struct{}),
		inflight: inflight,
		subs:     make(map[string][]*subscription),
		next:     make(map[string]int),
		unserved: make(map[string]map[outboxdriver.Aggregate]struct{}),
	}
	if cfg.Feed != nil {
		s.feed = &feedReader{s: s, seed: maphash.MakeSeed()}
		if cfg.Ordered {
			// Taken before the tracer wraps the driver, which hides it.
			orderer, ok := s.driver.(outboxdriver.FeedOrderer)
			if !ok {
				return nil, fmt.Errorf("watermilladapter: new subscriber: %w: Ordered with a Feed needs a store whose driver "+
					"orders a feed (outboxdriver.FeedOrderer; PostgreSQL's does)", outbox.ErrInvalidRequest)
			}
			s.feed.orderer = orderer
		}
	}
	// Taken before the tracer wraps the driver, which hides it.
	s.schema, _ = s.driver.(outboxdriver.SchemaChecker)
	s.slots = newSlotReporter(s.driver)
	if cfg.Tracer != nil {
		s.driver = tracedExecutor{Executor: s.driver, tracer: cfg.Tracer}
	}
	s.stopped, s.stopWatch = context.WithCancel(context.Background())
	s.drops = newDropLog(cfg.Logger, cfg.Clock)
	s.settler = newSettler(s.driver, cfg.Clock, cfg.Owner, cfg.Logger, cfg.Metrics, s.released)
	s.beats = newHeartbeat(s)
	return s, nil
}

// Owner returns the claim owner of this relay.
func (s *Subscriber) Owner() string { return s.owner }

// Subscribe starts relaying the events of topic to the returned channel.
// The channel is closed when ctx ends or the subscriber closes, once the
// acks and nacks of its messages are recorded: a Watermill router's Close,
// which returns when its handlers' channels are closed, leaves nothing
// unrecorded for the database close that usually follows. An empty topic
// fails with outbox.ErrInvalidRequest.
//
// Until one succeeds, Subscribe checks the store's table first
// ([outbox.Store.Check]): a table that does not exist, or is at an older
// migration than this wmoutbox needs, fails it with an error matching
// outbox.ErrNotMigrated that names the migration to run. A check the
// database cannot answer is logged at warn level, and the subscription
// starts: its claims retry, and log their errors.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if topic == "" {
		return nil, fmt.Errorf("watermilladapter: subscribe: %w: no topic", outbox.ErrInvalidRequest)
	}
	if err := s.checkSchema(ctx, topic); err != nil {
		return nil, err
	}
	s.beats.first()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSubscriberClosed
	}
	if len(s.subs[topic]) > 0 && !s.cfg.AllowSharedTopic {
		return nil, topicSubscribedError(topic)
	}
	s.beats.start()
	if s.started.IsZero() {
		s.started = s.cfg.Clock.Now()
		if s.feed != nil {
			s.startFeed()
		}
		if _, nop := s.cfg.Metrics.(nopMetrics); !nop || s.cfg.UnroutableAfter > 0 {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.watchUnserved()
			}()
		}
	}
	sub := newSubscription(s, topic)
	if unserved := s.unserved[topic]; sub.lanes != nil && len(unserved) > 0 {
		// Their events' seqs are not known: the claims take all of them.
		sub.park(math.MaxInt64, slices.Collect(maps.Keys(unserved))...)
		delete(s.unserved, topic)
	}
	if s.cfg.ReleaseEarlierClaims {
		if sub.earlier = s.earlier[topic]; sub.earlier == nil {
			sub.earlier, sub.releases = make(chan struct{}), true
			s.earlier[topic] = sub.earlier
		}
	}
	s.subs[topic] = append(s.subs[topic], sub)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sub.run(ctx)
	}()
	return sub.out, nil
}

// schemaCheckTimeout bounds the check of the table at Subscribe.
const schemaCheckTimeout = 10 * time.Second

// checkSchema checks the store's table, until a check passes: an error
// when it is not migrated, nil when it is or when the database cannot
// tell (which is logged).
func (s *Subscriber) checkSchema(ctx context.Context, topic string) error {
	if s.checked.Load() {
		return nil
	}
	checker := s.schema
	if checker == nil {
		s.checked.Store(true)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, schemaCheckTimeout)
	defer cancel()
	err := checker.CheckSchema(ctx)
	switch {
	case err == nil:
		s.checked.Store(true)
	case errors.Is(err, outbox.ErrNotMigrated):
		return fmt.Errorf("watermilladapter: subscribe to %s: %w", topic, err)
	default:
		s.cfg.Logger.Warn("outbox: cannot check the table at subscribe; its claims will tell",
			slog.String("topic", topic), slog.Any("error", err))
	}
	return nil
}

func (s *Subscriber) remove(sub *subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	subs := s.subs[sub.topic]
	for i, other := range subs {
		if other == sub {
			s.subs[sub.topic] = append(subs[:i:i], subs[i+1:]...)
			break
		}
	}
	if len(s.subs[sub.topic]) == 0 {
		delete(s.subs, sub.topic)
	}
}

// Close stops claiming, waits up to DrainTimeout for messages in handlers,
// releases every claim not finished so that another relay takes it at
// once (relays of other processes when [SubscriberConfig.Notify] tells
// them, else at their next poll; a queued event whose claim is half spent
// is left to it, as a worker leaves it, since this relay may have claimed
// the event again meanwhile), records pending outcomes, and closes the
// output channels. Every call, concurrent ones included, returns once all
// of that is done. With the database failing or not answering, it gives up
// on the outcomes and releases about 10 s after it began (statements
// already waiting included; each statement queued after that gets one
// attempt of at most a second) and returns [ErrNotRecorded]; a claim the
// database does not answer is given up 10 s after Close begins too, and
// what it may have claimed waits for its lease.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Subscriber) close() error {
	s.mu.Lock()
	s.closed = true
	s.stopWatch()
	s.settler.stop()
	for _, subs := range s.subs {
		for _, sub := range subs {
			sub.stop()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	err := s.settler.close()
	if s.feedDone != nil {
		// Only now: the feed's last position counts the outcomes the
		// settler recorded as it closed.
		s.stopFeed()
		<-s.feedDone
	}
	s.beats.end(err == nil)
	return err
}

// isClosed reports whether Close has begun.
func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// HotLease implements [outbox.HotPath]: hot events are written claimed by
// this relay's Owner for its LockTimeout.
func (s *Subscriber) HotLease() (owner string, lease time.Duration) {
	return s.owner, s.cfg.LockTimeout
}

// TakesHot implements [outbox.HotPath]: a subscription of this subscriber
// relays topic, unordered (an ordered event must wait for the claim to
// find the one before it delivered).
func (s *Subscriber) TakesHot(topic string) bool {
	if s.cfg.Ordered || s.feed != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && len(s.subs[topic]) > 0 && s.earlierReleased(topic)
}

// DeliverHot implements [outbox.HotPath]: it queues the committed events
// on the hot queues of their topics' subscriptions. Events that no
// subscription can take now (none serves the topic any more, or its hot
// queue is full) are released to the cold path; the write never fails.
// Events whose transaction stayed open for half their claim after writing
// them are left to a claim after its end, like events that waited that
// long in a queue, and not released: this relay may hold a newer claim of
// them already, which a release would end.
func (s *Subscriber) DeliverHot(_ context.Context, events []outbox.Envelope, claimLeft time.Duration) {
	if claimLeft <= s.cfg.LockTimeout/2 {
		for _, e := range events {
			s.cfg.Metrics.HotDropped(e.Topic)
			s.drops.add(e.Topic, dropLateCommit)
		}
		return
	}
	var dropped []releaseItem
	committed := s.cfg.Clock.Now()
	claimedUntil := committed.Add(claimLeft)
	for _, e := range events {
		if s.offerHot(e, committed, claimedUntil) {
			s.cfg.Metrics.HotEnqueued(e.Topic)
		} else {
			s.cfg.Metrics.HotDropped(e.Topic)
			s.drops.add(e.Topic, dropHotFull)
			dropped = append(dropped, releaseItem{id: e.ID, topic: e.Topic})
		}
	}
	if len(dropped) > 0 {
		s.settler.release(dropped)
	}
}

// Committed implements [outbox.HotPath]: the subscriptions of the events'
// topics claim those due now at once (after WakeCooldown), and those with
// a DeliverAfter ahead when they come due, rather than at their next
// poll. An ordered subscription is told their aggregates, which its claims
// name rather than walk the topic's; an event without an aggregate id
// makes it walk.
func (s *Subscriber) Committed(events []outbox.Envelope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		var aggregate outboxdriver.Aggregate
		if s.cfg.Ordered && e.AggregateID != "" {
			aggregate = aggregateOf(&e)
		}
		for _, sub := range s.subs[e.Topic] {
			switch {
			case s.feed != nil && e.DeliverAfter.IsZero():
				// The feed delivers it.
			case !e.DeliverAfter.IsZero():
				sub.scheduleClaim(e.DeliverAfter, aggregate)
			case aggregate.ID != "":
				sub.wakeFor(aggregate)
			default:
				sub.wake()
			}
		}
	}
}

// aggregateOf returns the aggregate of e.
func aggregateOf(e *outbox.Envelope) outboxdriver.Aggregate {
	return outboxdriver.Aggregate{Topic: e.Topic, Type: string(e.AggregateType), ID: e.AggregateID}
}

func (s *Subscriber) offerHot(e outbox.Envelope, committed, claimedUntil time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	subs := s.subs[e.Topic]
	if s.closed || len(subs) == 0 || !s.earlierReleased(e.Topic) {
		return false
	}
	start := s.next[e.Topic]
	s.next[e.Topic] = start + 1
	for i := range subs {
		if subs[(start+i)%len(subs)].offerHot(e, committed, claimedUntil) {
			return true
		}
	}
	return false
}

// earlierReleased reports, with s.mu held, whether topic's earlier claims
// are released, or need not be.
func (s *Subscriber) earlierReleased(topic string) bool {
	ch, ok := s.earlier[topic]
	return !ok || isDone(ch)
}

// released wakes the relays of topics whose claims were handed back: this
// process's, and through Notify the others'.
func (s *Subscriber) released(topics ...string) {
	s.Wake(topics...)
	if s.cfg.Notify != nil {
		s.cfg.Notify(topics)
	}
}

// Wake makes the cold paths of topics claim now instead of at their next
// poll, or at the end of WakeCooldown if they claimed less than that ago;
// with no topic, every subscription's. Events committed by another
// process are due: a postgres.Listener calls Wake when that process's
// Notifier says so. Topics this subscriber does not serve are ignored. It
// never blocks.
func (s *Subscriber) Wake(topics ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(topics) == 0 {
		for _, subs := range s.subs {
			for _, sub := range subs {
				sub.wake()
			}
		}
		return
	}
	for _, topic := range topics {
		for _, sub := range s.subs[topic] {
			sub.wake()
		}
	}
}
