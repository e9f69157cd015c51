package admin

func (s *Server) routeDispatch() {}
