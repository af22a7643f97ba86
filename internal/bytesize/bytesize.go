// Package bytesize reads and writes byte counts as people type and read
// them (10GiB, 500MB), for the CLI's flags and the console's forms alike,
// so a size typed in either means the same number of bytes.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30,
	"ti": 1 << 40, "tib": 1 << 40, "pi": 1 << 50, "pib": 1 << 50,
}

// Parse reads a byte count as people type it: 1048576, 500MB, 10GiB,
// 1.5 TB (decimal units are powers of 1000, binary ones of 1024; the
// unit's case does not matter).
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := units[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("want a number of bytes with an optional unit, such as 500MB or 10GiB")
	}
	if mult == 1 && !strings.Contains(num, ".") {
		return strconv.ParseInt(num, 10, 64)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("want a number of bytes with an optional unit, such as 500MB or 10GiB")
	}
	n := math.Round(f * mult)
	if n >= math.MaxInt64 {
		return 0, fmt.Errorf("larger than %d bytes", int64(math.MaxInt64))
	}
	return int64(n), nil
}

var binary = []struct {
	name string
	size int64
}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// Format writes n for reading: binary units with at most two decimals
// (1.46 KiB, 10 GiB), bytes below 1 KiB. It rounds; Exact does not.
func Format(n int64) string {
	for _, u := range binary {
		if n >= u.size || -n >= u.size {
			s := strconv.FormatFloat(float64(n)/float64(u.size), 'f', 2, 64)
			return strings.TrimSuffix(strings.TrimRight(s, "0"), ".") + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// Exact writes n so that Parse reads back exactly n: in the largest binary
// unit it is a whole multiple of (10GiB), else in bytes.
func Exact(n int64) string {
	for _, u := range binary {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
