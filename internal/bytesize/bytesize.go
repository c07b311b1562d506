// Package bytesize writes sizes in bytes for people, in binary units, for
// the operator surface (the wmoutbox command and the admin page).
package bytesize

import "strconv"

// Format writes n bytes in the largest binary unit that keeps at least 1
// of it, with one decimal below 10 of it: "512 B", "1.5 KiB", "3.0 GiB",
// "12 GiB". Negative n is written as 0 B.
func Format(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(max(n, 0), 10) + " B"
	}
	const units = "KMGTPE"
	v := float64(n) / 1024
	i := 0
	for ; v >= 1023.5 && i < len(units)-1; i++ { // would round to 1024
		v /= 1024
	}
	prec := 0
	if v < 9.95 { // rounds to less than 10
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + units[i:i+1] + "iB"
}
