#include <stdlib.h>

#include "template.h"
#include "unit.h"

static void
expect_render(const char *tpl, const char *context, enum idem_template_escape escape,
	      const char *want, const char *name)
{
	struct idem_error err;
	json_t *ctx = json_loads(context, 0, NULL);
	char *got = idem_template_render("t", tpl, ctx, escape, &err);

	CHECK_STR(got ? got : err.text, want, name);
	free(got);
	json_decref(ctx);
}

int
main(void)
{
	expect_render("a {{x}} b", "{\"x\": \"1\"}", IDEM_ESCAPE_NONE, "a 1 b", "variable");
	expect_render("{{n}} {{t}} {{z}}", "{\"n\": 7, \"t\": true, \"z\": null}",
	    IDEM_ESCAPE_NONE, "7 true ", "scalars");
	expect_render("{{a.b}}", "{\"a\": {\"b\": \"deep\"}}", IDEM_ESCAPE_NONE, "deep", "dotted");
	expect_render("{{#l}}[{{.}}]{{/l}}", "{\"l\": [1, 2, 3]}", IDEM_ESCAPE_NONE, "[1][2][3]",
	    "list section");
	expect_render("{{#l}}{{n}}{{k}};{{/l}}", "{\"k\": \"!\", \"l\": [{\"n\": 1}, {\"n\": 2}]}",
	    IDEM_ESCAPE_NONE, "1!;2!;", "section sees outer names");
	expect_render("{{^l}}none{{/l}}", "{\"l\": []}", IDEM_ESCAPE_NONE, "none", "inverted");
	expect_render("{{#l.0}}has{{/l.0}}", "{\"l\": [\"x\"]}", IDEM_ESCAPE_NONE, "has",
	    "index into a list");
	expect_render("x\n  {{#s}}\ny\n{{/s}}\nz\n", "{\"s\": true}", IDEM_ESCAPE_NONE,
	    "x\ny\nz\n", "standalone section lines vanish");
	expect_render("| {{v}} |", "{\"v\": \"a|b\\nc\"}", IDEM_ESCAPE_MARKDOWN, "| a\\|b<br>c |",
	    "markdown cell escaping");
	expect_render("{{{v}}} {{v}}", "{\"v\": \"a|b\"}", IDEM_ESCAPE_MARKDOWN, "a|b a\\|b",
	    "triple braces: unescaped");
	expect_render("{{#s}}open", "{}", IDEM_ESCAPE_NONE, "template t: section s is not closed",
	    "unclosed section");
	expect_render("{{/s}}", "{}", IDEM_ESCAPE_NONE, "template t: {{/s}} without a section",
	    "stray close");
	return unit_done("template");
}
