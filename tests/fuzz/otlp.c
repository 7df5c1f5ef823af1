/* Fuzzes the span receiver's decoders, OTLP/JSON and protobuf, on every
 * input: whatever the body, a decoder answers and never crashes, and each
 * span it hands on fits the span row: ids of hex, times, texts of UTF-8,
 * attributes a JSON object and events a JSON array. */
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "kill-at/otlp.h"
#include "text.h"

static int
check(void *ctx, const struct otlp_span *s)
{
	struct idem_json_shape shape;

	(void)ctx;
	if (strlen(s->trace_id) != 32 || strlen(s->span_id) != 16 ||
	    (s->parent_span_id[0] && strlen(s->parent_span_id) != 16))
		fuzz_fail("an id of the wrong length");
	if (!idem_utf8_valid(s->name, strlen(s->name)) || strlen(s->name) > OTLP_MAX_TEXT ||
	    (s->scope && !idem_utf8_valid(s->scope, strlen(s->scope))))
		fuzz_fail("a name that is not UTF-8, or too long");
	if (s->kind < 0 || s->kind > 5)
		fuzz_fail("a kind out of range");
	if (!idem_json_check(s->attributes, strlen(s->attributes), &shape) || shape.top != '{')
		fuzz_fail("attributes not a JSON object");
	if (!idem_json_check(s->events, strlen(s->events), &shape) || shape.top != '[')
		fuzz_fail("events not a JSON array");
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t nspans, dropped;
	char why[256];

	otlp_decode(OTLP_JSON, data, size, 64, 0, check, NULL, &nspans, &dropped, why, sizeof(why));
	otlp_decode(OTLP_PROTOBUF, data, size, 64, 0, check, NULL, &nspans, &dropped, why,
	    sizeof(why));
	return 0;
}
