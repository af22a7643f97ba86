package console

import (
	"net/http"
	"strings"

	"github.com/gpuaas/gpuaas/client"
	"github.com/gpuaas/gpuaas/internal/bytesize"
	"github.com/gpuaas/gpuaas/internal/iam"
)

// storageData is the project's storage page: one row per store, and the
// overrides' form for platform admins.
type storageData struct {
	Stores []storeRow
	// ETag is the version of the overrides the page was read at: the form
	// sends it back, so a change made since by someone else is not
	// silently overwritten (the API answers 412).
	ETag   string
	CanSet bool
}

// storeRow is one store's quota in force, its source and its use, in
// figures a person reads (exact bytes beside them).
type storeRow struct {
	Name      string // "Blobs", "Registry"
	Field     string // the form field of its override
	Flag      string // the server flag of the platform's default
	Quota     string // "" when none
	Source    string // "project" or "platform"
	Used      string
	UsedBytes int64
	Over      bool
	Parts     []storePart
	Override  string // the project's own quota, as the form shows it ("" when none)
}

type storePart struct{ Name, Size string }

func storageView(v client.ProjectStorage, canSet bool) storageData {
	row := func(name, field, flag string, quota *int64, source string, used int64, over bool, parts []storePart) storeRow {
		r := storeRow{Name: name, Field: field, Flag: flag, Source: source, Used: bytesize.Format(used), UsedBytes: used, Over: over, Parts: parts}
		if quota != nil {
			r.Quota = bytesize.Format(*quota)
			if source == "project" {
				r.Override = bytesize.Exact(*quota)
			}
		}
		return r
	}
	b, g := v.Blobs, v.Registry
	return storageData{ETag: v.ETag, CanSet: canSet, Stores: []storeRow{
		row("Blobs", "blob_quota", "--project-blob-quota-bytes", b.QuotaBytes, b.QuotaSource, b.UsedBytes, b.OverQuota, []storePart{
			{"registered", bytesize.Format(b.RegisteredBytes)}, {"committed, not registered", bytesize.Format(b.UnregisteredBytes)},
			{"uploading", bytesize.Format(b.UploadingBytes)}}),
		row("Registry", "registry_quota", "--project-registry-quota-bytes", g.QuotaBytes, g.QuotaSource, g.UsedBytes, g.OverQuota, []storePart{
			{"committed", bytesize.Format(g.CommittedBytes)}, {"held by pushes", bytesize.Format(g.HeldBytes)}}),
	}}
}

// storageData reads the project's storage. Only a platform admin may set
// a quota (a project's own admins must not raise theirs), so only they
// get the form; the API refuses anyone else's post all the same.
func (c *Console) storageData(r *http.Request, q *req) (storageData, error) {
	v, err := q.api.GetProjectStorage(r.Context(), q.view.ProjectID)
	return storageView(v, q.view.Can(iam.PermPlatformAdminOnly)), err
}

func (c *Console) storage(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	d, err := c.storageData(r, q)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "storage", page{Title: "Storage", Session: q.view, Data: d})
}

// putStorageQuota sets or clears both overrides from the form: an empty
// field puts that quota back to the platform's default. It sends the
// page's ETag as If-Match: if the quotas changed since the page was
// loaded, nothing is changed and the page says so with the quotas now.
func (c *Console) putStorageQuota(w http.ResponseWriter, r *http.Request, q *req) {
	if c.needProject(w, r, q) {
		return
	}
	var in client.ProjectStorageQuotaInput
	var bad []string
	for _, f := range []struct {
		field, name string
		to          **int64
	}{{"blob_quota", "the blob quota", &in.BlobQuotaBytes}, {"registry_quota", "the registry quota", &in.RegistryQuotaBytes}} {
		v := strings.TrimSpace(r.PostFormValue(f.field))
		if v == "" {
			continue
		}
		n, err := bytesize.Parse(v)
		if err != nil {
			bad = append(bad, f.name+" "+v+": "+err.Error())
			continue
		}
		*f.to = &n
	}
	var err error
	if bad == nil {
		var opts []client.RequestOption
		if tag := r.PostFormValue("etag"); tag != "" {
			opts = append(opts, client.WithIfMatch(tag))
		}
		_, err = q.api.PutProjectStorageQuota(r.Context(), q.view.ProjectID, in, opts...)
	}
	d, gerr := c.storageData(r, q)
	if gerr != nil {
		c.fail(w, r, gerr)
		return
	}
	switch ae, _ := errorFor(err); {
	case bad != nil:
		c.render(w, r, http.StatusUnprocessableEntity, "storage", page{Title: "Storage", Session: q.view, Data: d, Flash: strings.Join(bad, "; ")})
	case err != nil && (ae == nil || ae.Status >= 500):
		c.fail(w, r, err)
	case err != nil && ae.Status == http.StatusPreconditionFailed:
		// The API's message speaks of ETags; a person needs to know
		// what happened and that the page now shows the quotas as they are.
		stale := *ae
		stale.Message = "Someone changed this project's storage quotas after this page was loaded, so your change was not saved. " +
			"The quotas shown below are the ones in force now: enter your change again if it still applies."
		c.render(w, r, ae.Status, "storage", page{Title: "Storage", Session: q.view, Data: d, Error: &stale})
	case err != nil:
		c.render(w, r, ae.Status, "storage", page{Title: "Storage", Session: q.view, Data: d, Error: ae})
	default:
		http.Redirect(w, r, "/storage", http.StatusSeeOther)
	}
}
