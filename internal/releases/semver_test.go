package releases

import "testing"

func TestCompareVersions(t *testing.T) {
	ordered := []string{"0.0.0-devel+abc", "0.9.0", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "v1.0.1", "1.10.0", "10.0.0"}
	for i, a := range ordered {
		if !ValidVersion(a) {
			t.Fatalf("%s is not valid", a)
		}
		for j, b := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := CompareVersions(a, b); got != want {
				t.Errorf("Compare(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
	if CompareVersions("1.2.3+a", "1.2.3+b") != 0 {
		t.Error("build metadata counts")
	}
	for _, bad := range []string{"", "1.2", "devel", "1.2.3.4", "1.2.3-", "x1.2.3"} {
		if ValidVersion(bad) {
			t.Errorf("%q is valid", bad)
		}
	}
}
