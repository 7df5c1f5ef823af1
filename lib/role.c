#include <stdlib.h>
#include <string.h>

#include "pg.h"
#include "role.h"
#include "tsv.h"

#define MARK "idem sandbox account"
/* every program and setup that writes looks for the sandbox's marker */
#define SANDBOX_GRANT "GRANT USAGE ON SCHEMA idem TO %I; GRANT SELECT ON idem.sandbox TO %I"

/* What a role holds: type, schema, object and privilege, one row each.
 * The columns are text from the first branch on: of type name, which the
 * next branches would give them, an object longer than 63 bytes (a
 * function's signature) would be cut. */
static const char HELD_SQL[] =
	"WITH r AS (SELECT * FROM pg_roles WHERE rolname = $1) "
	"SELECT 'attribute'::text, ''::text, ''::text, a.p::text FROM r, LATERAL (VALUES ('SUPERUSER', r.rolsuper), "
	" ('CREATEROLE', r.rolcreaterole), ('CREATEDB', r.rolcreatedb), "
	" ('REPLICATION', r.rolreplication), ('BYPASSRLS', r.rolbypassrls), "
	" ('LOGIN', r.rolcanlogin)) a(p, held) WHERE a.held "
	"UNION ALL SELECT 'member', '', g.rolname, 'MEMBER' FROM r, pg_auth_members m "
	" JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid "
	"UNION ALL SELECT 'database', '', d.datname, a.privilege_type FROM r, pg_database d, "
	" LATERAL aclexplode(d.datacl) a WHERE d.datname = current_database() AND a.grantee = r.oid "
	"UNION ALL SELECT 'database', '', d.datname, 'OWNER' FROM r, pg_database d "
	" WHERE d.datname = current_database() AND d.datdba = r.oid "
	"UNION ALL SELECT 'schema', n.nspname, n.nspname, a.privilege_type FROM r, pg_namespace n, "
	" LATERAL aclexplode(n.nspacl) a WHERE a.grantee = r.oid "
	"UNION ALL SELECT 'schema', n.nspname, n.nspname, 'OWNER' FROM r, pg_namespace n "
	" WHERE n.nspowner = r.oid "
	"UNION ALL SELECT CASE WHEN c.relkind = 'S' THEN 'sequence' WHEN c.relkind IN ('v', 'm') "
	" THEN 'view' ELSE 'table' END, n.nspname, format('%I.%I', n.nspname, c.relname), p.p "
	" FROM r, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, "
	" LATERAL (SELECT a.privilege_type FROM aclexplode(c.relacl) a WHERE a.grantee = r.oid "
	"  UNION ALL SELECT 'OWNER' WHERE c.relowner = r.oid) p(p) "
	" WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') "
	"UNION ALL SELECT 'function', n.nspname, format('%I.%I(%s)', n.nspname, p.proname, "
	" pg_get_function_identity_arguments(p.oid)), a.p "
	" FROM r, pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace, "
	" LATERAL (SELECT x.privilege_type FROM aclexplode(p.proacl) x WHERE x.grantee = r.oid "
	"  UNION ALL SELECT 'OWNER' WHERE p.proowner = r.oid) a(p) "
	"ORDER BY 1, 3, 4";

enum { TYPE, SCHEMA, OBJECT, PRIVILEGE };

/* Runs statements made by the database, one or several. */
static int
exec(PGconn *conn, const char *what, const char *sql, struct idem_error *err)
{
	PGresult *res = PQexec(conn, sql);
	char msg[768];
	int ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;

	if (!ok)
		idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", what, idem_pg_message(conn, res, msg,
		    sizeof(msg)));
	PQclear(res);
	return ok ? 0 : -1;
}

/* Runs a statement made with format(): the SQL text of $2 .. with %I and
 * %L of the role ($1) and the others. */
static int
exec_formatted(PGconn *conn, const char *what, const char *format_sql, int n,
	       const char *const *params, struct idem_error *err)
{
	static const Oid text[3] = { IDEM_OID_TEXT, IDEM_OID_TEXT, IDEM_OID_TEXT };
	PGresult *res = PQexecParams(conn, format_sql, n, text, params, NULL, NULL, 0);
	char msg[768];
	int rc;

	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		idem_error_set(err, IDEM_EXIT_ENV, "%s: %s", what, idem_pg_message(conn, res, msg,
		    sizeof(msg)));
		PQclear(res);
		return -1;
	}
	rc = PQntuples(res) == 1 ? exec(conn, what, PQgetvalue(res, 0, 0), err) : 0;
	PQclear(res);
	return rc;
}

/* Runs every statement a section returns, given the role as $1; a
 * failure names the section and the adapter. */
static int
exec_section(const struct idem_role *r, PGconn *conn, const char *section, const char *what,
	     struct idem_error *err)
{
	const char *params[1] = { r->name };
	PGresult *res;
	char *named;
	int i, rc = 0;

	if (!idem_queue_has(r->q, section))
		return 0;
	if ((r->q->path ? asprintf(&named, "%s (section %s of %s)", what, section, r->q->path) :
	    asprintf(&named, "%s (section %s of the built-in %s adapter)", what, section,
	    r->q->kind)) < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	if ((res = idem_queue_exec(r->q, conn, section, named, 1, NULL, params, err)) != NULL) {
		for (i = 0; rc == 0 && i < PQntuples(res); i++)
			rc = exec(conn, named, PQgetvalue(res, i, 0), err);
		PQclear(res);
	} else {
		rc = -1;
	}
	free(named);
	return rc;
}

int
idem_role_open(struct idem_role *r, PGconn *conn, const char *name, const struct idem_queue *q,
	       const char *effect_table, struct idem_error *err)
{
	const char *params[2] = { name, MARK }, *dot = strchr(effect_table, '.');
	PGresult *res;
	int mine;

	memset(r, 0, sizeof(*r));
	r->name = idem_estrdup(name);
	r->q = q;
	r->effect_schema = dot ? idem_estrndup(effect_table, (size_t)(dot - effect_table)) :
	    idem_estrdup("public");
	idem_map_init(&r->listed);
	if ((r->out = open_memstream(&r->rows, &r->rows_len)) == NULL)
		idem_die(IDEM_EXIT_ENV, "open_memstream:");
	if ((res = idem_pg_exec(conn, "looking up the sandbox account", err,
	    "SELECT $1 = current_user", 1, params)) == NULL)
		return -1;
	mine = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (mine)
		return idem_error_set(err, IDEM_EXIT_USAGE, "sandbox_account %s is the user that "
		    "connects to the sandbox: the worker would hold all its rights; name another role",
		    name);
	/* a role idem made keeps nothing but LOGIN; one it did not is left
	 * as it is, and what it holds beyond the list is a finding */
	return exec_formatted(conn, "creating the sandbox account",
	    "SELECT CASE WHEN NOT EXISTS (SELECT FROM pg_roles WHERE rolname = $1::text) THEN "
	    " format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
	    "  NOBYPASSRLS NOINHERIT; COMMENT ON ROLE %I IS %L', $1, $1, $2::text) "
	    " WHEN shobj_description((SELECT oid FROM pg_roles WHERE rolname = $1), 'pg_authid') = $2::text "
	    " THEN format('ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION "
	    "  NOBYPASSRLS NOINHERIT', $1) ELSE 'SELECT' END", 2, params, err);
}

void
idem_role_close(struct idem_role *r)
{
	if (r->out != NULL)
		fclose(r->out);
	free(r->rows);
	free(r->name);
	free(r->effect_schema);
	idem_map_free(&r->listed);
	memset(r, 0, sizeof(*r));
}

/* The schemas the setup command owns while it runs: the effect table's
 * (not public) and the queue library's, those that exist. */
static int
own_schemas(struct idem_role *r, PGconn *conn, struct idem_error *err)
{
	const char *params[2] = { r->name, r->effect_schema };

	if (strcmp(r->effect_schema, "public") != 0 && exec_formatted(conn,
	    "giving the setup command the effect table's schema",
	    "SELECT format('ALTER SCHEMA %I OWNER TO %I', nspname, $1) FROM pg_namespace "
	    "WHERE nspname = $2", 2, params, err) < 0)
		return -1;
	return exec_section(r, conn, "setup-schemas", "giving the setup command the queue "
	    "library's schemas", err);
}

int
idem_role_for_setup(struct idem_role *r, PGconn *conn, struct idem_error *err)
{
	const char *params[1] = { r->name };
	char *version;
	int installed;

	if (exec_formatted(conn, "giving the setup command its rights",
	    "SELECT format('GRANT CONNECT, CREATE ON DATABASE %I TO %I; " SANDBOX_GRANT "', "
	    "current_database(), $1, $1, $1)", 1, params, err) < 0 || own_schemas(r, conn, err) < 0)
		return -1;
	/* the queue's rights, where the queue is there already: a queue the
	 * setup makes gets them after it (idem_role_confine) */
	if ((installed = idem_queue_version(r->q, conn, &version, err)) < 0)
		return -1;
	free(version);
	return installed ? exec_section(r, conn, "account", "granting the sandbox account its queue",
	    err) : 0;
}

static const char *
word(int yes)
{
	return yes ? "yes" : "no";
}

/* Whether a privilege held is on the list of its phase. */
static int
listed(const struct idem_role *r, const char *phase, PGresult *res, int i, const char *key)
{
	const char *type = PQgetvalue(res, i, TYPE), *schema = PQgetvalue(res, i, SCHEMA),
	    *privilege = PQgetvalue(res, i, PRIVILEGE);

	if (strcmp(type, "attribute") == 0)
		return strcmp(privilege, "LOGIN") == 0;
	if (strcmp(type, "member") == 0)
		return 0;
	if (strcmp(phase, "setup") == 0)
		return 1;
	/* its own schema, whatever it made there */
	if (strcmp(schema, r->effect_schema) == 0 && strcmp(r->effect_schema, "public") != 0)
		return 1;
	if (strcmp(privilege, "TRUNCATE") == 0 || strcmp(privilege, "OWNER") == 0)
		return 0;
	return idem_map_get(&r->listed, key) != IDEM_MAP_NONE;
}

/* Reads what the role holds; with remember, as the list; with phase,
 * written as grant rows. */
static int
read_held(struct idem_role *r, PGconn *conn, const char *phase, int remember,
	  struct idem_error *err)
{
	const char *params[1] = { r->name };
	PGresult *res = idem_pg_exec(conn, "reading the sandbox account's privileges", err,
	    HELD_SQL, 1, params);
	char *key;
	int i, ok;

	if (res == NULL)
		return -1;
	for (i = 0; i < PQntuples(res); i++) {
		const char *row[6] = { r->name, phase, PQgetvalue(res, i, TYPE),
		    PQgetvalue(res, i, OBJECT), PQgetvalue(res, i, PRIVILEGE), NULL };

		if (asprintf(&key, "%s\t%s\t%s", row[2], row[3], row[4]) < 0)
			idem_die(IDEM_EXIT_ENV, "asprintf:");
		if (remember) {
			idem_map_put(&r->listed, key, 1);
		} else {
			ok = listed(r, phase, res, i, key);
			if (!ok && strcmp(phase, "run") == 0)
				r->beyond++;
			row[5] = word(ok);
			idem_tsv_write_row(r->out, "grant", row, 6);
		}
		free(key);
	}
	PQclear(res);
	return 0;
}

int
idem_role_confine(struct idem_role *r, PGconn *conn, struct idem_error *err)
{
	const char *params[3] = { r->name, r->effect_schema, NULL };
	char **schemas = NULL, *array;
	PGresult *res;
	size_t n = 0;
	int i, rc;

	if (read_held(r, conn, "setup", 0, err) < 0 ||
	    exec_formatted(conn, "taking the setup command's rights back",
	    "SELECT format('REVOKE CREATE ON DATABASE %I FROM %I; REASSIGN OWNED BY %I TO CURRENT_USER; "
	    "GRANT CONNECT ON DATABASE %I TO %I; " SANDBOX_GRANT "', current_database(), $1, $1, "
	    "current_database(), $1, $1, $1)",
	    1, params, err) < 0 ||
	    exec_formatted(conn, "giving the sandbox account its schema",
	    "SELECT format('SET client_min_messages = warning; CREATE SCHEMA IF NOT EXISTS %I; "
	    "RESET client_min_messages; GRANT USAGE, CREATE ON SCHEMA %I TO %I; "
	    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO %I; "
	    "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA %I TO %I', $2, $2, $1, $2, $1, "
	    "$2, $1)", 2, params, err) < 0 ||
	    exec_section(r, conn, "account", "granting the sandbox account its queue", err) < 0)
		return -1;
	/* read on the rest: every other schema but the system's, idem's, the
	 * run's and those of the queue's tables it may not touch */
	if ((res = idem_queue_exec(r->q, conn, "denied", "naming what the sandbox account may not "
	    "do", 0, NULL, NULL, err)) == NULL)
		return -1;
	for (i = 0; i < PQntuples(res); i++) {
		const char *object = PQgetvalue(res, i, 0), *dot = strchr(object, '.');

		schemas = idem_ereallocarray(schemas, n + 1, sizeof(*schemas));
		schemas[n++] = dot ? idem_estrndup(object, (size_t)(dot - object)) : idem_estrdup("");
	}
	PQclear(res);
	params[2] = array = idem_queue_text_array(schemas, n);
	idem_free_list(schemas, n);
	rc = exec_formatted(conn, "giving the sandbox account read on the database",
	    "SELECT string_agg(format('GRANT USAGE ON SCHEMA %I TO %I; "
	    "GRANT SELECT ON ALL TABLES IN SCHEMA %I TO %I', nspname, $1, nspname, $1), '; ') "
	    "FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
	    "AND nspname NOT IN ('information_schema', 'idem', 'idem_run', $2) "
	    "AND nspname <> ALL ($3::text[]) HAVING count(*) > 0", 3, params, err);
	free(array);
	if (rc < 0)
		return -1;
	return read_held(r, conn, NULL, 1, err);
}

int
idem_role_finish(struct idem_role *r, PGconn *conn, struct idem_error *err)
{
	const char *params[3] = { r->name, NULL, NULL };
	PGresult *res, *held;
	int i;

	if (read_held(r, conn, "run", 0, err) < 0)
		return -1;
	if ((res = idem_queue_exec(r->q, conn, "denied", "naming what the sandbox account may not "
	    "do", 0, NULL, NULL, err)) == NULL)
		return -1;
	for (i = 0; i < PQntuples(res); i++) {
		const char *row[4] = { r->name, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), NULL };

		params[1] = row[1];
		params[2] = row[2];
		if ((held = idem_pg_exec(conn, "checking what the sandbox account may not do", err,
		    "SELECT coalesce(has_table_privilege($1, to_regclass($2), $3), false)", 3,
		    params)) == NULL) {
			PQclear(res);
			return -1;
		}
		row[3] = word(strcmp(PQgetvalue(held, 0, 0), "t") == 0);
		r->held += strcmp(row[3], "yes") == 0;
		idem_tsv_write_row(r->out, "denied", row, 4);
		PQclear(held);
	}
	PQclear(res);
	if ((res = idem_pg_exec(conn, "checking what the sandbox account may not do", err,
	    "SELECT rolsuper, rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = $1", 1,
	    params)) == NULL)
		return -1;
	for (i = 0; i < 2 && PQntuples(res) == 1; i++) {
		const char *row[4] = { r->name, "", i ? "CREATEROLE" : "SUPERUSER",
		    word(strcmp(PQgetvalue(res, 0, i), "t") == 0) };

		r->held += strcmp(row[3], "yes") == 0;
		idem_tsv_write_row(r->out, "denied", row, 4);
	}
	PQclear(res);
	return 0;
}

int
idem_role_write(struct idem_role *r, FILE *out)
{
	if (fflush(r->out) != 0)
		return -1;
	return fwrite(r->rows, 1, r->rows_len, out) == r->rows_len ? 0 : -1;
}

void
idem_role_setenv(const struct idem_role *r, PGconn *conn)
{
	char *url = idem_pg_url(PQhost(conn), PQport(conn), PQdb(conn), r->name);

	setenv("PGUSER", r->name, 1);
	setenv("DATABASE_URL", url, 1);
	setenv("IDEM_DATABASE_URL", url, 1);
	setenv("IDEM_DATABASE", url, 1);
	free(url);
}

char *
idem_role_finding(enum idem_kind kind, char *const *f)
{
	char *out = NULL;
	int rc = 0;

	if (kind == IDEM_KIND_DENIED) {
		if (strcmp(f[DENIED_HELD], "yes") == 0)
			rc = asprintf(&out, "could %s%s%s, which it may not", f[DENIED_PRIVILEGE],
			    *f[DENIED_OBJECT] ? " " : "", f[DENIED_OBJECT]);
	} else if (strcmp(f[GRANT_PHASE], "run") == 0 && strcmp(f[GRANT_LISTED], "no") == 0) {
		rc = *f[GRANT_OBJECT] ? asprintf(&out, "held %s on %s %s, beyond its list",
		    f[GRANT_PRIVILEGE], f[GRANT_TYPE], f[GRANT_OBJECT]) :
		    asprintf(&out, "held %s %s, beyond its list", f[GRANT_TYPE], f[GRANT_PRIVILEGE]);
	}
	if (rc < 0)
		idem_die(IDEM_EXIT_ENV, "asprintf:");
	return out;
}
