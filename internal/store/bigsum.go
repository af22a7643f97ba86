package store

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// Sums of money and quantities must not overflow: SQLite's SUM fails on
// 64-bit overflow and PostgreSQL's SUM(bigint) is a numeric that no int64
// can hold. exactSum sums a column in two parts that cannot overflow before
// a group holds about a billion rows — the value divided by 10^9 and the
// remainder (both truncate toward zero on both dialects) — and bigSum puts
// them back together exactly.
const sumSplit = 1_000_000_000

// exactSum is the SQL of the two part sums of col (two result columns).
func exactSum(col string) string {
	return "COALESCE(SUM(" + col + " / 1000000000), 0), COALESCE(SUM(" + col + " % 1000000000), 0)"
}

// bigSum scans the two columns of exactSum into one exact total.
type bigSum struct{ hi, lo bigPart }

func (b *bigSum) dests() []any { return []any{&b.hi, &b.lo} }

func (b *bigSum) value() *big.Int {
	n := new(big.Int).Mul(&b.hi.n, big.NewInt(sumSplit))
	return n.Add(n, &b.lo.n)
}

// bigPart scans an integer the driver returns as int64 or as text
// (PostgreSQL numeric).
type bigPart struct{ n big.Int }

func (p *bigPart) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		p.n.SetInt64(v)
		return nil
	case string:
		return p.parse(v)
	case []byte:
		return p.parse(string(v))
	}
	return fmt.Errorf("store: cannot scan %T into an integer sum", src)
}

func (p *bigPart) parse(s string) error {
	if _, ok := p.n.SetString(s, 10); !ok {
		return fmt.Errorf("store: %q is not an integer sum", strconv.Quote(s))
	}
	return nil
}

// Saturate returns n as an int64, clamped to the int64 range.
func Saturate(n *big.Int) int64 {
	switch {
	case n.IsInt64():
		return n.Int64()
	case n.Sign() > 0:
		return math.MaxInt64
	default:
		return math.MinInt64
	}
}
