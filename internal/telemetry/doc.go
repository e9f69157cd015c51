// Package telemetry sets up OpenTelemetry export for braid's programs (the
// braid CLI and the bundled example) from the standard OTEL_* environment
// variables. Libraries never call it: braid's packages use the global OTel
// API, or the providers given in their Config.
//
// # When it exports
//
// Setup does nothing, and returns a shutdown function that does nothing,
// unless an OTLP endpoint is configured: OTEL_EXPORTER_OTLP_ENDPOINT for
// both signals, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT for one each. OTEL_SDK_DISABLED=true
// turns everything off, and OTEL_TRACES_EXPORTER=none or
// OTEL_METRICS_EXPORTER=none one signal.
//
// # Protocol
//
// OTEL_EXPORTER_OTLP_PROTOCOL (or the per-signal
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL and OTEL_EXPORTER_OTLP_METRICS_PROTOCOL)
// picks the exporter: "http/protobuf", the default, usually on port 4318, or
// "grpc", usually on port 4317. The exporters read the other variables
// themselves: headers, timeouts, TLS certificates, compression. With
// http/protobuf, OTEL_EXPORTER_OTLP_ENDPOINT is a base URL such as
// http://localhost:4318, to which /v1/traces and /v1/metrics are appended;
// the per-signal endpoints are used as given.
//
// # What it sets
//
// A tracer provider with a batch span processor (OTEL_BSP_* apply) and the
// sampler of OTEL_TRACES_SAMPLER, a meter provider with a periodic reader
// (OTEL_METRIC_EXPORT_INTERVAL applies, 60 s by default), both with the
// resource of [Resource], become the OTel globals, together with the W3C
// trace-context and baggage propagators and an error handler that logs
// export errors through slog. The shutdown function flushes what is
// buffered and stops the exporters. [Exporting] says which signals are
// exported, for a program to tell its user; [Enabled] only says which the
// environment asks for.
//
// # The resource
//
// The resource names the service (Config.ServiceName, service.version),
// the instance (service.instance.id, random per process), the host
// (host.name, and host.id where the system has one) and the process
// (process.pid, process.executable.name, process.runtime.name, .version
// and .description), and the OTel SDK. OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME are merged last and win. A trace viewer tells the
// processes of one trace apart by the host and the process: without them,
// Jaeger takes the spans of a run's turns, which run in several
// processes, for one clock, and warns of a clock skew that is not there.
// The process's command line and owner are left out, since they can
// carry secrets.
package telemetry
