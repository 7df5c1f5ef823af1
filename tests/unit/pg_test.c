#include <stdlib.h>

#include "unit.h"
#include "pg.h"

static void
check_url(const char *host, const char *port, const char *dbname, const char *user,
	  const char *want, const char *name)
{
	char *got = idem_pg_url(host, port, dbname, user);

	CHECK_STR(got, want, name);
	free(got);
}

int
main(void)
{
	check_url("/tmp/idem/run", "5432", "idem", "idem",
	    "postgresql:///idem?host=%2Ftmp%2Fidem%2Frun&port=5432&user=idem",
	    "a socket directory goes in ?host= with the port");
	check_url("/tmp/a b+c%d&e=f'g#h?i", "5432", "idem", "idem",
	    "postgresql:///idem?host=%2Ftmp%2Fa%20b%2Bc%25d%26e%3Df%27g%23h%3Fi&port=5432&user=idem",
	    "every byte of a socket directory but the unreserved ones is encoded; + is never a space");
	check_url("@abstract", "5432", "idem", "idem",
	    "postgresql:///idem?host=%40abstract&port=5432&user=idem",
	    "an abstract socket is a socket directory too");
	check_url("db.example.org", "6543", "billing", "rehearsal-bot",
	    "postgresql://db.example.org:6543/billing?user=rehearsal-bot",
	    "a host name is the authority");
	check_url("::1", "5432", "idem", "idem", "postgresql://[::1]:5432/idem?user=idem",
	    "an IPv6 address is bracketed");
	check_url("fe80::1%eth0", "5432", "idem", "idem",
	    "postgresql://[fe80::1%25eth0]:5432/idem?user=idem", "a zone id is encoded");
	check_url("/run", "5432", "a b/c?d#e:f@g&h=i+j$k,l;m'n%o\xc3\xa9", "idem",
	    "postgresql:///a%20b%2Fc%3Fd%23e:f@g&h=i+j$k,l;m%27n%25o%C3%A9?host=%2Frun&port=5432&user=idem",
	    "a database name keeps in its path what decodeURI would not decode, but / ? and #");
	check_url("/run", "5432", "idem", "odd user@:/?#&=+%",
	    "postgresql:///idem?host=%2Frun&port=5432&user=odd%20user%40%3A%2F%3F%23%26%3D%2B%25",
	    "a user is encoded as a query value");
	check_url("/run", "", "idem", "",
	    "postgresql:///idem?host=%2Frun", "no port and no user: left out");
	check_url("db", "", "idem", NULL, "postgresql://db/idem", "a host without port or user");
	check_url(NULL, NULL, "idem", "idem", "postgresql:///idem?user=idem",
	    "no host: the client's default");
	return unit_done("pg");
}
