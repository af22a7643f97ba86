package instances

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/gpuaas/gpuaas/internal/errdefs"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/principal"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// Opening an instance's own UI through the platform's gateway. The person
// asks here (instance read permission); they get a one-time code bound to
// them, the instance and its UI port, which the gateway trades for its own
// short-lived cookie on the instance's origin. Issuing the code is the
// "open", so that is what is audited.

// UICodeTTL is how long a one-time UI code can be redeemed.
const UICodeTTL = time.Minute

// AuditUIOpen is the audit action of one open of an instance's UI.
const AuditUIOpen = "apps.instance.ui_open"

// UIDecl is what a version declares of an embedded UI: the container port
// exposed as embedded_ui_gateway and the path its UI starts at.
type UIDecl struct {
	ContainerPort int
	Path          string
}

// UIOf returns a version's embedded UI, if it declares one.
func UIOf(mv manifest.Version) (UIDecl, bool) {
	if mv.UI == nil || mv.UI.ExtensionKind != "embedded" || mv.RuntimeProfile == nil {
		return UIDecl{}, false
	}
	for _, p := range mv.RuntimeProfile.Ports {
		if p.Expose == manifest.ExposeEmbeddedUIGateway {
			path := mv.UI.Path
			if path == "" {
				path = "/"
			}
			return UIDecl{ContainerPort: p.Container, Path: path}, true
		}
	}
	return UIDecl{}, false
}

// UIOpen is a one-time code for the gateway, shown once.
type UIOpen struct {
	Code       string    `json:"code"`
	InstanceID string    `json:"instance_id"`
	Path       string    `json:"path"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// UIGrant is what a redeemed code proves: this person may open this
// instance's UI on this port.
type UIGrant struct {
	UserID, OrgID, ProjectID, InstanceID string
	Port                                 int
}

// UIUpstream is where the gateway sends an instance's UI traffic, and the
// instance's state for a page that explains why it cannot.
type UIUpstream struct {
	InstanceID, OrgID, ProjectID string
	Status                       InstanceStatus
	ReasonMessage                string
	Embedded                     bool
	ContainerPort                int
	Path                         string
	// Addr is host:port on the node, "" while the instance is not running.
	Addr string
}

func hashCode(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

func (s *Service) versionManifest(ctx context.Context, q Queries, appSlug, version string) (manifest.Version, error) {
	v, err := q.GetAppVersion(ctx, appSlug, version)
	if err != nil {
		return manifest.Version{}, err
	}
	var mv manifest.Version
	return mv, json.Unmarshal(v.Manifest, &mv)
}

// OpenUI issues a one-time code that opens the instance's embedded UI. Only
// people open UIs: the code ends in a browser cookie.
func (s *Service) OpenUI(ctx context.Context, g *iam.Grants, projectID, id string) (UIOpen, error) {
	p, inst, err := s.instance(ctx, g, projectID, id, iam.PermInstanceRead)
	if err != nil {
		return UIOpen{}, err
	}
	if g.P.Type != principal.User {
		return UIOpen{}, errdefs.PermissionDenied("ui_open_people_only",
			"only a person signed in to the console opens an app's UI; %s principals call the app's API directly", g.P.Type)
	}
	up, err := s.upstream(ctx, inst)
	if err != nil {
		return UIOpen{}, err
	}
	if !up.Embedded {
		return UIOpen{}, errdefs.FailedPrecondition("ui_not_embedded",
			"%s %s declares no embedded UI (the manifest's ui.extension_kind is not embedded, or no port is exposed as embedded_ui_gateway)", inst.AppSlug, inst.Version)
	}
	if up.Addr == "" {
		return UIOpen{}, errdefs.FailedPrecondition("instance_not_running",
			"instance %s is %s; its UI opens once it is running", inst.ID, inst.Status)
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	code := base64.RawURLEncoding.EncodeToString(raw)
	now := s.Now().UTC()
	// The project the person reads the instance through: its own, or one
	// attached to it (a shared instance).
	c := UIOpenCode{CodeHash: hashCode(code), UserID: g.P.ID, OrgID: p.OrgID, ProjectID: p.ID,
		InstanceID: inst.ID, Port: up.ContainerPort, CreatedAt: now, ExpiresAt: now.Add(UICodeTTL)}
	err = s.Store.Mutate(ctx, func(tx Tx) error {
		if err := tx.InsertUIOpenCode(ctx, c); err != nil {
			return err
		}
		return tx.Audit(storage.AuditEvent{Action: AuditUIOpen, ResourceType: "app_instance", ResourceID: inst.ID,
			OrgID: inst.OrgID, ProjectID: inst.ProjectID}, nil, map[string]any{"port": up.ContainerPort, "path": up.Path})
	})
	if err != nil {
		return UIOpen{}, err
	}
	return UIOpen{Code: code, InstanceID: inst.ID, Path: up.Path, ExpiresAt: c.ExpiresAt}, nil
}

// errUICode is the one answer to a code that cannot be redeemed, whatever
// the reason (unknown, expired, used, another instance's, access revoked).
var errUICode = errdefs.NotFound("ui_code_invalid",
	"this link to the app has expired or was already used; open the app again from its instance page in the console")

// RedeemUI trades a one-time code for the grant it proves, once. The person
// must still be allowed to open the instance's UI now (uiAllowed).
func (s *Service) RedeemUI(ctx context.Context, code, instanceID string) (UIGrant, error) {
	q, hash, now := s.Store.Read(), hashCode(code), s.Now().UTC()
	c, err := q.UsableUIOpenCode(ctx, hash, instanceID, now)
	if errors.Is(err, storage.ErrNotFound) {
		return UIGrant{}, errUICode
	}
	if err != nil {
		return UIGrant{}, err
	}
	gr := UIGrant{UserID: c.UserID, OrgID: c.OrgID, ProjectID: c.ProjectID, InstanceID: c.InstanceID, Port: c.Port}
	// Checked before the code is used: a check that cannot answer (the
	// database failing) leaves the code for the person's retry instead of
	// burning it.
	ok, err := s.uiAllowed(ctx, gr)
	if err != nil {
		return UIGrant{}, err
	}
	// Used whether or not the check passed: a code opens at most once, and
	// of two redemptions racing, one uses it.
	if _, err := q.RedeemUIOpenCode(ctx, hash, instanceID, now); errors.Is(err, storage.ErrNotFound) {
		return UIGrant{}, errUICode
	} else if err != nil {
		return UIGrant{}, err
	}
	if !ok {
		return UIGrant{}, errUICode
	}
	return gr, nil
}

// errUIRevoked is the answer to a grant its person no longer holds.
var errUIRevoked = errdefs.NotFound("ui_access_ended",
	"you may no longer open this app's UI; open it again from its instance page in the console")

// RecheckUI says whether the person of a grant the gateway holds (in an app
// token it issued) may still open the instance's UI on that port now: the
// checks RedeemUI makes, without the code. The gateway asks before it
// renews an app token and while a WebSocket outlives one. nil: allowed; a
// NotFound-kind error: refused (the role is gone, the account disabled, the
// instance gone or no longer serving that UI); any other error: it could
// not tell.
func (s *Service) RecheckUI(ctx context.Context, gr UIGrant) error {
	ok, err := s.uiAllowed(ctx, gr)
	if err != nil {
		return err
	}
	if !ok {
		return errUIRevoked
	}
	return nil
}

// uiAllowed says whether a grant still holds: its person is active and
// reads the instance's project now (for a grant made through a project the
// instance is attached to, that project, still attached), and the instance
// still serves an embedded UI on the grant's port. A grant naming no
// project reads through the instance's own.
func (s *Service) uiAllowed(ctx context.Context, gr UIGrant) (bool, error) {
	inst, err := s.Store.Read().GetAppInstanceByID(ctx, gr.InstanceID)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	projectID := gr.ProjectID
	if projectID == "" {
		projectID = inst.ProjectID
	}
	// The project's own org, read here rather than taken from the grant:
	// a project attached to a platform-managed instance is another org's,
	// and its readers hold their roles there.
	p, err := s.Store.Read().GetProject(ctx, projectID)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	ok, err := s.UserReads(ctx, gr.UserID, p.OrgID, p.ID)
	if err != nil || !ok {
		return false, err
	}
	if inst.ProjectID != projectID {
		// Through an attached project: still attached.
		if ok, err := s.Store.Read().InstanceAttached(ctx, inst.ID, projectID); err != nil || !ok {
			return false, err
		}
	}
	up, err := s.upstream(ctx, inst)
	if err != nil {
		return false, err
	}
	return up.Embedded && up.ContainerPort == gr.Port, nil
}

// UserReads says whether a person (active, with a role) may read the
// instances of a project now.
func (s *Service) UserReads(ctx context.Context, userID, orgID, projectID string) (bool, error) {
	u, err := s.Store.Read().GetUser(ctx, userID)
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil || u.Status != iam.UserActive {
		return false, err
	}
	g, err := iam.LoadGrants(ctx, s.Store.Read(), principal.Principal{Type: principal.User, ID: u.ID, Email: u.Email})
	if err != nil {
		return false, err
	}
	return g.Can(iam.PermInstanceRead, iam.Scope{OrgID: orgID, ProjectID: projectID}), nil
}

// UIUpstreamOf resolves where an instance's UI listens. ErrNotFound-kind
// for an unknown instance.
func (s *Service) UIUpstreamOf(ctx context.Context, instanceID string) (UIUpstream, error) {
	inst, err := s.Store.Read().GetAppInstanceByID(ctx, instanceID)
	if errors.Is(err, storage.ErrNotFound) {
		return UIUpstream{}, errInstanceNotFound(instanceID)
	}
	if err != nil {
		return UIUpstream{}, err
	}
	return s.upstream(ctx, inst)
}

func (s *Service) upstream(ctx context.Context, inst AppInstance) (UIUpstream, error) {
	up := UIUpstream{InstanceID: inst.ID, OrgID: inst.OrgID, ProjectID: inst.ProjectID, Status: inst.Status, ReasonMessage: inst.ReasonMessage}
	mv, err := s.versionManifest(ctx, s.Store.Read(), inst.AppSlug, inst.Version)
	if err != nil {
		return up, err
	}
	ui, ok := UIOf(mv)
	if !ok {
		return up, nil
	}
	up.Embedded, up.ContainerPort, up.Path = true, ui.ContainerPort, ui.Path
	a := AccessOf(inst)
	if inst.Status != StatusRunning || a == nil {
		return up, nil
	}
	for _, p := range a.Ports {
		if p.Container == ui.ContainerPort && p.Host > 0 {
			up.Addr = net.JoinHostPort(uiHost(a), strconv.Itoa(p.Host))
		}
	}
	return up, nil
}

// uiHost is where the control plane reaches a node's published ports: the
// address the agent binds them on (--host-address), unless that is the
// node's loopback or every address, in which case the node's advertised
// address (a node on this machine: loopback). A multi-host install must
// publish UI ports where the control plane can reach them
// (docs/console.md).
func uiHost(a *Access) string {
	bind := net.ParseIP(a.BindAddress)
	node := net.ParseIP(a.NodeAddress)
	local := a.NodeAddress == "" || a.NodeAddress == "localhost" || (node != nil && node.IsLoopback())
	switch {
	case bind != nil && !bind.IsLoopback() && !bind.IsUnspecified():
		return a.BindAddress
	case local:
		if bind != nil && bind.IsLoopback() {
			return a.BindAddress
		}
		return "127.0.0.1"
	default:
		return a.NodeAddress
	}
}
