package conformance

// PropertyNames lists the properties Run checks, in order, for the
// package's external tests.
func PropertyNames() []string {
	names := make([]string, len(properties))
	for i, p := range properties {
		names[i] = p.name
	}
	return names
}
