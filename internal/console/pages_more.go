package console

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/iam"
)

func (c *Console) extraRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /artifacts", c.signedIn(c.artifacts))
	m.HandleFunc("GET /service-accounts", c.signedIn(c.serviceAccounts))
	m.HandleFunc("POST /service-accounts", c.signedIn(c.createServiceAccount))
	m.HandleFunc("POST /service-accounts/{id}/{action}", c.signedIn(c.serviceAccountAction))
	m.HandleFunc("GET /usage", c.signedIn(c.usage))
	m.HandleFunc("GET /usage.csv", c.signedIn(c.usageCSV))
	m.HandleFunc("GET /budgets", c.signedIn(c.budget))
	m.HandleFunc("POST /budgets", c.signedIn(c.putBudget))
	m.HandleFunc("GET /storage", c.signedIn(c.storage))
	m.HandleFunc("POST /storage", c.signedIn(c.putStorageQuota))
	m.HandleFunc("GET /admin/nodes", c.signedIn(c.nodes))
	m.HandleFunc("GET /admin/audit", c.signedIn(c.audit))
}

type artifactsData struct {
	Items []client.AppArtifact
	Next  string
	Trust string
}

func (c *Console) artifacts(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	d := artifactsData{Trust: r.URL.Query().Get("trust_state")}
	items, next, err := q.api.ListArtifacts(r.Context(), q.view.ProjectID, client.ArtifactFilter{TrustState: d.Trust, Cursor: r.URL.Query().Get("cursor"), Limit: 50})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d.Items, d.Next = items, next
	c.render(w, r, http.StatusOK, "artifacts", page{Title: "Artifacts", Session: q.view, Data: d})
}

type saData struct {
	Items    []client.ServiceAccount
	Next     string
	Roles    []string
	CanWrite bool
	Created  *client.IssuedServiceAccountKey
	KeyFile  string
}

func (c *Console) saData(r *http.Request, q *req) (saData, error) {
	d := saData{Roles: iam.RoleNames(), CanWrite: q.view.Can(iam.PermSAWrite)}
	l, err := q.api.ListServiceAccounts(r.Context(), q.view.ProjectID, 50, r.URL.Query().Get("cursor"))
	d.Items, d.Next = l.Items, l.NextCursor
	return d, err
}

func (c *Console) serviceAccounts(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	d, err := c.saData(r, q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "serviceaccounts", page{Title: "Service accounts", Session: q.view, Data: d})
}

// createServiceAccount creates an account and shows its private key once:
// the answer is not stored, and the page is not cached.
func (c *Console) createServiceAccount(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	in := client.CreateServiceAccountRequest{Name: strings.TrimSpace(r.PostFormValue("name")), Slug: strings.TrimSpace(r.PostFormValue("slug")),
		Description: r.PostFormValue("description"), Roles: r.PostForm["roles"]}
	created, err := q.api.CreateServiceAccount(r.Context(), q.view.ProjectID, in)
	d, lerr := c.saData(r, q)
	if lerr != nil {
		c.fail(w, r, lerr)
		return
	}
	if err != nil {
		ae, _ := errorFor(err)
		if ae == nil || ae.Status >= 500 {
			c.fail(w, r, err)
			return
		}
		c.render(w, r, ae.Status, "serviceaccounts", page{Title: "Service accounts", Session: q.view, Error: ae, Data: d})
		return
	}
	d.Created = &created
	if created.PrivateKeyPEM != "" {
		kf := map[string]string{"type": "service_account", "service_account_id": created.ID, "project_id": created.ProjectID,
			"key_id": created.KeyID, "private_key": created.PrivateKeyPEM, "token_url": created.TokenURL}
		b, _ := json.MarshalIndent(kf, "", "  ")
		d.KeyFile = string(b)
	}
	c.render(w, r, http.StatusCreated, "serviceaccounts", page{Title: "Service accounts", Session: q.view, Data: d,
		Flash: "Service account created. Its key is shown once, below: save it now."})
}

func (c *Console) serviceAccountAction(w http.ResponseWriter, r *http.Request, q *req) {
	var err error
	switch r.PathValue("action") {
	case "disable":
		_, err = q.api.DisableServiceAccount(r.Context(), q.view.ProjectID, r.PathValue("id"))
	case "enable":
		_, err = q.api.EnableServiceAccount(r.Context(), q.view.ProjectID, r.PathValue("id"))
	default:
		c.render(w, r, http.StatusNotFound, "notfound", page{Title: "Not found", Session: q.view})
		return
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/service-accounts", http.StatusSeeOther)
}

// bar is one day of the cost chart.
type bar struct {
	Day          string
	Amount       string
	X, Y, H, W   float64
	LabelX       float64
	AmountMicros *big.Int
}

type usageData struct {
	Days     int
	Currency string
	Total    string
	Bars     []bar
	Max      string
	Groups   []usageRow
	CanGroup bool
	Empty    bool
}

type usageRow struct {
	Keys     map[string]string
	Quantity string
	Records  int64
}

// money formats micro-units of a currency.
func money(m *big.Int, currency string) string {
	if m == nil {
		m = new(big.Int)
	}
	r := new(big.Rat).SetFrac(m, big.NewInt(1_000_000))
	return r.FloatString(2) + " " + currency
}

func (c *Console) usage(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	days, _ := strconv.Atoi(r.URL.Query().Get("days"))
	if days <= 0 || days > 90 {
		days = 14
	}
	d := usageData{Days: days, Empty: true}
	today := c.cfg.Now().UTC().Truncate(24 * time.Hour)
	total, peak := new(big.Int), new(big.Int)
	for i := days - 1; i >= 0; i-- {
		from := today.AddDate(0, 0, -i)
		costs, err := q.api.Costs(r.Context(), client.BillingQuery{ProjectID: q.view.ProjectID, From: from, To: from.AddDate(0, 0, 1)})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		amount := new(big.Int)
		for _, t := range costs.Totals {
			if t.AmountMicros != nil {
				amount.Add(amount, t.AmountMicros)
			}
			d.Currency = t.Currency
			d.Empty = d.Empty && t.Entries == 0
		}
		total.Add(total, amount)
		if amount.Cmp(peak) > 0 {
			peak.Set(amount)
		}
		d.Bars = append(d.Bars, bar{Day: from.Format("Jan 2"), AmountMicros: amount})
	}
	// Server-rendered SVG: bar heights in a 600×160 box.
	const width, height = 600.0, 160.0
	step := width / float64(len(d.Bars))
	for i := range d.Bars {
		b := &d.Bars[i]
		h := 0.0
		if peak.Sign() > 0 {
			f, _ := new(big.Rat).SetFrac(b.AmountMicros, peak).Float64()
			h = f * (height - 20)
		}
		b.X, b.W, b.H, b.Y, b.LabelX = float64(i)*step+2, step-4, h, height-h, float64(i)*step+step/2
		b.Amount = money(b.AmountMicros, d.Currency)
	}
	d.Total, d.Max = money(total, d.Currency), money(peak, d.Currency)
	if q.view.Can(iam.PermBillingUsageRead) {
		d.CanGroup = true
		g, err := q.api.GroupUsage(r.Context(), client.BillingQuery{ProjectID: q.view.ProjectID, From: today.AddDate(0, 0, -(days - 1)),
			GroupBy: []string{"app_slug", "usage_unit"}})
		if err == nil {
			for _, row := range g.Groups {
				qty := "0"
				if row.Quantity != nil {
					qty = row.Quantity.String()
				}
				d.Groups = append(d.Groups, usageRow{Keys: row.Keys, Quantity: qty, Records: row.Records})
			}
		}
	}
	c.render(w, r, http.StatusOK, "usage", page{Title: "Usage and costs", Session: q.view, Data: d})
}

// usageCSV streams the API's CSV export of the project's usage or ledger.
func (c *Console) usageCSV(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	what := r.URL.Query().Get("what")
	if what != "ledger" {
		what = "usage"
	}
	days, _ := strconv.Atoi(r.URL.Query().Get("days"))
	if days <= 0 || days > 90 {
		days = 14
	}
	from := c.cfg.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -(days - 1))
	c.download(w, r, fmt.Sprintf("%s-%s.csv", q.view.Project.Slug, what), "text/csv; charset=utf-8", func(out io.Writer) error {
		return q.api.ExportCSV(r.Context(), what, client.BillingQuery{ProjectID: q.view.ProjectID, From: from}, out)
	})
}

// download answers with what export writes, as a file named name. The
// file's headers go out with its first byte: an export the API refuses
// before that is answered as any refusal is (fail), not as an empty file
// with 200. One that fails part way can only be cut short (net/http closes
// the connection, so the browser sees the download fail).
func (c *Console) download(w http.ResponseWriter, r *http.Request, name, contentType string, export func(io.Writer) error) {
	f := &fileWriter{w: w, name: name, contentType: contentType}
	err := export(f)
	switch {
	case err == nil && !f.started:
		f.start() // an empty file
	case err != nil && !f.started:
		c.fail(w, r, err)
	case err != nil:
		c.cfg.Logger.WarnContext(r.Context(), "console: a download failed part way", "file", name, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// fileWriter sets a download's headers on its first write.
type fileWriter struct {
	w                 http.ResponseWriter
	name, contentType string
	started           bool
}

func (f *fileWriter) start() {
	f.started = true
	h := f.w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, f.name))
	h.Set("Cache-Control", "no-store")
	f.w.WriteHeader(http.StatusOK)
}

func (f *fileWriter) Write(p []byte) (int, error) {
	if !f.started {
		f.start()
	}
	return f.w.Write(p)
}

type budgetData struct {
	Budget   client.Budget
	CanWrite bool
	Spend    string
	Limit    string
}

func (c *Console) budgetData(r *http.Request, q *req) (budgetData, error) {
	b, err := q.api.GetBudget(r.Context(), q.view.ProjectID)
	d := budgetData{Budget: b, CanWrite: q.view.Can(iam.PermBillingBudgetWrite), Spend: money(big.NewInt(b.SpendMicros), b.Currency)}
	if b.SpendLimitMicros != nil {
		d.Limit = new(big.Rat).SetFrac64(*b.SpendLimitMicros, 1_000_000).FloatString(2)
	}
	return d, err
}

func (c *Console) budget(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	d, err := c.budgetData(r, q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "budget", page{Title: "Budget", Session: q.view, Data: d})
}

// putBudget sets the project's budget. Empty limits mean none; the spend
// limit is entered in currency units.
func (c *Console) putBudget(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	in := client.BudgetInput{Period: r.PostFormValue("period")}
	var bad string
	if v := strings.TrimSpace(r.PostFormValue("gpu_quota")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			bad = "GPU quota must be a whole number"
		}
		in.GPUQuota = &n
	}
	if v := strings.TrimSpace(r.PostFormValue("spend_limit")); v != "" {
		rat, ok := new(big.Rat).SetString(v)
		if !ok {
			bad = "the spend limit must be a number, like 250 or 99.50"
		} else {
			m := new(big.Rat).Mul(rat, big.NewRat(1_000_000, 1))
			if !m.IsInt() || !m.Num().IsInt64() {
				bad = "the spend limit has more than 6 decimals or is too large"
			} else {
				n := m.Num().Int64()
				in.SpendLimitMicros = &n
			}
		}
	}
	if v := strings.TrimSpace(r.PostFormValue("soft_threshold_percent")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			bad = "the warning threshold must be a whole percentage"
		}
		in.SoftThresholdPercent = &n
	}
	var err error
	if bad == "" {
		_, err = q.api.PutBudget(r.Context(), q.view.ProjectID, in)
	}
	d, gerr := c.budgetData(r, q)
	if gerr != nil {
		c.fail(w, r, gerr)
		return
	}
	switch ae, _ := errorFor(err); {
	case bad != "":
		c.render(w, r, http.StatusUnprocessableEntity, "budget", page{Title: "Budget", Session: q.view, Data: d, Flash: bad})
	case err != nil && (ae == nil || ae.Status >= 500):
		c.fail(w, r, err)
	case err != nil:
		c.render(w, r, ae.Status, "budget", page{Title: "Budget", Session: q.view, Data: d, Error: ae})
	default:
		http.Redirect(w, r, "/budgets", http.StatusSeeOther)
	}
}

type nodesData struct {
	Items []client.Node
	Next  string
	State string
}

func (c *Console) nodes(w http.ResponseWriter, r *http.Request, q *req) {
	d := nodesData{State: r.URL.Query().Get("state")}
	items, next, err := q.api.ListNodes(r.Context(), d.State, r.URL.Query().Get("cursor"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	// The list carries no GPU detail; each node's page does.
	for i := range items {
		if n, err := q.api.GetNode(r.Context(), items[i].ID); err == nil {
			items[i] = n
		}
	}
	d.Items, d.Next = items, next
	c.render(w, r, http.StatusOK, "nodes", page{Title: "Nodes", Session: q.view, Data: d})
}

type auditRow struct {
	ID            string          `json:"id"`
	OccurredAt    string          `json:"occurred_at"`
	ActorType     string          `json:"actor_type"`
	ActorID       string          `json:"actor_id"`
	Action        string          `json:"action"`
	ResourceType  string          `json:"resource_type"`
	ResourceID    string          `json:"resource_id"`
	Outcome       string          `json:"outcome"`
	CorrelationID string          `json:"correlation_id"`
	ProjectID     string          `json:"project_id"`
	After         json.RawMessage `json:"after"`
}

type auditData struct {
	Items   []auditRow
	Next    string
	Filters map[string]string
	// Query is the filters as a query string, for the next page's link:
	// a URL part already encoded (html/template would encode its & and =
	// again, and the next page would lose the filters).
	Query template.URL
}

var auditFilters = []string{"action", "actor_id", "resource_type", "resource_id", "outcome", "correlation_id", "project_id", "org_id"}

func (c *Console) audit(w http.ResponseWriter, r *http.Request, q *req) {
	qv := url.Values{"limit": {"50"}}
	d := auditData{Filters: map[string]string{}}
	for _, f := range auditFilters {
		if v := strings.TrimSpace(r.URL.Query().Get(f)); v != "" {
			qv.Set(f, v)
			d.Filters[f] = v
		}
	}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		qv.Set("cursor", cur)
	}
	// A tenant admin reads their org's audit: filter to it unless asked.
	if !q.view.IsAdmin && qv.Get("org_id") == "" && q.view.Project != nil {
		qv.Set("org_id", q.view.Project.OrgID)
	}
	var out struct {
		Items      []auditRow `json:"items"`
		NextCursor string     `json:"next_cursor"`
	}
	if err := q.api.Do(r.Context(), http.MethodGet, "/api/v1/audit-events", qv, nil, &out); err != nil {
		c.fail(w, r, err)
		return
	}
	d.Items, d.Next = out.Items, out.NextCursor
	qv.Del("cursor")
	qv.Del("limit")
	d.Query = template.URL(qv.Encode()) // encoded by url.Values: safe as a query
	c.render(w, r, http.StatusOK, "audit", page{Title: "Audit log", Session: q.view, Data: d})
}
