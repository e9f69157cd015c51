package admin

func (s *Server) routeRuns() {}
