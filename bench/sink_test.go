package main

import (
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
)

// deliver hands events to t as the sink would, in the order given.
func deliver(t *tally, events ...int) {
	for _, i := range events {
		msg := message.NewMessage(watermill.NewUUID(), payload(i))
		msg.Metadata.Set(keySeq, strconv.Itoa(i))
		t.recv(msg)
	}
}

// The fill writes aggregates of consecutive events: aggregateOf gives
// events 10 to 19 the id of event 10, and every event its own with 1; hot
// aggregates take the events in turn.
func TestAggregatesAreConsecutiveEvents(t *testing.T) {
	tens := shape{perAggregate: 10}
	require.Equal(t, aggregateID(10), tens.aggregateOf(10))
	require.Equal(t, aggregateID(10), tens.aggregateOf(19))
	require.Equal(t, aggregateID(20), tens.aggregateOf(20))
	require.Equal(t, aggregateID(7), shape{perAggregate: 1}.aggregateOf(7))
	require.Equal(t, aggregateID(7), eachOwn.aggregateOf(7))
	hot := shape{hot: 10}
	require.Equal(t, aggregateID(3), hot.aggregateOf(13))
	require.Equal(t, 3, hot.index(23))
	require.Equal(t, 10, hot.aggregates(30))
}

// An ordered drain's tally accepts each aggregate's events in write order,
// whatever the order across aggregates, and repeated deliveries of an
// event already delivered, which at-least-once delivery allows.
func TestOrderCheckAcceptsDuplicates(t *testing.T) {
	tl := newTally(30)
	tl.checkOrder(shape{perAggregate: 10})
	deliver(tl, 0, 10, 1, 20, 11, 2, 1, 0, 3, 12, 2, 21)
	require.NoError(t, tl.check("drain"))
	require.Equal(t, 3, tl.duplicates())
}

// An event whose first delivery comes after a later event of its
// aggregate fails the check, wherever it stands in its aggregate.
func TestOrderCheckFindsEventsOutOfOrder(t *testing.T) {
	for name, events := range map[string][]int{
		"swapped":            {0, 2, 1},
		"late first arrival": {10, 12, 11, 12},
		"last of aggregate":  {29, 20},
	} {
		t.Run(name, func(t *testing.T) {
			tl := newTally(30)
			tl.checkOrder(shape{perAggregate: 10})
			deliver(tl, events...)
			require.ErrorContains(t, tl.check("drain"), "drain: 1 events reached the sink after a later event of their aggregate")
		})
	}
	// Hot aggregates: events 0, 10 and 20 are one aggregate's.
	tl := newTally(30)
	tl.checkOrder(shape{hot: 10})
	deliver(tl, 0, 1, 10, 21, 11)
	require.ErrorContains(t, tl.check("drain"), "1 events reached the sink after a later event of their aggregate (10 aggregates")
	// Without checkOrder, only deliveries are counted.
	tl = newTally(30)
	deliver(tl, 0, 2, 1)
	require.NoError(t, tl.check("drain"))
}
