package bytesize_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/bytesize"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		-1:              "0 B",
		0:               "0 B",
		1023:            "1023 B",
		1024:            "1.0 KiB",
		1536:            "1.5 KiB",
		10*1024 - 52:    "9.9 KiB",
		10*1024 - 51:    "10 KiB",
		5 << 20:         "5.0 MiB",
		3 << 30:         "3.0 GiB",
		12 << 30:        "12 GiB",
		1023 << 40:      "1023 TiB",
		math.MaxInt64:   "8.0 EiB",
		1<<30 + 1<<29:   "1.5 GiB",
		1024*1024 - 1:   "1.0 MiB",
		1023*1024 + 511: "1023 KiB",
	} {
		require.Equal(t, want, bytesize.Format(n), "%d", n)
	}
}
