package cli

import (
	"math/big"
	"testing"
)

func TestMoneyRendersBigAndNegativeAmounts(t *testing.T) {
	t.Parallel()
	huge, _ := new(big.Int).SetString("27670116110564327421", 10) // 3 × (2^63−1)
	cases := map[string]string{
		money(huge, "USD"):                   "27670116110564.327421 USD",
		money(big.NewInt(-2_500_001), "USD"): "-2.500001 USD",
		money64(694, "EUR"):                  "0.000694 EUR",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("money = %q, want %q", got, want)
		}
	}
}
