package admin

func (s *Server) routeJobs() {}
