package admin

func (s *Server) routeOperations() {}
