package admin

func (s *Server) routeSchedules() {}
