package console

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/config"
	"github.com/gpuaas/gpuaas/internal/iam"
	"github.com/gpuaas/gpuaas/internal/instances"
	"github.com/gpuaas/gpuaas/internal/manifest"
	"github.com/gpuaas/gpuaas/internal/redirect"
)

type catalogData struct {
	Entries  []client.ProjectCatalogEntry
	Apps     []client.CatalogApp // the raw catalog (platform admins)
	AllView  bool
	NextPage string
}

// catalog is the project's entitlement-filtered catalog; platform admins
// may switch to the raw catalog.
func (c *Console) catalog(w http.ResponseWriter, r *http.Request, q *req) {
	d := catalogData{AllView: q.view.IsAdmin && r.URL.Query().Get("view") == "all"}
	if d.AllView {
		apps, err := q.api.ListCatalog(r.Context(), client.CatalogListOptions{Limit: 100, Cursor: r.URL.Query().Get("cursor")})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		d.Apps, d.NextPage = apps.Items, apps.NextCursor
	} else {
		if c.needProject(w, r, q) {
			return
		}
		es, err := q.api.ProjectCatalog(r.Context(), q.view.ProjectID, client.CatalogListOptions{Limit: 100, Cursor: r.URL.Query().Get("cursor")})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		d.Entries, d.NextPage = es.Items, es.NextCursor
	}
	c.render(w, r, http.StatusOK, "catalog", page{Title: "Catalog", Session: q.view, Data: d})
}

type versionDetail struct {
	client.AppVersion
	Spec         manifest.Version
	Launchable   bool
	EmbeddedUI   bool
	ManifestJSON string
}

type appData struct {
	App      client.CatalogApp
	Versions []versionDetail
}

// projectEntry finds an app in the project's catalog (the versions this
// project may launch), or nil.
func (c *Console) projectEntry(r *http.Request, q *req, slug string) (*client.ProjectCatalogEntry, error) {
	cursor := ""
	for {
		es, err := q.api.ProjectCatalog(r.Context(), q.view.ProjectID, client.CatalogListOptions{Limit: 100, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for i := range es.Items {
			if es.Items[i].App.Slug == slug {
				return &es.Items[i], nil
			}
		}
		if cursor = es.NextCursor; cursor == "" {
			return nil, nil
		}
	}
}

func detail(v client.AppVersion, launchable bool) versionDetail {
	d := versionDetail{AppVersion: v, Launchable: launchable}
	_ = json.Unmarshal(v.Manifest, &d.Spec)
	_, d.EmbeddedUI = instances.UIOf(d.Spec)
	if b, err := json.MarshalIndent(json.RawMessage(v.Manifest), "", "  "); err == nil {
		d.ManifestJSON = string(b)
	}
	return d
}

func (c *Console) catalogApp(w http.ResponseWriter, r *http.Request, q *req) {
	slug := r.PathValue("slug")
	d := appData{}
	if q.view.Project != nil {
		e, err := c.projectEntry(r, q, slug)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if e != nil {
			d.App = e.App
			for _, v := range e.Versions {
				d.Versions = append(d.Versions, detail(v, q.view.Can(iam.PermInstanceCreate)))
			}
		}
	}
	if d.App.Slug == "" {
		// Not entitled here: the raw catalog, for those who may read it.
		app, err := q.api.GetCatalogApp(r.Context(), slug)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		vs, err := q.api.ListAppVersions(r.Context(), slug, "", client.CatalogListOptions{Limit: 100})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		d.App = app
		for _, v := range vs.Items {
			d.Versions = append(d.Versions, detail(v, false))
		}
	}
	c.render(w, r, http.StatusOK, "app", page{Title: d.App.DisplayName, Session: q.view, Data: d})
}

type launchData struct {
	App         client.CatalogApp
	Version     versionDetail
	Fields      []field
	DisplayName string
	Allocation  string
	Targets     []client.TargetAllocation
	Effective   *client.LaunchEffective
	EffJSON     string
	Problems    map[string]string
}

// launchVersion finds the entitled version a launch is for.
func (c *Console) launchVersion(w http.ResponseWriter, r *http.Request, q *req) (*launchData, bool) {
	if c.needProject(w, r, q) {
		return nil, false
	}
	if !q.view.Can(iam.PermInstanceCreate) {
		// Launch preview and create both need it: a viewer gets no wizard
		// whose every button the API refuses.
		c.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found", Session: q.view,
			Flash: "Your roles in this project do not allow launching apps. A project admin can grant you a role that does (project_member or app_operator)."})
		return nil, false
	}
	e, err := c.projectEntry(r, q, r.PathValue("slug"))
	if err != nil {
		c.fail(w, r, err)
		return nil, false
	}
	if e != nil {
		for _, v := range e.Versions {
			if v.Version == r.PathValue("version") {
				d := &launchData{App: e.App, Version: detail(v, true)}
				d.Fields = wizardFields(d.Version.Spec)
				return d, true
			}
		}
	}
	c.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found", Session: q.view,
		Flash: "This version is not in this project's catalog: it is not published, or the project is not entitled to it."})
	return nil, false
}

func (c *Console) launchForm(w http.ResponseWriter, r *http.Request, q *req) {
	d, ok := c.launchVersion(w, r, q)
	if !ok {
		return
	}
	lr, _ := launchRequest(d.Version.Spec, d.Fields)
	c.preview(w, r, q, d, lr)
}

// preview asks the server for the effective launch and shows it, or each
// field's error next to it.
func (c *Console) preview(w http.ResponseWriter, r *http.Request, q *req, d *launchData, lr client.LaunchRequest) {
	eff, err := q.api.PreviewLaunch(r.Context(), q.view.ProjectID, d.App.Slug, d.Version.Version, lr)
	status := http.StatusOK
	if err != nil {
		ae, fields := errorFor(err)
		if ae == nil || ae.Status >= 500 || ae.Status == http.StatusNotFound {
			c.fail(w, r, err)
			return
		}
		d.Problems = markErrors(d.Fields, fields)
		if len(fields) == 0 {
			d.Problems = map[string]string{"": ae.Message}
		}
		status = http.StatusUnprocessableEntity
	} else {
		d.Effective, d.Targets = &eff, eff.TargetAllocations
		if b, err := json.MarshalIndent(struct {
			OperatingMode     string          `json:"operating_mode"`
			ControlPlaneScope string          `json:"control_plane_scope"`
			Resources         any             `json:"resources"`
			Config            json.RawMessage `json:"config,omitempty"`
			Parameters        json.RawMessage `json:"parameters,omitempty"`
		}{eff.OperatingMode, eff.ControlPlaneScope, eff.Resources, eff.Config, eff.Parameters}, "", "  "); err == nil {
			d.EffJSON = string(b)
		}
	}
	c.render(w, r, status, "launch", page{Title: "Launch " + d.App.DisplayName, Session: q.view, Data: d})
}

func (c *Console) launch(w http.ResponseWriter, r *http.Request, q *req) {
	d, ok := c.launchVersion(w, r, q)
	if !ok {
		return
	}
	fill(d.Fields, r.PostForm)
	d.DisplayName, d.Allocation = strings.TrimSpace(r.PostFormValue("display_name")), r.PostFormValue("target_allocation_id")
	lr, err := launchRequest(d.Version.Spec, d.Fields)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if r.PostFormValue("action") != "launch" {
		c.preview(w, r, q, d, lr)
		return
	}
	res := (*client.LaunchResources)(nil)
	if lr.Resources != nil {
		res = &client.LaunchResources{GPUCount: lr.Resources.GPUCount, CPUCores: lr.Resources.CPUCores, MemoryGiB: lr.Resources.MemoryGiB}
	}
	name := d.DisplayName
	if name == "" {
		name = d.App.Slug
	}
	inst, err := q.api.CreateAppInstance(r.Context(), q.view.ProjectID, client.AppInstanceRequest{AppSlug: d.App.Slug, Version: d.Version.Version,
		DisplayName: name, Config: lr.Config, Parameters: lr.Parameters, Resources: res, TargetAllocationID: d.Allocation})
	if err != nil {
		ae, fields := errorFor(err)
		if ae == nil || ae.Status >= 500 {
			c.fail(w, r, err)
			return
		}
		d.Problems = markErrors(d.Fields, fields)
		if len(fields) == 0 {
			d.Problems = map[string]string{"": ae.Message}
		}
		c.render(w, r, ae.Status, "launch", page{Title: "Launch " + d.App.DisplayName, Session: q.view, Data: d})
		return
	}
	http.Redirect(w, r, "/workloads/instance/"+url.PathEscape(inst.ID), http.StatusSeeOther)
}

type listData struct {
	Items    []client.AppInstance
	Status   string
	Next     string
	Statuses []instances.InstanceStatus
}

func (c *Console) instanceList(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	after := c.liveAfter(r)
	d := listData{Status: r.URL.Query().Get("status"), Statuses: instances.Statuses}
	l, err := q.api.ListAppInstances(r.Context(), q.view.ProjectID, d.Status, 50, r.URL.Query().Get("cursor"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d.Items, d.Next = l.Items, l.NextCursor
	c.render(w, r, http.StatusOK, "instances", page{Title: "Instances", Session: q.view, Data: d, After: after})
}

type instanceData struct {
	Inst client.AppInstance
	// Project is the project the page reads the instance through: its
	// own, or an attached one (throughProject); its live stream is that
	// project's.
	Project   string
	Timeline  []client.AppInstanceEvent
	Logs      []string
	Versions  []string // versions it may move to
	Embedded  bool
	Terminal  bool
	CanUpdate bool
	CanDelete bool
}

// instanceProject resolves the project an instance link is in: the
// instance's own (its home). Changes go through it.
func (c *Console) instanceProject(r *http.Request, q *req, id string) string {
	if c.cfg.ProjectOf != nil {
		if p, err := c.cfg.ProjectOf(r.Context(), id); err == nil {
			return p
		}
	}
	return q.view.ProjectID
}

// throughProject calls the API's read of instance id, call, in the
// project the person reads it through, and says which. That is its home
// project (instanceProject) or, for a shared instance (control_plane_scope
// tenant, or platform-managed), a project attached to it: a member of an
// attached project only reads the shared instance through that project
// (GET /projects/{attached}/app-instances/{id}, its events, logs, UI), and
// through the home project the API answers not found. So where the home
// project refuses (404, or 403), call is tried in the project the session
// is in, and then in each other attached project the person's roles may
// read instances in; a link works whichever project the person has
// selected. The API still decides, and an instance the person reads
// through none of them stays not found (the home project's answer).
func (c *Console) throughProject(r *http.Request, q *req, id string, call func(project string) error) (string, error) {
	home := c.instanceProject(r, q, id)
	err := call(home)
	var ae *client.APIError
	if err == nil || !errors.As(err, &ae) || (ae.Status != http.StatusNotFound && ae.Status != http.StatusForbidden) {
		return home, err
	}
	if p := q.view.ProjectID; p != "" && p != home && call(p) == nil {
		return p, nil
	}
	for _, p := range c.otherReaders(r, q, id, home) {
		if call(p) == nil {
			return p, nil
		}
	}
	return home, err
}

// otherReaders lists the projects attached to instance id, other than
// home and the session's (throughProject tried those), in which the
// person's roles read instances (others would only answer not found).
// They are looked up only once the session's project has refused: a page
// read through it, each live update included, costs no lookup.
func (c *Console) otherReaders(r *http.Request, q *req, id, home string) []string {
	if c.cfg.AttachedTo == nil {
		return nil
	}
	attached, err := c.cfg.AttachedTo(r.Context(), id)
	if err != nil {
		return nil
	}
	var out []string
	for _, sc := range attached {
		if sc.ProjectID != home && sc.ProjectID != q.view.ProjectID && q.view.grants.Can(iam.PermInstanceRead, sc) {
			out = append(out, sc.ProjectID)
		}
	}
	return out
}

func (c *Console) instancePage(w http.ResponseWriter, r *http.Request, q *req) {
	id := r.PathValue("id")
	after := c.liveAfter(r)
	var inst client.AppInstance
	project, err := c.throughProject(r, q, id, func(project string) (err error) {
		inst, err = q.api.GetAppInstance(r.Context(), project, id)
		return err
	})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := instanceData{Inst: inst, Project: project, Terminal: inst.Status == "decommissioned"}
	sc := iam.Scope{OrgID: inst.OrgID, ProjectID: inst.ProjectID}
	d.CanUpdate = q.view.grants.Can(iam.PermInstanceUpdate, sc)
	d.CanDelete = q.view.grants.Can(iam.PermInstanceDelete, sc)
	if tl, err := q.api.AppInstanceEvents(r.Context(), project, id, 20, ""); err == nil {
		d.Timeline = tl.Items
	}
	if inst.ReasonCode != "" || inst.Status == "failed" {
		if l, err := q.api.AppInstanceLogs(r.Context(), project, id); err == nil {
			d.Logs = l.Lines
		}
	}
	if vs, err := q.api.ListAppVersions(r.Context(), inst.AppSlug, "", client.CatalogListOptions{Limit: 100}); err == nil {
		for _, v := range vs.Items {
			if v.Version == inst.Version {
				d.Embedded = detail(v, false).EmbeddedUI
			} else if v.Status == "published" || v.Status == "deprecated" {
				d.Versions = append(d.Versions, v.Version)
			}
		}
	}
	c.render(w, r, http.StatusOK, "instance", page{Title: inst.DisplayName, Session: q.view, Data: d, After: after})
}

// instanceAction runs upgrade, rollback or decommission from the page's
// confirmed forms.
func (c *Console) instanceAction(w http.ResponseWriter, r *http.Request, q *req) {
	id := r.PathValue("id")
	project := c.instanceProject(r, q, id)
	if r.PostFormValue("confirm") != "yes" {
		c.render(w, r, http.StatusUnprocessableEntity, "error", page{Title: "Not confirmed", Session: q.view,
			Flash: "Tick the confirmation box next to the button to " + r.PathValue("action") + " this instance."})
		return
	}
	var err error
	switch r.PathValue("action") {
	case "upgrade":
		_, err = q.api.UpgradeAppInstance(r.Context(), project, id, r.PostFormValue("version"))
	case "rollback":
		_, err = q.api.RollbackAppInstance(r.Context(), project, id, r.PostFormValue("version"))
	case "decommission":
		_, err = q.api.DecommissionAppInstance(r.Context(), project, id)
	default:
		c.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found", Session: q.view})
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/workloads/instance/"+url.PathEscape(id), http.StatusSeeOther)
}

// openApp hands the browser a one-time link to the instance's UI on its
// own origin (the gateway also sends people here when their app token
// expired). Minting a code opens the app as the person and is audited, so
// a GET does it only when the console itself (or the person, typing the
// address) asked: a link on another site, which SameSite=Lax sends the
// session cookie with, gets a page whose button (a CSRF-checked POST,
// openAppConfirmed) opens the app.
func (c *Console) openApp(w http.ResponseWriter, r *http.Request, q *req) {
	id, path := r.PathValue("id"), r.URL.Query().Get("path")
	if c.foreignNavigation(r) || r.URL.Query().Get("ask") != "" {
		var inst client.AppInstance
		_, err := c.throughProject(r, q, id, func(project string) (err error) {
			inst, err = q.api.GetAppInstance(r.Context(), project, id)
			return err
		})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		c.render(w, r, http.StatusOK, "open", page{Title: "Open " + inst.DisplayName, Session: q.view,
			Data: openData{Inst: inst, Path: path}, formToAnyOrigin: true})
		return
	}
	c.mintAndOpen(w, r, q, id, path)
}

// localNext is where a redirect to a caller-supplied "next" goes (the
// sign-in's, the sign-in page's when already signed in, the project
// switcher's): every such redirect takes it from here. redirect.Local
// keeps it on the console and answers the address the browser will
// actually request (dot segments, percent-encoded or not, and repeated
// slashes resolved), and askBeforeOpening then looks at that address, so
// "/workloads/instance/X/./open" and the like are asked about as the
// plain form is.
func localNext(next string) string {
	return askBeforeOpening(redirect.Local(next))
}

// redirectNext sends the browser on to the request's next (localNext).
func redirectNext(w http.ResponseWriter, r *http.Request, next string) {
	http.Redirect(w, r, localNext(next), http.StatusSeeOther)
}

// askBeforeOpening marks a next that opens an app (a foreign link, or the
// gateway, sent a signed-out person to sign in first; a page's project
// switcher posts the page's path): the redirect is the console's own, so
// the person is asked there as they would have been when signed in
// (openApp). next must be normalised already (localNext): the route is
// matched as the router matches it, segment by unescaped segment.
func askBeforeOpening(next string) string {
	u, err := url.Parse(next)
	if err != nil || !opensApp(u.EscapedPath()) {
		return next
	}
	qv := u.Query()
	qv.Set("ask", "1")
	u.RawQuery = qv.Encode()
	return u.String()
}

// opensApp reports whether the escaped path p is routed to openApp
// ("GET /workloads/instance/{id}/open").
func opensApp(p string) bool {
	segs := strings.Split(p, "/")
	if len(segs) != 5 || segs[0] != "" || segs[3] == "" {
		return false
	}
	for i, want := range map[int]string{1: "workloads", 2: "instance", 4: "open"} {
		if seg, err := url.PathUnescape(segs[i]); err != nil || seg != want {
			return false
		}
	}
	return true
}

// openAppConfirmed opens the app from the button of the page a foreign
// link got (openApp); signedIn checked its CSRF token.
func (c *Console) openAppConfirmed(w http.ResponseWriter, r *http.Request, q *req) {
	c.mintAndOpen(w, r, q, r.PathValue("id"), r.PostFormValue("path"))
}

type openData struct {
	Inst client.AppInstance
	Path string
}

// mintAndOpen mints a one-time UI code for the instance and sends the
// browser to the gateway with it, on to path within the app.
func (c *Console) mintAndOpen(w http.ResponseWriter, r *http.Request, q *req, id, path string) {
	var out struct {
		URL string `json:"url"`
	}
	// Through the project the person reads the instance in: a member of a
	// project attached to a shared instance opens it through that one. A
	// refused open mints no code, so trying the next project is safe.
	_, err := c.throughProject(r, q, id, func(project string) error {
		return q.api.Do(r.Context(), http.MethodPost, "/api/v1/projects/"+url.PathEscape(project)+"/app-instances/"+url.PathEscape(id)+"/ui-open", nil, nil, &out)
	})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	target, err := url.Parse(out.URL)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "//") {
		qv := target.Query()
		qv.Set("path", path)
		target.RawQuery = qv.Encode()
	}
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, target.String(), http.StatusSeeOther)
}

// foreignNavigation reports whether a GET may have been started by a page
// that is not the console's: another site's link, or an app's UI on a
// sibling subdomain (same-site, but not the console). A browser says so
// in Sec-Fetch-Site ("same-origin" for the console's own links, "none"
// for an address typed or a bookmark). Where it sends no fetch metadata
// (an older browser, or a plain-http origin that is not loopback, where
// browsers send none) an Origin or Referer of another origin gives it
// away; with neither (a page can suppress its Referer) only a request
// that no current browser would send without fetch metadata (over https
// or to loopback: a client that is no browser) passes.
func (c *Console) foreignNavigation(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "":
	default: // same-site, cross-site, or a value unknown here
		return true
	}
	seen := false
	for _, h := range []string{"Origin", "Referer"} {
		v := r.Header.Get(h)
		if v == "" {
			continue
		}
		if !c.ownOrigin(r, v) {
			return true
		}
		seen = true
	}
	return !seen && !c.fetchMetadataExpected(r)
}

// ownOrigin reports whether the URL v (an Origin or a Referer) is of the
// console's own origin: its public URL's, or the host the request came to.
func (c *Console) ownOrigin(r *http.Request, v string) bool {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" (an opaque origin) included
	}
	if c.cfg.PublicURL != nil {
		if pub, err := url.Parse(c.cfg.PublicURL()); err == nil && pub.Host != "" &&
			strings.EqualFold(pub.Scheme, u.Scheme) && strings.EqualFold(pub.Host, u.Host) {
			return true
		}
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(u.Host, r.Host)
}

// fetchMetadataExpected reports whether a current browser would have sent
// Sec-Fetch-Site to this request: browsers send it to potentially
// trustworthy origins only (https, loopback).
func (c *Console) fetchMetadataExpected(r *http.Request) bool {
	if r.TLS != nil || (c.cfg.PublicURL != nil && c.secure()) {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return config.LoopbackHost(host)
}

// eventStream relays the project's event stream to the page's
// EventSource, as the signed-in person: the API's own stream (access
// re-checks, exact resume from Last-Event-ID) behind the session cookie.
func (c *Console) eventStream(w http.ResponseWriter, r *http.Request, q *req) {
	project := r.URL.Query().Get("project")
	if project == "" {
		project = q.view.ProjectID
	}
	tok, err := c.token(r.Context(), q.s)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// The stream lives only as long as the session it is relayed for.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go c.endWithSession(ctx, cancel, q.s)
	in, err := http.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(project)+"/events/stream", nil)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	in.RemoteAddr, in.RequestURI = r.RemoteAddr, in.URL.RequestURI()
	in.Header.Set("Authorization", "Bearer "+tok)
	in.Header.Set("Accept", "text/event-stream")
	// A reconnect resumes from the last event the page saw; a first
	// opening from the position the page's state is as of (liveAfter).
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		in.Header.Set("Last-Event-ID", id)
	} else if after := r.URL.Query().Get("after"); after != "" {
		in.Header.Set("Last-Event-ID", after)
	} else {
		in.Header.Set("Last-Event-ID", "now")
	}
	c.cfg.API.ServeHTTP(w, in)
}
