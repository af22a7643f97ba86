package catalog

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseRequirementValid(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Requirement
	}{
		{"numpy", Requirement{Name: "numpy"}},
		{"numpy>=1.26", Requirement{Name: "numpy", Specifiers: []Specifier{{">=", "1.26"}}}},
		{"  Django >= 4.2 , < 5 ", Requirement{Name: "Django", Specifiers: []Specifier{{">=", "4.2"}, {"<", "5"}}}},
		{"requests[security,socks]==2.31.0", Requirement{Name: "requests", Extras: []string{"security", "socks"}, Specifiers: []Specifier{{"==", "2.31.0"}}}},
		{"torch==2.3.*", Requirement{Name: "torch", Specifiers: []Specifier{{"==", "2.3.*"}}}},
		{"torch!=2.1.*", Requirement{Name: "torch", Specifiers: []Specifier{{"!=", "2.1.*"}}}},
		{"torch==2.3.0+cu121", Requirement{Name: "torch", Specifiers: []Specifier{{"==", "2.3.0+cu121"}}}},
		{"pandas~=2.2", Requirement{Name: "pandas", Specifiers: []Specifier{{"~=", "2.2"}}}},
		{"pkg===1.0-custom", Requirement{Name: "pkg", Specifiers: []Specifier{{"===", "1.0-custom"}}}},
		{"name (>=1.0, <2.0)", Requirement{Name: "name", Specifiers: []Specifier{{">=", "1.0"}, {"<", "2.0"}}}},
		{"jax[cuda12]>=0.4.30rc1", Requirement{Name: "jax", Extras: []string{"cuda12"}, Specifiers: []Specifier{{">=", "0.4.30rc1"}}}},
		{"foo>=1!2.0.post3.dev4", Requirement{Name: "foo", Specifiers: []Specifier{{">=", "1!2.0.post3.dev4"}}}},
		{"zope.interface_x-y>1.0a1", Requirement{Name: "zope.interface_x-y", Specifiers: []Specifier{{">", "1.0a1"}}}},
		{"foo[]", Requirement{Name: "foo"}},
		{`pywin32>=306; sys_platform == "win32"`, Requirement{Name: "pywin32", Specifiers: []Specifier{{">=", "306"}}, Marker: `sys_platform == "win32"`}},
		{`uvloop;platform_system!='Windows' and (python_version>='3.8' or implementation_name=="pypy")`,
			Requirement{Name: "uvloop", Marker: `platform_system != "Windows" and (python_version >= "3.8" or implementation_name == "pypy")`}},
		{`foo; 'linux' in sys_platform`, Requirement{Name: "foo", Marker: `"linux" in sys_platform`}},
		{`foo; extra not in "a b"`, Requirement{Name: "foo", Marker: `extra not in "a b"`}},
	}
	for _, tc := range cases {
		got, err := ParseRequirement(tc.in)
		if err != nil {
			t.Errorf("ParseRequirement(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseRequirement(%q) = %#v, want %#v", tc.in, got, tc.want)
		}
		again, err := ParseRequirement(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("round trip of %q via %q: %#v, %v", tc.in, got.String(), again, err)
		}
	}
}

func TestParseRequirementInvalid(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"",
		"   ",
		"-e .",
		"--index-url=https://evil.example.com/simple",
		"foo @ https://example.com/foo.whl",
		"foo@git+https://github.com/x/foo",
		"https://example.com/foo.tar.gz",
		"./local/path",
		"numpy; rm -rf /",
		"numpy && curl evil",
		"numpy | sh",
		"numpy`id`",
		"numpy$(id)",
		"numpy\nos",
		"numpy # comment",
		"numpy>=",
		"numpy=>1.0",
		"numpy>=1.0,",
		"numpy>=1.*",
		"numpy~=1",
		"numpy~=1.0+local",
		"numpy>=1.0+local",
		"numpy==1.0.*.post1",
		"numpy==one",
		"numpy[",
		"numpy[extra",
		"numpy[ex tra]",
		"foo-",
		"_foo",
		"foo (>=1.0",
		"foo; ",
		"foo; python_version",
		"foo; bogus_var == '1'",
		"foo; python_version >= '3.8' and",
		`foo; python_version >= "3.8`,
		`foo; os_name == "a'b"`,
		"foo; (python_version > '3'",
		"foo>=1.0 bar",
		"numpy>=1.26 ; ",
		string(make([]byte, 300)),
	} {
		if r, err := ParseRequirement(in); err == nil {
			t.Errorf("ParseRequirement(%q) = %#v, want error", in, r)
		}
	}
	if _, err := ParseRequirement("foo @ https://x"); !errors.Is(err, ErrDirectReference) {
		t.Errorf("direct reference: got %v", err)
	}
}

func TestNormalizedName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"Foo_Bar": "foo-bar", "zope.interface": "zope-interface", "a--_.b": "a-b"} {
		if got := (Requirement{Name: in}).NormalizedName(); got != want {
			t.Errorf("NormalizedName(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseRequirement: no panics, and an accepted requirement renders to a
// string that parses back to the same value and carries no refused byte.
func FuzzParseRequirement(f *testing.F) {
	for _, s := range []string{"numpy>=1.26", "requests[socks]==2.31.0; python_version >= '3.8'", "torch==2.3.*", "foo @ https://x", "a (>=1,<2)", "x; (os_name=='a' or extra in 'b') and python_version<'4'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRequirement(s)
		if err != nil {
			return
		}
		out := r.String()
		for i := 0; i < len(out); i++ {
			if c := out[i]; c < 0x20 || c >= 0x7f || c == '@' || c == '`' || c == '$' || c == '&' || c == '|' {
				t.Fatalf("accepted %q renders with refused byte %q", s, c)
			}
		}
		again, err := ParseRequirement(out)
		if err != nil {
			t.Fatalf("String() of %q = %q does not reparse: %v", s, out, err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip of %q: %#v != %#v", s, again, r)
		}
	})
}
