package admin

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The OpenAPI document is generated from the route table, so it cannot
// drift from the routes the server serves.

func (s *Server) routeOpenAPI() {
	s.add(&route{
		Method: "GET", Path: "/api/openapi.json", Tag: "meta",
		Summary:  "This API's OpenAPI 3.1 document",
		Response: map[string]any{},
		Handle: func(w http.ResponseWriter, r *http.Request) error {
			writeJSON(w, http.StatusOK, s.openAPI())
			return nil
		},
	})
}

var pathParam = regexp.MustCompile(`\{([a-zA-Z_]+)(\.\.\.)?\}`)

// openAPI builds the document.
func (s *Server) openAPI() map[string]any {
	schemas := map[string]any{}
	g := &schemaGen{defs: schemas}
	paths := map[string]map[string]any{}
	for _, rt := range s.routes {
		if !strings.HasPrefix(rt.Path, "/api/") {
			continue
		}
		op := map[string]any{
			"summary":     rt.Summary,
			"operationId": operationID(rt),
			"tags":        []string{rt.Tag},
		}
		var params []map[string]any
		for _, m := range pathParam.FindAllStringSubmatch(rt.Path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		query := rt.Query
		for _, q := range query {
			params = append(params, map[string]any{"name": q.Name, "in": "query", "description": q.Description, "schema": map[string]any{"type": q.Type}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if rt.Body != nil {
			op["requestBody"] = map[string]any{
				"required": true,
				"content":  map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(rt.Body))}},
			}
		}
		status := rt.Status
		if status == 0 {
			status = http.StatusOK
		}
		responses := map[string]any{}
		ok := map[string]any{"description": http.StatusText(status)}
		if rt.Response != nil {
			ct := "application/json"
			if rt.Path == "/api/events" {
				ct = "text/event-stream"
			}
			ok["content"] = map[string]any{ct: map[string]any{"schema": g.schema(reflect.TypeOf(rt.Response))}}
		}
		responses[strconv.Itoa(status)] = ok
		errRef := map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(errorBody{}))}}}
		for _, st := range []int{400, 401, 404, 413, 422} {
			if st == 413 && rt.Body == nil {
				continue
			}
			e := map[string]any{"description": http.StatusText(st)}
			for k, v := range errRef {
				e[k] = v
			}
			responses[strconv.Itoa(st)] = e
		}
		e := map[string]any{"description": "a fault of the server or its database, logged"}
		for k, v := range errRef {
			e[k] = v
		}
		responses["500"] = e
		if rt.Mutates {
			responses["403"] = map[string]any{"description": "a read-only token on a route that changes state"}
		}
		for st, when := range rt.Also {
			e := map[string]any{"description": when}
			if st >= 400 {
				for k, v := range errRef {
					e[k] = v
				}
			} else if ok["content"] != nil {
				e["content"] = ok["content"]
			}
			responses[strconv.Itoa(st)] = e
		}
		op["responses"] = responses
		p := pathParam.ReplaceAllString(rt.Path, "{$1}")
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		paths[p][strings.ToLower(rt.Method)] = op
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":       "braid admin API",
			"version":     "1",
			"description": "Operate braid: runs, jobs, dead letters, dispatch, schedules, recurring jobs, leases and queues. Every route needs a bearer token; routes that change state need an admin token.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas":         schemas,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
		"security": []map[string]any{{"bearer": []string{}}},
	}
}

// operationID names a route for generated clients: the method and the
// path's words, as getApiRunsById.
func operationID(rt *route) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(rt.Method))
	for _, part := range strings.FieldsFunc(rt.Path, func(r rune) bool { return r == '/' || r == '-' || r == '.' }) {
		if m := pathParam.FindStringSubmatch(part); m != nil {
			part = "by_" + m[1]
		}
		for _, w := range strings.Split(part, "_") {
			if w != "" {
				b.WriteString(strings.ToUpper(w[:1]) + w[1:])
			}
		}
	}
	return b.String()
}

// schemaGen turns Go types into JSON Schemas, naming structs under
// components/schemas.
type schemaGen struct{ defs map[string]any }

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
	durType  = reflect.TypeOf(time.Duration(0))
)

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	if t == nil {
		return map[string]any{}
	}
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case rawType:
		return map[string]any{"description": "any JSON value"}
	case durType:
		return map[string]any{"type": "integer", "description": "nanoseconds"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		name := schemaName(t)
		if _, seen := g.defs[name]; !seen {
			g.defs[name] = map[string]any{} // a placeholder breaks cycles
			props := map[string]any{}
			var required []string
			g.fields(t, props, &required)
			def := map[string]any{"type": "object", "properties": props}
			if len(required) > 0 {
				sort.Strings(required)
				def["required"] = required
			}
			g.defs[name] = def
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}

// fields adds the JSON fields of struct t, embedded structs flattened.
func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props, required)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
		// A pointer is optional, unless its field says it is required (a
		// bool that must be given, as false is a value).
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && (f.Type.Kind() != reflect.Pointer || f.Tag.Get("required") == "true") {
			*required = append(*required, name)
		}
	}
}

// schemaName names a struct type: its name, with a generic type's
// arguments spelled out.
func schemaName(t reflect.Type) string {
	name := t.Name()
	if i := strings.IndexByte(name, '['); i >= 0 {
		args := name[i+1 : len(name)-1]
		parts := strings.Split(args, ",")
		for j, p := range parts {
			if k := strings.LastIndexAny(p, "./"); k >= 0 {
				p = p[k+1:]
			}
			parts[j] = strings.TrimLeft(p, "*[]")
		}
		name = name[:i] + "Of" + strings.Join(parts, "And")
	}
	if name == "" {
		name = "Object"
	}
	if pkg := t.PkgPath(); pkg != "" && !strings.HasSuffix(pkg, "/admin") {
		name = pkg[strings.LastIndexByte(pkg, '/')+1:] + "." + name
	}
	return name
}
