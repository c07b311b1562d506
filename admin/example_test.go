package admin_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/wmoutbox/wmoutbox/admin"
)

// Mount the dashboard under /outbox/ of a service's mux, for requests
// carrying a bearer token. In a service the store is the outbox store
// (*postgres.Store, *mysql.Store or *sqlite.Store) and the token comes
// from a secret; here an in-memory fake stands in for the store.
func Example() {
	store := newFakeStore(someEvents()...) // your *postgres.Store
	const secret = "a-long-random-token"   // from your secret store

	h, err := admin.New(store, admin.Config{Authorize: admin.BearerToken(secret)})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))

	// What requests get, without the token and with it.
	for _, auth := range []string{"", "Bearer " + secret} {
		r := httptest.NewRequest(http.MethodGet, "/outbox/dead", http.NoBody)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// 401
	// 200
}

// A read-only page needs no authorizer, and then answers the local host
// only: for a debug port bound to 127.0.0.1.
func ExampleNew_readOnly() {
	h, err := admin.New(newFakeStore(), admin.Config{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, remote := range []string{"127.0.0.1:50000", "192.0.2.1:50000"} {
		r := httptest.NewRequest(http.MethodGet, "/", http.NoBody)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(remote, w.Code)
	}
	// Output:
	// 127.0.0.1:50000 200
	// 192.0.2.1:50000 403
}
