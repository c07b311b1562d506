package codec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestContains(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"timeout":   "%timeout%",
		"100%_done": "%100!%!_done%",
		"wow!":      "%wow!!%",
		"":          "%%",
	} {
		require.Equal(t, want, Contains(in), in)
	}
}
