package admin

import "net/http"

// route is one API route: its pattern, its handler, and what the OpenAPI
// document says of it.
type route struct {
	// Method and Path form the ServeMux pattern, as "GET /api/runs/{id}".
	Method, Path string
	// Summary is one line for the OpenAPI document.
	Summary string
	// Tag groups routes in the OpenAPI document: runs, jobs, dispatch,
	// schedules, recurring, leases, queues, events.
	Tag string
	// Mutates marks a route that changes something: it needs the admin
	// role, and writes an audit line.
	Mutates bool
	// Query lists the query parameters the route reads.
	Query []Param
	// Body is a value of the request body's type, or nil for none.
	Body any
	// Response is a value of the response body's type (status 200, or
	// Status when set).
	Response any
	// Status is the success status when it is not 200.
	Status int
	// Also lists the statuses the route answers besides its success and
	// those every route may (400, 401, 404, 413, 422, 500, and 403 for a
	// route that mutates), each with when it does.
	Also map[int]string
	// Handle serves the route. A returned error is written as JSON; see
	// writeError.
	Handle func(w http.ResponseWriter, r *http.Request) error
}

// Param is a query parameter of a route.
type Param struct {
	Name, Type, Description string // Type: string, integer, number, boolean
}

// Paging parameters, shared by every list route.
var pagingParams = []Param{
	{Name: "limit", Type: "integer", Description: "the most items to return (1 to 1000, default 100)"},
	{Name: "offset", Type: "integer", Description: "items to skip (0 or more, default 0)"},
}

// add registers rt on the server's mux.
func (s *Server) add(rt *route) {
	s.routes = append(s.routes, rt)
	s.mux.HandleFunc(rt.Method+" "+rt.Path, func(w http.ResponseWriter, r *http.Request) {
		if rt.Mutates && roleOf(r.Context()) != RoleAdmin {
			writeError(w, r, errorf(http.StatusForbidden, "forbidden: %s %s changes state and needs an admin token; this token is read-only", rt.Method, rt.Path))
			return
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			writeError(w, r, errorf(http.StatusRequestEntityTooLarge, "request body too large: %d bytes; the limit is %d", r.ContentLength, s.cfg.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		if err := rt.Handle(w, r); err != nil {
			writeError(w, r, s.apiErr(err))
		}
	})
}

// routeAll registers every route. Each group of routes lives in the file
// of its concern.
func (s *Server) routeAll() {
	s.routeRuns()
	s.routeJobs()
	s.routeDispatch()
	s.routeSchedules()
	s.routeRecurring()
	s.routeOperations()
	s.routeEvents()
	s.routeOpenAPI()
	s.routeDashboard()
}
