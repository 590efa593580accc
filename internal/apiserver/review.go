package apiserver

// review answers create on a virtual resource (access reviews). No virtual
// resource is registered yet; authorization adds them.
func (s *Server) review(req *request) error {
	return methodNotAllowed(req.r.Method)
}
