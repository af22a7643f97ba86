package cli

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1048576, "500MB": 500_000_000, "10GiB": 10 << 30, "10gib": 10 << 30,
		"1.5 TB": 1_500_000_000_000, "2KiB": 2048, "7b": 7, "1.5GiB": 3 << 29,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "GiB", "10 parsecs", "1.2.3GB", "9999999PiB", "99999999999999999999"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
