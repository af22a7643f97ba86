package console

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/internal/manifest"
)

func wizardVersion(t *testing.T) manifest.Version {
	t.Helper()
	var mv manifest.Version
	raw := `{"version":"1.0.0","config_schema":{"type":"object","required":["model"],"properties":{
	  "model":{"type":"string","enum":["llama","mistral"],"description":"which model"},
	  "workers":{"type":"integer","minimum":1,"maximum":8,"default":2},
	  "temperature":{"type":"number","default":0.7},
	  "debug":{"type":"boolean","default":true},
	  "tags":{"type":"array","items":{"type":"string"}},
	  "ports":{"type":"array","items":{"type":"integer"}}}},
	 "runtime_profile":{"kind":"launchable_oci","resources":{"gpu_count":{"default":1,"min":0,"max":4}},
	  "parameters":{"type":"object","properties":{"pip_packages":{"type":"array","items":{"type":"string"},"description":"extra packages"}}}}}`
	if err := json.Unmarshal([]byte(raw), &mv); err != nil {
		t.Fatal(err)
	}
	return mv
}

func TestWizardFieldsFromSchema(t *testing.T) {
	fs := wizardFields(wizardVersion(t))
	by := map[string]field{}
	for _, f := range fs {
		by[f.Name] = f
	}
	for name, want := range map[string]struct{ kind, value, min, max string }{
		"resources.gpu_count":     {"integer", "1", "0", "4"},
		"config.model":            {"enum", "", "", ""},
		"config.workers":          {"integer", "2", "1", "8"},
		"config.temperature":      {"number", "0.7", "", ""},
		"config.debug":            {"boolean", "", "", ""},
		"config.tags":             {"array", "", "", ""},
		"parameters.pip_packages": {"array", "", "", ""},
	} {
		f, ok := by[name]
		if !ok {
			t.Errorf("no field %s", name)
			continue
		}
		if f.Kind != want.kind || f.Value != want.value || f.Min != want.min || f.Max != want.max {
			t.Errorf("%s: %+v, want %+v", name, f, want)
		}
	}
	if m := by["config.model"]; !m.Required || len(m.Options) != 2 || m.Description != "which model" || m.Pointer != "/config/model" {
		t.Errorf("model: %+v", m)
	}
	if !by["config.debug"].Checked {
		t.Error("a boolean's default true is not checked")
	}
}

func TestWizardBuildsTheLaunchRequest(t *testing.T) {
	mv := wizardVersion(t)
	fs := wizardFields(mv)
	fill(fs, url.Values{"resources.gpu_count": {"2"}, "config.model": {"llama"}, "config.workers": {"many"},
		"config.tags": {"a, b,"}, "config.ports": {"80, x"}, "parameters.pip_packages": {"numpy==2.1"}})
	lr, err := launchRequest(mv, fs)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Resources == nil || *lr.Resources.GPUCount != 2 {
		t.Errorf("resources: %+v", lr.Resources)
	}
	var cfg map[string]any
	_ = json.Unmarshal(lr.Config, &cfg)
	// Text that is not the field's type goes as text: the server's schema
	// check names the problem. An unticked box is false; empty is omitted.
	if cfg["model"] != "llama" || cfg["workers"] != "many" || cfg["debug"] != false || cfg["temperature"] != nil {
		t.Errorf("config: %v", cfg)
	}
	if tags, _ := cfg["tags"].([]any); len(tags) != 2 || tags[1] != "b" {
		t.Errorf("tags: %v", cfg["tags"])
	}
	if ports, _ := cfg["ports"].([]any); len(ports) != 2 || ports[0] != float64(80) || ports[1] != "x" {
		t.Errorf("ports: %v", cfg["ports"])
	}
	if string(lr.Parameters) != `{"pip_packages":["numpy==2.1"]}` {
		t.Errorf("parameters: %s", lr.Parameters)
	}
	rest := markErrors(fs, map[string]string{"/config/workers": "must be an integer", "/config/tags/1": "too short", "/operating_mode": "no"})
	for _, f := range fs {
		switch f.Name {
		case "config.workers", "config.tags":
			if f.Error == "" {
				t.Errorf("%s: error not placed", f.Name)
			}
		default:
			if f.Error != "" {
				t.Errorf("%s got another field's error %q", f.Name, f.Error)
			}
		}
	}
	if rest["/operating_mode"] != "no" || len(rest) != 1 {
		t.Errorf("unplaced errors: %v", rest)
	}
}

// An enum of numbers or booleans sends the option chosen as the schema's
// value (the number 2, not the text "2", which no such enum admits); a
// property whose name holds "/" gets its error by its escaped pointer, and
// another property's error does not land on it.
func TestWizardSendsEnumValuesAsTheirTypeAndPlacesEscapedPointers(t *testing.T) {
	var mv manifest.Version
	raw := `{"version":"1.0.0","config_schema":{"type":"object","properties":{
	  "replicas":{"type":"integer","enum":[1,2,4],"default":2},
	  "precision":{"type":"number","enum":[0.5,1.5]},
	  "fast":{"enum":[true,false]},
	  "mode":{"type":"string","enum":["a  b","c"]},
	  "a":{"type":"object"},
	  "a/b":{"type":"string"}}}}`
	if err := json.Unmarshal([]byte(raw), &mv); err != nil {
		t.Fatal(err)
	}
	fs := wizardFields(mv)
	fill(fs, url.Values{"config.replicas": {"4"}, "config.precision": {"1.5"}, "config.fast": {"false"}, "config.mode": {"a  b"}})
	lr, err := launchRequest(mv, fs)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	_ = json.Unmarshal(lr.Config, &cfg)
	if cfg["replicas"] != float64(4) || cfg["precision"] != 1.5 || cfg["fast"] != false || cfg["mode"] != "a  b" {
		t.Errorf("config %s: want replicas 4, precision 1.5, fast false (as JSON numbers and booleans), mode %q", lr.Config, "a  b")
	}

	// The form shows each option with its value, the default chosen.
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.render(rec, httptest.NewRequest("GET", "/catalog/x/1.0.0/launch", nil), 200, "launch", page{Session: &sessionView{CSRF: "t"}, Data: &launchData{Fields: wizardFields(mv)}})
	if body := rec.Body.String(); !strings.Contains(body, `<option value="2" selected>2</option>`) || !strings.Contains(body, `<option value="a  b" >a  b</option>`) {
		t.Errorf("the enum options:\n%s", body)
	}

	rest := markErrors(fs, map[string]string{"/config/a~1b": "too long", "/config/a/b": "unknown property"})
	for _, f := range fs {
		switch f.Name {
		case "config.a/b":
			if f.Error != "too long" {
				t.Errorf("a/b: error %q, want its own (too long)", f.Error)
			}
		case "config.a":
			if f.Error != "unknown property" {
				t.Errorf("a: error %q, want its own (unknown property)", f.Error)
			}
		}
	}
	if len(rest) != 0 {
		t.Errorf("unplaced: %v", rest)
	}
}

// A resource that is not a whole number gets an error about what the
// person typed, not the server's about the -1 the request carried instead.
func TestWizardResourceErrorNamesWhatWasTyped(t *testing.T) {
	mv := wizardVersion(t)
	fs := wizardFields(mv)
	fill(fs, url.Values{"resources.gpu_count": {"two"}, "config.model": {"llama"}})
	lr, err := launchRequest(mv, fs)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Resources == nil || lr.Resources.GPUCount == nil || *lr.Resources.GPUCount != -1 {
		t.Fatalf("resources: %+v", lr.Resources)
	}
	// What the server answers to gpu_count -1.
	markErrors(fs, map[string]string{"/resources/gpu_count": "gpu_count -1 is outside the allowed range 0–4"})
	for _, f := range fs {
		if f.Name == "resources.gpu_count" && (!strings.Contains(f.Error, `whole number (got "two")`) || strings.Contains(f.Error, "-1")) {
			t.Errorf("gpu_count error %q, want one about %q", f.Error, "two")
		}
	}
}
