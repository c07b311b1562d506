// Package interop has no API: its tests check that the records
// kafkaforward produces are the ones watermill-kafka's publisher writes,
// read by watermill-kafka's subscriber, and its benchmarks set
// kafkaforward beside watermill-kafka's publisher.
//
// It is a module of its own, so that watermill-kafka and Sarama (with
// gokrb5, go-metrics and OpenTelemetry behind them) stay out of the
// library's go.mod: a requirement there, even one that only a test needs,
// takes part in the version selection of every module that depends on
// wmoutbox. Run its tests from this directory, or with make test from the
// repository root:
//
//	go test -race ./...
//	go test -run '^$' -bench . ./...
package interop
