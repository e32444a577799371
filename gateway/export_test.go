package gateway

// RefusedCallers is how many callers p remembers a final mint refusal of.
func RefusedCallers(p *Pool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused.len()
}
