package client

// The Go client is hand-written, and these tests keep it one source of truth
// with api/openapi.yaml:
//
//   - TestEveryOperationHasAMethod: every operation of the contract is named
//     by the doc comment of a Client method ("Operation: <operationId>", more
//     than one when a method serves several), or is an exception below with
//     its reason; and each such method, called, sends the method and path of
//     exactly the operations it names, with only documented query
//     parameters.
//   - TestTypesMatchTheContract: every object schema of the contract
//     (components and operations' inline bodies) has its Go type, whose JSON
//     fields are the schema's properties, no more and no fewer, of matching
//     kinds, required ones never dropped when empty (no omitempty).
//   - TestTypesRoundTrip: a value of each such schema, every property set,
//     decodes into its Go type (no unknown field) and encodes back the same.

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math/big"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuaas/gpuaas/api"
	"github.com/gpuaas/gpuaas/client/nodeapi"
	"gopkg.in/yaml.v3"
)

// operationExceptions are the operations no Client method calls, and why.
var operationExceptions = map[string]string{
	"streamProjectEventsWebSocket":  "the WebSocket form of the event stream is for browsers; Go follows the same events over SSE (FollowEvents)",
	"streamOrgEventsWebSocket":      "the WebSocket form of the event stream is for browsers; Go follows the same events over SSE (FollowEvents)",
	"streamPlatformEventsWebSocket": "the WebSocket form of the event stream is for browsers; Go follows the same events over SSE (FollowEvents)",
}

// helperMethods are the exported Client methods that name no operation
// because they build on the methods that do, and why.
var helperMethods = map[string]string{
	"Do":                  "the generic JSON request every method sends through",
	"TokenURL":            "computes the token audience; sends nothing",
	"ServiceAccountToken": "signs an assertion and calls ExchangeAssertion",
	"WaitOperation":       "polls GetOperation while following FollowEvents",
}

// callVariants give the arguments a call cannot make up (an index into the
// method's parameters, ctx being 0) for the methods that serve several
// operations by one of their arguments: one call per variant.
var callVariants = map[string][]map[int]any{
	"TransitionAppVersion": {{3: "publish"}, {3: "deprecate"}, {3: "retire"}},
	"TransitionArtifact":   {{3: "promote"}, {3: "verify"}, {3: "revoke"}, {3: "deprecate"}, {3: "retire"}},
	"ListEvents":           {{1: ProjectEventsPath("p")}, {1: OrgEventsPath("o")}, {1: PlatformEventsPath}},
	"FollowEvents":         {{1: ProjectEventsPath("p")}, {1: OrgEventsPath("o")}, {1: PlatformEventsPath}},
	"ExportCSV":            {{1: "usage"}, {1: "ledger"}, {1: "costs"}},
	"UploadBlob":           {{1: "/api/v1/projects/p/artifact-uploads/u"}},
}

// contract is api/openapi.yaml as plain YAML.
type contract struct {
	root map[string]any
	ops  map[string]operation // by operationId
}

type operation struct {
	id, method, path string
	node             map[string]any
}

func loadContract(t *testing.T) *contract {
	t.Helper()
	var root map[string]any
	if err := yaml.Unmarshal(api.OpenAPI, &root); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	c := &contract{root: root, ops: map[string]operation{}}
	for path, item := range root["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			node, ok := op.(map[string]any)
			if !ok || node["operationId"] == nil {
				continue
			}
			id := node["operationId"].(string)
			c.ops[id] = operation{id: id, method: strings.ToUpper(method), path: path, node: node}
		}
	}
	return c
}

// ref follows a local $ref ("#/components/…") to its node.
func (c *contract) ref(s string) map[string]any {
	var n any = c.root
	for _, part := range strings.Split(strings.TrimPrefix(s, "#/"), "/") {
		n = n.(map[string]any)[part]
	}
	return n.(map[string]any)
}

func (c *contract) deref(n map[string]any) map[string]any {
	for n["$ref"] != nil {
		n = c.ref(n["$ref"].(string))
	}
	return n
}

// match finds the operation a request would reach: the documented path
// whose segments match, a literal segment beating a parameter (as the
// server's mux does).
func (c *contract) match(method, path string) (operation, bool) {
	var best operation
	bestScore := -1
	segs := strings.Split(path, "/")
	for _, op := range c.ops {
		if op.method != method {
			continue
		}
		tsegs := strings.Split(op.path, "/")
		if len(tsegs) != len(segs) {
			continue
		}
		score := 0
		for i, ts := range tsegs {
			if strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}") {
				if segs[i] == "" {
					score = -1
					break
				}
				continue
			}
			if ts != segs[i] {
				score = -1
				break
			}
			score++
		}
		if score > bestScore {
			best, bestScore = op, score
		}
	}
	return best, bestScore >= 0
}

// queryParams are the query parameters an operation documents.
func (c *contract) queryParams(op operation) map[string]bool {
	out := map[string]bool{}
	params, _ := op.node["parameters"].([]any)
	for _, p := range params {
		p := c.deref(p.(map[string]any))
		if p["in"] == "query" {
			out[p["name"].(string)] = true
		}
	}
	return out
}

// methodOperations reads, from the client's source, the operations each
// exported Client method names in its doc comment.
func methodOperations(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() || !isClientReceiver(fn.Recv) {
				continue
			}
			out[fn.Name.Name] = nil
			if fn.Doc == nil {
				continue
			}
			for _, line := range strings.Split(fn.Doc.Text(), "\n") {
				if ids, ok := strings.CutPrefix(line, "Operation:"); ok {
					out[fn.Name.Name] = append(out[fn.Name.Name], strings.Fields(ids)...)
				}
			}
		}
	}
	return out
}

func isClientReceiver(recv *ast.FieldList) bool {
	if len(recv.List) != 1 {
		return false
	}
	star, ok := recv.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	return ok && id.Name == "Client"
}

// recorder answers every request with an empty JSON object (an event
// stream with 400, so a follower returns) and remembers what was asked.
type recorder struct{ reqs []*http.Request }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.reqs = append(r.reqs, req)
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	status, body := http.StatusOK, `{}`
	if req.Header.Get("Accept") == "text/event-stream" {
		status, body = http.StatusBadRequest, `{"error":{"code":"stop","message":"stop","correlation_id":"x","details":{}}}`
	}
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

// args makes up arguments for a method: distinct strings (so that every
// path parameter is a non-empty segment), ones for numbers, zero values
// for the rest, a reader with one byte and a writer that discards.
func args(m reflect.Type, variant map[int]any) []reflect.Value {
	n := m.NumIn()
	if m.IsVariadic() {
		n-- // no options
	}
	out := make([]reflect.Value, n)
	for i := range n {
		if v, ok := variant[i]; ok {
			out[i] = reflect.ValueOf(v)
			continue
		}
		t := m.In(i)
		switch {
		case t == reflect.TypeFor[context.Context]():
			out[i] = reflect.ValueOf(context.Background())
		case t == reflect.TypeFor[io.Reader]():
			out[i] = reflect.ValueOf(strings.NewReader("x"))
		case t == reflect.TypeFor[io.Writer]():
			out[i] = reflect.ValueOf(io.Discard)
		case t.Kind() == reflect.String:
			out[i] = reflect.ValueOf(fmt.Sprintf("a%d", i)).Convert(t)
		case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
			out[i] = reflect.ValueOf(1).Convert(t)
		default:
			out[i] = reflect.Zero(t)
		}
	}
	return out
}

func TestEveryOperationHasAMethod(t *testing.T) {
	spec := loadContract(t)
	methods := methodOperations(t)
	named := map[string][]string{} // operationId → methods
	for _, name := range keys(methods) {
		ops := methods[name]
		if len(ops) == 0 {
			if helperMethods[name] == "" {
				t.Errorf("Client.%s names no operation: add \"Operation: <operationId>\" to its doc comment, or list it in helperMethods with why", name)
			}
			continue
		}
		if helperMethods[name] != "" {
			t.Errorf("Client.%s names operations and is listed in helperMethods", name)
		}
		want := map[string]bool{}
		for _, id := range ops {
			if _, ok := spec.ops[id]; !ok {
				t.Errorf("Client.%s names operation %q, which api/openapi.yaml does not have", name, id)
				continue
			}
			want[id] = true
			named[id] = append(named[id], name)
		}
		// Call it and see what it sends.
		rec := &recorder{}
		c := New("http://gpuaas.test", "token")
		c.HTTP.Transport = rec
		m := reflect.ValueOf(c).MethodByName(name)
		variants := callVariants[name]
		if variants == nil {
			variants = []map[int]any{nil}
		}
		for _, v := range variants {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			a := args(m.Type(), v)
			if len(a) > 0 && a[0].Type() == reflect.TypeFor[context.Context]() {
				a[0] = reflect.ValueOf(ctx)
			}
			m.Call(a)
			cancel()
		}
		hit := map[string]bool{}
		for _, r := range rec.reqs {
			op, ok := spec.match(r.Method, r.URL.EscapedPath())
			switch {
			case !ok:
				t.Errorf("Client.%s sends %s %s, which is no operation of api/openapi.yaml", name, r.Method, r.URL.EscapedPath())
				continue
			case !want[op.id]:
				t.Errorf("Client.%s sends %s %s, which is %s (%s %s), not an operation it names (%s)", name, r.Method, r.URL.EscapedPath(), op.id, op.method, op.path, strings.Join(ops, " "))
				continue
			}
			hit[op.id] = true
			documented := spec.queryParams(op)
			for k := range r.URL.Query() {
				if !documented[k] {
					t.Errorf("Client.%s sends query parameter %q, which %s does not document", name, k, op.id)
				}
			}
		}
		for id := range want {
			if !hit[id] {
				o := spec.ops[id]
				t.Errorf("Client.%s names %s (%s %s) but sends no such request", name, id, o.method, o.path)
			}
		}
	}
	for id, why := range operationExceptions {
		if _, ok := spec.ops[id]; !ok {
			t.Errorf("operationExceptions lists %q, which api/openapi.yaml does not have", id)
		}
		if len(named[id]) > 0 {
			t.Errorf("operationExceptions lists %q (%s), but Client.%s names it", id, why, named[id][0])
		}
	}
	var missing []string
	for id, op := range spec.ops {
		if len(named[id]) == 0 && operationExceptions[id] == "" {
			missing = append(missing, fmt.Sprintf("%s (%s %s)", id, op.method, op.path))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("no Client method names operation %s", m)
	}
	t.Logf("%d operations: %d named by Client methods, %d exceptions", len(spec.ops), len(spec.ops)-len(operationExceptions), len(operationExceptions))
}

// contractTypes maps every object schema of the contract to the Go type
// that carries it. Keys: "schemas/X", "requestBodies/X" and "responses/X"
// for #/components/…, and "<operationId> request" or "<operationId> <status>"
// for a body an operation declares inline.
var contractTypes = map[string]any{
	"schemas/PlatformRelease":                 PlatformRelease{},
	"schemas/PlatformReleaseArtifact":         PlatformReleaseArtifact{},
	"schemas/PlatformReleaseList":             PlatformReleaseList{},
	"schemas/PlatformReleaseManifest":         PlatformReleaseManifest{},
	"schemas/PlatformReleaseManifestArtifact": PlatformReleaseManifestArtifact{},
	"schemas/Error":                           errorEnvelope{},
	"schemas/Org":                             Org{},
	"schemas/OrgList":                         CatalogPage[Org]{},
	"schemas/Project":                         Project{},
	"schemas/ProjectList":                     CatalogPage[Project]{},
	"schemas/User":                            User{},
	"schemas/RoleBinding":                     RoleBinding{},
	"schemas/RoleBindingList":                 CatalogPage[RoleBinding]{},
	"schemas/Me":                              Me{},
	"schemas/AuditEvent":                      AuditEvent{},
	"schemas/AuditEventList":                  CatalogPage[AuditEvent]{},
	"schemas/ServiceAccountKey":               ServiceAccountKey{},
	"schemas/ServiceAccountFields":            ServiceAccount{},
	"schemas/ServiceAccount":                  ServiceAccount{},
	"schemas/ServiceAccountKeyIssued":         IssuedServiceAccountKey{},
	"schemas/ServiceAccountList":              ServiceAccountList{},
	"schemas/ServiceAccountTokenRequest":      ServiceAccountTokenRequest{},
	"schemas/VersionActionRequest":            VersionActionRequest{},
	"schemas/CatalogApp":                      CatalogApp{},
	"schemas/CatalogAppList":                  CatalogPage[CatalogApp]{},
	"schemas/CatalogAppVersion":               AppVersion{},
	"schemas/CatalogAppVersionList":           CatalogPage[AppVersion]{},
	"schemas/ManifestRegistration":            ManifestRegistration{},
	"schemas/ManifestProblem":                 ManifestProblem{},
	"schemas/PolicyOverrides":                 PolicyOverrides{},
	"schemas/AppEntitlement":                  Entitlement{},
	"schemas/AppEntitlementList":              CatalogPage[Entitlement]{},
	"schemas/ProjectCatalogEntry":             ProjectCatalogEntry{},
	"schemas/ProjectCatalogList":              CatalogPage[ProjectCatalogEntry]{},
	"schemas/LaunchRequest":                   LaunchRequest{},
	"schemas/LaunchEffective":                 LaunchEffective{},
	"schemas/RegistryInfo":                    RegistryInfo{},
	"schemas/RegistryCredentials":             RegistryCredentials{},
	"schemas/PublishIntentRequest":            PublishIntentRequest{},
	"schemas/ArtifactIntent":                  ArtifactIntent{},
	"schemas/RegisterArtifactRequest":         RegisterArtifactRequest{},
	"schemas/AppArtifact":                     AppArtifact{},
	"schemas/AppArtifactList":                 CatalogPage[AppArtifact]{},
	"schemas/ArtifactSigningKey":              ArtifactSigningKey{},
	"schemas/ArtifactSigningKeyList":          CatalogPage[ArtifactSigningKey]{},
	"schemas/ArtifactUpload":                  ArtifactUpload{},
	"schemas/NodeJoinTokenRequest":            NodeJoinTokenRequest{},
	"schemas/NodeJoinToken":                   NodeJoinToken{},
	"schemas/NodeGPU":                         nodeapi.GPU{},
	"schemas/NodeInventory":                   nodeapi.Inventory{},
	"schemas/NodeWorkload":                    nodeapi.Workload{},
	"schemas/Node":                            Node{},
	"schemas/NodeList":                        CatalogPage[Node]{},
	"schemas/NodeJoinRequest":                 nodeapi.JoinRequest{},
	"schemas/NodeJoinResponse":                nodeapi.JoinResponse{},
	"schemas/NodeHeartbeat":                   nodeapi.Heartbeat{},
	"schemas/NodeHeartbeatResponse":           nodeapi.HeartbeatResponse{},
	"schemas/NodeTask":                        nodeapi.Task{},
	"schemas/NodeTaskList":                    nodeapi.TaskList{},
	"schemas/NodeTaskResult":                  nodeapi.TaskResult{},
	"schemas/AllocationRequest":               AllocationRequest{},
	"schemas/Allocation":                      Allocation{},
	"schemas/AllocationList":                  CatalogPage[Allocation]{},
	"schemas/AppInstanceCreate":               AppInstanceRequest{},
	"schemas/AppInstanceAccess":               AppInstanceAccess{},
	"schemas/UIOpen":                          UIOpen{},
	"schemas/Operation":                       Operation{},
	"schemas/AppInstance":                     AppInstance{},
	"schemas/AppInstanceList":                 AppInstanceList{},
	"schemas/AppInstanceEvent":                AppInstanceEvent{},
	"schemas/AppInstanceEventList":            AppInstanceEventList{},
	"schemas/AppInstanceMember":               AppInstanceMember{},
	"schemas/AppInstanceMemberOperation":      MemberOperation{},
	"schemas/AppWorkerGrant":                  AppWorkerGrant{},
	"schemas/AppInstanceAttachment":           AppInstanceAttachment{},
	"schemas/AppInstanceAttachmentList":       CatalogPage[AppInstanceAttachment]{},
	"schemas/AppWorkerGrantList":              CatalogPage[AppWorkerGrant]{},
	"schemas/WorkerOperation":                 WorkerOperation{},
	"schemas/WorkerLease":                     WorkerLease{},
	"schemas/AppInstanceMemberList":           CatalogPage[AppInstanceMember]{},
	"schemas/AppInstanceLogs":                 AppInstanceLogs{},
	"schemas/Event":                           Event{},
	"schemas/EventList":                       EventList{},
	"schemas/UsageCloudEvent":                 UsageCloudEvent{},
	"schemas/AppInstanceHealth":               AppInstanceHealth{},
	"schemas/RuntimeCloudEvent":               RuntimeCloudEvent{},
	"schemas/RuntimeEventReport":              RuntimeEventReport{},
	"schemas/UsageIngestResult":               UsageResult{},
	"schemas/UsageRecord":                     UsageRecord{},
	"schemas/UsageRecordList":                 CatalogPage[UsageRecord]{},
	"schemas/UsageGroups":                     UsageGroups{},
	"schemas/LedgerEntry":                     LedgerEntry{},
	"schemas/BillingTotal":                    BillingTotal{},
	"schemas/LedgerEntryList":                 LedgerPage{},
	"schemas/BillingCosts":                    BillingCosts{},
	"schemas/BillingBudgetInput":              BudgetInput{},
	"schemas/ProjectStorage":                  ProjectStorage{},
	"schemas/BlobStorage":                     BlobStorage{},
	"schemas/RegistryStorage":                 RegistryStorage{},
	"schemas/ProjectStorageQuotaInput":        ProjectStorageQuotaInput{},
	"schemas/BillingBudget":                   Budget{},
	"schemas/BillingPriceInput":               PriceInput{},
	"schemas/BillingPrice":                    Price{},
	"schemas/UnratedUsageList":                UnratedUsageList{},
	"schemas/BillingPriceList":                CatalogPage[Price]{},

	"requestBodies/AppInstanceTargetVersion": targetVersionRequest{},
	"requestBodies/ArtifactTransition":       artifactTransitionRequest{},
	"requestBodies/AddMember":                addMemberRequest{},
	"responses/CursorExpired":                errorEnvelope{},
	"responses/Error":                        errorEnvelope{},
	"responses/Token":                        Token{},
	"responses/Ready":                        Readiness{},

	"getHealthz 200":                     Health{},
	"getJWKS 200":                        JWKS{},
	"login request":                      loginRequest{},
	"addAppInstanceMembers request":      AddMembersRequest{},
	"acquireWorkerOperation request":     acquireRequest{},
	"attachAppInstanceProject request":   attachRequest{},
	"heartbeatWorkerOperation request":   WorkerHeartbeatRequest{},
	"completeWorkerOperation request":    WorkerCompleteRequest{},
	"failWorkerOperation request":        WorkerFailRequest{},
	"createOrg request":                  createOrgRequest{},
	"createProject request":              createProjectRequest{},
	"createUser request":                 CreateUserRequest{},
	"createServiceAccount request":       CreateServiceAccountRequest{},
	"rotateServiceAccountKey request":    RotateServiceAccountKeyRequest{},
	"putAppEntitlement request":          entitlementRequest{},
	"putOrgAppEntitlement request":       entitlementRequest{},
	"unwrapRegistryCredential request":   unwrapRequest{},
	"createArtifactPullIntent request":   pullIntentRequest{},
	"registerArtifactSigningKey request": signingKeyRequest{},
	"exchangeNodeToken request":          nodeapi.TokenRequest{},
	"republishEvents request":            republishRequest{},
	"republishEvents 202":                Republished{},
	"listParkedEvents 200":               ParkedEventList{},
	"correctLedgerEntry request":         correctionRequest{},
}

// typeExceptions are object schemas with no Go type of their own, and why.
var typeExceptions = map[string]string{
	"schemas/ManifestInvalidError": "the Error envelope with code manifest_invalid: it decodes as *APIError, and ManifestProblems reads its details.problems",
	"verifyArtifact request":       "TransitionArtifact sends every action the ArtifactTransition body; verify's is that body without target_state, which is omitted when empty",
}

// omitEmptyAllowed are the Go types that may leave out an empty property
// that some schema they carry requires, and why.
var omitEmptyAllowed = map[string]string{
	"client.PolicyOverrides": "putAppEntitlement sends it, where every list is optional and an empty one narrows nothing; " +
		"AppEntitlement requires them only because the server always answers them",
}

// objectSchemas lists every object schema of the contract (one declaring
// properties), keyed as contractTypes is.
func (c *contract) objectSchemas() map[string]map[string]any {
	out := map[string]map[string]any{}
	comps := c.root["components"].(map[string]any)
	for name, s := range comps["schemas"].(map[string]any) {
		if c.isObject(s.(map[string]any)) {
			out["schemas/"+name] = s.(map[string]any)
		}
	}
	for _, kind := range []string{"requestBodies", "responses"} {
		for name, b := range comps[kind].(map[string]any) {
			if s := jsonSchema(b.(map[string]any)); s != nil && c.isObject(s) {
				out[kind+"/"+name] = s
			}
		}
	}
	for id, op := range c.ops {
		if rb, ok := op.node["requestBody"].(map[string]any); ok && rb["$ref"] == nil {
			if s := jsonSchema(rb); s != nil && s["$ref"] == nil && c.isObject(s) {
				out[id+" request"] = s
			}
		}
		resps, _ := op.node["responses"].(map[string]any)
		for code, r := range resps {
			r := r.(map[string]any)
			if r["$ref"] != nil {
				continue
			}
			if s := jsonSchema(r); s != nil && s["$ref"] == nil && c.isObject(s) {
				out[id+" "+code] = s
			}
		}
	}
	return out
}

// jsonSchema is the JSON schema of a request body or response, or nil.
func jsonSchema(body map[string]any) map[string]any {
	content, _ := body["content"].(map[string]any)
	for ct, m := range content {
		if ct == "application/json" || strings.HasSuffix(ct, "+json") {
			s, _ := m.(map[string]any)["schema"].(map[string]any)
			return s
		}
	}
	return nil
}

// isObject: the schema declares properties (itself or through allOf).
func (c *contract) isObject(s map[string]any) bool {
	props, _ := c.properties(s)
	return len(props) > 0
}

// properties merges a schema's properties and required names with those of
// its allOf members.
func (c *contract) properties(s map[string]any) (map[string]map[string]any, map[string]bool) {
	s = c.deref(s)
	props, req := map[string]map[string]any{}, map[string]bool{}
	if all, ok := s["allOf"].([]any); ok {
		for _, m := range all {
			p, r := c.properties(m.(map[string]any))
			for k, v := range p {
				props[k] = v
			}
			for k := range r {
				req[k] = true
			}
		}
	}
	if p, ok := s["properties"].(map[string]any); ok {
		for k, v := range p {
			props[k] = v.(map[string]any)
		}
	}
	if r, ok := s["required"].([]any); ok {
		for _, k := range r {
			req[k.(string)] = true
		}
	}
	return props, req
}

// kind is the JSON type a schema allows (besides null), and whether it
// allows null.
func (c *contract) kind(s map[string]any) (string, bool) {
	s = c.deref(s)
	switch t := s["type"].(type) {
	case string:
		return t, false
	case []any:
		kind, null := "", false
		for _, x := range t {
			if x == "null" {
				null = true
			} else {
				kind = x.(string)
			}
		}
		return kind, null
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		if alts, ok := s[key].([]any); ok {
			kind, null := "", false
			for _, a := range alts {
				k, n := c.kind(a.(map[string]any))
				if k == "null" || n {
					null = true
				}
				if k != "null" && k != "" {
					kind = k
				}
			}
			return kind, null
		}
	}
	if v, ok := s["const"]; ok {
		return jsonKind(v), false
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return jsonKind(e[0]), false
	}
	if props, _ := c.properties(s); len(props) > 0 {
		return "object", false
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		return c.kind(all[0].(map[string]any))
	}
	return "", false // anything
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case int, float64:
		return "number"
	}
	return ""
}

// alternative is the non-null member of a oneOf/anyOf, or s itself.
func (c *contract) alternative(s map[string]any) map[string]any {
	s = c.deref(s)
	for _, key := range []string{"oneOf", "anyOf"} {
		if alts, ok := s[key].([]any); ok {
			for _, a := range alts {
				if k, _ := c.kind(a.(map[string]any)); k != "null" {
					return c.deref(a.(map[string]any))
				}
			}
		}
	}
	return s
}

type jsonField struct {
	name      string
	goName    string
	typ       reflect.Type
	omitEmpty bool
}

// jsonFields lists a struct's JSON fields as encoding/json sees them
// (embedded structs inlined).
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out = append(out, jsonField{name: name, goName: t.Name() + "." + f.Name, typ: f.Type, omitEmpty: omit})
	}
	return out
}

var (
	rawMessage = reflect.TypeFor[json.RawMessage]()
	bigInt     = reflect.TypeFor[big.Int]()
	timeTime   = reflect.TypeFor[time.Time]()
)

// check compares Go type t with schema s at path, and returns what differs.
func (c *contract) check(path string, t reflect.Type, s map[string]any) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	kind, _ := c.kind(s)
	s = c.alternative(s)
	if t == rawMessage || t.Kind() == reflect.Interface {
		if props, _ := c.properties(s); len(props) > 0 {
			return []string{fmt.Sprintf("%s: Go %s is opaque, but the schema declares properties %s", path, t, keys(props))}
		}
		return nil
	}
	bad := func() []string {
		return []string{fmt.Sprintf("%s: Go %s does not hold the schema's %s", path, t, kind)}
	}
	switch kind {
	case "":
		return nil // any JSON
	case "string":
		if t.Kind() != reflect.String && t != timeTime {
			return bad()
		}
	case "integer":
		if t != bigInt && (t.Kind() < reflect.Int || t.Kind() > reflect.Uint64) {
			return bad()
		}
	case "number":
		if t != bigInt && (t.Kind() < reflect.Int || t.Kind() > reflect.Float64) {
			return bad()
		}
	case "boolean":
		if t.Kind() != reflect.Bool {
			return bad()
		}
	case "array":
		if t.Kind() != reflect.Slice || t.Elem().Kind() == reflect.Uint8 {
			return bad()
		}
		if items, ok := s["items"].(map[string]any); ok {
			return c.check(path+"[]", t.Elem(), items)
		}
	case "object":
		return c.checkObject(path, t, s)
	}
	return nil
}

func (c *contract) checkObject(path string, t reflect.Type, s map[string]any) []string {
	props, required := c.properties(s)
	switch t.Kind() {
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return []string{fmt.Sprintf("%s: Go %s is not keyed by string", path, t)}
		}
		var out []string
		for _, name := range keys(props) {
			out = append(out, c.check(path+"."+name, t.Elem(), props[name])...)
		}
		if ap, ok := c.deref(s)["additionalProperties"].(map[string]any); ok {
			out = append(out, c.check(path+".*", t.Elem(), ap)...)
		}
		return out
	case reflect.Struct:
	default:
		return []string{fmt.Sprintf("%s: Go %s does not hold the schema's object", path, t)}
	}
	var out []string
	fields := map[string]jsonField{}
	for _, f := range jsonFields(t) {
		fields[f.name] = f
		if _, ok := props[f.name]; !ok {
			out = append(out, fmt.Sprintf("%s: field %s (json %q) is not a property of the schema", path, f.goName, f.name))
		}
	}
	for _, name := range keys(props) {
		f, ok := fields[name]
		if !ok {
			out = append(out, fmt.Sprintf("%s: Go %s has no field for property %q", path, t, name))
			continue
		}
		if required[name] && f.omitEmpty && omitEmptyAllowed[t.String()] == "" {
			out = append(out, fmt.Sprintf("%s: required property %q is omitempty in %s", path, name, f.goName))
		}
		out = append(out, c.check(path+"."+name, f.typ, props[name])...)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestTypesMatchTheContract(t *testing.T) {
	spec := loadContract(t)
	schemas := spec.objectSchemas()
	for key, why := range typeExceptions {
		if schemas[key] == nil {
			t.Errorf("typeExceptions lists %q (%s), which is no object schema of api/openapi.yaml", key, why)
		}
		if contractTypes[key] != nil {
			t.Errorf("typeExceptions lists %q, which contractTypes maps too", key)
		}
	}
	for key := range contractTypes {
		if schemas[key] == nil {
			t.Errorf("contractTypes maps %q, which is no object schema of api/openapi.yaml", key)
		}
	}
	for _, key := range keys(schemas) {
		v, ok := contractTypes[key]
		if !ok {
			if typeExceptions[key] == "" {
				t.Errorf("%s has no Go type: map it in contractTypes, or list it in typeExceptions with why", key)
			}
			continue
		}
		for _, problem := range spec.check(key, reflect.TypeOf(v), schemas[key]) {
			t.Error(problem)
		}
	}
	t.Logf("%d object schemas: %d with their Go type, %d exceptions", len(schemas), len(contractTypes), len(typeExceptions))
}

// A value with every property set decodes into each mapped type and
// encodes back to the same JSON.
func TestTypesRoundTrip(t *testing.T) {
	spec := loadContract(t)
	schemas := spec.objectSchemas()
	for _, key := range keys(contractTypes) {
		s := schemas[key]
		if s == nil {
			continue // TestTypesMatchTheContract says so
		}
		want := spec.sample(s, 0)
		in, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		v := reflect.New(reflect.TypeOf(contractTypes[key]))
		dec := json.NewDecoder(strings.NewReader(string(in)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v.Interface()); err != nil {
			t.Errorf("%s: %s does not decode %s: %v", key, v.Type().Elem(), in, err)
			continue
		}
		out, err := json.Marshal(v.Interface())
		if err != nil {
			t.Errorf("%s: encode: %v", key, err)
			continue
		}
		var got any
		_ = json.Unmarshal(out, &got)
		var norm any
		_ = json.Unmarshal(in, &norm)
		if !reflect.DeepEqual(got, norm) {
			t.Errorf("%s: %s does not round-trip:\n sent %s\n  got %s", key, v.Type().Elem(), in, out)
		}
	}
}

// sample builds a JSON value that sets every property of s to a non-empty
// value of its kind.
func (c *contract) sample(s map[string]any, depth int) any {
	if depth > 8 {
		return nil
	}
	kind, _ := c.kind(s)
	s = c.alternative(s)
	if v, ok := s["const"]; ok {
		return v
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[len(e)-1]
	}
	switch kind {
	case "string":
		if s["format"] == "date-time" {
			return "2024-05-06T07:08:09Z"
		}
		return "s"
	case "integer", "number":
		return 7
	case "boolean":
		return true
	case "array":
		if items, ok := s["items"].(map[string]any); ok {
			return []any{c.sample(items, depth+1)}
		}
		return []any{"s"}
	case "object":
		props, _ := c.properties(s)
		if len(props) == 0 {
			break
		}
		out := map[string]any{}
		for name, p := range props {
			out[name] = c.sample(p, depth+1)
		}
		return out
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		return map[string]any{"k": c.sample(ap, depth+1)}
	}
	return map[string]any{"k": "v"} // any JSON: an object stands for it
}
