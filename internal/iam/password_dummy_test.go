package iam

import "testing"

// The timing equaliser verifies like a real hash (same cost) and matches
// no password.
func TestDummyHashVerifiesAtFullCost(t *testing.T) {
	for _, pw := range []string{"", "gpuaas-timing-equaliser", "password"} {
		ok, err := VerifyPassword(dummyHash, pw)
		if err != nil || ok {
			t.Fatalf("VerifyPassword(dummyHash, %q) = %v, %v", pw, ok, err)
		}
	}
	real, err := HashPassword("x")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := real[:len("$argon2id$v=19$m=19456,t=2,p=1$")], dummyHash[:len("$argon2id$v=19$m=19456,t=2,p=1$")]; a != b {
		t.Fatalf("dummy hash parameters %q differ from real ones %q", b, a)
	}
}
