package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// bigStore answers as a store holding a million DEAD events would, from
// prepared pages: what the benchmark measures is the handler and its
// templates, not a database.
type bigStore struct {
	fakeStore
	groups []outbox.DeadGroup
	events []outbox.Event
}

func newBigStore(pageSize int) *bigStore {
	s := &bigStore{}
	for i := range pageSize {
		s.groups = append(s.groups, outbox.DeadGroup{
			Group: fmt.Sprintf("g%04d", i), Reason: "dial tcp <addr>: i/o timeout after <n>ms",
			SampleError: "dial tcp 10.0.0.1:9092: i/o timeout after 3000ms", Count: 1_000_000 - int64(i),
			FirstDied: fakeNow.Add(-time.Hour), LastDied: fakeNow, Topics: []string{"orders", "payments"},
		})
		e := deadEvent(fmt.Sprintf("01JDQ8V3M4X7K2R9T6Y5W%05d", i), "orders", "g0001",
			"kafka: produce orders: "+strings.Repeat("broker not available; ", 8), i)
		s.events = append(s.events, e)
	}
	return s
}

func (s *bigStore) DeadGroups(_ context.Context, q outbox.DeadGroupQuery) ([]outbox.DeadGroup, error) {
	return s.groups[:min(q.Limit, len(s.groups))], nil
}

func (s *bigStore) QueryDead(_ context.Context, q outbox.DeadQuery) ([]outbox.Event, error) {
	return s.events[:min(q.Limit, len(s.events))], nil
}

func (s *bigStore) CountDead(context.Context, outbox.DeadFilter) (int64, error) {
	return 1_000_000, nil
}

// BenchmarkDeadPage renders the dead-letter page of a million DEAD events,
// a full page of events and of failure groups, at two page sizes.
func BenchmarkDeadPage(b *testing.B) {
	for _, size := range []int{admin.DefaultPageSize, admin.MaxPageSize} {
		b.Run(fmt.Sprintf("page=%d", size), func(b *testing.B) {
			store := newBigStore(size + 1)
			h, err := admin.New(store, admin.Config{Authorize: admin.BearerToken("t"), PageSize: size})
			if err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "/dead?topic=orders", http.NoBody)
			r.Header.Set("Authorization", "Bearer t")
			var bytes int
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code, w.Body.String())
				}
				bytes = w.Body.Len()
			}
			b.ReportMetric(float64(bytes), "bytes/page")
		})
	}
}
