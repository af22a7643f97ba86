package billing

import "context"

// The ingest steps after parsing, for the external ingest benchmark.

func (s *Service) CheckEvents(inst Instance, events []UsageEvent) error {
	return s.checkEvents(inst, events)
}

func (s *Service) StoreEvents(ctx context.Context, inst Instance, events []UsageEvent) (IngestResult, error) {
	at := make([]attribution, len(events))
	for i := range at {
		at[i] = attribution{org: inst.OrgID, project: inst.ProjectID}
	}
	return s.storeEvents(ctx, inst, events, at)
}
