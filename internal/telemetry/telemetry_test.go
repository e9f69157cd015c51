package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// received collects what an OTLP receiver got.
type received struct {
	mu      sync.Mutex
	spans   []string // span names
	metrics []string // metric names
	service []string // service.name of every resource
}

func (r *received) addService(res *resourcepb.Resource) {
	for _, kv := range res.GetAttributes() {
		if kv.GetKey() == "service.name" {
			r.service = append(r.service, kv.GetValue().GetStringValue())
		}
	}
}

func (r *received) addTraces(req *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		r.addService(rs.GetResource())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s.GetName())
			}
		}
	}
}

func (r *received) addMetrics(req *collectormetrics.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		r.addService(rm.GetResource())
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				r.metrics = append(r.metrics, m.GetName())
			}
		}
	}
}

func (r *received) snapshot() (spans, metrics, service []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans), slices.Clone(r.metrics), slices.Compact(slices.Sorted(slices.Values(r.service)))
}

// httpReceiver serves OTLP over HTTP (protobuf) on loopback.
func httpReceiver(t *testing.T) (*received, string) {
	t.Helper()
	rec := &received{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var req collectortrace.ExportTraceServiceRequest
		if body, err := io.ReadAll(r.Body); err != nil || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		rec.addTraces(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req collectormetrics.ExportMetricsServiceRequest
		if body, err := io.ReadAll(r.Body); err != nil || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		rec.addMetrics(&req)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

type traceService struct {
	collectortrace.UnimplementedTraceServiceServer
	rec *received
}

func (s *traceService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.rec.addTraces(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	collectormetrics.UnimplementedMetricsServiceServer
	rec *received
}

func (s *metricsService) Export(_ context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	s.rec.addMetrics(req)
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

// grpcReceiver serves OTLP over gRPC on loopback.
func grpcReceiver(t *testing.T) (*received, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &received{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, &traceService{rec: rec})
	collectormetrics.RegisterMetricsServiceServer(srv, &metricsService{rec: rec})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return rec, "http://" + lis.Addr().String()
}

// cleanEnv clears every variable Setup reads and restores the OTel
// globals when the test ends.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, name := range []string{EnvEndpoint, EnvTracesEndpoint, EnvMetricsEndpoint, EnvProtocol, EnvTracesProtocol,
		EnvMetricsProtocol, EnvTracesExporter, EnvMetricsExporter, EnvSDKDisabled, "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(name, "")
	}
	tp, mp, prop := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetMeterProvider(mp)
		otel.SetTextMapPropagator(prop)
	})
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// emit records one span and one counter increment through the globals.
func emit(ctx context.Context, t *testing.T) {
	t.Helper()
	_, span := otel.Tracer("telemetry_test").Start(ctx, "test.span")
	span.End()
	counter, err := otel.Meter("telemetry_test").Int64Counter("test.counter")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(ctx, 1)
}

func TestSetupDoesNothingWithoutEndpoint(t *testing.T) {
	cleanEnv(t)
	tp, mp := otel.GetTracerProvider(), otel.GetMeterProvider()
	shutdown, err := Setup(context.Background(), Config{ServiceName: "feedfetcher", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != tp || otel.GetMeterProvider() != mp {
		t.Error("Setup without an endpoint replaced the global providers")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown = %v", err)
	}
	if got := Enabled(); got != (Signals{}) {
		t.Errorf("Enabled() = %+v, want nothing", got)
	}
}

func TestSetupHTTP(t *testing.T) {
	cleanEnv(t)
	rec, url := httpReceiver(t)
	t.Setenv(EnvEndpoint, url)
	ctx := context.Background()
	shutdown, err := Setup(ctx, Config{ServiceName: "feedfetcher", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(otel.GetTextMapPropagator().Fields(), "traceparent") {
		t.Error("the global propagator does not carry traceparent")
	}
	emit(ctx, t)
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown = %v", err)
	}
	spans, metrics, service := rec.snapshot()
	if diff := cmp.Diff([]string{"test.span"}, spans); diff != "" {
		t.Errorf("spans received (-want +got):\n%s", diff)
	}
	if !slices.Contains(metrics, "test.counter") {
		t.Errorf("metrics received %v, want test.counter", metrics)
	}
	if diff := cmp.Diff([]string{"feedfetcher"}, service); diff != "" {
		t.Errorf("service.name (-want +got):\n%s", diff)
	}
}

func TestSetupGRPC(t *testing.T) {
	cleanEnv(t)
	rec, url := grpcReceiver(t)
	t.Setenv(EnvEndpoint, url)
	t.Setenv(EnvProtocol, "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	ctx := context.Background()
	shutdown, err := Setup(ctx, Config{ServiceName: "feedfetcher", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	emit(ctx, t)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatalf("shutdown = %v", err)
	}
	spans, metrics, service := rec.snapshot()
	if !slices.Contains(spans, "test.span") || !slices.Contains(metrics, "test.counter") {
		t.Errorf("received spans %v and metrics %v, want test.span and test.counter", spans, metrics)
	}
	if diff := cmp.Diff([]string{"from-env"}, service); diff != "" {
		t.Errorf("OTEL_SERVICE_NAME does not win (-want +got):\n%s", diff)
	}
}

func TestSetupOneSignal(t *testing.T) {
	cleanEnv(t)
	rec, url := httpReceiver(t)
	t.Setenv(EnvTracesEndpoint, url+"/v1/traces")
	mp := otel.GetMeterProvider()
	ctx := context.Background()
	shutdown, err := Setup(ctx, Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetMeterProvider() != mp {
		t.Error("a traces endpoint alone installed a meter provider")
	}
	emit(ctx, t)
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans, metrics, service := rec.snapshot()
	if len(spans) != 1 || len(metrics) != 0 || !cmp.Equal(service, []string{ServiceNameDefault}) {
		t.Errorf("received spans %v, metrics %v, services %v; want one span of %q and no metrics", spans, metrics, service, ServiceNameDefault)
	}
}

func TestEnabled(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want Signals
	}{
		{"nothing", nil, Signals{}},
		{"common endpoint", map[string]string{EnvEndpoint: "http://localhost:4318"}, Signals{Traces: true, Metrics: true}},
		{"metrics only", map[string]string{EnvMetricsEndpoint: "http://localhost:4318/v1/metrics"}, Signals{Metrics: true}},
		{"traces exporter none", map[string]string{EnvEndpoint: "http://localhost:4318", EnvTracesExporter: "none"}, Signals{Metrics: true}},
		{"sdk disabled", map[string]string{EnvEndpoint: "http://localhost:4318", EnvSDKDisabled: "TRUE"}, Signals{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if got := Enabled(); got != tt.want {
				t.Errorf("Enabled() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSetupRejectsUnsupportedProtocol(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvEndpoint, "http://localhost:4318")
	t.Setenv(EnvTracesProtocol, "http/json")
	tp := otel.GetTracerProvider()
	shutdown, err := Setup(context.Background(), Config{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), EnvTracesProtocol+`="http/json"`) {
		t.Errorf("Setup = %v, want an error naming %s and its value", err, EnvTracesProtocol)
	}
	if otel.GetTracerProvider() != tp {
		t.Error("a failed Setup replaced the tracer provider")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("the shutdown of a failed Setup = %v", err)
	}
}

func TestResource(t *testing.T) {
	cleanEnv(t)
	ctx := context.Background()
	res, err := Resource(ctx, Config{ServiceName: "feedfetcher", ServiceVersion: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]attribute.Value{}
	for _, kv := range res.Attributes() {
		got[string(kv.Key)] = kv.Value
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]attribute.Value{
		"service.name":            attribute.StringValue("feedfetcher"),
		"service.version":         attribute.StringValue("1.2.3"),
		"host.name":               attribute.StringValue(host),
		"process.pid":             attribute.IntValue(os.Getpid()),
		"process.executable.name": attribute.StringValue(filepath.Base(exe)),
		"process.runtime.name":    attribute.StringValue("go"),
		"process.runtime.version": attribute.StringValue(runtime.Version()),
	}
	// host.id comes from the system (/etc/machine-id on Linux) when it
	// has one.
	if id, err := resource.New(ctx, resource.WithHostID()); err == nil {
		v, _ := id.Set().Value("host.id")
		want["host.id"] = v
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("resource attribute %s = %v (present %t), want %v", k, g.Emit(), ok, w.Emit())
		}
	}
	for _, k := range []string{"service.instance.id", "process.runtime.description", "telemetry.sdk.name"} {
		if got[k].AsString() == "" {
			t.Errorf("resource attribute %s is missing", k)
		}
	}
	for _, k := range []string{"process.command_args", "process.owner", "process.command_line"} {
		if _, ok := got[k]; ok {
			t.Errorf("resource carries %s, which can hold secrets", k)
		}
	}

	// The instance ID is the process's: the same on every call.
	again, err := Resource(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := again.Set().Value("service.instance.id"); v != got["service.instance.id"] {
		t.Errorf("service.instance.id changed between calls: %v, then %v", got["service.instance.id"].Emit(), v.Emit())
	}
	if v, _ := again.Set().Value("service.name"); v.AsString() != ServiceNameDefault {
		t.Errorf("service.name without a configured name = %q, want %q", v.AsString(), ServiceNameDefault)
	}
}

func TestResourceEnvironmentWins(t *testing.T) {
	cleanEnv(t)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "host.name=from-env,service.instance.id=instance-7,deployment.environment.name=test")
	t.Setenv("OTEL_SERVICE_NAME", "svc-from-env")
	res, err := Resource(context.Background(), Config{ServiceName: "feedfetcher"})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"host.name":                   "from-env",
		"service.instance.id":         "instance-7",
		"deployment.environment.name": "test",
		"service.name":                "svc-from-env",
	} {
		if v, _ := res.Set().Value(attribute.Key(k)); v.AsString() != want {
			t.Errorf("resource attribute %s = %q, want %q from the environment", k, v.AsString(), want)
		}
	}
	if v, _ := res.Set().Value("process.pid"); v.AsInt64() != int64(os.Getpid()) {
		t.Errorf("process.pid = %d, want %d beside the environment's attributes", v.AsInt64(), os.Getpid())
	}
}

func TestExporting(t *testing.T) {
	cleanEnv(t)
	_, url := httpReceiver(t)
	t.Setenv(EnvEndpoint, url)
	t.Setenv(EnvMetricsExporter, "none")
	ctx := context.Background()
	if got := Exporting(); got != (Signals{}) {
		t.Errorf("Exporting() before Setup = %+v, want nothing", got)
	}
	shutdown, err := Setup(ctx, Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Exporting(), (Signals{Traces: true}); got != want {
		t.Errorf("Exporting() with OTEL_METRICS_EXPORTER=none = %+v, want %+v", got, want)
	}
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := Exporting(); got != (Signals{}) {
		t.Errorf("Exporting() after shutdown = %+v, want nothing", got)
	}
}

func TestSignalsString(t *testing.T) {
	for _, tt := range []struct {
		s    Signals
		want string
	}{
		{Signals{}, "nothing"},
		{Signals{Traces: true}, "traces"},
		{Signals{Metrics: true}, "metrics"},
		{Signals{Traces: true, Metrics: true}, "traces and metrics"},
	} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.s, got, tt.want)
		}
	}
}
