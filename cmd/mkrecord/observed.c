/* observed.c: the declared and the observed, side by side in the record */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "error.h"
#include "observed.h"

json_t *
idem_observed_database(const struct idem_run *run)
{
	return json_pack("{s:o,s:o}", "declared", idem_run_text(idem_run_seed(run, "database")),
	    "observed", run->database ? json_incref(run->database) : json_null());
}

/* The database name a conninfo or URI names, or NULL when it names none
 * (a service, the PG* environment). Caller frees. */
static char *
declared_dbname(const char *conninfo)
{
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL), *o;
	char *name = NULL;

	for (o = opts; o != NULL && o->keyword != NULL; o++)
		if (strcmp(o->keyword, "dbname") == 0 && o->val != NULL && *o->val != '\0')
			name = idem_estrdup(o->val);
	PQconninfoFree(opts);
	return name;
}

/* The server's version in words: the first word of server_version. */
static char *
short_version(const char *server_version)
{
	return idem_estrndup(server_version, strcspn(server_version, " "));
}

static json_t *
database_difference(const struct idem_run *run)
{
	const char *declared = idem_run_seed(run, "database");
	const json_t *db = run->database;
	char *said, *dbname, *version;
	const char *observed_name;
	json_t *line;

	if (declared == NULL)
		said = idem_estrdup("none declared");
	else if (asprintf(&said, "declared `%s`", declared) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if (db == NULL) {
		line = json_sprintf("the database: %s, not observed: the stream has no database row",
		    said);
		free(said);
		return line;
	}
	observed_name = json_string_value(json_object_get(db, "dbname"));
	version = short_version(json_string_value(json_object_get(db, "server_version")));
	dbname = declared ? declared_dbname(declared) : NULL;
	line = json_sprintf("the database: %s; the run used %sdatabase %s on PostgreSQL %s, default "
	    "isolation %s; production's server and settings were not observed", said,
	    dbname && strcmp(dbname, observed_name) != 0 ? "another, " : "", observed_name, version,
	    json_string_value(json_object_get(db, "isolation")));
	free(said);
	free(dbname);
	free(version);
	return line;
}

json_t *
idem_observed_as_declared(const struct idem_run *run)
{
	const char *command = idem_run_seed(run, "worker_command");
	json_t *declared;
	int same;

	if (run->worker == NULL || command == NULL)
		return NULL;
	declared = idem_run_words(command);
	same = json_equal(declared, json_object_get(run->worker, "words"));
	json_decref(declared);
	return same ? json_true() : json_false();
}

json_t *
idem_observed_differences(const struct idem_run *run)
{
	const char *v = idem_run_seed(run, "cannot_reproduce");
	const char *image = idem_run_seed(run, "worker_image");
	json_t *out = v ? json_loads(v, 0, NULL) : NULL;

	if (!json_is_array(out)) {
		json_decref(out);
		out = json_array();
	}
	json_array_append_new(out, database_difference(run));
	/* kill-at reads the worker's executable and script, never an image */
	if (image != NULL)
		json_array_append_new(out, json_sprintf("the worker image: declared `%s`, not observed: "
		    "no image digest was read from what ran", image));
	if (json_is_false(idem_observed_as_declared(run)))
		json_array_append_new(out, json_sprintf("the worker command: declared `%s`, another ran "
		    "(see worker.observed)", idem_run_seed(run, "worker_command")));
	if (idem_run_seed(run, "worker_version") != NULL)
		json_array_append_new(out, json_sprintf("the worker version: declared %s, not observed",
		    idem_run_seed(run, "worker_version")));
	return out;
}
