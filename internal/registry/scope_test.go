package registry

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]Scope{
		"repository:gpuaas/apps/p/a:push,pull":        {Type: "repository", Name: "gpuaas/apps/p/a", Actions: []string{"pull", "push"}},
		"repository:a:pull,pull":                      {Type: "repository", Name: "a", Actions: []string{"pull"}},
		"repository(plugin):vendor/p:pull":            {Type: "repository", Class: "plugin", Name: "vendor/p", Actions: []string{"pull"}},
		"registry:catalog:*":                          {Type: "registry", Name: "catalog", Actions: []string{"*"}},
		"repository:gpuaas/apps/p/a:delete,push,pull": {Type: "repository", Name: "gpuaas/apps/p/a", Actions: []string{"delete", "pull", "push"}},
	} {
		got, err := ParseScope(raw)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseScope(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{
		"", "repository", "repository:a", "repository::pull", "repository:a:", "repository:a:pull,",
		"Repository:a:pull", "repository:A:pull", "repository:a:PULL", "repository:a/../b:pull",
		"repository(:a:pull", "repository:localhost:5000/x:pull", "repository:a//b:pull", "repository:-a:pull", "registry:cat alog:*", "repository:" + strings.Repeat("a", 300) + ":pull",
	} {
		if _, err := ParseScope(raw); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseScope(%q) err = %v, want ErrInvalidArgument", raw, err)
		}
	}
}

func TestParseScopesMerges(t *testing.T) {
	t.Parallel()
	got, err := ParseScopes([]string{"repository:a:pull  repository:b:push", "", "repository:a:push"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].String() != "repository:a:pull,push" || got[1].String() != "repository:b:push" {
		t.Fatalf("ParseScopes = %v", got)
	}
	if _, err := ParseScopes([]string{strings.Repeat("repository:a:pull ", maxScopes+1)}); err == nil {
		t.Fatal("too many scopes accepted")
	}
}

func FuzzParseScope(f *testing.F) {
	for _, s := range []string{
		"repository:gpuaas/apps/p/a:push,pull", "repository(plugin):x:pull", "registry:catalog:*",
		"repository:localhost:5000/a/b:pull", "a:b:c", "::", "repository:a:pull,,push",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := ParseScope(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("error kind: %v", err)
			}
			return
		}
		if s.Type == "" || s.Name == "" || len(s.Actions) == 0 {
			t.Fatalf("accepted incomplete scope %+v from %q", s, raw)
		}
		again, err := ParseScope(s.String())
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip %q -> %+v -> %q -> %+v, %v", raw, s, s.String(), again, err)
		}
		if many, err := ParseScopes([]string{raw + " " + raw}); err != nil || len(many) != 1 {
			t.Fatalf("ParseScopes(twice %q) = %v, %v", raw, many, err)
		}
	})
}
