/* runrows.c: the worker, call and missed rows of kill-at */
#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "runrows.h"
#include "seed.h"
#include "tsv.h"
#include "error.h"
#include "file.h"
#include "text.h"

int
idem_runrows_calls(FILE *out, struct idem_vendor_call *const *calls, size_t n, long long skew_us)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const struct idem_vendor_call *c = calls[i];
		char at[32], worker[16], pid[16], status[16];
		const char *row[12];

		idem_format_time(c->at_us + skew_us, at);
		snprintf(worker, sizeof(worker), "%d", c->worker);
		snprintf(pid, sizeof(pid), "%d", (int)c->pid);
		snprintf(status, sizeof(status), "%d", c->status);
		row[0] = at;
		row[1] = worker;
		row[2] = pid;
		row[3] = c->method;
		row[4] = c->path;
		row[5] = c->idempotency_key;
		row[6] = c->body_sha256;
		row[7] = c->business_key;
		row[8] = status;
		/* a request cut short before it was answered took no effect */
		row[9] = *c->answer ? c->answer : "error";
		row[10] = c->effect ? "yes" : "no";
		row[11] = c->response_id;
		if (idem_tsv_write_row(out, "call", row, 12) < 0)
			return -1;
	}
	return 0;
}

static int
regular_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The file execvp(3) runs for a name: itself when it holds a slash, else
 * the first executable regular file of that name along PATH; NULL when
 * there is none. */
static char *
resolve_executable(const char *name)
{
	const char *path = getenv("PATH"), *p, *colon;
	char *file;

	if (*name == '\0')
		return NULL;
	if (strchr(name, '/'))
		return regular_file(name) ? idem_estrdup(name) : NULL;
	if (path == NULL)
		path = "/bin:/usr/bin";
	for (p = path;; p = colon + 1) {
		size_t len;

		colon = strchr(p, ':');
		len = colon ? (size_t)(colon - p) : strlen(p);
		/* an empty entry is the current directory */
		if (asprintf(&file, "%.*s%s%s", (int)len, p, len ? "/" : "", name) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (regular_file(file) && access(file, X_OK) == 0)
			return file;
		free(file);
		if (colon == NULL)
			return NULL;
	}
}

int
idem_runrows_worker(FILE *out, char *const *argv, const char *command)
{
	json_t *argv_json = json_array();
	char **words = NULL, *text = NULL, *word, *save, *argv_text, *executable = NULL;
	char executable_sha256[65], script_sha256[65];
	const char *row[5] = { NULL, NULL, NULL, NULL, NULL };
	size_t nwords = 0, i;
	int rc;

	for (i = 0; argv[i] != NULL; i++)
		json_array_append_new(argv_json, json_string(argv[i]));
	argv_text = idem_json_canonical(argv_json);
	json_decref(argv_json);
	if (command != NULL) {
		text = idem_estrdup(command);
		for (word = strtok_r(text, " \t\n", &save); word; word = strtok_r(NULL, " \t\n", &save)) {
			words = idem_ereallocarray(words, nwords + 1, sizeof(*words));
			words[nwords++] = word;
		}
	} else {
		for (nwords = 0; argv[nwords] != NULL; nwords++)
			;
		words = idem_ereallocarray(NULL, nwords + 1, sizeof(*words));
		memcpy(words, argv, nwords * sizeof(*words));
	}
	row[0] = argv_text;
	if (nwords > 0 && (executable = resolve_executable(words[0])) != NULL) {
		row[1] = executable;
		if (idem_sha256_file(executable, executable_sha256) == 0)
			row[2] = executable_sha256;
	}
	for (i = 1; i < nwords; i++)
		if (regular_file(words[i]) && idem_sha256_file(words[i], script_sha256) == 0) {
			row[3] = words[i];
			row[4] = script_sha256;
			break;
		}
	rc = idem_tsv_write_row(out, "worker", row, 5);
	free(executable);
	free(argv_text);
	free(words);
	free(text);
	return rc < 0 ? -1 : 0;
}

int
idem_runrows_missed(FILE *out, const char *what, const char *scenario, const char *id,
		    long long attempt, const char *step)
{
	char attempt_text[24];
	const char *row[5] = { what, scenario, id, NULL, step };

	if (attempt > 0) {
		snprintf(attempt_text, sizeof(attempt_text), "%lld", attempt);
		row[3] = attempt_text;
	}
	return idem_tsv_write_row(out, "missed", row, 5) < 0 ? -1 : 0;
}
