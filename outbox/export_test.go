package outbox

// Prepare is prepare, for the tests of package outbox_test: what the
// writer makes of envelopes before it inserts them.
var Prepare = prepare
