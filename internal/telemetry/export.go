package telemetry

import (
	"context"
	"fmt"
	"math"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// otlpExporter is otlptrace's exporter with its span transform replaced:
// the OTLP client (otlptracehttp's: its retries, compression, TLS and
// OTEL_EXPORTER_OTLP_* settings) sends what protoSpans builds. otlptrace
// makes three objects per attribute and five per span of every batch;
// protoSpans makes the same messages in a few arrays per batch, which is
// most of what tracing used to add to a request's allocations.
type otlpExporter struct {
	client otlptrace.Client
	mu     sync.Mutex
	// stopped: Shutdown stops the client once.
	stopped bool
}

// newOTLPExporter starts client and exports through it.
func newOTLPExporter(ctx context.Context, client otlptrace.Client) (*otlpExporter, error) {
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &otlpExporter{client: client}, nil
}

// ExportSpans sends spans in one request.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	rs := protoSpans(spans)
	if len(rs) == 0 {
		return nil
	}
	if err := e.client.UploadTraces(ctx, rs); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// Shutdown stops the client; later calls do nothing.
func (e *otlpExporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	return e.client.Stop(ctx)
}

// protoSpans is spans as OTLP messages, grouped by resource and
// instrumentation scope in the order they first appear, each field as
// otlptrace's transform sets it. The messages of the spans, their
// statuses, events, links and top-level attributes live in arrays made
// once per batch.
func protoSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	var n, nEvents, nLinks int
	var a attrArena
	for _, sd := range spans {
		if sd == nil {
			continue
		}
		n++
		a.count(sd.Attributes())
		for _, ev := range sd.Events() {
			nEvents++
			a.count(ev.Attributes)
		}
		for _, l := range sd.Links() {
			nLinks++
			a.count(l.Attributes)
		}
	}
	if n == 0 {
		return nil
	}
	a.make()
	msgs := make([]tracepb.Span, n)
	statuses := make([]tracepb.Status, n)
	// Each span's trace id, span id and parent span id; each link's two.
	ids := make([]byte, 0, n*(16+8+8)+nLinks*(16+8))
	events := make([]tracepb.Span_Event, nEvents)
	eventPtrs := make([]*tracepb.Span_Event, nEvents)
	links := make([]tracepb.Span_Link, nLinks)
	linkPtrs := make([]*tracepb.Span_Link, nLinks)

	type scopeKey struct {
		r  attribute.Distinct
		is instrumentation.Scope
	}
	var out []*tracepb.ResourceSpans
	byResource := map[attribute.Distinct]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	i := 0
	for _, sd := range spans {
		if sd == nil {
			continue
		}
		res, scope := sd.Resource(), sd.InstrumentationScope()
		rKey := res.Equivalent()
		ss, ok := byScope[scopeKey{rKey, scope}]
		if !ok {
			ss = &tracepb.ScopeSpans{Scope: scopeProto(scope), Spans: []*tracepb.Span{}, SchemaUrl: scope.SchemaURL}
			byScope[scopeKey{rKey, scope}] = ss
			rs, seen := byResource[rKey]
			if !seen {
				rs = &tracepb.ResourceSpans{Resource: resourceProto(res), SchemaUrl: res.SchemaURL()}
				byResource[rKey] = rs
				out = append(out, rs)
			}
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}

		s := &msgs[i]
		sc := sd.SpanContext()
		tid, sid := sc.TraceID(), sc.SpanID()
		ids = append(ids, tid[:]...)
		s.TraceId = ids[len(ids)-16 : len(ids) : len(ids)]
		ids = append(ids, sid[:]...)
		s.SpanId = ids[len(ids)-8 : len(ids) : len(ids)]
		s.TraceState = sc.TraceState().String()
		parent := sd.Parent()
		if psid := parent.SpanID(); psid.IsValid() {
			ids = append(ids, psid[:]...)
			s.ParentSpanId = ids[len(ids)-8 : len(ids) : len(ids)]
		}
		s.Flags = spanFlags(sc.TraceFlags(), parent)
		s.Name = sd.Name()
		s.Kind = spanKindProto(sd.SpanKind())
		s.StartTimeUnixNano = unixNano(sd.StartTime().UnixNano())
		s.EndTimeUnixNano = unixNano(sd.EndTime().UnixNano())
		s.Attributes = a.keyValues(sd.Attributes())
		s.DroppedAttributesCount = clampUint32(sd.DroppedAttributes())
		if evs := sd.Events(); len(evs) > 0 {
			s.Events = eventPtrs[:len(evs):len(evs)]
			eventPtrs = eventPtrs[len(evs):]
			for j, ev := range evs {
				e := &events[j]
				e.Name = ev.Name
				e.TimeUnixNano = unixNano(ev.Time.UnixNano())
				e.Attributes = a.keyValues(ev.Attributes)
				e.DroppedAttributesCount = clampUint32(ev.DroppedAttributeCount)
				s.Events[j] = e
			}
			events = events[len(evs):]
		}
		s.DroppedEventsCount = clampUint32(sd.DroppedEvents())
		if ls := sd.Links(); len(ls) > 0 {
			s.Links = linkPtrs[:len(ls):len(ls)]
			linkPtrs = linkPtrs[len(ls):]
			for j, l := range ls {
				pl := &links[j]
				ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
				ids = append(ids, ltid[:]...)
				pl.TraceId = ids[len(ids)-16 : len(ids) : len(ids)]
				ids = append(ids, lsid[:]...)
				pl.SpanId = ids[len(ids)-8 : len(ids) : len(ids)]
				pl.Attributes = a.keyValues(l.Attributes)
				pl.DroppedAttributesCount = clampUint32(l.DroppedAttributeCount)
				pl.Flags = spanFlags(l.SpanContext.TraceFlags(), l.SpanContext)
				s.Links[j] = pl
			}
			links = links[len(ls):]
		}
		s.DroppedLinksCount = clampUint32(sd.DroppedLinks())
		st := sd.Status()
		statuses[i].Code = statusCode(st.Code)
		statuses[i].Message = st.Description
		s.Status = &statuses[i]
		ss.Spans = append(ss.Spans, s)
		i++
	}
	return out
}

// attrArena holds the messages of a batch's top-level attributes: count
// every list first, then make, then keyValues hands out each list's
// messages from the arrays. A nested value (a slice, a map) makes its own.
type attrArena struct {
	n, strs, ints, bools, doubles int
	ptrs                          []*commonpb.KeyValue
	kvs                           []commonpb.KeyValue
	vals                          []commonpb.AnyValue
	strVals                       []commonpb.AnyValue_StringValue
	intVals                       []commonpb.AnyValue_IntValue
	boolVals                      []commonpb.AnyValue_BoolValue
	doubleVals                    []commonpb.AnyValue_DoubleValue
}

func (a *attrArena) count(attrs []attribute.KeyValue) {
	a.n += len(attrs)
	for _, kv := range attrs {
		switch kv.Value.Type() {
		case attribute.STRING:
			a.strs++
		case attribute.INT64:
			a.ints++
		case attribute.BOOL:
			a.bools++
		case attribute.FLOAT64:
			a.doubles++
		}
	}
}

func (a *attrArena) make() {
	a.ptrs = make([]*commonpb.KeyValue, a.n)
	a.kvs = make([]commonpb.KeyValue, a.n)
	a.vals = make([]commonpb.AnyValue, a.n)
	a.strVals = make([]commonpb.AnyValue_StringValue, a.strs)
	a.intVals = make([]commonpb.AnyValue_IntValue, a.ints)
	a.boolVals = make([]commonpb.AnyValue_BoolValue, a.bools)
	a.doubleVals = make([]commonpb.AnyValue_DoubleValue, a.doubles)
}

// keyValues is attrs as OTLP key-values, nil for none.
func (a *attrArena) keyValues(attrs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	out := a.ptrs[:len(attrs):len(attrs)]
	a.ptrs = a.ptrs[len(attrs):]
	for i, kv := range attrs {
		m := &a.kvs[i]
		m.Key = string(kv.Key)
		v := &a.vals[i]
		switch kv.Value.Type() {
		case attribute.STRING:
			a.strVals[0].StringValue = kv.Value.AsString()
			v.Value = &a.strVals[0]
			a.strVals = a.strVals[1:]
		case attribute.INT64:
			a.intVals[0].IntValue = kv.Value.AsInt64()
			v.Value = &a.intVals[0]
			a.intVals = a.intVals[1:]
		case attribute.BOOL:
			a.boolVals[0].BoolValue = kv.Value.AsBool()
			v.Value = &a.boolVals[0]
			a.boolVals = a.boolVals[1:]
		case attribute.FLOAT64:
			a.doubleVals[0].DoubleValue = kv.Value.AsFloat64()
			v.Value = &a.doubleVals[0]
			a.doubleVals = a.doubleVals[1:]
		default:
			v.Value = anyValue(kv.Value).Value
		}
		m.Value = v
		out[i] = m
	}
	a.kvs = a.kvs[len(attrs):]
	a.vals = a.vals[len(attrs):]
	return out
}

// anyValue is v as an OTLP value, made on its own (nested values, the
// resource's and the scope's attributes).
func anyValue(v attribute.Value) *commonpb.AnyValue {
	av := &commonpb.AnyValue{}
	switch v.Type() {
	case attribute.BOOL:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}
	case attribute.INT64:
		av.Value = &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}
	case attribute.FLOAT64:
		av.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}
	case attribute.STRING:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: v.AsString()}
	case attribute.BYTESLICE:
		av.Value = &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}
	case attribute.BOOLSLICE:
		av.Value = arrayOf(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		av.Value = arrayOf(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		av.Value = arrayOf(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		av.Value = arrayOf(v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		av.Value = arrayOf(v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		av.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: keyValuesOf(v.AsMap())}}
	case attribute.EMPTY:
	default:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: "INVALID"}
	}
	return av
}

func arrayOf[T any](vs []T, value func(T) attribute.Value) *commonpb.AnyValue_ArrayValue {
	out := make([]*commonpb.AnyValue, len(vs))
	for i, v := range vs {
		out[i] = anyValue(value(v))
	}
	return &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: out}}
}

// keyValuesOf is attrs as OTLP key-values, each made on its own.
func keyValuesOf(attrs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(attrs))
	for i, kv := range attrs {
		out[i] = &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)}
	}
	return out
}

func resourceProto(r *resource.Resource) *resourcepb.Resource {
	if r == nil {
		return nil
	}
	return &resourcepb.Resource{Attributes: keyValuesOf(r.Attributes())}
}

func scopeProto(s instrumentation.Scope) *commonpb.InstrumentationScope {
	if s == (instrumentation.Scope{}) {
		return nil
	}
	return &commonpb.InstrumentationScope{Name: s.Name, Version: s.Version, Attributes: keyValuesOf(s.Attributes.ToSlice())}
}

// spanFlags: the W3C flags, and whether the parent (or the linked span)
// is remote, which OTLP says it knows.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	flags := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return flags
}

func spanKindProto(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

func statusCode(c codes.Code) tracepb.Status_StatusCode {
	switch c {
	case codes.Ok:
		return tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		return tracepb.Status_STATUS_CODE_ERROR
	}
	return tracepb.Status_STATUS_CODE_UNSET
}

func unixNano(ns int64) uint64 { return uint64(max(0, ns)) }

func clampUint32(v int) uint32 {
	if v < 0 {
		return 0
	}
	if int64(v) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}
