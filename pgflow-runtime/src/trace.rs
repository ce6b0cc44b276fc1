//! Trace propagation (feature `otel`): a run records the W3C trace context of the span that
//! started it (`traceparent`, then `tracestate` after a newline when there is one), and each
//! task span of the run continues that trace, so one run is one trace across workers and
//! machines. Spans go to OpenTelemetry through `tracing-opentelemetry`: install its layer with
//! your tracer provider; without the layer (or without the feature) nothing is recorded and
//! the task spans stand alone.

/// The current span's W3C trace context, as a run stores it; `None` outside a span that
/// OpenTelemetry traces, or without the `otel` feature.
pub fn current_trace_context() -> Option<String> {
    #[cfg(feature = "otel")]
    {
        otel::current()
    }
    #[cfg(not(feature = "otel"))]
    {
        None
    }
}

/// Makes `span` continue the trace `trace_context` names (a run's, as stored); a no-op without
/// a context or without the `otel` feature.
pub fn continue_trace(span: &tracing::Span, trace_context: Option<&str>) {
    #[cfg(feature = "otel")]
    if let Some(context) = trace_context {
        otel::continue_in(span, context);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, trace_context);
}

#[cfg(feature = "otel")]
mod otel {
    use std::collections::HashMap;

    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    const TRACEPARENT: &str = "traceparent";
    const TRACESTATE: &str = "tracestate";

    pub(super) fn current() -> Option<String> {
        let context = tracing::Span::current().context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        let parent = carrier.remove(TRACEPARENT)?;
        Some(match carrier.remove(TRACESTATE).filter(|s| !s.is_empty()) {
            Some(state) => format!("{parent}\n{state}"),
            None => parent,
        })
    }

    pub(super) fn continue_in(span: &tracing::Span, stored: &str) {
        let mut carrier = HashMap::new();
        let mut lines = stored.splitn(2, '\n');
        if let Some(parent) = lines.next() {
            carrier.insert(TRACEPARENT.to_owned(), parent.to_owned());
        }
        if let Some(state) = lines.next() {
            carrier.insert(TRACESTATE.to_owned(), state.to_owned());
        }
        let context = TraceContextPropagator::new().extract(&carrier);
        if context.span().span_context().is_valid() {
            let _ = span.set_parent(context);
        }
    }
}
