package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/google/uuid"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ServiceNameDefault is the service name when neither Config.ServiceName
// nor the environment gives one.
const ServiceNameDefault = "braid"

// Protocols that OTEL_EXPORTER_OTLP_PROTOCOL and its per-signal variants
// accept.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Names of the environment variables Setup reads itself; the exporters and
// the SDK read the others.
const (
	EnvEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	EnvProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	EnvTracesExporter  = "OTEL_TRACES_EXPORTER"
	EnvMetricsExporter = "OTEL_METRICS_EXPORTER"
	EnvSDKDisabled     = "OTEL_SDK_DISABLED"
)

// Config configures Setup. The zero value is usable: every field documents
// its default.
type Config struct {
	// ServiceName is the service.name of the resource, unless
	// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES sets one. It defaults
	// to ServiceNameDefault.
	ServiceName string

	// ServiceVersion is the service.version of the resource; empty leaves
	// it out.
	ServiceVersion string

	// Logger receives export errors, through OTel's global error handler.
	// It defaults to slog.Default().
	Logger *slog.Logger
}

// Signals says which signals the environment asks to export.
type Signals struct {
	Traces  bool
	Metrics bool
}

// Enabled returns which signals the environment asks to export over OTLP:
// a signal is on when its endpoint (or the common one) is set, unless
// OTEL_SDK_DISABLED is true or its OTEL_*_EXPORTER is "none".
func Enabled() Signals {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(EnvSDKDisabled)), "true") {
		return Signals{}
	}
	common := env(EnvEndpoint) != ""
	return Signals{
		Traces:  (common || env(EnvTracesEndpoint) != "") && !exporterNone(EnvTracesExporter),
		Metrics: (common || env(EnvMetricsEndpoint) != "") && !exporterNone(EnvMetricsExporter),
	}
}

func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }

func exporterNone(name string) bool { return strings.EqualFold(env(name), "none") }

// protocol returns the OTLP protocol of a signal and the variable that set
// it, or an error naming the variable when its value is not supported.
func protocol(signalVar string) (string, error) {
	name, value := signalVar, env(signalVar)
	if value == "" {
		name, value = EnvProtocol, env(EnvProtocol)
	}
	switch strings.ToLower(value) {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	default:
		return "", fmt.Errorf("telemetry: %s=%q is not supported; use %q or %q", name, value, ProtocolHTTP, ProtocolGRPC)
	}
}

// exporting holds the signals of the Setup in force, nil when none is.
var exporting atomic.Pointer[Signals]

// Exporting returns the signals that Setup installed exporters for and
// whose shutdown function has not yet been called: what the program
// actually exports, as opposed to what the environment asks for
// (Enabled). It is empty when Setup was not called, changed nothing, or
// failed.
func Exporting() Signals {
	if s := exporting.Load(); s != nil {
		return *s
	}
	return Signals{}
}

// String names the signals, as in "traces and metrics", "traces",
// "metrics" or "nothing".
func (s Signals) String() string {
	switch {
	case s.Traces && s.Metrics:
		return "traces and metrics"
	case s.Traces:
		return "traces"
	case s.Metrics:
		return "metrics"
	}
	return "nothing"
}

// instanceID is this process's service.instance.id: one random UUID per
// process, so that the spans of two processes on one host, or of a
// process and its restart, are told apart.
var instanceID = uuid.NewString()

// Resource returns the resource that Setup gives both providers. It
// names the service (Config.ServiceName, or ServiceNameDefault, and
// Config.ServiceVersion), the instance (service.instance.id, random per
// process), the host (host.name, and host.id where the system provides
// one, such as /etc/machine-id), the process (process.pid,
// process.executable.name, process.runtime.name, .version and
// .description) and the OTel SDK. OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME are merged last, so they win over every other source.
// The process's command line and owner are left out: they can carry
// secrets.
//
// A trace viewer such as Jaeger tells processes apart by these
// attributes; without the host's and the process's, it mistakes spans of
// different processes for one clock and warns of a skew that is not
// there.
func Resource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	name := cfg.ServiceName
	if name == "" {
		name = ServiceNameDefault
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", name),
		attribute.String("service.instance.id", instanceID),
	}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.ServiceVersion))
	}
	// A host ID is not available everywhere (a container without
	// /etc/machine-id, say): it is added only when found.
	if id, err := resource.New(ctx, resource.WithHostID()); err == nil {
		attrs = append(attrs, id.Attributes()...)
	}
	// Later detectors win: the environment overrides everything else.
	res, err := resource.New(ctx,
		resource.WithAttributes(attrs...),
		resource.WithHost(),
		resource.WithProcessPID(),
		resource.WithProcessExecutableName(),
		resource.WithProcessRuntimeName(),
		resource.WithProcessRuntimeVersion(),
		resource.WithProcessRuntimeDescription(),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: building the resource: %w", err)
	}
	return res, nil
}

// Setup configures OTLP export of traces and metrics from the OTEL_*
// environment variables and installs the providers as the OTel globals. It
// returns a function that flushes and stops the exporters; call it before
// the program exits. When the environment configures no endpoint it
// changes nothing and returns a function that does nothing. A protocol it
// does not support is an error naming the variable; nothing is installed
// then.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	on := Enabled()
	if !on.Traces && !on.Metrics {
		return nothing, nil
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = ServiceNameDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var traceProto, metricProto string
	if on.Traces {
		if traceProto, err = protocol(EnvTracesProtocol); err != nil {
			return nothing, err
		}
	}
	if on.Metrics {
		if metricProto, err = protocol(EnvMetricsProtocol); err != nil {
			return nothing, err
		}
	}

	res, err := Resource(ctx, cfg)
	if err != nil {
		return nothing, err
	}

	var shutdowns []func(context.Context) error
	shutdownAll := func(ctx context.Context) error {
		var errs []error
		for _, f := range shutdowns {
			errs = append(errs, f(ctx))
		}
		return errors.Join(errs...)
	}

	var tp *sdktrace.TracerProvider
	if on.Traces {
		var exp sdktrace.SpanExporter
		if traceProto == ProtocolGRPC {
			exp, err = otlptracegrpc.New(ctx)
		} else {
			exp, err = otlptracehttp.New(ctx)
		}
		if err != nil {
			return nothing, fmt.Errorf("telemetry: creating the OTLP trace exporter (%s): %w", traceProto, err)
		}
		tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		shutdowns = append(shutdowns, tp.Shutdown)
	}
	var mp *sdkmetric.MeterProvider
	if on.Metrics {
		var exp sdkmetric.Exporter
		if metricProto == ProtocolGRPC {
			exp, err = otlpmetricgrpc.New(ctx)
		} else {
			exp, err = otlpmetrichttp.New(ctx)
		}
		if err != nil {
			_ = shutdownAll(ctx)
			return nothing, fmt.Errorf("telemetry: creating the OTLP metric exporter (%s): %w", metricProto, err)
		}
		mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		shutdowns = append(shutdowns, mp.Shutdown)
	}

	if tp != nil {
		otel.SetTracerProvider(tp)
	}
	if mp != nil {
		otel.SetMeterProvider(mp)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	logger := cfg.Logger
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("telemetry: export failed", slog.String("error", err.Error()))
	}))
	logger.Info("telemetry: exporting over OTLP", slog.Bool("traces", on.Traces), slog.Bool("metrics", on.Metrics),
		slog.String("traces_protocol", traceProto), slog.String("metrics_protocol", metricProto))
	exporting.Store(&on)
	return func(ctx context.Context) error {
		exporting.CompareAndSwap(&on, nil)
		if err := shutdownAll(ctx); err != nil {
			return fmt.Errorf("telemetry: shutting down: %w", err)
		}
		return nil
	}, nil
}
