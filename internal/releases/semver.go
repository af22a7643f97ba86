package releases

import (
	"strconv"
	"strings"
)

// CompareVersions orders two valid semantic versions by semver precedence
// (-1, 0, +1): a leading v and build metadata are ignored, a pre-release
// sorts before its release, pre-release fields compare numerically when
// both are numeric. Callers check ValidVersion first.
func CompareVersions(a, b string) int {
	ca, pa := splitVersion(a)
	cb, pb := splitVersion(b)
	for i := range 3 {
		if c := compareNum(ca[i], cb[i]); c != 0 {
			return c
		}
	}
	switch {
	case pa == "" && pb == "":
		return 0
	case pa == "":
		return 1
	case pb == "":
		return -1
	}
	fa, fb := strings.Split(pa, "."), strings.Split(pb, ".")
	for i := 0; i < len(fa) && i < len(fb); i++ {
		_, errA := strconv.ParseUint(fa[i], 10, 64)
		_, errB := strconv.ParseUint(fb[i], 10, 64)
		var c int
		switch {
		case errA == nil && errB == nil:
			c = compareNum(fa[i], fb[i])
		case errA == nil:
			c = -1 // numeric identifiers sort before alphanumeric ones
		case errB == nil:
			c = 1
		default:
			c = strings.Compare(fa[i], fb[i])
		}
		if c != 0 {
			return c
		}
	}
	return compareNum(strconv.Itoa(len(fa)), strconv.Itoa(len(fb)))
}

func splitVersion(v string) (core [3]string, pre string) {
	v = strings.TrimPrefix(v, "v")
	v, _, _ = strings.Cut(v, "+")
	v, pre, _ = strings.Cut(v, "-")
	copy(core[:], strings.SplitN(v, ".", 3))
	return core, pre
}

// compareNum compares decimal digit strings of any length.
func compareNum(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}
