package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1048576, "500MB": 500_000_000, "10GiB": 10 << 30, "10gib": 10 << 30,
		"1.5 TB": 1_500_000_000_000, "2KiB": 2048, "7b": 7, "1.5GiB": 3 << 29,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "GiB", "10 parsecs", "1.2.3GB", "9999999PiB", "99999999999999999999"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatAndExact(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1500: "1.46 KiB", 10 << 30: "10 GiB", 3 << 29: "1.5 GiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
	for _, n := range []int64{0, 1, 1500, 2048, 10 << 30, 3 << 29, 1_500_000_000} {
		if got, err := Parse(Exact(n)); err != nil || got != n {
			t.Errorf("Parse(Exact(%d)) = Parse(%q) = %d, %v", n, Exact(n), got, err)
		}
	}
}

// FuzzParse: whatever is typed, Parse answers a count or an error, and
// never a negative count.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10GiB", "1.5 TB", "", "-1", "9999999PiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := Parse(s); err == nil && n < 0 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
	})
}
