// Package browsertest drives the admin package's dead-letter page in a real,
// headless Chromium against a real PostgreSQL and relay: what a unit test
// of the handler cannot see (the browser's cookies, its form submissions
// under the page's Content-Security-Policy, the redirects after an
// action). Tests only.
//
// It is a module of its own so that chromedp stays out of the library's
// go.mod. The browser is the CHROMIUM environment variable or the first of
// chromium, chromium-browser and google-chrome on the PATH; without one
// the test skips, and fails under CI=true.
//
//	cd admin/browsertest && go test ./...
//	go test ./... -update-screenshot   # writes docs/images/admin-dead-letters.png
package browsertest
