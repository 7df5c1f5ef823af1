/* Fuzzes the template renderer: the input up to the first NUL is the
 * template, the rest the JSON context it is rendered against. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "template.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *nul = memchr(data, '\0', size);
	size_t tpl_len = nul ? (size_t)(nul - (const char *)data) : size;
	struct idem_error err;
	json_t *context = NULL;
	char *tpl, *out;

	tpl = malloc(tpl_len + 1);
	memcpy(tpl, data, tpl_len);
	tpl[tpl_len] = '\0';
	if (nul != NULL)
		context = json_loadb(nul + 1, size - tpl_len - 1, 0, NULL);
	if (context == NULL)
		context = json_pack("{s:s, s:[{s:i}, {s:s}], s:{s:b}}", "name", "a|b\nc",
		    "rows", "n", 1, "n", "two", "flags", "on", 1);
	out = idem_template_render("fuzz", tpl, context, IDEM_ESCAPE_MARKDOWN, &err);
	free(out);
	out = idem_template_render("fuzz", tpl, context, IDEM_ESCAPE_NONE, &err);
	free(out);
	json_decref(context);
	free(tpl);
	return 0;
}
