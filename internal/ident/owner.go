package ident

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// Owner names this process in the rows it holds (a relay's claims, a log
// feed's slot lease): host, pid and a random suffix, so that two
// instances in one process differ too. It keeps the last maxLen bytes,
// where the pid and suffix are.
func Owner(maxLen int) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	owner := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(suffix))
	if len(owner) > maxLen {
		owner = owner[len(owner)-maxLen:]
	}
	return owner
}
