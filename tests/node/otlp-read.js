// node otlp-read.js TRACE.json: reads a trace file as OTLP/JSON with the
// protobuf definitions OpenTelemetry JS shipped, not with idem's code:
// ExportTraceServiceRequest as protobufjs compiled it from
// opentelemetry-proto in @opentelemetry/otlp-transformer 0.216.0, the last
// release that carries it (later ones write protobuf by hand and read
// none).
//
// The file is taken by OTLP/JSON's rules (ids in lowercase hex, 64-bit
// integers as decimal strings, enums as numbers, field names in
// lowerCamelCase), made the message, encoded to protobuf and decoded
// again; what comes back must be the file, field for field, so that a
// field the definitions do not know, or a value of the wrong type, fails.
// The spans must then make trees: ids unique, each parent in its child's
// trace, every root a job's span.
//
// Prints the trace as the decoded message holds it, one line a span, its
// fields separated by tabs:
//   job JOB TRACE-ID
//   attempt JOB DELIVERY-COUNT MESSAGE-ID STATUS EVENT,EVENT,... LOST-ID,...|-
//   span JOB DELIVERY-COUNT MESSAGE-ID SPAN-ID PATH
// where PATH is the worker span's name after its ancestors' under the
// attempt, joined by " > ", and STATUS unset, ok or error. Exits 1 with one
// line on stderr when the file is not such a trace, 2 on bad use.
'use strict';

const fs = require('fs');
const root = require('otlp-proto-0.216/build/src/generated/root.js');

const v1 = root.opentelemetry.proto;
const Request = v1.collector.trace.v1.ExportTraceServiceRequest;
const KIND_INTERNAL = 1, KIND_CONSUMER = 5;
const STATUS = ['unset', 'ok', 'error'];

function fail(message) {
  process.stderr.write(`otlp-read: ${message}\n`);
  process.exit(1);
}

// OTLP/JSON's ids: lowercase hex of their length, or "" for no parent.
function idBytes(hex, bytes, where, empty) {
  if (empty && hex === '')
    return Buffer.alloc(0);
  if (typeof hex !== 'string' || !new RegExp(`^[0-9a-f]{${2 * bytes}}$`).test(hex))
    fail(`${where}: ${JSON.stringify(hex)} is not ${bytes} bytes in lowercase hex`);
  return Buffer.from(hex, 'hex');
}

function withIds(s, where) {
  return {
    ...s,
    traceId: idBytes(s.traceId, 16, `${where}.traceId`),
    spanId: idBytes(s.spanId, 8, `${where}.spanId`),
    ...('parentSpanId' in s ? { parentSpanId: idBytes(s.parentSpanId, 8, `${where}.parentSpanId`, true) } : {}),
    ...('links' in s ? { links: s.links.map((l, i) => withIds(l, `${where}.links[${i}]`)) } : {}),
  };
}

// The file with its ids as bytes, as protobufjs takes them.
function toMessage(json) {
  const rs = json.resourceSpans;
  if (!Array.isArray(rs))
    fail('resourceSpans: not an array');
  return {
    ...json,
    resourceSpans: rs.map((r, i) => ({
      ...r,
      scopeSpans: (r.scopeSpans || []).map((ss, j) => ({
        ...ss,
        spans: (ss.spans || []).map((s, k) => withIds(s, `resourceSpans[${i}].scopeSpans[${j}].spans[${k}]`)),
      })),
    })),
  };
}

// Bytes back to hex, as OTLP/JSON writes them.
function hexed(v) {
  if (v instanceof Uint8Array)
    return Buffer.from(v).toString('hex');
  if (Array.isArray(v))
    return v.map(hexed);
  if (v !== null && typeof v === 'object')
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, hexed(x)]));
  return v;
}

// Whether a decoded value is its field's default, which OTLP/JSON may
// leave out.
function empty(v) {
  return v === null || v === '' || v === 0 || v === '0' || v === false ||
    (Array.isArray(v) && v.length === 0);
}

// The first path where the decoded message and the file differ, or null.
function differs(file, back, path) {
  if (Array.isArray(file)) {
    if (!Array.isArray(back) || back.length !== file.length)
      return `${path}: ${file.length} entries, ${Array.isArray(back) ? back.length : 'none'} decoded`;
    for (let i = 0; i < file.length; i++) {
      const d = differs(file[i], back[i], `${path}[${i}]`);
      if (d)
        return d;
    }
    return null;
  }
  if (file !== null && typeof file === 'object') {
    if (back === null || typeof back !== 'object')
      return `${path}: an object, decoded as ${JSON.stringify(back)}`;
    for (const k of Object.keys(file)) {
      if (!(k in back))
        return `${path}.${k}: not a field of the definitions`;
      const d = differs(file[k], back[k], `${path}.${k}`);
      if (d)
        return d;
    }
    for (const k of Object.keys(back))
      if (!(k in file) && !empty(back[k]))
        return `${path}.${k}: decoded, not in the file`;
    return null;
  }
  return file === back ? null : `${path}: ${JSON.stringify(file)} decoded as ${JSON.stringify(back)}`;
}

function attribute(span, key) {
  const kv = (span.attributes || []).find((a) => a.key === key);
  if (!kv)
    return undefined;
  const v = kv.value;
  return v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue;
}

function main() {
  if (process.argv.length !== 3) {
    process.stderr.write('usage: node otlp-read.js trace.json\n');
    process.exit(2);
  }
  const file = process.argv[2];
  let json;
  try {
    json = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    fail(`${file}: ${e.message}`);
  }
  const err = Request.verify(Request.fromObject(toMessage(json)));
  if (err)
    fail(`${file}: ${err}`);
  const wire = Request.encode(Request.fromObject(toMessage(json))).finish();
  const decoded = Request.decode(wire);
  const back = hexed(Request.toObject(decoded, { longs: String, enums: Number, defaults: true, arrays: true }));
  const d = differs(json, back, '');
  if (d)
    fail(`${file}: ${d.slice(1)}`);

  // the trees, from the decoded message
  const spans = new Map();
  for (const r of back.resourceSpans)
    for (const ss of r.scopeSpans)
      for (const s of ss.spans) {
        if (spans.has(s.spanId))
          fail(`span ${s.spanId}: twice`);
        spans.set(s.spanId, s);
      }
  const lines = [];
  for (const s of spans.values()) {
    if (!s.parentSpanId) {
      if (s.kind !== KIND_INTERNAL || !s.name.startsWith('job '))
        fail(`span ${s.spanId} (${s.name}): a root that is not a job's span`);
      lines.push(['job', s.name.slice(4), s.traceId]);
      continue;
    }
    const parent = spans.get(s.parentSpanId);
    if (!parent || parent.traceId !== s.traceId)
      fail(`span ${s.spanId} (${s.name}): its parent ${s.parentSpanId} is not in its trace`);
    // the attempt above it, and the path from there
    let a = s;
    const path = [];
    while (a.kind !== KIND_CONSUMER && a.parentSpanId) {
      path.unshift(a.name);
      a = spans.get(a.parentSpanId);
    }
    if (a.kind !== KIND_CONSUMER)
      fail(`span ${s.spanId} (${s.name}): under no attempt`);
    const job = attribute(a, 'idem.job.id'), count = attribute(a, 'idem.message.delivery_count');
    const msg = attribute(a, 'messaging.message.id');
    if (a === s) {
      const events = (s.events || []).map((e) => e.name);
      const lost = (s.events || []).filter((e) => e.name === 'spans lost')
        .flatMap((e) => (attribute(e, 'idem.span_ids') === undefined ?
          e.attributes.find((kv) => kv.key === 'idem.span_ids').value.arrayValue.values.map((x) => x.stringValue) :
          [attribute(e, 'idem.span_ids')]));
      lines.push(['attempt', job, count, msg, STATUS[(s.status && s.status.code) || 0],
        events.join(',') || '-', lost.join(',') || '-']);
    } else {
      lines.push(['span', job, count, msg, s.spanId, path.join(' > ')]);
    }
  }
  process.stdout.write(lines.map((l) => `${l.join('\t')}\n`).join(''));
}

main();
