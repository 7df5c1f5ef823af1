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
// The spans must then make trees: ids unique and not all zero, each parent
// in its child's trace, no cycle, every root a job's span of idem's scope,
// each of idem's attempts (CONSUMER spans of its scope) under one, every
// other span under an attempt.
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
  if (/^0+$/.test(hex))
    fail(`${where}: all zero, which OTLP forbids`);
  return Buffer.from(hex, 'hex');
}

function withIds(s, where) {
  if (s === null || typeof s !== 'object' || Array.isArray(s))
    fail(`${where}: not an object`);
  if ('links' in s && !Array.isArray(s.links))
    fail(`${where}.links: not an array`);
  return {
    ...s,
    traceId: idBytes(s.traceId, 16, `${where}.traceId`),
    spanId: idBytes(s.spanId, 8, `${where}.spanId`),
    ...('parentSpanId' in s ? { parentSpanId: idBytes(s.parentSpanId, 8, `${where}.parentSpanId`, true) } : {}),
    ...('links' in s ? { links: s.links.map((l, i) => withIds(l, `${where}.links[${i}]`)) } : {}),
  };
}

// o[key], an array or nothing, of an object o.
function array(o, key, where) {
  if (o === null || typeof o !== 'object' || Array.isArray(o))
    fail(`${where}: not an object`);
  if (o[key] !== undefined && !Array.isArray(o[key]))
    fail(`${where}.${key}: not an array`);
  return o[key] || [];
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
      scopeSpans: array(r, 'scopeSpans', `resourceSpans[${i}]`).map((ss, j) => ({
        ...ss,
        spans: array(ss, 'spans', `resourceSpans[${i}].scopeSpans[${j}]`)
          .map((s, k) => withIds(s, `resourceSpans[${i}].scopeSpans[${j}].spans[${k}]`)),
      })),
    })),
  };
}

// The ids back to hex, as OTLP/JSON writes them; other bytes (an
// AnyValue's bytesValue) in base64, as OTLP/JSON writes those.
const ID_FIELDS = new Set(['traceId', 'spanId', 'parentSpanId']);
function hexed(v, key) {
  if (v instanceof Uint8Array)
    return Buffer.from(v).toString(ID_FIELDS.has(key) ? 'hex' : 'base64');
  if (Array.isArray(v))
    return v.map((x) => hexed(x, key));
  if (v !== null && typeof v === 'object')
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, hexed(x, k)]));
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
      if (!Object.prototype.hasOwnProperty.call(back, k))
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

  // the trees, from the decoded message: idem's own spans are those of
  // its scope, a job's at each root and an attempt's (CONSUMER) under it
  const spans = new Map(), own = new Set();
  for (const r of back.resourceSpans)
    for (const ss of r.scopeSpans)
      for (const s of ss.spans) {
        if (spans.has(s.spanId))
          fail(`span ${s.spanId}: twice`);
        spans.set(s.spanId, s);
        if (ss.scope && ss.scope.name === 'idem')
          own.add(s);
      }
  const isAttempt = (s) => own.has(s) && s.kind === KIND_CONSUMER;
  const lines = [];
  for (const s of spans.values()) {
    if (!s.parentSpanId) {
      if (!own.has(s) || s.kind !== KIND_INTERNAL || !s.name.startsWith('job '))
        fail(`span ${s.spanId} (${s.name}): a root that is not a job's span`);
      lines.push(['job', s.name.slice(4), s.traceId]);
      continue;
    }
    // the attempt above it, and the path from there
    let a = s;
    const path = [], seen = new Set();
    while (!isAttempt(a)) {
      const parent = spans.get(a.parentSpanId);
      if (!parent || parent.traceId !== a.traceId)
        fail(`span ${a.spanId} (${a.name}): its parent ${a.parentSpanId} is not in its trace`);
      if (seen.has(a) || !parent.parentSpanId)
        fail(`span ${s.spanId} (${s.name}): under no attempt`);
      seen.add(a);
      path.unshift(a.name);
      a = parent;
    }
    const job = attribute(a, 'idem.job.id'), count = attribute(a, 'idem.message.delivery_count');
    const msg = attribute(a, 'messaging.message.id');
    if (a === s) {
      const parent = spans.get(s.parentSpanId);
      if (!parent || parent.traceId !== s.traceId)
        fail(`span ${s.spanId} (${s.name}): its parent ${s.parentSpanId} is not in its trace`);
      if (!own.has(parent) || parent.parentSpanId)
        fail(`span ${s.spanId} (${s.name}): an attempt not under its job's span`);
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
