package admin

func (s *Server) routeRecurring() {}
