package devstack

// UserNames are the development users' names, in the order dev.json lists
// them (for the command line's completion and messages).
func UserNames() []string {
	names := make([]string, len(devUsers))
	for i, u := range devUsers {
		names[i] = u.name
	}
	return names
}
