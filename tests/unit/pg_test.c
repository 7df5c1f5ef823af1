#include <stdlib.h>

#include "unit.h"
#include "pg.h"

/* Socket directories and hosts, with port 5432, database idem and user idem. */
static const struct {
	const char *host, *want, *name;
} hosts[] = {
	{ "/tmp/idem/run", "postgresql:///idem?host=%2Ftmp%2Fidem%2Frun&port=5432&user=idem",
	    "a socket directory goes in ?host= with the port" },
	{ "/tmp/a b+c%d&e=f'g#h?i",
	    "postgresql:///idem?host=%2Ftmp%2Fa%20b%2Bc%25d%26e%3Df%27g%23h%3Fi&port=5432&user=idem",
	    "every byte of a socket directory but the unreserved ones is encoded; + is never a space" },
	{ "@abstract", "postgresql:///idem?host=%40abstract&port=5432&user=idem",
	    "an abstract socket is a socket directory too" },
	{ "::1", "postgresql://[::1]:5432/idem?user=idem", "an IPv6 address is bracketed" },
	{ "fe80::1%eth0", "postgresql://[fe80::1%25eth0]:5432/idem?user=idem",
	    "a zone id is encoded" },
};

/* Other ports, databases and users, and none. */
static const struct {
	const char *host, *port, *dbname, *user, *want, *name;
} others[] = {
	{ "db.example.org", "6543", "billing", "rehearsal-bot",
	    "postgresql://db.example.org:6543/billing?user=rehearsal-bot",
	    "a host name is the authority" },
	{ "/run", "5432", "a b/c?d#e:f@g&h=i+j$k,l;m'n%o\xc3\xa9", "idem",
	    "postgresql:///a%20b%2Fc%3Fd%23e:f@g&h=i+j$k,l;m%27n%25o%C3%A9?host=%2Frun&port=5432&user=idem",
	    "a database name keeps in its path what decodeURI would not decode, but / ? and #" },
	{ "/run", "5432", "idem", "odd user@:/?#&=+%",
	    "postgresql:///idem?host=%2Frun&port=5432&user=odd%20user%40%3A%2F%3F%23%26%3D%2B%25",
	    "a user is encoded as a query value" },
	{ "/run", "", "idem", "", "postgresql:///idem?host=%2Frun", "no port and no user: left out" },
	{ "db", "", "idem", NULL, "postgresql://db/idem", "a host without port or user" },
	{ NULL, NULL, "idem", "idem", "postgresql:///idem?user=idem",
	    "no host: the client's default" },
};

static void
check_url(const char *host, const char *port, const char *dbname, const char *user,
	  const char *want, const char *name)
{
	char *got = idem_pg_url(host, port, dbname, user);

	CHECK_STR(got, want, name);
	free(got);
}

/* Which database a program of the pipeline connects to, and how it says
 * so: -d, IDEM_DATABASE, the seed's, the PG* environment. */
static void
check_choose(void)
{
	const char *how = NULL;

	unsetenv("IDEM_DATABASE");
	CHECK_STR(idem_pg_choose("dbname=a", "dbname=seed", &how), "dbname=a", "-d first");
	CHECK_STR(how, "-d", "-d named");
	CHECK_STR(idem_pg_choose(NULL, "dbname=seed", &how), "dbname=seed", "then the seed's");
	CHECK_STR(how, "the seed's database", "the seed's named");
	CHECK(idem_pg_choose(NULL, NULL, &how) == NULL, "then the PG* environment");
	CHECK_STR(how, "the PG* environment", "the PG* environment named");
	setenv("IDEM_DATABASE", "dbname=controller", 1);
	CHECK_STR(idem_pg_choose(NULL, "dbname=seed", &how), "dbname=controller",
	    "IDEM_DATABASE before the seed's");
	CHECK_STR(how, "IDEM_DATABASE", "IDEM_DATABASE named");
	CHECK_STR(idem_pg_choose("", "dbname=seed", &how), "dbname=controller",
	    "-d '' is IDEM_DATABASE");
	unsetenv("IDEM_DATABASE");
	CHECK(idem_pg_choose("", "dbname=seed", &how) == NULL, "-d '' skips the seed's");
}

/* One database is one sandbox id and one name, whatever the server says
 * of its version. */
static void
check_same_database(void)
{
	char *a[] = { "id-1", "idem", "15.18", "150018", "read committed" };
	char *b[] = { "id-1", "idem", "16.2", "160002", "serializable" };
	char *copy[] = { "id-1", "other", "15.18", "150018", "read committed" };
	char *another[] = { "id-2", "idem", "15.18", "150018", "read committed" };
	struct idem_pg_observed sa, sb, sc, sd;
	struct idem_error err;

	idem_pg_observed_from(&sa, a);
	idem_pg_observed_from(&sb, b);
	idem_pg_observed_from(&sc, copy);
	idem_pg_observed_from(&sd, another);
	CHECK(idem_pg_same_database(&sa, &sb, "-d", &err) == 0, "same id and name: one database");
	CHECK(idem_pg_same_database(&sa, &sc, "-d", &err) < 0 && err.status == IDEM_EXIT_USAGE,
	    "a template copy, another name: another database, a usage error");
	CHECK_STR(err.text, "-d points at database other of sandbox id-1, but the stream's database "
	    "row names database idem of sandbox id-1: one pipeline uses one database",
	    "the refusal names both");
	CHECK(idem_pg_same_database(&sa, &sd, "-d", &err) < 0, "another sandbox id: another database");
	idem_pg_observed_free(&sa);
	idem_pg_observed_free(&sb);
	idem_pg_observed_free(&sc);
	idem_pg_observed_free(&sd);
}

int
main(void)
{
	size_t i;

	check_choose();
	check_same_database();
	for (i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++)
		check_url(hosts[i].host, "5432", "idem", "idem", hosts[i].want, hosts[i].name);
	for (i = 0; i < sizeof(others) / sizeof(others[0]); i++)
		check_url(others[i].host, others[i].port, others[i].dbname, others[i].user,
		    others[i].want, others[i].name);
	return unit_done("pg");
}
