/* seed-sanitize: turn real payloads, one JSON object a line, into the
 * jobs of a seed with the same shape: every string a keyed pseudonym,
 * integers kept or coarsened, field names and types kept; report what was
 * replaced; refuse what cannot be made safe. */
#include <sys/stat.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "sanitize.h"
#include "error.h"
#include "file.h"
#include "text.h"

#define KEY_MIN 16
#define KEY_MAX 4096
#define LINE_MAX_BYTES (1 << 20)

static const char synopsis[] =
	"usage: seed-sanitize [-k key-file] [-c path=multiple] [-p prefix] [file]\n";

/* The key: a file only its owner reads, or IDEM_SANITIZE_KEY; never
 * written anywhere. */
static void
load_key(struct idem_sanitizer *s, const char *path)
{
	struct idem_error err;
	struct stat st;
	const char *env;
	char *key;
	size_t len;

	if (path == NULL) {
		if ((env = getenv("IDEM_SANITIZE_KEY")) == NULL || *env == '\0')
			idem_die(IDEM_EXIT_USAGE, "no key: give -k key-file, or set IDEM_SANITIZE_KEY");
		if (strlen(env) < KEY_MIN)
			idem_die(IDEM_EXIT_USAGE, "IDEM_SANITIZE_KEY: shorter than %d bytes", KEY_MIN);
		idem_sanitize_init(s, (const unsigned char *)env, strlen(env));
		return;
	}
	if (stat(path, &st) < 0)
		idem_die(IDEM_EXIT_USAGE, "%s:", path);
	if (!S_ISREG(st.st_mode))
		idem_die(IDEM_EXIT_USAGE, "%s: not a key file", path);
	if (st.st_mode & 077)
		idem_die(IDEM_EXIT_USAGE, "%s: permissions %04o are too open: a key must not be "
		    "readable by group or others (chmod 600 %s)", path, (unsigned)(st.st_mode & 07777),
		    path);
	if ((key = idem_read_file_max(path, KEY_MAX, &len, &err)) == NULL)
		idem_die_error(&err);
	if (len < KEY_MIN) {
		sodium_memzero(key, len);
		free(key);
		idem_die(IDEM_EXIT_USAGE, "%s: shorter than %d bytes", path, KEY_MIN);
	}
	idem_sanitize_init(s, (const unsigned char *)key, len);
	sodium_memzero(key, len);
	free(key);
}

static int
by_path(const void *a, const void *b)
{
	return strcmp(((const struct idem_sanitize_path *)a)->path,
	    ((const struct idem_sanitize_path *)b)->path);
}

/* What was replaced and what kept, field by field, on standard error. */
static void
report(struct idem_sanitizer *s, const char *name)
{
	size_t i, j;

	fprintf(stderr, "seed-sanitize: %s: %lld payloads\n", name, s->lines);
	qsort(s->paths, s->npaths, sizeof(*s->paths), by_path);
	for (i = 0; i < s->npaths; i++) {
		const struct idem_sanitize_path *p = &s->paths[i];

		if (p->strings > 0)
			fprintf(stderr, "seed-sanitize: %s: %lld strings replaced by %zu pseudonyms\n",
			    p->path, p->strings, p->distinct.n);
		if (p->coarsened > 0)
			fprintf(stderr, "seed-sanitize: %s: %lld integers coarsened\n", p->path,
			    p->coarsened);
		else if (p->integers > 0)
			fprintf(stderr, "seed-sanitize: %s: %lld integers kept\n", p->path, p->integers);
	}
	for (j = 0; j < s->ncoarse; j++) {
		for (i = 0; i < s->npaths; i++)
			if (strcmp(s->paths[i].path, s->coarse_paths[j]) == 0 && s->paths[i].integers > 0)
				break;
		if (i == s->npaths)
			idem_warn("-c %s: no integer there was coarsened", s->coarse_paths[j]);
	}
}

struct options {
	const char *key_path, *prefix, *name;
	char **coarse;
	size_t ncoarse;
	FILE *in;
};

static void
parse_options(int argc, char *argv[], struct options *o)
{
	static const struct option longopts[] = {
		{ "key", required_argument, NULL, 'k' },
		{ "coarsen", required_argument, NULL, 'c' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "k:c:p:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'k': o->key_path = optarg; break;
		case 'c':
			o->coarse = idem_ereallocarray(o->coarse, o->ncoarse + 1, sizeof(char *));
			o->coarse[o->ncoarse++] = optarg;
			break;
		case 'p':
			if (!idem_file_name_valid(optarg, strlen(optarg)))
				idem_die(IDEM_EXIT_USAGE, "-p %s: a prefix is letters, digits, '.', '_' "
				    "and '-', beginning with a letter or a digit", optarg);
			o->prefix = optarg;
			break;
		case 'h': idem_usage(synopsis, 0);
		case 'V': puts("seed-sanitize " IDEM_VERSION); idem_close_stdout(); exit(0);
		default: idem_usage(synopsis, IDEM_EXIT_USAGE);
		}
	}
	if (argc - optind > 1)
		idem_usage(synopsis, IDEM_EXIT_USAGE);
}

/* The jobs of every line made safe, in memory: nothing is written until
 * every line is. */
static void
sanitize_lines(struct idem_sanitizer *s, FILE *in, const char *name, const char *prefix,
	       char **out, size_t *out_len)
{
	char *line = NULL, *text, where[256];
	struct idem_error err;
	size_t cap = 0;
	json_t *payload;
	ssize_t got;
	long line_no = 0;
	FILE *jobs;

	if ((jobs = open_memstream(out, out_len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	while ((got = getline(&line, &cap, in)) >= 0) {
		line_no++;
		snprintf(where, sizeof(where), "%s:%ld", name, line_no);
		if (got > 0 && line[got - 1] == '\n')
			line[--got] = '\0';
		if (got > LINE_MAX_BYTES)
			idem_die(IDEM_EXIT_USAGE, "%s: longer than %d bytes", where, LINE_MAX_BYTES);
		if ((payload = idem_sanitize_line(s, line, (size_t)got, where, &err)) == NULL)
			idem_die_error(&err);
		if ((text = json_dumps(payload, JSON_PRESERVE_ORDER)) == NULL)
			idem_die(IDEM_EXIT_ENV, "json_dumps: out of memory");
		fprintf(jobs, "  - { id: \"%s-%04ld\", payload: %s }\n", prefix, line_no, text);
		free(text);
		json_decref(payload);
	}
	if (ferror(in))
		idem_die(IDEM_EXIT_ENV, "%s: read error:", name);
	free(line);
	if (fclose(jobs) != 0)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	if (s->lines == 0)
		idem_die(IDEM_EXIT_USAGE, "%s: no payloads", name);
}

int
main(int argc, char *argv[])
{
	struct options o = { .prefix = "job" };
	struct idem_sanitizer s;
	struct idem_error err;
	char *out = NULL, *text;
	size_t out_len = 0, i;

	argv0 = "seed-sanitize";
	argv[0] = (char *)argv0;
	parse_options(argc, argv, &o);
	if (sodium_init() < 0)
		idem_die(IDEM_EXIT_ENV, "libsodium could not start");
	load_key(&s, o.key_path);
	for (i = 0; i < o.ncoarse; i++)
		if (idem_sanitize_coarsen(&s, o.coarse[i], &err) < 0)
			idem_die_error(&err);
	free(o.coarse);
	o.in = idem_eopen_input(optind < argc ? argv[optind] : NULL, &o.name);
	sanitize_lines(&s, o.in, o.name, o.prefix, &out, &out_len);
	if (o.in != stdin)
		fclose(o.in);
	text = json_dumps(s.schema, JSON_PRESERVE_ORDER);
	printf("# %lld payloads made safe by seed-sanitize: every string a keyed pseudonym\n"
	    "payload_schema: %s\njobs:\n", s.lines, text);
	free(text);
	fwrite(out, 1, out_len, stdout);
	free(out);
	report(&s, o.name);
	idem_sanitize_free(&s);
	idem_close_stdout();
	return 0;
}
