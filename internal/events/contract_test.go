package events_test

import (
	"strings"
	"testing"

	"github.com/gpuaas/gpuaas/api"
	"github.com/gpuaas/gpuaas/internal/artifacts"
	"github.com/gpuaas/gpuaas/internal/catalog"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/gpuaas/gpuaas/internal/releases"
	"github.com/gpuaas/gpuaas/internal/servertest"
	"gopkg.in/yaml.v3"
)

// The AsyncAPI document is well formed for the conventions docs/events.md
// promises: every message is named after its type, listed on the bus
// channel (and so on the HTTP stream channel, which aliases that list), and
// its payload compiles; the types the domains emit are all documented.
func TestAsyncAPIDocument(t *testing.T) {
	var doc struct {
		AsyncAPI string `yaml:"asyncapi"`
		Channels map[string]struct {
			Messages map[string]struct {
				Ref string `yaml:"$ref"`
			} `yaml:"messages"`
		} `yaml:"channels"`
		Components struct {
			Messages map[string]struct {
				Name string `yaml:"name"`
			} `yaml:"messages"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.AsyncAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.AsyncAPI, "3.") {
		t.Fatalf("asyncapi %q, want 3.x", doc.AsyncAPI)
	}
	c, err := servertest.Events()
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range doc.Components.Messages {
		if m.Name != name {
			t.Errorf("message %s is named %q; name it after its type", name, m.Name)
		}
		for ch, def := range doc.Channels {
			if def.Messages[name].Ref != "#/components/messages/"+name {
				t.Errorf("message %s is not listed on channel %s", name, ch)
			}
		}
		// A minimal envelope of the type must reach payload validation (the
		// data is wrong on purpose: the error must be about data, not the
		// schema failing to compile).
		err := c.Check(events.Envelope{Type: name, SpecVersion: "1.0"})
		if err == nil || strings.Contains(err.Error(), "compile") {
			t.Errorf("message %s: %v", name, err)
		}
	}
	emitted := []string{
		artifacts.EventRegistered, artifacts.EventPromoted, artifacts.EventDeprecated, artifacts.EventRetired,
		artifacts.EventRevoked, artifacts.EventVerified, artifacts.EventVerificationFailed,
		catalog.EventManifestRegistered, catalog.EventVersionPublished, catalog.EventVersionDeprecated,
		catalog.EventVersionRetired, catalog.EventEntitlementUpdated,
		"iam.service_account.created", "iam.service_account.enabled", "iam.service_account.disabled",
		"iam.service_account.key_rotated", "iam.service_account.deleted",
		releases.EventPublished,
	}
	for _, typ := range emitted {
		if _, ok := doc.Components.Messages[typ]; !ok {
			t.Errorf("emitted type %s is not in api/asyncapi.yaml", typ)
		}
	}
}

func TestBusSubject(t *testing.T) {
	if got := events.BusSubject("", "p.1", "apps.version.published"); got != "gpuaas.events._.p_1.apps.version.published" {
		t.Fatalf("subject %q", got)
	}
}

// FuzzParseCursor: list cursors come from clients.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", events.Cursor(0), events.Cursor(42), "cA", "!!", "cDEx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := events.ParseCursor(s)
		if err == nil && (p < 0 || events.Cursor(p) == "") {
			t.Fatalf("cursor %q parsed to %d", s, p)
		}
	})
}
