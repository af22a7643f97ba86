package cli

import (
	"fmt"
	"math/big"
)

// money renders micro-units as a decimal amount. Totals are big integers:
// a sum of ledger entries may exceed 64 bits.
func money(micros *big.Int, currency string) string {
	sign, m := "", new(big.Int).Set(micros)
	if m.Sign() < 0 {
		sign = "-"
		m.Neg(m)
	}
	units, frac := m.QuoRem(m, big.NewInt(1_000_000), new(big.Int))
	return fmt.Sprintf("%s%s.%06d %s", sign, units, frac.Int64(), currency)
}

// money64 renders one entry's or price's micro-units.
func money64(micros int64, currency string) string { return money(big.NewInt(micros), currency) }
