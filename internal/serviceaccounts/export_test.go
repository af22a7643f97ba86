package serviceaccounts

// SetRolePermissions replaces the role → permissions table the
// no-escalation check reads (tests only).
func (s *Service) SetRolePermissions(f func(role string) []string) { s.permsOf.Store(&f) }
