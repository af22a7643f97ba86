package compose

import (
	"fmt"
	"testing"

	"github.com/moby/moby/api/types/container"
)

func TestStopOrder(t *testing.T) {
	c := func(svc, deps string) container.Summary {
		return container.Summary{ID: svc + "-1", Labels: map[string]string{LabelService: svc, LabelDependsOn: deps}}
	}
	for name, tc := range map[string]struct {
		cs   []container.Summary
		want string
	}{
		// web and worker need db, db needs volume-init; cache stands alone.
		"chain": {[]container.Summary{
			c("db", "volume-init:service_completed_successfully:false"), c("web", "db:service_started:false,cache:service_started:false"),
			c("worker", "db:service_healthy:true"), c("cache", ""), c("volume-init", ""),
		}, "[[web-1 worker-1] [cache-1 db-1] [volume-init-1]]"},
		// Containers from before the label: no order, one step.
		"unlabelled": {[]container.Summary{
			{ID: "a-1", Labels: map[string]string{LabelService: "a"}}, {ID: "b-1", Labels: map[string]string{LabelService: "b"}},
		}, "[[a-1 b-1]]"},
		// A cycle (Up refuses one) still stops everything.
		"cycle": {[]container.Summary{c("a", "b:service_started:false"), c("b", "a:service_started:false"), c("front", "a:service_started:false")},
			"[[front-1] [a-1 b-1]]"},
		"empty": {nil, "[]"},
	} {
		if got := fmt.Sprint(stopOrder(tc.cs)); got != tc.want {
			t.Errorf("%s: %s, want %s", name, got, tc.want)
		}
	}
}
