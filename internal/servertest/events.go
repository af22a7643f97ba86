package servertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpuaas/gpuaas/api"
	"github.com/gpuaas/gpuaas/internal/events"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// EventContract validates event envelopes against api/asyncapi.yaml: the
// type must have a message there and the envelope (data included) must
// match its payload schema.
type EventContract struct {
	messages map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	cache    map[string]*jsonschema.Schema
}

const asyncDocURL = "file:///asyncapi.json"

var (
	eventContractOnce sync.Once
	eventContract     *EventContract
	eventContractErr  error
)

// Events returns the parsed event contract (parsed once per process).
func Events() (*EventContract, error) {
	eventContractOnce.Do(func() { eventContract, eventContractErr = LoadEventContract() })
	return eventContract, eventContractErr
}

// LoadEventContract parses the embedded AsyncAPI document.
func LoadEventContract() (*EventContract, error) {
	doc, c, err := loadSchemaDoc("asyncapi.yaml", api.AsyncAPI, asyncDocURL)
	if err != nil {
		return nil, err
	}
	c.AssertFormat()
	comps, _ := doc["components"].(map[string]any)
	msgs, _ := comps["messages"].(map[string]any)
	return &EventContract{messages: msgs, compiler: c, cache: map[string]*jsonschema.Schema{}}, nil
}

// Types lists the event types the contract documents.
func (c *EventContract) Types() []string {
	out := make([]string, 0, len(c.messages))
	for k := range c.messages {
		out = append(out, k)
	}
	return out
}

// Check validates one envelope.
func (c *EventContract) Check(env events.Envelope) error {
	if _, ok := c.messages[env.Type]; !ok {
		return fmt.Errorf("event type %q is not in api/asyncapi.yaml: add a message named after it (see docs/events.md)", env.Type)
	}
	body, err := json.Marshal(env)
	if err != nil {
		return err
	}
	ptr := "#/components/messages/" + env.Type + "/payload"
	c.mu.Lock()
	s, ok := c.cache[ptr]
	if !ok {
		if s, err = c.compiler.Compile(asyncDocURL + ptr); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("compile %s: %w", ptr, err)
		}
		c.cache[ptr] = s
	}
	c.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("event %s does not match api/asyncapi.yaml: %v\nevent: %s", env.Type, err, truncate(body))
	}
	return nil
}

// checkEvents validates every outbox row the test caused, sequenced or not.
func (s *Server) checkEvents() {
	c, err := Events()
	if err != nil {
		s.T.Errorf("event contract: %v", err)
		return
	}
	rows, err := s.DB.Queries().AllEvents(context.Background())
	if err != nil {
		s.T.Errorf("event check: %v", err)
		return
	}
	for _, e := range rows {
		if err := c.Check(events.FromStore(e)); err != nil {
			s.T.Errorf("event contract: %v", err)
		}
	}
}

// SettleEvents waits until the relay has sequenced every event committed
// before the call (lists show sequenced events only): two more relay passes
// guarantee one started after now.
func (s *Server) SettleEvents() {
	s.T.Helper()
	r := s.App.Relay()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.WaitRuns(ctx, r.Runs()+2); err != nil {
		s.T.Fatalf("relay did not run: %v", err)
	}
}

// loadSchemaDoc parses a YAML contract and registers it at url with a
// JSON Schema 2020-12 compiler, so schemas inside it compile by pointer.
func loadSchemaDoc(name string, yamlDoc []byte, url string) (map[string]any, *jsonschema.Compiler, error) {
	var raw any
	if err := yaml.Unmarshal(yamlDoc, &raw); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	// Round-trip through JSON so the compiler sees plain JSON values.
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, err
	}
	m, _ := doc.(map[string]any)
	return m, c, nil
}
