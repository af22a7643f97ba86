package iam

import "testing"

func TestNormalizeEmail(t *testing.T) {
	for in, want := range map[string]string{
		"ＡＤＭＩＮ@gpuaas.dev":  "admin@gpuaas.dev",
		" Ada@Example.COM ": "ada@example.com",
	} {
		if got, bad := NormalizeEmail(in); bad != nil || got != want {
			t.Errorf("NormalizeEmail(%q) = %q, %v; want %q", in, got, bad, want)
		}
	}
	for _, in := range []string{"admin\u200b@gpuaas.dev", "\u202eadmin@gpuaas.dev", "ad\u2060min@gpuaas.dev",
		"\ufeffadmin@gpuaas.dev", "admin@gpuaas\u200e.dev", "a\u2066dmin@gpuaas.dev", "ad\u00admin@gpuaas.dev"} {
		if _, bad := NormalizeEmail(in); bad == nil || bad.Field != "/email" {
			t.Errorf("NormalizeEmail(%q) accepted an invisible code point", in)
		}
	}
}
