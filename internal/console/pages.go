package console

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"strings"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/redirect"
	"github.com/gpuaas/gpuaas/internal/storage"
)

// req is one signed-in request: its session, the API as that person, and
// what the layout shows.
type req struct {
	s    ConsoleSession
	api  *client.Client
	view *sessionView
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheable(http.FileServerFS(static))))
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.signedIn(c.logout))
	m.HandleFunc("GET /{$}", c.signedIn(c.home))
	m.HandleFunc("GET /projects", c.signedIn(c.projects))
	m.HandleFunc("POST /projects/select", c.signedIn(c.selectProject))
	m.HandleFunc("GET /catalog", c.signedIn(c.catalog))
	m.HandleFunc("GET /catalog/{slug}", c.signedIn(c.catalogApp))
	m.HandleFunc("GET /catalog/{slug}/{version}/launch", c.signedIn(c.launchForm))
	m.HandleFunc("POST /catalog/{slug}/{version}/launch", c.signedIn(c.launch))
	m.HandleFunc("GET /workloads", c.signedIn(c.instanceList))
	m.HandleFunc("GET /workloads/instance/{id}", c.signedIn(c.instancePage))
	m.HandleFunc("POST /workloads/instance/{id}/{action}", c.signedIn(c.instanceAction))
	m.HandleFunc("GET /workloads/instance/{id}/open", c.signedIn(c.openApp))
	m.HandleFunc("POST /workloads/instance/{id}/open", c.signedIn(c.openAppConfirmed))
	m.HandleFunc("GET "+eventStreamPath, c.signedIn(c.eventStream))
	c.extraRoutes(m)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found"})
	})
	c.mux = m
}

func cacheable(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		h.ServeHTTP(w, r)
	})
}

// signedIn runs h for a live session; anyone else goes to sign-in and, once
// signed in, comes back. Every POST must carry the session's CSRF token.
func (c *Console) signedIn(h func(http.ResponseWriter, *http.Request, *req)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(r)
		if errors.Is(err, errNoSession) {
			if background(r) {
				// A live page's script, not the person: a redirect to the
				// sign-in page would hand it a page it cannot show. It
				// answers signed out; the script says so on the page.
				securityHeaders(w)
				http.Error(w, "signed out: the console session has ended", http.StatusUnauthorized)
				return
			}
			if r.Method != http.MethodGet {
				c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Flash: "Your session has ended; sign in again.",
					Data: loginData{CSRF: c.loginCSRF(w, r), Next: "/"}})
				return
			}
			http.Redirect(w, r, "/login?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
			return
		}
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if r.Method == http.MethodPost && !checkCSRF(r, s.CSRFToken) {
			c.render(w, r, http.StatusForbidden, "error", page{Title: "Refused",
				Flash: "This form is stale or did not come from the console (its CSRF token is missing or wrong). Go back, reload the page and try again."})
			return
		}
		tok, err := c.token(r.Context(), s)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		q := &req{s: s, api: c.apiClient(r, tok)}
		q.view, err = c.sessionView(r.Context(), q)
		if api, ok := errors.AsType[*client.APIError](err); ok && api.Status == http.StatusUnauthorized {
			// The token minted for the session is refused, while the
			// session itself still stands (its key was retired, say):
			// mint another, once.
			c.tokens.Delete(s.IDHash)
			if tok, err = c.token(r.Context(), s); err == nil {
				q.api = c.apiClient(r, tok)
				q.view, err = c.sessionView(r.Context(), q)
			}
		}
		if err != nil {
			c.fail(w, r, err)
			return
		}
		h(w, r, q)
	}
}

// sessionView loads what the layout shows: who, which project, which
// projects to switch to, and the person's grants.
func (c *Console) sessionView(ctx context.Context, q *req) (*sessionView, error) {
	me, err := q.api.Me(ctx)
	if err != nil {
		return nil, err
	}
	v := &sessionView{Email: me.Email, UserID: me.ID, CSRF: q.s.CSRFToken, ProjectID: q.s.ProjectID}
	if v.grants, err = c.cfg.Grants(ctx, me.ID); err != nil {
		return nil, err
	}
	v.IsAdmin = v.grants.IsPlatformAdmin()
	// The switcher lists the first orgs and projects; a project past them
	// is chosen by its id on the projects page.
	orgs, err := q.api.ListOrgs(ctx, client.CatalogListOptions{Limit: 50})
	if err != nil {
		return nil, err
	}
	for _, o := range orgs.Items {
		ps, err := q.api.ListProjects(ctx, o.ID, client.CatalogListOptions{Limit: 100})
		if err != nil {
			continue // an org the person sees but whose projects they do not
		}
		for _, p := range ps.Items {
			sel := p.ID == q.s.ProjectID
			if sel {
				pc := p
				v.Project, v.orgOfActive = &pc, p.OrgID
			}
			v.Projects = append(v.Projects, projectChoice{ID: p.ID, Label: o.Slug + " / " + p.Slug, Selected: sel})
		}
	}
	if v.Project == nil && v.ProjectID != "" {
		// Beyond the pages listed (an org's 101st project, say): the
		// remembered project is still the one worked in while visible.
		if p, err := q.api.GetProject(ctx, v.ProjectID); err == nil {
			label := p.Slug
			if o, err := q.api.GetOrg(ctx, p.OrgID); err == nil {
				label = o.Slug + " / " + p.Slug
			}
			v.Project, v.orgOfActive = &p, p.OrgID
			v.Projects = append(v.Projects, projectChoice{ID: p.ID, Label: label, Selected: true})
		} else {
			v.ProjectID = "" // gone, or no longer visible
		}
	}
	return v, nil
}

// fail renders an API refusal or an internal error as a page. A missing
// thing and a forbidden one look the same, as in the API.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *client.APIError
	if errors.As(err, &ae) {
		status := ae.Status
		if status == http.StatusForbidden {
			status = http.StatusNotFound
		}
		if status == http.StatusNotFound {
			c.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found"})
			return
		}
		c.render(w, r, status, "error", page{Title: "Refused", Error: ae})
		return
	}
	c.cfg.Logger.ErrorContext(r.Context(), "console", "path", r.URL.Path, "err", err)
	c.render(w, r, http.StatusInternalServerError, "error", page{Title: "Something went wrong",
		Flash: "The console could not load this page. Try again; if it persists, the server's log has the cause."})
}

type loginData struct {
	CSRF, Next, Email string
}

func (c *Console) loginCSRF(w http.ResponseWriter, r *http.Request) string {
	ck := c.cookie(loginCSRFCookie, "/login")
	if have, err := r.Cookie(ck.Name); err == nil && len(have.Value) >= 32 {
		return have.Value
	}
	ck.Value, ck.SameSite = randomToken(), http.SameSiteStrictMode
	http.SetCookie(w, ck)
	return ck.Value
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, err := c.session(r); err == nil {
		redirectNext(w, r, r.URL.Query().Get("next"))
		return
	}
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: loginData{CSRF: c.loginCSRF(w, r), Next: redirect.Local(r.URL.Query().Get("next"))}})
}

// login signs a person in with the API's own login (its rate limit and
// throttle apply), then opens a server-side session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(c.cookie(loginCSRFCookie, "/login").Name)
	if err != nil || !checkCSRF(r, ck.Value) {
		c.render(w, r, http.StatusForbidden, "login", page{Title: "Sign in", Flash: "The sign-in form expired; try again.",
			Data: loginData{CSRF: c.loginCSRF(w, r), Next: redirect.Local(r.PostFormValue("next"))}})
		return
	}
	// A sign-in replaces the browser's session: the one it still holds
	// (the same person again, or another on a shared machine) ends on the
	// server first, whatever the sign-in's outcome, so its cookie, copied
	// or left behind, opens nothing. The form's CSRF check above keeps
	// another site from ending it so.
	if err := c.endPrevious(r); err != nil {
		c.fail(w, r, err)
		return
	}
	email, next := r.PostFormValue("email"), redirect.Local(r.PostFormValue("next"))
	api := c.apiClient(r, "")
	// The API's own login (its rate limit and throttle), then who it is;
	// the console keeps no password-born token, it mints its own per session.
	_, err = api.Login(r.Context(), email, r.PostFormValue("password"))
	var me client.Me
	if err == nil {
		me, err = api.Me(r.Context())
	}
	if err != nil {
		var ae *client.APIError
		if !errors.As(err, &ae) {
			c.fail(w, r, err)
			return
		}
		if ae.Status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		c.render(w, r, ae.Status, "login", page{Title: "Sign in", Error: ae, Data: loginData{CSRF: c.loginCSRF(w, r), Next: next, Email: email}})
		return
	}
	id := randomToken()
	now := c.cfg.Now().UTC()
	s := ConsoleSession{IDHash: hashID(id), UserID: me.ID, CSRFToken: randomToken(), CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(c.cfg.MaxAge)}
	if err := c.cfg.Sessions.InsertConsoleSession(r.Context(), s); err != nil {
		c.fail(w, r, err)
		return
	}
	session := c.cookie(SessionCookie, "/")
	session.Value, session.SameSite = id, http.SameSiteLaxMode
	http.SetCookie(w, session)
	done := c.cookie(loginCSRFCookie, "/login")
	done.MaxAge = -1
	http.SetCookie(w, done)
	redirectNext(w, r, next)
}

// endPrevious ends the session whose cookie a sign-in carries, if it has
// not ended yet (over or not: a session past its expiry is ended all the
// same, so nothing of it lingers).
func (c *Console) endPrevious(r *http.Request) error {
	ck, err := r.Cookie(c.cookie(SessionCookie, "/").Name)
	if err != nil || ck.Value == "" {
		return nil
	}
	old, err := c.cfg.Sessions.GetConsoleSession(r.Context(), hashID(ck.Value))
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !old.EndedAt.IsZero() {
		return nil
	}
	return c.endSession(r.Context(), old.IDHash, c.cfg.Now())
}

// logout ends the session on the server: the cookie is worthless after.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, q *req) {
	if err := c.endSession(r.Context(), q.s.IDHash, c.cfg.Now()); err != nil {
		c.fail(w, r, err)
		return
	}
	gone := c.cookie(SessionCookie, "/")
	gone.MaxAge, gone.SameSite = -1, http.SameSiteLaxMode
	http.SetCookie(w, gone)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (c *Console) home(w http.ResponseWriter, r *http.Request, q *req) {
	if q.view.Project == nil {
		http.Redirect(w, r, "/projects", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/workloads", http.StatusSeeOther)
}

func (c *Console) projects(w http.ResponseWriter, r *http.Request, q *req) {
	c.render(w, r, http.StatusOK, "projects", page{Title: "Projects", Session: q.view})
}

func (c *Console) selectProject(w http.ResponseWriter, r *http.Request, q *req) {
	id := r.PostFormValue("project_id")
	if _, err := q.api.GetProject(r.Context(), id); err != nil {
		c.fail(w, r, err)
		return
	}
	if err := c.cfg.Sessions.SetConsoleSessionProject(r.Context(), q.s.IDHash, id); err != nil {
		c.fail(w, r, err)
		return
	}
	redirectNext(w, r, r.PostFormValue("next"))
}

// needProject sends a person without a chosen project to choose one.
func (c *Console) needProject(w http.ResponseWriter, r *http.Request, q *req) bool {
	if q.view.Project != nil {
		return false
	}
	http.Redirect(w, r, "/projects?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
	return true
}

// errorFor turns an API error into the page's error (nil when err is not
// one) and its field errors by JSON pointer.
func errorFor(err error) (*client.APIError, map[string]string) {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		return nil, nil
	}
	fields := map[string]string{}
	if fs, ok := ae.Details["fields"].([]any); ok {
		for _, f := range fs {
			m, _ := f.(map[string]any)
			field, _ := m["field"].(string)
			msg, _ := m["message"].(string)
			if field != "" && fields[field] == "" {
				fields[strings.TrimSuffix(field, "/")] = msg
			}
		}
	}
	return ae, fields
}
